/* The preferences page's "This browser" part: desktop notifications on or off for this browser (kept with the
 * other browser-side preferences, read by notify.js) and the browser's own permission, which only a click can ask. */
(function () {
  "use strict";
  var RH = window.ReviewHub;
  var box = document.getElementById("browser-prefs");
  if (!RH || !box) return;
  var toggle = document.getElementById("pref-notify");
  var status = document.getElementById("notify-permission");
  var allow = document.getElementById("notify-allow");
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
