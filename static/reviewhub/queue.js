/* Queue page: rows appear, change holder and disappear live; "n" claims the next request. */
(function () {
  "use strict";
  var RH = window.ReviewHub;
  var table = document.getElementById("request-table");
  if (!RH || !table) return;

  var rows = document.getElementById("request-rows");
  var empty = document.getElementById("empty-row");
  var liveStatus = document.getElementById("live-status");
  var statusFilter = table.dataset.filterStatus;
  var agentFilter = table.dataset.filterAgent;
  var firstPage = table.dataset.firstPage === "true";
  var lastPage = table.dataset.lastPage === "true";
  var rowUrl = table.dataset.rowUrl;
  var OPEN = { pending: true, claimed: true };

  function wanted(summary) {
    if (!OPEN[summary.status]) return false;
    if (statusFilter !== "open" && summary.status !== statusFilter) return false;
    return !agentFilter || summary.agent === agentFilter;
  }

  function findRow(id) {
    return rows.querySelector('tr[data-id="' + CSS.escape(id) + '"]');
  }

  /* A row's markup has one source, the server's review/_queue_row.html: fetched here for arrivals and changes. */
  function fetchRow(id) {
    var url = rowUrl.replace("00000000-0000-0000-0000-000000000000", encodeURIComponent(id));
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } }).then(
      function (response) {
        if (response.status !== 200) return null;
        return response.text().then(function (html) {
          var holder = document.createElement("tbody");
          holder.innerHTML = html; // server-rendered and escaped, like the page itself
          return holder.querySelector("tr[data-id]");
        });
      },
      function () {
        return null;
      }
    );
  }

  /* Review order: higher priority first, then older first. */
  function comesBefore(summary, row) {
    var priority = Number(row.dataset.priority);
    if (summary.priority !== priority) return summary.priority > priority;
    return Date.parse(summary.created_at) < Date.parse(row.dataset.created);
  }

  function place(summary, fresh) {
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

  var countsTimer = null;
  function refreshCounts() {
    window.clearTimeout(countsTimer);
    countsTimer = window.setTimeout(function () {
      RH.getJSON(table.dataset.countsUrl).then(function (counts) {
        if (!counts) return;
        ["pending", "claimed", "overdue"].forEach(function (key) {
          var element = document.querySelector('#queue-counts [data-count="' + key + '"]');
          if (element) element.textContent = String(counts[key]);
        });
      });
    }, 250);
  }

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

  RH.socket(table.dataset.ws, {
    message: apply,
    open: function (again) {
      if (again) window.location.reload(); // pushes may have been missed while disconnected
      liveStatus.textContent = "Live updates on.";
    },
    lost: function () {
      liveStatus.textContent = "Reconnecting…";
    },
  });

  document.addEventListener("keydown", function (event) {
    if (event.key === "n" && RH.shortcut(event)) {
      event.preventDefault();
      RH.submit(document.getElementById("next-form"));
    }
  });
})();
