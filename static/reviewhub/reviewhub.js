// @ts-check
/* ReviewHub reviewer pages: shared helpers (API calls, live sockets, clocks, shortcuts).
 * Everything an agent wrote is untrusted: it only ever reaches the DOM through textContent.
 * A classic script, loaded first by base.html: the pages' scripts (queue.js, request.js and its modules, ...) find
 * these helpers as the global `ReviewHub` (window.ReviewHub), typed from this file. */

/**
 * The reviewer API's JSON answer, as far as the pages read it: an error's status, detail and per-field reasons.
 * @typedef {object} ApiBody
 * @property {string} [status]
 * @property {string} [detail]
 * @property {Record<string, string>} [fields]
 */

/**
 * What `ReviewHub.post` resolves to; status 0 when the request did not reach the server.
 * @typedef {object} PostResult
 * @property {boolean} ok
 * @property {number} status
 * @property {ApiBody | null} data
 */

/**
 * @template M
 * @typedef {object} SocketHandlers
 * @property {(message: M) => void} message each JSON frame
 * @property {(again: boolean) => void} [open] again: reconnected, so pushes may have been missed
 * @property {() => void} [lost]
 * @property {() => void} [denied] closed as not allowed (4401, 4403): no retry
 */

var ReviewHub = (function () {
  "use strict";

  var RH = {};

  RH.csrfToken = function () {
    /** @type {HTMLInputElement | null} */
    var field = document.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  };

  /* POST JSON to the reviewer API with the session cookie and CSRF header; never throws. */
  /** @param {string} url @param {unknown} [body] @returns {Promise<PostResult>} */
  RH.post = function (url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Content-Type": "application/json",
        Accept: "application/json",
        "X-CSRFToken": RH.csrfToken(),
      },
      body: body === undefined ? null : JSON.stringify(body),
    }).then(
      function (response) {
        return response.json().then(
          function (data) {
            return { ok: response.ok, status: response.status, data: data };
          },
          function () {
            return { ok: response.ok, status: response.status, data: null };
          }
        );
      },
      function () {
        return { ok: false, status: 0, data: null };
      }
    );
  };

  /** GET JSON; null when it fails. @param {string} url @returns {Promise<any>} */
  RH.getJSON = function (url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } }).then(
      function (response) {
        return response.ok ? response.json() : null;
      },
      function () {
        return null;
      }
    );
  };

  /* "45s", "3m 12s", "2h 05m", "3d 4h": compact and stable in width. */
  /** @param {number} ms */
  RH.duration = function (ms) {
    var seconds = Math.max(0, Math.floor(ms / 1000));
    if (seconds < 60) return seconds + "s";
    var minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + "m " + String(seconds % 60).padStart(2, "0") + "s";
    var hours = Math.floor(minutes / 60);
    if (hours < 24) return hours + "h " + String(minutes % 60).padStart(2, "0") + "m";
    return Math.floor(hours / 24) + "d " + (hours % 24) + "h";
  };

  /* Times in the reviewer's own time zone; UTC stays one hover away (the element's title). */
  /** @param {string} iso */
  RH.clockTime = function (iso) {
    var moment = new Date(iso);
    if (isNaN(moment.getTime())) return "";
    return moment.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  };

  /** @param {Date} moment */
  RH.utcText = function (moment) {
    return moment.toISOString().slice(0, 19).replace("T", " ") + " UTC";
  };

  /** @param {ParentNode} [root] */
  RH.localTimes = function (root) {
    /** @type {NodeListOf<HTMLTimeElement>} */
    var local = (root || document).querySelectorAll("time[data-local]");
    local.forEach(function (element) {
      var moment = new Date(element.dateTime);
      if (isNaN(moment.getTime())) return;
      var today = new Date().toDateString() === moment.toDateString();
      element.textContent =
        element.dataset.local === "time" || today
          ? moment.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
          : moment.toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
      element.title = RH.utcText(moment);
    });
    /** @type {NodeListOf<HTMLTimeElement>} */
    var counting = (root || document).querySelectorAll("time[data-age], time[data-deadline]");
    counting.forEach(function (element) {
      var moment = new Date(element.dateTime);
      if (!isNaN(moment.getTime())) element.title = moment.toLocaleString() + " · " + RH.utcText(moment);
    });
  };

  /* Preferences kept in this browser: single-key shortcuts (WCAG 2.1.4: they can be turned off) and opening
   * the next request after answering. Both on unless turned off. */
  /** @param {string} name */
  RH.pref = function (name) {
    try {
      return window.localStorage.getItem("reviewhub." + name) !== "off";
    } catch (error) {
      return true;
    }
  };

  /** @param {string} name @param {boolean} on */
  RH.setPref = function (name, on) {
    try {
      window.localStorage.setItem("reviewhub." + name, on ? "on" : "off");
    } catch (error) {
      /* private mode: the preference lasts for this page only */
    }
  };

  var SOON_MS = 5 * 60 * 1000;

  /* Ages count up, deadlines count down; both re-render every second from their ISO timestamps. */
  RH.tick = function () {
    var now = Date.now();
    /** @type {NodeListOf<HTMLElement>} */
    var ages = document.querySelectorAll("[data-age]");
    ages.forEach(function (element) {
      var since = Date.parse(element.dataset.age || "");
      if (!isNaN(since)) element.textContent = RH.duration(now - since);
    });
    /** @type {NodeListOf<HTMLElement>} */
    var deadlines = document.querySelectorAll("[data-deadline]");
    deadlines.forEach(function (element) {
      var deadline = Date.parse(element.dataset.deadline || "");
      if (isNaN(deadline)) return;
      var left = deadline - now;
      element.textContent = left > 0 ? "in " + RH.duration(left) : "overdue " + RH.duration(-left);
      element.classList.toggle("is-overdue", left <= 0);
      element.classList.toggle("is-soon", left > 0 && left < SOON_MS);
    });
  };

  /* A WebSocket that reconnects with backoff. `handlers.open(again)` learns whether pushes may have been missed. */
  /** @template M @param {string} path @param {SocketHandlers<M>} handlers */
  RH.socket = function (path, handlers) {
    /** @type {WebSocket | null} */
    var socket = null;
    var attempts = 0;
    var everOpened = false;
    function connect() {
      var scheme = location.protocol === "https:" ? "wss://" : "ws://";
      socket = new WebSocket(scheme + location.host + path);
      socket.onopen = function () {
        var again = everOpened;
        everOpened = true;
        attempts = 0;
        document.body.dataset.live = "on";
        if (handlers.open) handlers.open(again);
      };
      socket.onmessage = function (event) {
        var message;
        try {
          message = JSON.parse(event.data);
        } catch (error) {
          return;
        }
        handlers.message(message);
      };
      socket.onclose = function (event) {
        document.body.dataset.live = "off";
        if (event.code === 4401 || event.code === 4403) {
          if (handlers.denied) handlers.denied();
          return; // not allowed: retrying will not help
        }
        attempts += 1;
        if (handlers.lost) handlers.lost();
        window.setTimeout(connect, Math.min(30000, 500 * Math.pow(2, attempts)));
      };
    }
    connect();
    window.setInterval(function () {
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "ping" }));
    }, 25000);
  };

  /* True when a key press belongs to a field the reviewer is typing in, so single-letter shortcuts stay out. */
  /** @param {Event} event */
  RH.isTyping = function (event) {
    var target = /** @type {HTMLInputElement | null} */ (event.target);
    if (!target || !target.tagName) return false;
    var tag = target.tagName.toLowerCase();
    if (tag === "textarea" || tag === "select" || target.isContentEditable) return true;
    if (tag !== "input") return false;
    return ["checkbox", "radio", "button", "submit"].indexOf((target.type || "").toLowerCase()) === -1;
  };

  /** @param {KeyboardEvent} event */
  RH.plainKey = function (event) {
    // An open modal dialog (take over) owns the keyboard: no letter acts on the page behind it.
    if (document.querySelector("dialog[open]")) return false;
    return !event.ctrlKey && !event.metaKey && !event.altKey && !RH.isTyping(event);
  };

  /* A single-key shortcut: a plain key, outside fields, with shortcuts turned on. */
  /** @param {KeyboardEvent} event */
  RH.shortcut = function (event) {
    return RH.plainKey(event) && RH.pref("shortcuts");
  };

  function wirePrefs() {
    [
      ["pref-shortcuts", "shortcuts"],
      ["pref-auto-next", "autoNext"],
    ].forEach(function (pair) {
      const box = /** @type {HTMLInputElement | null} */ (document.getElementById(pair[0]));
      if (!box) return;
      box.checked = RH.pref(pair[1]);
      box.addEventListener("change", function () {
        RH.setPref(pair[1], box.checked);
        document.dispatchEvent(new CustomEvent("reviewhub:prefs"));
      });
    });
    document.body.classList.toggle("no-shortcuts", !RH.pref("shortcuts"));
    document.addEventListener("reviewhub:prefs", function () {
      document.body.classList.toggle("no-shortcuts", !RH.pref("shortcuts"));
    });
  }

  /** @param {HTMLFormElement | null} form */
  RH.submit = function (form) {
    if (!form) return;
    if (form.requestSubmit) form.requestSubmit();
    else form.submit();
  };

  /* Forms that filter by day send the browser's time zone, used when the reviewer saved none (history). */
  function fillBrowserZone() {
    var zone = "";
    try {
      zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (error) {
      return;
    }
    /** @type {NodeListOf<HTMLInputElement>} */
    var inputs = document.querySelectorAll("input[data-browser-zone]");
    inputs.forEach(function (input) {
      if (!input.value) input.value = zone;
    });
  }

  fillBrowserZone();
  wirePrefs();
  RH.localTimes();
  RH.tick();
  window.setInterval(RH.tick, 1000);
  return RH;
})();
