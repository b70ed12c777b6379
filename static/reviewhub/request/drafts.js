// @ts-check
/* Shared drafts: what is typed here is saved as the request's draft (typing in a preview claims it first), and what
 * a teammate types elsewhere arrives over the socket and is written into the same fields. */
import { CLOSED, RH, form, me, page, state } from "./page.js";
import { readValue, showError, writeValue } from "./answers.js";
import { claim } from "./claim.js";
import { applyUpdate, loseClaim } from "./status.js";

/**
 * A question's draft as the socket pushes it (`request.draft`).
 * @typedef {object} Draft
 * @property {string} question
 * @property {unknown} value
 * @property {string} state "draft", "submitted" or "skipped"
 * @property {string} [updated_by]
 */

const draftsUrl = (page && page.dataset.draftsUrl) || "";

/** @param {HTMLElement} question @param {string} wanted "draft", or "submitted" to have it checked */
function saveDraft(question, wanted) {
  if (!state.mine && state.preview) {
    claim().then((ok) => {
      if (ok) saveDraft(question, wanted);
    });
    return;
  }
  if (!state.mine) return;
  const id = question.dataset.question || "";
  const value = readValue(question);
  const saved = value === null ? "draft" : wanted;
  RH.post(draftsUrl, { question: id, value: value, state: saved }).then((result) => {
    if (result.status === 409) {
      const current = result.data && result.data.status;
      if (current && CLOSED[current]) applyUpdate({ status: current });
      else loseClaim("Your answer could not be saved: you no longer hold this request.");
    } else if (result.status === 400 && saved === "submitted") {
      const fields = (result.data && result.data.fields) || {};
      showError(question, fields[id] || (result.data && result.data.detail) || "is not valid");
      // Still share what was typed, as a draft, so other pages see it.
      RH.post(draftsUrl, { question: id, value: value, state: "draft" });
    } else if (result.ok && saved === "submitted") {
      showError(question, "");
    }
  });
}

/** @param {Element} question */
function skipBox(question) {
  return /** @type {HTMLInputElement | null} */ (question.querySelector("[data-skip-for]"));
}

/** @param {Draft} draft */
export function applyDraft(draft) {
  if (draft.updated_by === me) return; // our own save coming back
  /** @type {HTMLElement | null} */
  const question = form && form.querySelector('.question[data-question="' + CSS.escape(draft.question) + '"]');
  if (!question) return;
  const skipped = draft.state === "skipped";
  const box = skipBox(question);
  if (box) box.checked = skipped;
  question.classList.toggle("is-skipped", skipped);
  if (!skipped) writeValue(question, draft.value);
  const note = question.querySelector("[data-note-for]");
  if (note) note.textContent = (skipped ? "Skipped by " : "Edited by ") + (draft.updated_by || "someone");
  question.classList.remove("is-remote-edit");
  void question.offsetWidth; // restart the highlight animation
  question.classList.add("is-remote-edit");
}

// Draft saves wait a moment: a choice answered at once (y then a) sends only the answer, so no draft request
// competes with it for the request's row. Sending the answer drops the saves still waiting.
/** @type {number[]} */
let draftTimers = [];
const CHOICE_SAVE_MS = 250;

/** @param {HTMLElement} question @param {string} wanted @param {number} delay */
function laterSave(question, wanted, delay) {
  const timer = window.setTimeout(() => {
    const at = draftTimers.indexOf(timer);
    if (at !== -1) draftTimers.splice(at, 1);
    saveDraft(question, wanted);
  }, delay);
  draftTimers.push(timer);
  return timer;
}

export function dropWaitingSaves() {
  draftTimers.forEach(window.clearTimeout);
  draftTimers = [];
}

export function shareDrafts() {
  if (!form) return;
  /** @type {NodeListOf<HTMLElement>} */
  const questions = form.querySelectorAll(".question[data-question]");
  questions.forEach((question) => {
    /** @type {number | undefined} */
    let timer;
    question.addEventListener("input", (event) => {
      state.typed = true;
      if (/** @type {Element} */ (event.target).matches("[data-skip-for]")) return;
      window.clearTimeout(timer);
      timer = laterSave(question, "draft", 300);
    });
    question.addEventListener("change", (event) => {
      state.typed = true;
      window.clearTimeout(timer);
      const target = /** @type {HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement} */ (event.target);
      if (target.matches("[data-skip-for]")) {
        const skipped = /** @type {HTMLInputElement} */ (target).checked;
        question.classList.toggle("is-skipped", skipped);
        if (skipped) {
          showError(question, "");
          if (state.mine) RH.post(draftsUrl, { question: question.dataset.question, value: null, state: "skipped" });
        } else {
          saveDraft(question, "submitted");
        }
        return;
      }
      if (target.type === "radio" || target.type === "checkbox") {
        if (!state.mine && state.preview) claim(); // the claim is not delayed: a teammate must see it at once
        timer = laterSave(question, "submitted", CHOICE_SAVE_MS);
      } else {
        saveDraft(question, "submitted");
      }
    });
  });
}
