// @ts-check
/* The claim: taken from the preview, kept alive by a heartbeat while the page is open, given back when the page is
 * left with nothing typed, and taken over (supervisors) after a confirming dialog. */
import { CLOSED, RH, claimForm, me, page, state, takeoverForm } from "./page.js";
import { applyUpdate, loseClaim, show } from "./status.js";

const data = page ? page.dataset : /** @type {DOMStringMap} */ ({});
/** @type {Promise<boolean> | null} */
let claiming = null;

/** Claims from the preview (the c key, the Claim button, the first keystroke in a field); true once held. */
export function claim() {
  if (state.mine) return Promise.resolve(true);
  if (claiming) return claiming;
  claiming = RH.post(data.claimUrl || "").then((result) => {
    claiming = null;
    if (result.ok) {
      applyUpdate({ status: "claimed", claimed_by: me });
      return true;
    }
    const body = result.data || {};
    state.preview = false;
    if (body.status && CLOSED[body.status]) applyUpdate({ status: body.status });
    else loseClaim("Someone else claimed this request first. Your page is read-only.");
    return false;
  });
  return claiming;
}

function heartbeat() {
  if (!state.mine) return;
  RH.post(data.heartbeatUrl || "").then((result) => {
    if (!state.mine || result.ok || result.status === 0) return; // status 0: offline for now, try again next beat
    const body = result.data || {};
    if (body.status && CLOSED[body.status]) {
      applyUpdate({ status: body.status });
    } else if (body.status === "claimed") {
      loseClaim("Someone else holds this request now. Your page is read-only.");
    } else {
      loseClaim("Your claim ran out and the request went back to the queue. Claim it again to answer.");
      show(claimForm, true);
    }
  });
}

export function keepClaimAlive() {
  const leaseSeconds = parseInt(data.leaseSeconds || "", 10) || 300;
  // A third of the lease: two beats can be lost before the claim lapses.
  window.setInterval(heartbeat, Math.min(60000, Math.max(2000, (leaseSeconds * 1000) / 3)));
  // A tab that slept (laptop lid, background throttling) renews as soon as it is looked at again.
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") heartbeat();
  });
}

export function wireClaimButton() {
  claimForm.addEventListener("submit", (event) => {
    if (!state.preview) return; // not claimable from here: let the server say why
    event.preventDefault();
    claim();
  });
}

/* Take over asks first, in a modal dialog: focus starts on Cancel, Escape or Cancel closes it and focus returns to
 * the trigger; only "Yes, take over" posts. */
export function wireTakeover() {
  const dialog = /** @type {HTMLDialogElement | null} */ (document.getElementById("takeover-dialog"));
  const trigger = document.getElementById("takeover-open");
  const cancel = document.getElementById("takeover-cancel");
  const takeover = takeoverForm;
  // Without <dialog> support (older Safari and Firefox) the trigger stays a link to ?takeover=1.
  if (!dialog || !("showModal" in dialog) || !trigger || !cancel || !takeover) return;
  trigger.addEventListener("click", (event) => {
    event.preventDefault();
    const name = document.getElementById("takeover-holder");
    if (name && state.holder) name.textContent = state.holder;
    if (dialog.open) dialog.close();
    dialog.showModal();
    cancel.focus();
  });
  cancel.addEventListener("click", (event) => {
    event.preventDefault();
    dialog.close();
  });
  dialog.addEventListener("close", () => {
    if (!takeover.classList.contains("is-hidden")) trigger.focus();
  });
  if (dialog.open) {
    // Rendered open for ?takeover=1: make it modal like the trigger would.
    dialog.close();
    dialog.showModal();
  }
}

/* Leaving the page (navigation, tab closed) releases a claim on which nothing was typed. */
export function releaseOnLeave() {
  window.addEventListener("pagehide", () => {
    if (!state.mine || state.typed || state.submitting || CLOSED[state.status] || !navigator.sendBeacon) return;
    const body = new FormData();
    body.append("csrfmiddlewaretoken", RH.csrfToken());
    navigator.sendBeacon(data.leaveUrl || "", body);
  });
}
