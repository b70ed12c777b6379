// @ts-check
/* Passkey step-up on the request page (templates/review/_step_up.html, shown when a rule says `step_up: passkey`):
 * an accept — Accept, Approve or Reject, or a quorum's "Approve this answer" — first gets a one-time challenge binding this
 * request and its digest, signs it with navigator.credentials.get, puts the assertion into the form and submits
 * again. The server verifies it (py_webauthn) before anything is recorded; a decline needs no passkey. */
import { credentialJSON, postJSON, refusalText, requestOptions } from "../passkeys.js";

const FIELD = "step_up_assertion";
const marker = document.getElementById("step-up");

/** Whether the button sends an accept: Accept, a quorum's Approve, and both of an approval's buttons (Reject is
 * an accept whose answer is "no": the agent's server acts on an accept, so it is signed too).
 * @param {HTMLButtonElement | HTMLInputElement | null} submitter */
function isAccept(submitter) {
  if (!submitter) return false;
  return (
    (submitter.name === "action" && (submitter.value === "accept" || submitter.value === "approve")) ||
    submitter.name === "decide"
  );
}

/** @param {string} text */
function say(text) {
  const status = document.getElementById("step-up-status");
  if (status) status.textContent = text;
}

/** @param {HTMLFormElement} form @param {HTMLButtonElement} submitter */
async function signAndSubmit(form, submitter) {
  if (!marker) return;
  say("Confirm with your passkey…");
  marker.dataset.state = "signing";
  try {
    const options = await postJSON(String(marker.dataset.options), {});
    if (!options.ok) throw new Error(refusalText(options.data));
    const credential = /** @type {PublicKeyCredential | null} */ (
      await navigator.credentials.get({ publicKey: requestOptions(options.data.publicKey) })
    );
    if (!credential) throw new Error("No passkey answered.");
    let field = /** @type {HTMLInputElement | null} */ (form.querySelector(`input[name=${FIELD}]`));
    if (!field) {
      field = document.createElement("input");
      field.type = "hidden";
      field.name = FIELD;
      form.appendChild(field);
    }
    field.value = JSON.stringify(credentialJSON(credential));
    marker.dataset.state = "signed";
    say("Signed with your passkey: sending…");
    form.requestSubmit(submitter);
  } catch (error) {
    marker.dataset.state = "refused";
    say(`Not approved: ${error instanceof Error ? error.message : String(error)}`);
  }
}

export function requireStepUp() {
  if (!marker) return;
  // Capture phase: before the page's own submit handlers, which see the second, signed submit.
  document.addEventListener(
    "submit",
    (event) => {
      const form = /** @type {HTMLFormElement} */ (event.target);
      const submitter = /** @type {HTMLButtonElement | null} */ (event.submitter);
      if (!isAccept(submitter) || !submitter) return;
      const field = /** @type {HTMLInputElement | null} */ (form.querySelector(`input[name=${FIELD}]`));
      if (field && field.value) return; // signed: let it go (the challenge is one-time; a resubmit signs anew)
      event.preventDefault();
      event.stopImmediatePropagation();
      if (!window.PublicKeyCredential || !navigator.credentials) {
        say("This browser cannot use passkeys: approve on one that can, or decline.");
        return;
      }
      signAndSubmit(form, submitter);
    },
    true,
  );
}
