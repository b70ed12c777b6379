// @ts-check
/* The preferences page's "Push notifications": turn Web Push on or off for this browser. On: register the service
 * worker (/service-worker.js, scope "/"), ask the browser's permission (only a click may), subscribe with the
 * server's VAPID public key and save the subscription as this reviewer's. Off: unsubscribe and forget it. The list
 * of the reviewer's browsers is the server's (preferences.html); the page reloads to show it after a change. */
(function () {
  "use strict";
  var RH = window.ReviewHub;
  var found = document.getElementById("web-push");
  if (!RH || !found || !found.dataset.key) return;
  var section = found;
  var status = /** @type {HTMLElement} */ (document.getElementById("push-status"));
  var on = /** @type {HTMLButtonElement} */ (document.getElementById("push-subscribe"));
  var off = /** @type {HTMLButtonElement} */ (document.getElementById("push-unsubscribe"));
  var supported = "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;

  /** The VAPID key as the bytes `applicationServerKey` takes. @param {string} text */
  function keyBytes(text) {
    var padded = (text + "===".slice((text.length + 3) % 4)).replace(/-/g, "+").replace(/_/g, "/");
    return Uint8Array.from(window.atob(padded), function (c) {
      return c.charCodeAt(0);
    });
  }

  /** @param {string} text */
  function say(text) {
    status.textContent = text;
  }

  function registration() {
    return navigator.serviceWorker
      .register(String(section.dataset.worker), { scope: "/" })
      .then(function () {
        return navigator.serviceWorker.ready;
      });
  }

  /** @param {PushSubscription | null} subscription */
  function render(subscription) {
    on.hidden = !!subscription;
    off.hidden = !subscription;
    section.dataset.state = subscription ? "subscribed" : "unsubscribed";
    if (window.Notification.permission === "denied") {
      say("This browser blocks ReviewHub's notifications: allow them in the site's settings first.");
    } else {
      say(subscription ? "On: this browser receives push notifications." : "Off in this browser.");
    }
  }

  function subscribe() {
    on.disabled = true;
    say("Asking this browser…");
    window.Notification.requestPermission()
      .then(function (permission) {
        if (permission !== "granted") throw new Error("Notifications were not allowed in this browser.");
        return registration();
      })
      .then(function (ready) {
        return ready.pushManager.getSubscription().then(function (existing) {
          return (
            existing ||
            ready.pushManager.subscribe({
              userVisibleOnly: true,
              applicationServerKey: keyBytes(String(section.dataset.key)),
            })
          );
        });
      })
      .then(function (subscription) {
        return RH.post(String(section.dataset.subscribe), subscription.toJSON()).then(function (result) {
          if (!result.ok) throw new Error((result.data && result.data.detail) || "ReviewHub refused the subscription.");
          section.dataset.state = "subscribed";
          window.location.reload();
        });
      })
      .catch(function (/** @type {Error} */ error) {
        on.disabled = false;
        say("Not turned on: " + (error && error.message ? error.message : "this browser refused."));
      });
  }

  function unsubscribe() {
    off.disabled = true;
    registration()
      .then(function (ready) {
        return ready.pushManager.getSubscription();
      })
      .then(function (subscription) {
        if (!subscription) return null;
        var endpoint = subscription.endpoint;
        return subscription.unsubscribe().then(function () {
          return RH.post(String(section.dataset.unsubscribe), { endpoint: endpoint });
        });
      })
      .then(function () {
        window.location.reload();
      })
      .catch(function () {
        off.disabled = false;
        say("Could not turn push off in this browser; try again.");
      });
  }

  if (!supported) {
    say("This browser cannot receive push notifications. On iPhone and iPad, add ReviewHub to the Home Screen first.");
    return;
  }
  on.addEventListener("click", subscribe);
  off.addEventListener("click", unsubscribe);
  navigator.serviceWorker
    .getRegistration("/")
    .then(function (existing) {
      return existing ? existing.pushManager.getSubscription() : null;
    })
    .then(function (subscription) {
      render(subscription);
      // Saved again (the same row): a subscription the server dropped, or one the browser renewed, is known again.
      if (subscription) RH.post(String(section.dataset.subscribe), subscription.toJSON());
    }, function () {
      render(null);
    });
})();
