// @ts-check
// Getting a reviewer's attention from the browser: the tab title and favicon count the requests waiting in my
// queues, and, once the reviewer opts in, a desktop notification announces a new request (or one the escalation
// chain assigned to me) while the tab is hidden; clicking it opens the request. Polls /reach/waiting; the pages
// themselves stay server-rendered and work without this script.

/**
 * What /reach/waiting answers (elicitation/reviewer/notifications.py).
 * @typedef {object} Waiting
 * @property {number} [waiting] requests waiting in my queues
 * @property {WaitingItem[]} [items] what a notification may announce
 * @property {number} [poll] seconds until the next poll
 */

/**
 * @typedef {object} WaitingItem
 * @property {string} id
 * @property {string} key
 * @property {string} title
 * @property {string} body
 * @property {string} url
 */

(function () {
  "use strict";
  if (!document.body || !document.body.dataset.username) {
    return;
  }
  var baseTitle = document.title;
  var seenKey = "rh-notified:" + document.body.dataset.username;
  var seen = loadSeen();
  var primed = false;
  /** @type {number | null} */
  var timer = null;
  /** @type {HTMLLinkElement | null} */
  var icon = null;

  /** @returns {string[]} */
  function loadSeen() {
    try {
      return JSON.parse(window.localStorage.getItem(seenKey) || "[]");
    } catch (e) {
      return [];
    }
  }

  /** @param {string} key */
  function remember(key) {
    if (seen.indexOf(key) !== -1) {
      return false;
    }
    seen.push(key);
    seen = seen.slice(-300);
    try {
      window.localStorage.setItem(seenKey, JSON.stringify(seen));
    } catch (e) {
      // storage full or disabled: the in-memory list still prevents repeats in this tab
    }
    return true;
  }

  function csrfToken() {
    /** @type {HTMLInputElement | null} */
    var field = document.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  /** @param {number} count */
  function drawFavicon(count) {
    if (!icon) {
      icon =
        /** @type {HTMLLinkElement | null} */ (document.querySelector("link[rel~=icon]")) ||
        document.createElement("link");
      icon.rel = "icon";
      document.head.appendChild(icon);
    }
    var canvas = document.createElement("canvas");
    canvas.width = canvas.height = 32;
    var ctx = canvas.getContext("2d");
    if (!ctx) {
      return;
    }
    ctx.fillStyle = "#1f4e79";
    ctx.fillRect(0, 0, 32, 32);
    ctx.fillStyle = "#ffffff";
    ctx.font = "bold 20px sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillText("R", 13, 17);
    if (count > 0) {
      ctx.fillStyle = "#d13438";
      ctx.beginPath();
      ctx.arc(23, 9, 9, 0, 2 * Math.PI);
      ctx.fill();
      ctx.fillStyle = "#ffffff";
      ctx.font = "bold 12px sans-serif";
      ctx.fillText(count > 99 ? "99" : String(count), 23, 10);
    }
    icon.href = canvas.toDataURL("image/png");
    icon.dataset.count = String(count);
  }

  /** @param {number} count */
  function showCount(count) {
    document.title = count > 0 ? "(" + count + ") " + baseTitle : baseTitle;
    drawFavicon(count);
  }

  function canNotify() {
    // Off for this browser when turned off on the preferences page (static/reviewhub/preferences.js).
    var off = window.ReviewHub && !window.ReviewHub.pref("notify");
    return "Notification" in window && window.Notification.permission === "granted" && !off;
  }

  /** @param {WaitingItem} item */
  function notify(item) {
    var note = new window.Notification(item.title, { body: item.body, tag: item.key });
    note.onclick = function () {
      window.focus();
      window.location.href = item.url;
      note.close();
    };
    fetch("/reach/shown/" + encodeURIComponent(item.id), {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken() },
    }).catch(function () {});
  }

  /** @param {Waiting} data */
  function handle(data) {
    showCount(data.waiting || 0);
    var hidden = document.visibilityState === "hidden";
    (data.items || []).forEach(function (item) {
      var fresh = remember(item.key);
      // The first poll only learns what is already there; a notification is for news.
      if (fresh && primed && hidden && canNotify()) {
        notify(item);
      }
    });
    primed = true;
    return (data.poll || 10) * 1000;
  }

  function poll() {
    fetch("/reach/waiting", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        return response.ok ? response.json() : Promise.reject(response.status);
      })
      .then(handle, function () {
        return 30000;
      })
      .then(function (delay) {
        timer = window.setTimeout(poll, delay);
      });
  }

  function offerOptIn() {
    if (!("Notification" in window) || window.Notification.permission !== "default") {
      return;
    }
    var nav = document.querySelector(".topnav");
    if (!nav) {
      return;
    }
    var button = document.createElement("button");
    button.type = "button";
    button.className = "btn btn-quiet btn-small reach-opt-in";
    button.textContent = "Desktop notifications";
    button.title = "Tell me about new requests while this tab is in the background";
    button.addEventListener("click", function () {
      window.Notification.requestPermission().then(function () {
        button.remove();
      });
    });
    nav.appendChild(button);
  }

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible" && timer !== null) {
      window.clearTimeout(timer);
      poll();
    }
  });
  offerOptIn();
  poll();
})();
