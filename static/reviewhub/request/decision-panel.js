// @ts-check
/* The decision panel (templates/review/_quorum.html): when the page hears that the request changed (another
 * approver, a veto), the approvals line is refreshed from the panel's JSON. Without this the page shows the figures
 * as of its load. */
import { RH } from "./page.js";

/**
 * What the panel's JSON (request-decision) tells this script.
 * @typedef {object} Decision
 * @property {string} status
 * @property {{text: string}} [progress]
 */

const panel = document.getElementById("decision-panel");
const line = document.getElementById("quorum-progress");

export function refreshDecision() {
  if (!panel || !line) return;
  RH.getJSON(/** @type {string} */ (panel.dataset.decisionUrl)).then((/** @type {Decision | null} */ body) => {
    if (!body || !body.progress) return;
    line.textContent = body.progress.text;
    panel.dataset.status = body.status;
    const quorumForm = document.getElementById("quorum-form");
    if (quorumForm && body.status !== "pending" && body.status !== "claimed") quorumForm.classList.add("is-hidden");
  });
}
