"""Sphinx extension: claims tables of notebook pages link their refs and fold when long.

In every claims table, the ref cell links to its statement.

A claim's ref names the paper's statement ("Lemma B.1", "Thm 4.2"); where the chapter has a statement
block for it (`tfbook.build.claims_page.chapter_labels`, the rule the every-claim page uses), the ref
becomes a link to that block, on its own page or another page of the chapter. The stored outputs keep
plain text: the link is added while the book is built, from the statement blocks as they are then.
A table of more than `FOLD_ROWS` claims is folded under a one-line summary (its caption, how many
claims, how many hold, the kinds), so a page reads as prose with its evidence one click away.
"""
from __future__ import annotations

import html
import re
from typing import Any

from docutils import nodes

from tfbook.build.claims_page import ROOT, chapter_labels, statement_key, toc_chapters
from tfbook.build.statements_page import read_statements

REF_CELL = re.compile(r'(<tr><td style="white-space:nowrap">)([^<]*)(</td>)')
ROW = re.compile(r'<tr><td style="white-space:nowrap">.*?</td><td style="white-space:normal">.*?</td>'
                 r'<td style="white-space:nowrap">([^<]*)</td>', re.S)
CAPTION = re.compile(r"<caption[^>]*>(.*?)</caption>", re.S)
FOLD_ROWS = 12


def fold(table: str) -> str:
    """A claims table of more than FOLD_ROWS rows inside a dropdown whose summary counts its claims."""
    kinds = ROW.findall(table)
    if len(kinds) <= FOLD_ROWS:
        return table
    held = table.count("&#10004; yes")
    caption = CAPTION.search(table)
    counts = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds))
    verdict = "all hold" if held == len(kinds) else f"{held} hold, {len(kinds) - held} FAIL"
    summary = f"{caption.group(1) + ': ' if caption else ''}{len(kinds)} claims, {verdict} ({counts})"
    return (f'<details class="tfbook-claims-fold"><summary>{summary}</summary>{table}</details>')


def _chapters(app) -> dict[str, tuple[dict[tuple[str, str], str], dict[str, str]]]:
    """docname -> (the chapter's labels, label -> the docname that defines it); built once per build."""
    cached = getattr(app.env, "_tfbook_claim_links", None)
    if cached is None:
        root = ROOT if (ROOT / "_toc.yml").is_file() else None
        cached = {}
        for files in toc_chapters(root or ROOT):
            labels = chapter_labels(files)
            where = {st.label: f for f in files for st in read_statements(ROOT / f"{f}.ipynb")}
            cached.update({f: (labels, where) for f in files})
        app.env._tfbook_claim_links = cached
    return cached


def link_refs(app, doctree, docname: str) -> None:
    chapter = _chapters(app).get(docname)
    if chapter is None or app.builder.format != "html":
        return
    labels, where = chapter

    def link(match: re.Match) -> str:
        ref = html.unescape(match.group(2))
        key = statement_key(ref, start=True)
        label = labels.get(key[0]) if key else None
        if label is None or label not in where:
            return match.group(0)
        uri = app.builder.get_relative_uri(docname, where[label]) + "#" + label
        return f'{match.group(1)}<a class="reference internal" href="{uri}">{match.group(2)}</a>{match.group(3)}'

    for node in list(doctree.findall(nodes.raw)):
        text = node.astext()
        if node.get("format") == "html" and "tfbook-claims" in text:
            node.replace_self(nodes.raw(node.rawsource, fold(REF_CELL.sub(link, text)), format="html",
                                        classes=node.get("classes", [])))


def setup(app) -> dict[str, Any]:
    app.connect("doctree-resolved", link_refs)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
