// The request page's decision panel: when the page's socket hears the request changed (another approver, a veto),
// refresh the approvals line from the panel's JSON. No inline script (CSP); progressive: without JS the page
// shows the figures as of its load.
(function () {
  "use strict";
  var panel = document.getElementById("decision-panel");
  var line = document.getElementById("quorum-progress");
  if (!panel || !line || !window.WebSocket) return;
  var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
  var refresh = function () {
    fetch(panel.dataset.decisionUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body || !body.progress) return;
        line.textContent = body.progress.text;
        panel.dataset.status = body.status;
        var form = document.getElementById("quorum-form");
        if (form && body.status !== "pending" && body.status !== "claimed") form.classList.add("is-hidden");
      })
      .catch(function () {});
  };
  var connect = function (delay) {
    var socket = new WebSocket(scheme + window.location.host + panel.dataset.ws);
    socket.onmessage = function (event) {
      try {
        if (JSON.parse(event.data).type === "request.update") refresh();
      } catch (ignored) { /* not ours */ }
    };
    socket.onclose = function () { window.setTimeout(function () { connect(Math.min(delay * 2, 30000)); refresh(); }, delay); };
  };
  connect(1000);
})();
