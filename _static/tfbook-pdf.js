/* `make pdf` overwrites this copy in _build/html with `window.TFBOOK_PDF = true;`. */
window.TFBOOK_PDF = false;
