"""Sphinx extension: every script once per page.

Two extensions Jupyter Book loads add scripts a second time: sphinx-thebe registers its inline
configuration (``const THEBE_JS_URL = ...``) twice, so the second declaration throws; myst-nb adds
MathJax to pages with notebook output although the theme loads it already (deferred), so MathJax starts
twice. This drops, page by page, every script whose source (or, for inline scripts, body) was already
included, keeping the first deferred copy of a file when there is one.
"""
from __future__ import annotations

from typing import Any


def _key(script: Any) -> str:
    """The script's file (without query), or the body of an inline script."""
    source = str(getattr(script, "filename", None) or "").split("?", 1)[0]
    return source or str((getattr(script, "attributes", {}) or {}).get("body", ""))


def _deferred(script: Any) -> bool:
    attributes = getattr(script, "attributes", {}) or {}
    return "defer" in attributes or "async" in attributes


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    first: dict[str, Any] = {}
    for script in scripts:
        key = _key(script)
        if key and (key not in first or (_deferred(script) and not _deferred(first[key]))):
            first[key] = script
    context["script_files"] = [s for s in scripts if not _key(s) or first.get(_key(s)) is s]


def setup(app) -> dict[str, Any]:
    app.connect("html-page-context", dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
