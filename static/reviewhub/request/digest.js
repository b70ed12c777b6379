// @ts-check
/* The decision card's Copy button: the full argument digest (the card shows its first 12 hex digits) to the
 * clipboard, for comparing with what an MCP server computed. */

export function copyDigest() {
  const button = /** @type {HTMLButtonElement | null} */ (document.getElementById("digest-copy"));
  if (!button || !navigator.clipboard) return;
  button.addEventListener("click", () => {
    navigator.clipboard.writeText(button.dataset.copy || "").then(
      () => {
        button.textContent = "Copied";
      },
      () => {
        button.textContent = "Copy failed";
      },
    );
  });
}
