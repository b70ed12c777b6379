// @ts-check
/* What the page shows of the request's state: the badge, the holder line, one live notice, which controls are live.
 * applyUpdate() moves the page to the request's new state, pushed by the socket or learnt from an API answer. */
import {
  CLOSED,
  RH,
  badge,
  claimForm,
  flowStatus,
  form,
  holderText,
  me,
  notices,
  page,
  state,
  takeoverForm,
} from "./page.js";

/** @typedef {import("./page.js").RequestSummary} RequestSummary */

/** @type {Readonly<Record<string, boolean>>} */
const CLOSED_LEVEL_OF = { answered: true, rejected: true, expired: true, withdrawn: true };
/** @type {Readonly<Record<string, string>>} */
const CLOSED_LEVEL = { completed: "answered", expired: "expired", withdrawn: "withdrawn" };

function noticeElements() {
  /** @type {NodeListOf<HTMLElement>} */
  const elements = notices.querySelectorAll("[data-notice]");
  return elements;
}

/** @param {string} level @param {string} text */
export function notice(level, text) {
  // One live notice about the request's state at a time; server-rendered ones are replaced too.
  noticeElements().forEach((element) => {
    if (element.dataset.notice !== "error" || CLOSED_LEVEL_OF[level]) element.remove();
  });
  const element = document.createElement("div");
  element.className = "alert alert-" + level;
  element.dataset.notice = level;
  element.textContent = text;
  notices.appendChild(element);
}

function clearStateNotices() {
  noticeElements().forEach((element) => {
    if (element.dataset.notice === "info" || element.dataset.notice === "held") element.remove();
  });
}

/** @param {boolean} editable */
function setEditable(editable) {
  if (form) {
    /** @type {NodeListOf<HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement | HTMLButtonElement>} */
    const controls = form.querySelectorAll("input, select, textarea, button");
    controls.forEach((element) => {
      if (element.name === "csrfmiddlewaretoken" || element.name === "then" || element.name === "inline") return;
      element.disabled = !editable && !(state.preview && element.dataset.answer !== "release");
    });
  }
  const open = document.getElementById("open-url");
  if (open) open.classList.toggle("is-hidden", !editable);
}

/** @param {HTMLElement | null} element @param {boolean} visible */
export function show(element, visible) {
  if (element) element.classList.toggle("is-hidden", !visible);
  const dialog = element && !visible && /** @type {HTMLDialogElement | null} */ (element.querySelector("dialog[open]"));
  if (dialog) dialog.close();
}

/** @param {string} next */
function setStatus(next) {
  state.status = next;
  if (page) page.dataset.status = next;
  badge.textContent = next;
  badge.className = "badge badge-lg badge-" + next;
}

/** @param {string} text @param {string} [who] @param {string} [since] */
function setHolder(text, who, since) {
  holderText.replaceChildren();
  if (!who) {
    holderText.textContent = text;
    return;
  }
  holderText.append("Held by ");
  const strong = document.createElement("strong");
  strong.textContent = who;
  holderText.append(strong, " since " + RH.clockTime(since || "") + ".");
}

/** @param {RequestSummary} summary */
function closedText(summary) {
  if (summary.status === "withdrawn") {
    return "The agent withdrew this request (its turn ended). Nothing entered here will be sent.";
  }
  if (summary.status === "expired") return "The deadline passed; the request expired.";
  return "This request was answered.";
}

/** @param {string} text */
export function loseClaim(text) {
  state.mine = false;
  state.preview = false;
  if (page) page.dataset.mine = "false";
  setEditable(false);
  // A late reply (a draft save, a heartbeat) must not hide that the request is already gone.
  if (!CLOSED[state.status]) notice("warn", text);
}

/** @param {RequestSummary} summary */
export function applyUpdate(summary) {
  setStatus(summary.status);
  if (summary.url_flow_completed && flowStatus) show(flowStatus, true);
  if (summary.status !== "claimed") state.holder = "";
  if (CLOSED[summary.status]) {
    state.mine = false;
    setEditable(false);
    show(claimForm, false);
    show(takeoverForm, false);
    state.preview = false;
    setHolder("Closed.");
    notice(CLOSED_LEVEL[summary.status] || "info", closedText(summary));
    return;
  }
  if (summary.status === "claimed") {
    const holder = summary.claimed_by || "";
    if (summary.claimed_by === me) {
      state.holder = me;
      state.mine = true;
      state.preview = false;
      if (page) page.dataset.mine = "true";
      setEditable(true);
      show(claimForm, false);
      show(takeoverForm, false);
      clearStateNotices();
      setHolder("You hold this request. Your claim renews while this page is open.");
      return;
    }
    if (state.mine) {
      loseClaim(holder + " took over this request. Your page is read-only now.");
    } else if (state.holder !== holder) {
      notice("held", holder + " is answering this request. Read-only.");
    }
    state.holder = holder;
    state.preview = false;
    setEditable(false);
    setHolder("", holder, summary.claimed_at);
    show(claimForm, false);
    show(takeoverForm, true);
    return;
  }
  // Back in the queue: the holder released it, or the lease ran out.
  if (state.mine) loseClaim("Your claim ran out and the request went back to the queue. Claim it again to answer.");
  else notice("info", "Nobody holds this request now. Claim it to answer.");
  setEditable(false);
  setHolder("Nobody holds this request.");
  show(claimForm, true);
  show(takeoverForm, false);
}
