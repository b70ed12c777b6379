// @ts-check
/* What every part of the request page shares: its elements, and what it knows about the request (`state`), kept
 * in one object that the modules read and update. Lookups only: nothing here acts on the page. */

/**
 * A request as its page hears of it: pushed (`request.update`), or implied by an API answer.
 * @typedef {object} RequestSummary
 * @property {string} status
 * @property {string} [claimed_by]
 * @property {string} [claimed_at]
 * @property {boolean} [url_flow_completed]
 */

export const RH = window.ReviewHub;
export const page = document.getElementById("request-page");
const data = page ? page.dataset : /** @type {DOMStringMap} */ ({});

/* Elements request.html renders whenever it renders #request-page (request.js starts nothing without it). */
export const notices = rendered("notices");
export const badge = rendered("status-badge");
export const holderText = rendered("holder-text");
export const claimForm = /** @type {HTMLFormElement} */ (rendered("claim-form"));
/* Elements that depend on the request: null when absent. */
export const form = /** @type {HTMLFormElement | null} */ (document.getElementById("answer-form"));
export const takeoverForm = document.getElementById("takeover-form"); // supervisors only
export const flowStatus = document.getElementById("url-flow-status"); // URL-mode requests still open

export const me = document.body.dataset.username || "";
/** @type {Readonly<Record<string, boolean>>} */
export const CLOSED = { completed: true, expired: true, withdrawn: true };

export const state = {
  mine: data.mine === "true",
  holder: data.holder || "",
  status: data.status || "",
  // A pending request nobody holds is a preview: its fields are open, and typing there claims it first.
  preview: data.preview === "true" && data.mine !== "true",
  typed: false, // anything typed or chosen on this page: leaving then keeps the claim
  submitting: false,
};

/** @param {string} id */
function rendered(id) {
  return /** @type {HTMLElement} */ (document.getElementById(id));
}
