// @ts-check
/* Request page: keeps the claim alive, shares drafts with every open page, and follows the request live.
 * The page works without this script; it only adds what needs no reload. Agent text goes through textContent.
 * A native ES module (no bundler): each concern is a module under request/, and this one starts them in order. */
import { RH, page } from "./request/page.js";
import {
  checkAnswerOnSubmit,
  focusFirstError,
  followAutoNext,
  noteSubmits,
  showOwnAddress,
} from "./request/answer-form.js";
import { keepClaimAlive, releaseOnLeave, wireClaimButton, wireTakeover } from "./request/claim.js";
import { copyDigest } from "./request/digest.js";
import { shareDrafts } from "./request/drafts.js";
import { focusOnArrival, rovingRail } from "./request/focus.js";
import { listenToKeys } from "./request/keys.js";
import { followLive } from "./request/live.js";
import { requireStepUp } from "./request/step-up.js";

if (RH && page) {
  shareDrafts();
  keepClaimAlive();
  followLive();
  checkAnswerOnSubmit();
  showOwnAddress();
  followAutoNext();
  wireClaimButton();
  noteSubmits();
  wireTakeover();
  releaseOnLeave();
  focusFirstError();
  focusOnArrival();
  rovingRail();
  listenToKeys();
  copyDigest();
}
requireStepUp(); // a passkey-signed accept (rules' `step_up: passkey`); no-op on other requests
