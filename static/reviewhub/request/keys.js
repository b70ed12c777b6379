// @ts-check
/* The keyboard loop: a accept, d decline, c claim, y/n approve / reject an approval (else answer the first open
 * yes/no question), 1–9 pick an option, n next request once
 * this one is not ours to answer, Ctrl+Enter accept, Esc leave a field. Letters only outside fields, and only with
 * shortcuts on (reviewhub.js). */
import { CLOSED, RH, form, state } from "./page.js";
import { readValue, yesNoQuestions } from "./answers.js";
import { claim } from "./claim.js";

/* y / n: answer the first yes/no question still open (or the only one), as a click on its radio would. */
/** @param {boolean} yes */
function chooseYesNo(yes) {
  const questions = yesNoQuestions();
  if (!questions.length) return false;
  const target = questions.filter((q) => readValue(q) === null)[0] || questions[0];
  const radio = /** @type {HTMLInputElement | null} */ (
    target.querySelector('input[type=radio][value="' + (yes ? "true" : "false") + '"]')
  );
  if (!radio || radio.disabled) return false;
  radio.click();
  return true;
}

/* An approval's Approve / Reject buttons: the key is the click (one key per yes/no). */
/** @param {string} which */
function decide(which) {
  const button = /** @type {HTMLButtonElement | null} */ (document.querySelector('[data-decide="' + which + '"]'));
  if (!button || button.disabled) return false;
  button.click();
  return true;
}

/* 1–9: pick that option of the choice question in focus, or else of the first one still unanswered. */
/** @param {number} number */
function pickOption(number) {
  if (!form) return false;
  const selector = '.question[data-kind="single-select"], .question[data-kind="multi-select"]';
  const active = document.activeElement;
  let question = /** @type {HTMLElement | null} */ (active && active.closest ? active.closest(selector) : null);
  if (!question) {
    /** @type {HTMLElement[]} */
    const choices = Array.from(form.querySelectorAll(selector));
    question = choices.filter((q) => readValue(q) === null)[0] || null;
  }
  if (!question) return false;
  /** @type {HTMLInputElement[]} */
  const options = Array.from(question.querySelectorAll("input[type=radio], input[type=checkbox]"));
  const option = options[number - 1];
  if (!option || option.disabled) return false;
  option.click();
  option.focus({ preventScroll: true });
  return true;
}

function nextForm() {
  return /** @type {HTMLFormElement | null} */ (document.getElementById("next-form"));
}

/** @param {string} action */
function clickAnswer(action) {
  const button = /** @type {HTMLButtonElement | null} */ (form && form.querySelector('[data-answer="' + action + '"]'));
  if (!button || button.disabled) return;
  button.click();
}

export function listenToKeys() {
  document.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      clickAnswer("accept");
      return;
    }
    if (event.key === "Escape" && RH.isTyping(event)) {
      /** @type {HTMLElement} */ (event.target).blur();
      return;
    }
    if (!RH.shortcut(event)) return;
    const answering = !CLOSED[state.status] && (state.mine || state.preview);
    const approval = answering && document.querySelector("[data-decide]") !== null;
    if (event.key === "a") clickAnswer("accept");
    else if (event.key === "d") clickAnswer("decline");
    else if (event.key === "c" && state.preview) claim();
    else if (event.key === "y" && approval) decide("approve");
    else if (event.key === "n" && approval) decide("reject");
    else if (event.key === "y" && answering) chooseYesNo(true);
    else if (event.key === "n" && answering && yesNoQuestions().length) chooseYesNo(false);
    else if (event.key === "n" && (!state.mine || CLOSED[state.status])) RH.submit(nextForm());
    else if (!(/^[1-9]$/.test(event.key) && answering && pickOption(Number(event.key)))) return;
    event.preventDefault();
  });
}
