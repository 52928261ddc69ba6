"""The every-claim page: ``book/claims.md``, generated from the claims records stored in the notebooks.

Every `tfbook.claims.Claims.show` output carries a machine-readable record (mime type
`tfbook.claims.MIME`). This module reads the notebooks listed in ``_toc.yml`` *without executing
them*, places each claim in the section (markdown heading) above the cell where it was checked,
and writes one page: counts per chapter (claims, held, failed, claims of each kind, construction claims
broken by each sabotage of the claims audit and by none), then one table per notebook (section, paper
reference, statement, holds, broken by, kind, measured, bound, ratio: the verdict first, so a narrow
screen shows it without scrolling) with links to the section where
the claim is executed. Records stored before claims had a kind (schema 1) show ``construction``, the
default kind. A Claims object shown several times stores growing records: its last one counts
(`stored_records`).

*Broken by* is read from the claims audit, ``book/claims_audit.json`` (`tfbook.build.claims_audit`), when
it has an entry for the notebook's current code cells (same code hash): the sabotages under which
the claim failed, marked ``†`` where the run stopped before it; ``none`` when no sabotage broke it;
``-`` where the audit has no entry.

``python -m tfbook.build.claims_page`` writes the page (and `tfbook.build.statements_page`'s index of statement
blocks and `tfbook.build.run_page`'s run times); ``--check`` exits 1 if a stored page differs
from what the notebooks and the audit give (``make notebooks``, ``make claims-audit`` and
``make book-stored`` regenerate it).
"""
from __future__ import annotations

import argparse
import pathlib
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import nbformat

from tfbook.build import audit_file, repository, run_page, statements_page
from tfbook.claims import KINDS, MIME, cell_id

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = "book/claims.md"
_SLUG_CLEAN = re.compile(r"[^\w\u4e00-\u9fff\- ]")
_ESCAPE = re.compile(r"([\\`*_\[\]<>|$~#{}])")


@dataclass
class Notebook:
    """One notebook's claims: its toc path, title, and rows (section title, slug, claim record)."""

    path: str
    title: str
    rows: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    code_hash: str = ""


@dataclass
class Chapter:
    title: str
    notebooks: list[Notebook] = field(default_factory=list)
    labels: dict[tuple[str, str], str] = field(default_factory=dict)  # (kind, number) -> statement label

    def counts(self) -> tuple[int, int]:
        rows = [r for nb in self.notebooks for r in nb.rows]
        return len(rows), sum(bool(r[2]["holds"]) for r in rows)


def toc_chapters(root: pathlib.Path = ROOT) -> list[list[str]]:
    """The notebook paths (without suffix) of each chapter in ``_toc.yml``, in book order."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    entries = [ch for part in toc.get("parts", []) for ch in part.get("chapters", [])] + toc.get("chapters", [])

    def files(entry: dict) -> list[str]:
        out = [entry["file"]] if "file" in entry else []
        for sub in entry.get("sections", []):
            out += files(sub)
        return out

    chapters = [[f for f in files(e) if (root / f"{f}.ipynb").exists()] for e in entries]
    return [c for c in chapters if c]


def toc_captions(root: pathlib.Path = ROOT) -> dict[str, str]:
    """The chapter's name for the first notebook of each chapter: the title of the chapter's own page
    (a markdown page whose sections are the notebooks), else the caption of its part."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    out = {}
    for part in toc.get("parts", []):
        for number, chapter in enumerate(part.get("chapters", [])):
            page = root / f"{chapter.get('file', '')}.md"
            sections = chapter.get("sections", [])
            if page.is_file() and sections and "file" in sections[0]:
                title = next((line[2:].strip() for line in page.read_text().splitlines()
                              if line.startswith("# ")), None)
                if title:
                    out[sections[0]["file"]] = title
            elif number == 0 and part.get("caption") and "file" in chapter:
                out[chapter["file"]] = part["caption"]
    return out


def heading_text(line: str) -> str:
    """The slug text of a markdown heading line: text and code, without math (as MyST computes it)."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    tokens = MarkdownIt("commonmark").use(dollarmath_plugin).parse("# " + line)  # "1. x" is no list
    inline = tokens[1].children or []
    return "".join(t.content for t in inline if t.type in ("text", "code_inline"))


def slugify(text: str) -> str:
    """MyST's (GitHub's) heading slug."""
    return _SLUG_CLEAN.sub("", text.lower().replace(" ", "-"))


def _headings(source: str) -> list[tuple[int, str]]:
    out, fenced = [], False
    for line in source.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            out.append((len(m.group(1)), m.group(2)))
    return out


def read_notebook(path: pathlib.Path, name: str) -> Notebook:
    """Collect the claims records of one stored notebook, each placed in its section."""
    nb = nbformat.read(path, as_version=4)
    title, section, slug = name, "", ""
    slugs: set[str] = set()
    where: dict[str, tuple[str, str]] = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for level, text in _headings(cell.source):
                s = base = slugify(heading_text(text))
                i = 1
                while s in slugs:
                    s, i = f"{base}-{i}", i + 1
                slugs.add(s)
                if level == 1 and title == name:
                    title = text
                section, slug = text, s
        elif cell.cell_type == "code":
            where.setdefault(cell_id(cell.source), (section, slug))
    notebook = Notebook(name, title, code_hash=audit_file.code_hash(nb))
    for record, _ in stored_records(nb):
        for claim in record["claims"]:
            sec, sl = where.get(claim.get("cell") or "", ("", ""))
            notebook.rows.append((sec, sl, claim))
    return notebook


def stored_records(nb: nbformat.NotebookNode) -> list[tuple[dict[str, Any], Any]]:
    """The last record of every Claims object shown in a stored notebook, with the cell that showed it.

    A Claims object shown again stores a record that extends its previous one: a record whose claims
    begin with the claims of the latest record of the same title replaces it; any other record is a
    new object. The records come in the order the objects were first shown.
    """
    finals: list[tuple[dict[str, Any], Any]] = []
    latest: dict[str, int] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            record = out.get("data", {}).get(MIME)
            if not (isinstance(record, dict) and isinstance(record.get("claims"), list)):
                continue
            title = record.get("title", "")
            i = latest.get(title)
            if i is not None and record["claims"][:len(finals[i][0]["claims"])] == finals[i][0]["claims"]:
                finals[i] = (record, cell)
            else:
                latest[title] = len(finals)
                finals.append((record, cell))
    return finals


_NUMBERED = re.compile(r"\b(Lemma|Thm|Theorem|Prop|Proposition|Def|Definition|Cor|Corollary)\.?\s+([A-Z]?\d+(?:\.\d+)*)")
_KIND = {"thm": "theorem", "prop": "proposition", "def": "definition", "cor": "corollary"}


def statement_key(text: str, start: bool = False) -> list[tuple[str, str]]:
    """The (kind, number) pairs named in ``text`` ("Thm 4.2" and "Theorem 4.2" both give ("theorem",
    "4.2")); with ``start``, only a name at the very beginning."""
    found = [_NUMBERED.match(text)] if start else list(_NUMBERED.finditer(text))
    return [(_KIND.get(m.group(1).lower(), m.group(1).lower()), m.group(2)) for m in found if m]


def collect(root: pathlib.Path = ROOT) -> list[Chapter]:
    chapters = []
    captions = toc_captions(root)
    for files in toc_chapters(root):
        notebooks = [read_notebook(root / f"{f}.ipynb", f) for f in files]
        labels = chapter_labels(files, root)
        chapters.append(Chapter(captions.get(files[0], notebooks[0].title), notebooks, labels))
    return chapters


def chapter_labels(files: list[str], root: pathlib.Path = ROOT) -> dict[tuple[str, str], str]:
    """(kind, number) -> the label of the chapter's statement block for it: the block that carries the
    number in its parenthesis, then one of the named kind, then any ("Approximation (Theorem 1)" before
    "One block of Theorem 1" before "Constants of Theorem 1")."""
    labels: dict[tuple[str, str], str] = {}
    statements = [st for f in files for st in statements_page.read_statements(root / f"{f}.ipynb")]
    for rank in range(3):
        for st in statements:
            named = " ".join(re.findall(r"\(([^)]*)\)", st.title)) if rank == 0 else st.title
            for key in statement_key(named):
                if key[0] == st.kind or rank == 2:
                    labels.setdefault(key, st.label)
    return labels


def _esc(text: str) -> str:
    """Statement text: every markdown character escaped (shown literally, as in the notebook)."""
    return _ESCAPE.sub(r"\\\1", str(text)).replace("\n", " ")


def _md(text: str) -> str:
    """A heading's markdown (math and code kept) made safe for a table cell: a ``|`` inside math
    becomes ``\\vert`` (an escaped pipe would turn into a norm), elsewhere ``\\|``."""
    parts = re.split(r"(\$[^$]*\$)", str(text).replace("\n", " "))
    return "".join(p.replace("|", "\\vert ") if p.startswith("$") and len(p) > 1 else p.replace("|", "\\|")
                   for p in parts)


def _link(text: str, target: str) -> str:
    return f"[{text}]({target})"


def audited(nb: Notebook, audit: Optional[dict[str, Any]]) -> Optional[list[Optional[dict[str, Any]]]]:
    """Each row's claim in the claims audit (`tfbook.build.claims_audit`), None where the audit has none;
    None for the whole notebook when the audit has no entry for its current code."""
    entry = (audit or {}).get("notebooks", {}).get(nb.path + ".ipynb")
    if entry is None or entry.get("code_hash") != nb.code_hash:
        return None
    by_key = {(c["cell"], c["ref"], c["statement"], c["occurrence"]): c for c in entry["claims"]}
    return [by_key.get(k) for k in audit_file.keyed([row[2] for row in nb.rows])]


def _broken_by(claim: Optional[dict[str, Any]]) -> str:
    """The runs that broke a claim (``†``: the run stopped before it; ``untrained``: the run without training,
    for an experiment claim), ``none`` or ``-`` (not audited)."""
    if claim is None:
        return "-"
    runs = [s + ("†" if s in claim.get("not_reached", []) else "") for s in claim["broken_by"]]
    if claim["kind"] == "experiment" and claim.get("untrained") in ("failed", "not reached", "missing"):
        runs.append(audit_file.UNTRAINED + ("†" if claim["untrained"] != "failed" else ""))
    return ", ".join(runs) or "none"


def _counts(notebooks: list[Notebook], audit: Optional[dict[str, Any]]) -> list[str]:
    """Claims per kind, then construction claims broken by each sabotage and unbroken (``-`` unaudited)."""
    rows = [r for nb in notebooks for r in nb.rows]
    kinds = [str(sum(r[2].get("kind", "construction") == k for r in rows)) for k in KINDS]
    audited_rows = [a for nb in notebooks for a in (audited(nb, audit) or []) if a is not None]
    constr = [a for a in audited_rows if a["kind"] == "construction"]
    if not audited_rows:
        return kinds + ["-"] * (len(audit_file.SABOTAGES) + 3)
    expt = [a for a in audited_rows if a["kind"] == "experiment"]
    return kinds + [str(sum(s in a["broken_by"] for a in constr)) for s in audit_file.SABOTAGES] + \
        [str(sum(not a["broken_by"] for a in constr)), str(sum(a.get("untrained") == "failed" for a in expt)),
         str(sum(a.get("untrained") not in (None, "failed") for a in expt))]


def _tally(notebooks: list[Notebook]) -> tuple[int, int]:
    """(claims, claims that hold) over ``notebooks``."""
    rows = [r for nb in notebooks for r in nb.rows]
    return len(rows), sum(bool(r[2]["holds"]) for r in rows)


def render(chapters: list[Chapter], page: str = PAGE, audit: Optional[dict[str, Any]] = None) -> str:
    """The page's markdown (deterministic: a function of the stored records and the claims audit only)."""
    base = pathlib.PurePosixPath(page).parent

    def rel(path: str) -> str:
        return str(pathlib.PurePosixPath(path).relative_to(base)) + ".ipynb"

    with_claims = [c for c in chapters if c.counts()[0]]
    sabotages = list(audit_file.SABOTAGES)
    lines = [
        "(claims-index)=",
        "# Every claim in the book",
        "",
        "Each row below is a statement of a paper that a notebook of this book executed: what the paper",
        "states, what was measured on the built construction, the bound it is compared with, the ratio",
        "measured/bound and whether the claim holds. A claim that fails stops its notebook, so every",
        "stored notebook shows only claims that held when it ran; the tests re-run every notebook and",
        "compare these values. Values below 1e-12 are rounding level and printed as such.",
        "A claim's kind says what was measured: *construction* (a built model: its error, exactness,",
        "states or attention), *size* (a count or norm of the built model against the paper's formula),",
        "*paper* (the paper's mathematics, without a construction), *experiment* (a trained model or",
        "a statistical experiment), and the yardsticks an experiment or a construction is measured against,",
        "counted apart: *control* (a check that would pass if the claim beside it were false: an ablated or",
        "mutated model, a stalled estimator) and *baseline* (a model-free rule, a fixed comparator or a",
        "property of the data). Where a trivial scale is given (the target's norm, or the error of",
        "the model that does nothing), the claim shows it with the ratio bound/trivial.",
        "Each notebook's claims are folded by section: open a section to see its table, and follow the",
        "link above the table to the cell that checks the claims.",
        "",
        "*Broken by* comes from the claims audit (`book/claims_audit.json`, `make claims-audit`): every",
        "notebook is run again under three sabotages of the core layers, *zero* (every layer's update",
        "removed: the model does nothing), *eps* (every update scaled by 1 + 1e-3) and *weights* (noise of",
        "1e-3 · max |w| on every stored weight), and a claim is broken by each sabotage under which it",
        "fails (†: the notebook stopped before reaching it). A construction claim that no sabotage breaks",
        "checks nothing about the construction; `-` marks a claim the audit has not seen in this",
        "notebook's current code. The counts give the claims of each kind, then the construction claims",
        "broken by each sabotage and those broken by none (*unbroken*). A notebook with experiment claims",
        "is run once more with every training routine returning its initial parameters (*untrained*):",
        "each experiment claim must fail there, or it would hold for a model that learned nothing; a",
        "control or baseline must not move.",
        "",
        "This page is generated from the claims tables stored in the notebooks and the claims audit",
        "(`python -m tfbook.build.claims_page`); it is rebuilt whenever the notebooks are re-executed.",
        "",
    ]
    # three narrow tables (they fit a phone): claims and verdicts, kinds, the audit
    every = [nb for c in with_claims for nb in c.notebooks]
    groups = [(with_claims, lambda c: _link(_md(c.title), rel(c.notebooks[0].path)), lambda c: c.notebooks),
              ([None], lambda c: "**all chapters**", lambda c: every)]
    tables = [("Claims per chapter", ["notebooks", "claims", "hold", "fail"],
               lambda nbs: [str(len(nbs)), *(lambda n, h: [str(n), str(h), str(n - h)])(*_tally(nbs))]),
              ("Claims by kind", list(KINDS), lambda nbs: _counts(nbs, audit)[:len(KINDS)]),
              ("Construction claims broken by each sabotage", [*sabotages, "unbroken"],
               lambda nbs: _counts(nbs, audit)[len(KINDS):len(KINDS) + len(sabotages) + 1]),
              ("Experiment claims without training", ["fail untrained", "hold untrained"],
               lambda nbs: _counts(nbs, audit)[len(KINDS) + len(sabotages) + 1:])]
    for caption, columns, cells in tables:
        lines += [f"**{caption}**", "", "| chapter | " + " | ".join(columns) + " |",
                  "|:---|" + "---:|" * len(columns)]
        for items, name, nbs_of in groups:
            lines += [f"| {name(c)} | " + " | ".join(cells(nbs_of(c))) + " |" for c in items]
        lines.append("")
    for chapter in with_claims:
        n, h = chapter.counts()
        lines += [f"## {_md(chapter.title)}", "", f"{n} claims, {h} hold.", ""]
        for nb in chapter.notebooks:
            if nb.rows:
                lines += _notebook_lines(nb, rel(nb.path), audit, chapter.labels)
    return "\n".join(lines).rstrip() + "\n"


def _sections(nb: Notebook, found: list) -> list[tuple[str, str, list]]:
    """The notebook's rows grouped by section, in order: (section title, slug, [(claim, audit entry)])."""
    groups: dict[str, tuple[str, str, list]] = {}
    for (sec, slug, c), a in zip(nb.rows, found):
        groups.setdefault(slug, (sec, slug, []))[2].append((c, a))
    return list(groups.values())


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _kinds(claims: list[dict[str, Any]]) -> str:
    counts = [(k, sum(c.get("kind", "construction") == k for c in claims)) for k in KINDS]
    return ", ".join(f"{n} {k}" for k, n in counts if n)


def _ref(ref: str, labels: dict[tuple[str, str], str]) -> str:
    """A claim's paper reference, linked to the chapter's statement block when it names one."""
    key = statement_key(ref, start=True)
    label = labels.get(key[0]) if key else None
    if label is None or re.search(r"[`<>|]", ref):
        return _esc(ref)
    return f"{{prf:ref}}`{ref} <{label}>`"


def _notebook_lines(nb: Notebook, link: str, audit: Optional[dict[str, Any]],
                    labels: Optional[dict[tuple[str, str], str]] = None) -> list[str]:
    """One heading per notebook, then one folded table per section (claims in the order executed)."""
    found = audited(nb, audit)
    note = " The claims audit has not run on this notebook's current code." \
        if audit is not None and found is None else ""
    held = sum(bool(r[2]["holds"]) for r in nb.rows)
    lines = [f"### {_md(nb.title)}", "",
             f"Notebook: {_link(nb.path.split('/')[-1] + '.ipynb', link)}, {len(nb.rows)} claims "
             f"({_kinds([r[2] for r in nb.rows])}), {held} hold.{note}", ""]
    for sec, slug, rows in _sections(nb, found or [None] * len(nb.rows)):
        failed = sum(not c["holds"] for c, _ in rows)
        title = (_md(sec) if sec else "Claims outside a section") + f" ({_plural(len(rows), 'claim')}"
        title += f", **{failed} fail**)" if failed else ")"
        lines += [f":::{{dropdown}} {title}", ":class-container: tfbook-claims-section"]
        if failed:
            lines.append(":open:")
        lines += ["", (f"Checked in {_link(_md(sec), f'{link}#{slug}')}." if slug else
                       f"Checked in {_link(nb.path.split('/')[-1] + '.ipynb', link)}."), "",
                  "| ref | claim | holds | broken by | kind | measured | bound | measured/bound |",
                  "|:---|:---|:---:|:---|:---|---:|---:|---:|"]
        for c, a in rows:
            mark = "✔ yes" if c["holds"] else "**✘ NO**"
            claim = c["statement"] + (f" (trivial scale {c['trivial']}; bound/trivial {c['bound_over_trivial']})"
                                      if c.get("trivial") else "")
            kind = c.get("kind", "construction")  # records of schema 1 have no kind
            lines.append(f"| {_ref(c['ref'], labels or {})} | {_esc(claim)} | {mark} | {_broken_by(a)} | "
                         f"{_esc(kind)} | {_esc(c['measured'])} | {_esc(c['relation'] + ' ' + c['bound'])} | "
                         f"{_esc(c['ratio'])} |")
        lines += ["", ":::", ""]
    return lines


def pages(root: pathlib.Path = ROOT) -> dict[str, str]:
    """The generated pages (path relative to ``root`` -> text): this one, `tfbook.build.statements_page`'s and
    `tfbook.build.run_page`'s."""
    chapters = collect(root)
    titles = {nb.path: _md(nb.title) for c in chapters for nb in c.notebooks}
    toc = toc_chapters(root)
    config = root / "_config.yml"
    repo = repository.settings(config) if config.exists() else repository.Repository("", False)
    return {PAGE: render(chapters, audit=audit_file.load(root / audit_file.AUDIT)),
            statements_page.PAGE: statements_page.render(statements_page.collect(root, toc, titles)),
            run_page.PAGE: run_page.render(run_page.collect(root, toc, titles), repo)}


def main(argv: Optional[list[str]] = None, root: pathlib.Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description="generate book/claims.md and book/statements.md from the stored notebooks")
    parser.add_argument("--check", action="store_true", help="exit 1 if a stored page is stale")
    args = parser.parse_args(argv)
    stale = 0
    for page, text in pages(root).items():
        path = root / page
        if path.exists() and path.read_text() == text:
            continue
        if args.check:
            print(f"{page} is stale: run `python -m tfbook.build.claims_page`")
            stale = 1
        else:
            path.write_text(text)
            print(f"{page} written")
    return stale


if __name__ == "__main__":
    raise SystemExit(main())
