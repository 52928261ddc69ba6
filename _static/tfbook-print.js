/* Printing a page prints everything on it: every folded dropdown and hidden cell opens first. */
window.addEventListener("beforeprint", () => {
  document.querySelectorAll("details").forEach((d) => { d.open = true; });
});
