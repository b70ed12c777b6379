// @ts-check
/* Answers as values, in the MCP content shape: read from a question's fields, written into them (a teammate's
 * draft), and a question's error line. A question is the `.question[data-question]` block of _question.html. */
import { form } from "./page.js";

/** @typedef {string | number | boolean | string[] | null} AnswerValue */

/** @param {Element} question */
function answerInputs(question) {
  /** @type {NodeListOf<HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>} */
  const inputs = question.querySelectorAll("[name^='answer-']");
  return inputs;
}

/** Radio buttons and checkboxes: the fields of a choice. @param {Element} question */
function choiceInputs(question) {
  return Array.from(answerInputs(question)).filter(
    /** @returns {input is HTMLInputElement} */ (input) => input instanceof HTMLInputElement
  );
}

/** @param {string} text */
function toContentDateTime(text) {
  const match = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(:\d{2}(?:\.\d+)?)?$/.exec(text);
  return match ? match[1] + "T" + match[2] + (match[3] || ":00") + "Z" : text;
}

/** @param {string | number | Date} value */
function toLocalDateTime(value) {
  const moment = new Date(value);
  return isNaN(moment.getTime()) ? String(value) : moment.toISOString().slice(0, 19);
}

/** @param {HTMLElement} question @returns {AnswerValue} */
export function readValue(question) {
  const kind = question.dataset.kind;
  const inputs = answerInputs(question);
  const choices = choiceInputs(question);
  if (kind === "boolean" && inputs[0].type === "radio") {
    const choice = choices.filter((input) => input.checked)[0];
    return choice ? choice.value === "true" : null;
  }
  if (kind === "boolean") return choices[0].checked;
  if (kind === "multi-select") {
    const chosen = choices.filter((input) => input.checked);
    return chosen.length ? chosen.map((input) => input.value) : null;
  }
  if (kind === "single-select") {
    if (inputs[0].tagName.toLowerCase() === "select") return inputs[0].value || null;
    const picked = choices.filter((input) => input.checked)[0];
    return picked ? picked.value : null;
  }
  const text = inputs[0].value;
  if (text === "") return null;
  if (kind === "number" || kind === "integer") {
    const number = Number(text);
    return isFinite(number) ? number : null;
  }
  return question.dataset.format === "date-time" ? toContentDateTime(text) : text;
}

/** @param {HTMLElement} question @param {unknown} value */
export function writeValue(question, value) {
  const kind = question.dataset.kind;
  const inputs = answerInputs(question);
  const choices = choiceInputs(question);
  if (kind === "boolean" && inputs[0].type === "radio") {
    choices.forEach((input) => {
      input.checked = (input.value === "true" && value === true) || (input.value === "false" && value === false);
    });
  } else if (kind === "boolean") {
    choices[0].checked = value === true;
  } else if (kind === "multi-select") {
    const values = Array.isArray(value) ? value : [];
    choices.forEach((input) => {
      input.checked = values.indexOf(input.value) !== -1;
    });
  } else if (kind === "single-select" && inputs[0].tagName.toLowerCase() !== "select") {
    choices.forEach((input) => {
      input.checked = input.value === value;
    });
  } else if (value === null || value === undefined) {
    inputs[0].value = "";
  } else {
    inputs[0].value =
      question.dataset.format === "date-time" ? toLocalDateTime(/** @type {string} */ (value)) : String(value);
  }
}

/** @param {string} reason */
function errorSentence(reason) {
  if (reason === "is required") return "This question is required.";
  const text = reason.charAt(0).toUpperCase() + reason.slice(1);
  return /\.$/.test(text) ? text : text + ".";
}

/** Shows a question's error, or clears it (""). @param {Element} question @param {string} reason */
export function showError(question, reason) {
  const element = question.querySelector("[data-error-for]");
  question.classList.toggle("has-error", Boolean(reason));
  if (!element) return;
  element.textContent = reason ? errorSentence(reason) : "";
  element.classList.toggle("is-hidden", !reason);
  answerInputs(question).forEach((input) => {
    if (reason) input.setAttribute("aria-invalid", "true");
    else input.removeAttribute("aria-invalid");
  });
}

/** The yes/no questions shown as radio buttons: the ones y and n answer. */
export function yesNoQuestions() {
  if (!form) return [];
  /** @type {NodeListOf<HTMLElement>} */
  const booleans = form.querySelectorAll('.question[data-kind="boolean"]');
  return Array.from(booleans).filter((q) => q.querySelector("input[type=radio]"));
}
