// @ts-check
/* `?` opens the list of every shortcut (templates/review/_shortcuts.html), a modal <dialog>: focus moves into it,
 * Esc or Close shuts it and focus returns where it was. A classic script, shared by the queue and request pages. */
(function () {
  var RH = window.ReviewHub;
  var dialog = /** @type {HTMLDialogElement | null} */ (document.getElementById("shortcuts-dialog"));
  if (!RH || !dialog) return;
  var opener = document.getElementById("shortcuts-open");
  var close = document.getElementById("shortcuts-close");
  /** @type {HTMLElement | null} */
  var before = null;

  function show() {
    if (!dialog || dialog.open) return;
    before = /** @type {HTMLElement | null} */ (document.activeElement);
    dialog.showModal();
  }

  if (opener) opener.addEventListener("click", show);
  if (close) close.addEventListener("click", function () {
    if (dialog) dialog.close();
  });
  dialog.addEventListener("close", function () {
    if (before && before !== document.body && document.contains(before)) before.focus({ preventScroll: true });
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "?" && RH.shortcut(event)) {
      event.preventDefault();
      show();
    }
  });
})();
