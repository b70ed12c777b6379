// @ts-check
/* The undo banner (templates/review/_undo.html): counts down to the moment the agent is told, then says it was
 * sent and drops the Undo button; `u` presses Undo while it shows. The button is a plain form POST, so undo works
 * without this script. A classic script, shared by the queue and request pages. */
(function () {
  var RH = window.ReviewHub;
  /** @type {HTMLElement[]} */
  var banners = Array.prototype.slice.call(document.querySelectorAll("[data-undo-banner]"));
  if (!banners.length) return;

  /** @param {HTMLElement} banner */
  function follow(banner) {
    var sendAt = Date.parse(banner.dataset.sendAt || "");
    var countdown = /** @type {HTMLElement | null} */ (banner.querySelector("[data-undo-countdown]"));
    function tick() {
      var left = Math.ceil((sendAt - Date.now()) / 1000);
      if (!countdown) return;
      if (left > 0) {
        countdown.textContent = "The agent is told in " + left + " s.";
        window.setTimeout(tick, 250);
        return;
      }
      countdown.textContent = "Sent: the agent has been told.";
      banner.classList.add("is-sent");
      var form = banner.querySelector("form");
      if (form) form.remove();
    }
    if (!isNaN(sendAt)) tick();
  }

  banners.forEach(follow);
  document.addEventListener("keydown", function (event) {
    if (event.key !== "u" || !RH || !RH.shortcut(event)) return;
    var button = /** @type {HTMLButtonElement | null} */ (document.querySelector("[data-undo-banner] [data-undo]"));
    if (!button) return;
    event.preventDefault();
    button.click();
  });
})();
