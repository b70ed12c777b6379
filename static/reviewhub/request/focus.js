// @ts-check
/* Where the keyboard starts: on arrival (opening a request, or the next one after answering) focus goes to the
 * first unanswered field, or to the Yes (approve) choice of a yes/no approval, never stays on <body>. The queue
 * rail is one tab stop (roving tabindex, arrow keys inside), so Tab leaves it for the form at once. */
import { CLOSED, form, state } from "./page.js";
import { readValue, yesNoQuestions } from "./answers.js";

/** @param {HTMLElement} question @returns {HTMLElement | null} */
function firstControl(question) {
  const checked = /** @type {HTMLElement | null} */ (question.querySelector("[name^='answer-']:checked"));
  return checked || /** @type {HTMLElement | null} */ (question.querySelector("[name^='answer-']:not(:disabled)"));
}

/* y / n answer the first yes/no question still open: its radios say so to assistive technology. */
function markYesNoKeys() {
  const first = yesNoQuestions()[0];
  if (!first) return;
  const yes = first.querySelector("input[type=radio][value=true]");
  const no = first.querySelector("input[type=radio][value=false]");
  if (yes) yes.setAttribute("aria-keyshortcuts", "y");
  if (no) no.setAttribute("aria-keyshortcuts", "n");
}

/** The control to start on, or null when nothing here is to be answered. @returns {HTMLElement | null} */
function arrivalTarget() {
  if (!form || CLOSED[state.status] || !(state.mine || state.preview)) return null;
  // An approval starts on its Approve button: Enter or y decides, Tab reaches Reject and any note.
  const approve = /** @type {HTMLButtonElement | null} */ (form.querySelector("[data-decide=approve]"));
  if (approve && !approve.disabled) return approve;
  /** @type {NodeListOf<HTMLElement>} */
  const questions = form.querySelectorAll(".question[data-question]");
  for (const question of Array.from(questions)) {
    if (question.classList.contains("is-skipped") || readValue(question) !== null) continue;
    const control = firstControl(question);
    if (control) return control;
  }
  // Everything is answered (drafts): the Accept button is what is left to press.
  return /** @type {HTMLElement | null} */ (form.querySelector('[data-answer="accept"]:not(:disabled)'));
}

export function focusOnArrival() {
  markYesNoKeys();
  if (document.getElementById("error-summary")) return; // focusFirstError() owns a refused answer's page
  const active = document.activeElement;
  if (active && active !== document.body) return; // the reviewer is already somewhere
  const target = arrivalTarget();
  // Without scrolling: the page opens on the agent's question; the first key typed brings the field into view.
  if (target) target.focus({ preventScroll: true });
}

/* The rail's links: one tab stop (the current request, else the first), Up/Down/Home/End move within. */
export function rovingRail() {
  const rail = document.getElementById("queue-rail");
  if (!rail) return;
  /** @type {HTMLAnchorElement[]} */
  const links = Array.from(rail.querySelectorAll(".rail-list a"));
  if (!links.length) return;
  const current = links.filter((link) => link.getAttribute("aria-current") === "page")[0] || links[0];
  links.forEach((link) => link.setAttribute("tabindex", link === current ? "0" : "-1"));
  rail.addEventListener("keydown", (event) => {
    const index = links.indexOf(/** @type {HTMLAnchorElement} */ (event.target));
    if (index === -1) return;
    /** @type {Record<string, number>} */
    const moves = { ArrowDown: index + 1, ArrowUp: index - 1, Home: 0, End: links.length - 1 };
    if (!(event.key in moves)) return;
    event.preventDefault();
    const next = links[Math.max(0, Math.min(links.length - 1, moves[event.key]))];
    links.forEach((link) => link.setAttribute("tabindex", link === next ? "0" : "-1"));
    next.focus();
  });
}
