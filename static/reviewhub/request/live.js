// @ts-check
/* The page's live socket (reconnecting with backoff, reviewhub.js): the request's changes, teammates' drafts. */
import { RH, page, state } from "./page.js";
import { refreshDecision } from "./decision-panel.js";
import { applyDraft } from "./drafts.js";
import { applyUpdate } from "./status.js";

/**
 * A frame of the request page's socket (elicitation/reviewer/sockets.py relays delivery/pushes.py).
 * @typedef {object} RequestFrame
 * @property {string} type "request.update", "request.draft" or "pong"
 * @property {import("./page.js").RequestSummary} [request]
 * @property {import("./drafts.js").Draft} [draft]
 */

export function followLive() {
  RH.socket(/** @type {string} */ (page && page.dataset.ws), {
    message: (/** @type {RequestFrame} */ message) => {
      if (message.type === "request.update") {
        if (message.request) applyUpdate(message.request);
        refreshDecision();
      } else if (message.type === "request.draft" && message.draft) {
        applyDraft(message.draft);
      }
    },
    open: (again) => {
      if (!again) return;
      // Pushes may have been missed while disconnected; a read-only page can simply reload.
      if (!state.mine) window.location.reload();
      else refreshDecision();
    },
  });
}
