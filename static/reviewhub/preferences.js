// @ts-check
/* The preferences page's "This browser" part: desktop notifications on or off for this browser (kept with the
 * other browser-side preferences, read by notify.js) and the browser's own permission, which only a click can ask. */
(function () {
  "use strict";
  var RH = window.ReviewHub;
  var found = document.getElementById("browser-prefs");
  if (!RH || !found) return;
  var box = found; // not null, for the functions below too (a narrowed var is not narrowed inside them)
  /* Elements preferences.html renders inside #browser-prefs. */
  var toggle = /** @type {HTMLInputElement} */ (document.getElementById("pref-notify"));
  var status = /** @type {HTMLElement} */ (document.getElementById("notify-permission"));
  var allow = /** @type {HTMLButtonElement} */ (document.getElementById("notify-allow"));
  var supported = "Notification" in window;

  function permission() {
    return supported ? window.Notification.permission : "unsupported";
  }

  function render() {
    var state = permission();
    toggle.checked = RH.pref("notify") && state !== "unsupported";
    toggle.disabled = state === "unsupported";
    allow.hidden = !(toggle.checked && state === "default");
    if (state === "unsupported") {
      status.textContent = "This browser cannot show desktop notifications.";
    } else if (state === "denied") {
      status.textContent = "This browser blocks ReviewHub's notifications: allow them in the site's settings.";
    } else if (state === "default") {
      status.textContent = "This browser has not been asked yet.";
    } else {
      status.textContent = toggle.checked ? "On: allowed by this browser." : "Off.";
    }
    box.dataset.permission = state;
  }

  function ask() {
    window.Notification.requestPermission().then(render, render);
  }

  toggle.addEventListener("change", function () {
    RH.setPref("notify", toggle.checked);
    if (toggle.checked && permission() === "default") ask();
    render();
  });
  allow.addEventListener("click", ask);
  box.hidden = false;
  render();
})();
