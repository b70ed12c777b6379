// @ts-check
/* Queue page: rows appear, change holder and disappear live; "n" claims the next request. */

/**
 * A request as the queue page's socket pushes it (`queue.update`).
 * @typedef {object} QueueSummary
 * @property {string} id
 * @property {string} status
 * @property {string} agent
 * @property {number} priority
 * @property {string} created_at
 */

(function () {
  "use strict";
  var RH = window.ReviewHub;
  var table = document.getElementById("request-table");
  if (!RH || !table) return;
  var data = table.dataset;

  /* Elements queue.html renders with the table. */
  var rows = /** @type {HTMLElement} */ (document.getElementById("request-rows"));
  var empty = /** @type {HTMLElement} */ (document.getElementById("empty-row"));
  var liveStatus = /** @type {HTMLElement} */ (document.getElementById("live-status"));
  var statusFilter = data.filterStatus;
  var agentFilter = data.filterAgent;
  var firstPage = data.firstPage === "true";
  var lastPage = data.lastPage === "true";
  var rowUrl = data.rowUrl || "";
  /** @type {Readonly<Record<string, boolean>>} */
  var OPEN = { pending: true, claimed: true };

  /** @param {QueueSummary} summary */
  function wanted(summary) {
    if (!OPEN[summary.status]) return false;
    if (statusFilter !== "open" && summary.status !== statusFilter) return false;
    return !agentFilter || summary.agent === agentFilter;
  }

  /** @param {string} id @returns {HTMLTableRowElement | null} */
  function findRow(id) {
    return rows.querySelector('tr[data-id="' + CSS.escape(id) + '"]');
  }

  /* A row's markup has one source, the server's review/_queue_row.html: fetched here for arrivals and changes. */
  /** @param {string} id @returns {Promise<HTMLTableRowElement | null>} */
  function fetchRow(id) {
    var url = rowUrl.replace("00000000-0000-0000-0000-000000000000", encodeURIComponent(id));
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } }).then(
      function (response) {
        if (response.status !== 200) return null;
        return response.text().then(function (html) {
          var holder = document.createElement("tbody");
          holder.innerHTML = html; // server-rendered and escaped, like the page itself
          /** @type {HTMLTableRowElement | null} */
          var row = holder.querySelector("tr[data-id]");
          return row;
        });
      },
      function () {
        return null;
      }
    );
  }

  /* Review order: higher priority first, then older first. */
  /** @param {QueueSummary} summary @param {HTMLTableRowElement} row */
  function comesBefore(summary, row) {
    var priority = Number(row.dataset.priority);
    if (summary.priority !== priority) return summary.priority > priority;
    return Date.parse(summary.created_at) < Date.parse(row.dataset.created || "");
  }

  /** @param {QueueSummary} summary @param {HTMLTableRowElement} fresh */
  function place(summary, fresh) {
    /** @type {NodeListOf<HTMLTableRowElement>} */
    var existing = rows.querySelectorAll("tr[data-id]");
    var before = null;
    for (var index = 0; index < existing.length; index += 1) {
      if (existing[index] !== fresh && comesBefore(summary, existing[index])) {
        before = existing[index];
        break;
      }
    }
    // Rows that sort before this page or after it belong to another page.
    if (before === existing[0] && existing.length && !firstPage) return;
    if (before === null && !lastPage) return;
    rows.insertBefore(fresh, before);
  }

  /** @param {QueueSummary} summary */
  function upsert(summary) {
    fetchRow(summary.id).then(function (fresh) {
      var row = findRow(summary.id);
      if (!fresh) {
        if (row) row.remove();
      } else if (row) {
        row.replaceWith(fresh);
      } else {
        fresh.classList.add("is-new");
        place(summary, fresh);
      }
      RH.localTimes();
      RH.tick();
      syncEmpty();
    });
  }

  function syncEmpty() {
    empty.classList.toggle("is-hidden", rows.querySelector("tr[data-id]") !== null);
  }

  /** @type {number | undefined} */
  var countsTimer;
  function refreshCounts() {
    window.clearTimeout(countsTimer);
    countsTimer = window.setTimeout(function () {
      RH.getJSON(data.countsUrl || "").then(function (/** @type {Record<string, number> | null} */ counts) {
        if (!counts) return;
        ["pending", "claimed", "overdue"].forEach(function (key) {
          var element = document.querySelector('#queue-counts [data-count="' + key + '"]');
          if (element) element.textContent = String(counts[key]);
        });
      });
    }, 250);
  }

  /** @param {{type: string, request?: QueueSummary}} message */
  function apply(message) {
    if (message.type !== "queue.update" || !message.request) return;
    var summary = message.request;
    var row = findRow(summary.id);
    if (wanted(summary)) {
      upsert(summary);
    } else if (row) {
      row.remove();
    }
    syncEmpty();
    refreshCounts();
  }

  RH.socket(data.ws || "", {
    message: apply,
    open: function (again) {
      if (again) window.location.reload(); // pushes may have been missed while disconnected
      liveStatus.textContent = "Live updates on.";
    },
    lost: function () {
      liveStatus.textContent = "Reconnecting…";
    },
  });

  /* j / k: move down / up the list, focusing each row's link (Enter opens it); the row in focus is marked. */
  /** @param {number} step */
  function moveInList(step) {
    /** @type {HTMLAnchorElement[]} */
    var links = Array.prototype.slice.call(rows.querySelectorAll("tr[data-id] .request-link"));
    if (!links.length) return;
    var index = links.indexOf(/** @type {HTMLAnchorElement} */ (document.activeElement));
    var next = links[index === -1 ? (step > 0 ? 0 : links.length - 1) : Math.max(0, Math.min(links.length - 1, index + step))];
    links.forEach(function (link) {
      var row = link.closest("tr");
      if (row) row.classList.toggle("is-selected", link === next);
    });
    next.focus();
  }

  document.addEventListener("keydown", function (event) {
    if (!RH.shortcut(event)) return;
    if (event.key === "n") RH.submit(/** @type {HTMLFormElement | null} */ (document.getElementById("next-form")));
    else if (event.key === "j") moveInList(1);
    else if (event.key === "k") moveInList(-1);
    else return;
    event.preventDefault();
  });
})();
