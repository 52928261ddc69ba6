/* Printing a page prints everything on it: every folded dropdown and hidden cell opens first (on the
   browser's print event, and at load for `make pdf`, which opens each page with `?print`). Once
   `make pdf` has built the book's PDF, the header offers it. */
/* The theme reads the colour mode from <html data-mode>, which this book's theme leaves empty (the
   console then shows "Got invalid theme mode" and the reader's choice is forgotten between pages). */
if (!document.documentElement.dataset.mode) {
  document.documentElement.dataset.mode = localStorage.getItem("mode") || "auto";
}
function tfbookOpenAll() {
  document.querySelectorAll("details").forEach((d) => { d.open = true; });
}
window.addEventListener("beforeprint", tfbookOpenAll);
document.addEventListener("DOMContentLoaded", () => {
  if (new URLSearchParams(window.location.search).has("print")) tfbookOpenAll();
  const buttons = document.querySelector(".article-header-buttons");
  if (!window.TFBOOK_PDF || !buttons) return;
  const link = document.createElement("a");
  link.href = (document.documentElement.dataset.content_root || "./") + "tfbook.pdf";
  link.className = "btn btn-sm";
  link.title = "The whole book as one PDF";
  link.textContent = "PDF";
  buttons.prepend(link);
});
