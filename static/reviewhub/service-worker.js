// @ts-check
/* ReviewHub's service worker (served at /service-worker.js, so its scope is the whole site): shows the Web Push
 * notifications the server sends (elicitation/delivery/web_push.py) while no ReviewHub tab is open, and answers a
 * yes/no approval from the notification's Approve / Reject buttons.
 *
 * A push's payload is JSON: title, body (plain text; a notification never renders markup), the request's page,
 * and for an approval its buttons, most with a one-time token. A button with a token posts it to the request's
 * push-answer endpoint, which answers through the same claim, quorum, rule and audit path as the request page; the
 * reviewer then sees what happened in a second notification. A button without one ("Approve with passkey", on a
 * request whose accept only the page can sign) and a click anywhere else open (or focus) the request page.
 * Browsers that show no action buttons (Safari, iOS) only ever open the page. */
"use strict";

/** @type {any} */
var sw = self;

sw.addEventListener("install", function () {
  sw.skipWaiting();
});

sw.addEventListener("activate", function (/** @type {any} */ event) {
  event.waitUntil(sw.clients.claim());
});

/** The push's JSON, or a plain notice when it is not what the server sends. @param {any} data */
function readPush(data) {
  try {
    var parsed = data ? data.json() : null;
    if (parsed && typeof parsed.title === "string") return parsed;
  } catch (error) {
    /* fall through: still show something, as a push must be visible */
  }
  return { title: "ReviewHub", body: "A request is waiting for you.", url: "/", actions: [] };
}

/** Show a pushed request. @param {any} payload */
function showRequest(payload) {
  var actions = Array.isArray(payload.actions) ? payload.actions : [];
  /** @type {Record<string, string>} */
  var tokens = {};
  actions.forEach(function (/** @type {any} */ item) {
    if (typeof item.token === "string" && item.token) tokens[item.action] = item.token;
  });
  return sw.registration.showNotification(String(payload.title), {
    body: String(payload.body || ""),
    tag: String(payload.tag || ""),
    icon: payload.icon || undefined,
    badge: payload.badge || undefined,
    renotify: false,
    requireInteraction: actions.length > 0,
    actions: actions.map(function (/** @type {any} */ item) {
      return { action: String(item.action), title: String(item.title) };
    }),
    data: { url: payload.url || "/", answerUrl: payload.answerUrl || "", tokens: tokens, request: payload.request },
  });
}

sw.addEventListener("push", function (/** @type {any} */ event) {
  event.waitUntil(showRequest(readPush(event.data)));
});

/** Open the page, or focus a tab that already shows it. @param {string} url */
function openPage(url) {
  var target = new URL(url, sw.location.origin).href;
  return sw.clients.matchAll({ type: "window", includeUncontrolled: true }).then(function (/** @type {any[]} */ tabs) {
    for (var i = 0; i < tabs.length; i += 1) {
      if (tabs[i].url === target && "focus" in tabs[i]) return tabs[i].focus();
    }
    return sw.clients.openWindow(target);
  });
}

/** What the answer endpoint said, as a second notification on the same tag. @param {any} data @param {any} result */
function showResult(data, result) {
  var ok = result.ok;
  var body = result.body || {};
  var title = ok ? String(body.outcome || "Answered") : "Not answered";
  var text = ok ? "Your answer was sent to the agent." : String(body.detail || "Open the request to answer it.");
  return sw.registration.showNotification(title, {
    body: text,
    tag: "result:" + String(data.request || ""),
    data: { url: data.url, answerUrl: "", tokens: {}, request: data.request },
  });
}

/**
 * What a click on a notification does: an action with a token posts it, anything else (an action without a
 * token, the notification's body) opens the request.
 * Kept apart from the event so that it has one definition whoever calls it (tests/browser/test_web_push.py
 * drives it with the notification the browser shows, as a click would).
 * @param {any} notification @param {string} action
 */
function handleNotificationClick(notification, action) {
  var data = notification.data || {};
  var token = data.tokens && action ? data.tokens[action] : "";
  notification.close();
  if (!token || !data.answerUrl) return openPage(data.url || "/");
  return fetch(data.answerUrl, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify({ token: token }),
  })
    .then(function (response) {
      return response.json().then(
        function (body) {
          return { ok: response.ok, status: response.status, body: body };
        },
        function () {
          return { ok: response.ok, status: response.status, body: null };
        }
      );
    })
    .catch(function () {
      return { ok: false, status: 0, body: { detail: "ReviewHub could not be reached: open the request." } };
    })
    .then(function (result) {
      return showResult(data, result).then(function () {
        return result;
      });
    });
}
sw.handleNotificationClick = handleNotificationClick;

sw.addEventListener("notificationclick", function (/** @type {any} */ event) {
  event.waitUntil(handleNotificationClick(event.notification, event.action));
});
