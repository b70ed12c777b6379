// @ts-check
/* Sending the answer: Accept is refused here while a yes/no question is unanswered, the waiting draft saves are
 * dropped, and the form says whether to open the next request after it (the autoNext preference). */
import { RH, form, page, state } from "./page.js";
import { readValue, showError, yesNoQuestions } from "./answers.js";
import { dropWaitingSaves } from "./drafts.js";

/* Accept refuses while a required yes/no is unanswered: nothing is sent, the question says why and has focus. */
function unansweredChoices() {
  return yesNoQuestions().filter((q) => readValue(q) === null && !q.classList.contains("is-skipped"));
}

export function checkAnswerOnSubmit() {
  if (!form) return;
  form.addEventListener("submit", (event) => {
    const submitter = /** @type {HTMLButtonElement | null} */ (event.submitter);
    if (submitter && submitter.value === "accept") {
      const missing = unansweredChoices();
      if (missing.length) {
        event.preventDefault();
        missing.forEach((q) => showError(q, "is required"));
        const first = /** @type {HTMLInputElement | null} */ (missing[0].querySelector("input[type=radio]"));
        if (first) first.focus();
        return;
      }
    }
    state.submitting = true;
    dropWaitingSaves();
  });
}

/* Any form this page submits (answer, take over, next) is the reviewer acting, not leaving. */
export function noteSubmits() {
  document.addEventListener("submit", (event) => {
    if (!event.defaultPrevented) state.submitting = true;
  });
}

/* The answer's response may be the next request's page itself (inline=1, no redirect round trip): the address bar
 * then still shows the answered request's URL; put the page's own there, so reload and links are right. */
export function showOwnAddress() {
  const own = page && page.dataset.url;
  if (own && location.pathname !== own) history.replaceState(null, "", own);
}

export function followAutoNext() {
  const thenNext = /** @type {HTMLInputElement | null} */ (document.getElementById("then-next"));
  const inlineNext = /** @type {HTMLInputElement | null} */ (document.getElementById("inline-next"));
  function syncAutoNext() {
    if (thenNext) thenNext.value = RH.pref("autoNext") ? "next" : "";
    if (inlineNext) inlineNext.value = RH.pref("autoNext") ? "1" : ""; // every browser with modules has replaceState
  }
  syncAutoNext();
  document.addEventListener("reviewhub:prefs", syncAutoNext);
}

/* After a failed Accept, focus moves to the first field the error summary lists. */
export function focusFirstError() {
  const summary = document.getElementById("error-summary");
  if (!summary) return;
  const firstInvalid = /** @type {HTMLElement | null} */ (form && form.querySelector("[aria-invalid=true]"));
  (firstInvalid || summary).focus();
}
