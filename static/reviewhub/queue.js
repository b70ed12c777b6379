/* Queue page: rows appear, change holder and disappear live; "n" claims the next request. */
(function () {
  "use strict";
  var RH = window.ReviewHub;
  var table = document.getElementById("request-table");
  if (!RH || !table) return;

  var rows = document.getElementById("request-rows");
  var empty = document.getElementById("empty-row");
  var template = document.getElementById("row-template");
  var liveStatus = document.getElementById("live-status");
  var statusFilter = table.dataset.filterStatus;
  var agentFilter = table.dataset.filterAgent;
  var firstPage = table.dataset.firstPage === "true";
  var lastPage = table.dataset.lastPage === "true";
  var requestUrl = table.dataset.requestUrl;
  var OPEN = { pending: true, claimed: true };

  function wanted(summary) {
    if (!OPEN[summary.status]) return false;
    if (statusFilter !== "open" && summary.status !== statusFilter) return false;
    return !agentFilter || summary.agent === agentFilter;
  }

  function findRow(id) {
    return rows.querySelector('tr[data-id="' + CSS.escape(id) + '"]');
  }

  function badge(summary) {
    var span = document.createElement("span");
    if (summary.status === "claimed") {
      span.className = "badge badge-claimed";
      span.textContent = "claimed by " + (summary.claimed_by || "someone");
    } else {
      span.className = "badge badge-pending";
      span.textContent = "pending";
    }
    return span;
  }

  function setStatus(row, summary) {
    var cell = row.querySelector('[data-field="status"]');
    cell.replaceChildren(badge(summary));
    row.classList.toggle("is-claimed", summary.status === "claimed");
  }

  function excerpt(text) {
    return text.length > 160 ? text.slice(0, 159) + "…" : text;
  }

  function buildRow(summary) {
    var row = template.content.firstElementChild.cloneNode(true);
    row.dataset.id = summary.id;
    row.dataset.priority = String(summary.priority);
    row.dataset.created = summary.created_at;
    var priority = row.querySelector('[data-field="priority"]');
    priority.textContent = String(summary.priority);
    if (summary.priority > 0) priority.classList.add("priority-high");
    if (summary.priority < 0) priority.classList.add("priority-low");
    var link = row.querySelector('[data-field="message"]');
    link.textContent = excerpt(summary.message_excerpt || "");
    link.href = requestUrl.replace("00000000-0000-0000-0000-000000000000", encodeURIComponent(summary.id));
    var agent = row.querySelector('[data-field="agent"]');
    agent.textContent = summary.agent;
    if (summary.mode === "url") {
      var mode = document.createElement("span");
      mode.className = "badge badge-muted";
      mode.textContent = "URL";
      agent.after(" ", mode);
    }
    var age = row.querySelector("[data-age]");
    age.dataset.age = summary.created_at;
    age.setAttribute("datetime", summary.created_at);
    var countdown = row.querySelector("[data-deadline]");
    countdown.dataset.deadline = summary.deadline;
    countdown.setAttribute("datetime", summary.deadline);
    setStatus(row, summary);
    row.classList.add("is-new");
    return row;
  }

  /* Review order: higher priority first, then older first. */
  function comesBefore(summary, row) {
    var priority = Number(row.dataset.priority);
    if (summary.priority !== priority) return summary.priority > priority;
    return Date.parse(summary.created_at) < Date.parse(row.dataset.created);
  }

  function insert(summary) {
    var existing = rows.querySelectorAll("tr[data-id]");
    var before = null;
    for (var index = 0; index < existing.length; index += 1) {
      if (comesBefore(summary, existing[index])) {
        before = existing[index];
        break;
      }
    }
    // Rows that sort before this page or after it belong to another page.
    if (before === existing[0] && existing.length && !firstPage) return;
    if (before === null && !lastPage) return;
    rows.insertBefore(buildRow(summary), before);
    RH.tick();
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
      if (row) setStatus(row, summary);
      else insert(summary);
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
    if (event.key === "n" && RH.plainKey(event)) {
      event.preventDefault();
      RH.submit(document.getElementById("next-form"));
    }
  });
})();
