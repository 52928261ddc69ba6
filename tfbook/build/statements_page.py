"""The statement index: ``book/statements.md``, every theorem, lemma, definition, proposition and corollary
block of the book with its title, in book order, generated from the stored notebooks.

Sphinx-proof's own index lists bare labels; this page lists each block's title (which carries the paper's
number, e.g. "Product (Lemma 4)") as a reference to the block, grouped by chapter and notebook.
`tfbook.build.claims_page` writes it beside the claims page (``python -m tfbook.build.claims_page``; ``--check``
covers both pages).
"""
from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

import nbformat

PAGE = "book/statements.md"
_DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{prf:(\w+)\}[ \t]*(.*)$", re.M)
_LABEL = re.compile(r"^:label:\s*(\S+)", re.M)


@dataclass(frozen=True)
class Statement:
    """One statement block: its kind (lemma, theorem, ...), title and label."""

    kind: str
    title: str
    label: str


def read_statements(path: pathlib.Path) -> list[Statement]:
    """The labelled statement blocks of one notebook, in order (proof blocks are not statements)."""
    out = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "markdown":
            continue
        for m in _DIRECTIVE.finditer(cell.source):
            if m.group(2) == "proof":
                continue
            options = cell.source[m.end():].split("\n\n", 1)[0]  # the option lines right below the directive
            label = _LABEL.search(options)
            if label:
                out.append(Statement(m.group(2), m.group(3).strip(), label.group(1)))
    return out


def _ref_text(title: str) -> str:
    """A title as the text of a {prf:ref} role (no math there: ``$N$`` becomes ``N``; no angle brackets)."""
    return re.sub(r"\$([^$]*)\$", r"\1", title).replace("<", "(").replace(">", ")").replace("`", "")


def render(chapters: list[tuple[str, list[tuple[str, str, list[Statement]]]]]) -> str:
    """The page: per chapter a table of (statement, kind, notebook); ``chapters`` as `collect` returns."""
    total = sum(len(s) for _, nbs in chapters for _, _, s in nbs)
    lines = ["(statements-index)=", "# Every statement in the book", "",
             f"The {total} theorems, lemmas, propositions, corollaries and definitions that the book states, in",
             "reading order. Each title carries the paper's own number; follow it to the block, and from",
             "there to the cells that build and check it ({ref}`every claim <claims-index>`).", ""]
    for title, notebooks in chapters:
        rows = [(nb_title, path, s) for nb_title, path, statements in notebooks for s in statements]
        if not rows:
            continue
        lines += [f"## {title}", "", "| statement | kind | notebook |", "|:---|:---|:---|"]
        for nb_title, path, s in rows:
            text = _ref_text(s.title) or s.label
            nb_title = nb_title.replace("|", "\\|")
            lines.append(f"| {{prf:ref}}`{text} <{s.label}>` | {s.kind} | [{nb_title}]({path}) |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def collect(root: pathlib.Path, toc: list[list[str]], titles: dict[str, str]):
    """(chapter title, [(notebook title, page-relative path, statements)]) for the toc's notebooks."""
    base = pathlib.PurePosixPath(PAGE).parent
    chapters = []
    for files in toc:
        notebooks = [(titles.get(f, f), str(pathlib.PurePosixPath(f).relative_to(base)) + ".ipynb",
                      read_statements(root / f"{f}.ipynb")) for f in files]
        chapters.append((titles.get(files[0], files[0]), notebooks))
    return chapters
