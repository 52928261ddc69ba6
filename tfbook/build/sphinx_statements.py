"""Sphinx extension: statement titles of one form, "Lemma 2.4 (margin to sample complexity)".

Statement blocks are written ``{prf:lemma} Squaring (Lemma 3)``: a name, then the paper's number in
parentheses. sphinx-proof shows them unnumbered as "Lemma (Squaring (Lemma 3))", and a title that
starts with the paper's number as "Lemma (Lemma 2.4 (margin ...))". This rewrites each title on the
built page: a title that starts with a paper number is shown as written; a title whose last
parenthesis starts with one becomes "Lemma 3 (Squaring)"; any other stays "Lemma (Uniform attention)".
"""
from __future__ import annotations

import re
from typing import Any

NAME = re.compile(r"(Lemmas?|Theorems?|Thm|Propositions?|Prop|Definitions?|Defs?|Corollary|Cor|Claim|Section|Sec"
                  r"|Equation|App)\.?\s+\(?[A-Z]?\.?\d")
TITLE = re.compile(r'(<p class="admonition-title"[^>]*>)<span class="caption-number">([^<]*)</span> \((.*?)\)</p>',
                   re.S)


def _split_last_parenthesis(text: str) -> tuple[str, str] | None:
    """``"Squaring (Lemma 3)"`` -> ``("Squaring", "Lemma 3")``; None without a closing parenthesis."""
    if not text.endswith(")"):
        return None
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return text[:i].rstrip(), text[i + 1:-1]
    return None


def plain_title(kind: str, title: str) -> str:
    """The title as the reader sees it (kind: "Lemma", title: the block's title, HTML)."""
    if NAME.match(title):
        return title
    split = _split_last_parenthesis(title)
    if split and split[0] and NAME.match(split[1]):
        return f"{split[1]} ({split[0]})"
    return f"{kind.strip()} ({title})"


def retitle(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    body = context.get("body")
    if body and "admonition-title" in body:
        context["body"] = TITLE.sub(lambda m: f"{m.group(1)}{plain_title(m.group(2), m.group(3))}</p>", body)


def setup(app) -> dict[str, Any]:
    app.connect("html-page-context", retitle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
