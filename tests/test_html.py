"""The rendered book as a reader sees it (run after `make book-stored`; `make test-html`).

No object reprs in outputs, no code or output line over 88 characters, no unfolded code cell over 40
lines (median at most 15), no TeX in page titles, every
image present, captioned and described, no claim row shown twice on a page, no reference without its
text, every page of the TOC rendered. Parses _build/html with the standard library.
"""
import html.parser
import pathlib
import re
from urllib.parse import unquote, urlparse

import pytest

from tfbook.build.claims_page import toc_chapters

ROOT = pathlib.Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
pytestmark = pytest.mark.html
REPRS = ("Claim(", "Claims(", "<matplotlib", " at 0x", "<Figure size", "<torch.", "<function ")
MAX_LINE = 88
BARE_REFERENCE = {"", "Lemma", "Theorem", "Definition", "Proposition", "Corollary", "Fig.", "Figure"}


class Page(html.parser.HTMLParser):
    """Collects the title, images (source, alt text, inside a captioned figure or not), the text of
    cell outputs and of code cells (by line, for <pre> blocks), the rows of claims tables and the text
    of internal references."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.title, self.images, self.output_text, self.pre_text, self.code_text = "", [], [], [], []
        self.figures: list[dict] = []  # per cell-output image: alt, inside a <figure>, the figure's caption
        self.claim_rows: list[str] = []
        self.references: list[str] = []
        # (tag, inside output, inside pre, inside code input, inside claims table, inside reference)
        self._stack: list[tuple[str, bool, bool, bool, bool, bool]] = []
        self._in_title = False
        self._figure: list[dict] = []  # open <figure> elements
        self._row: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        cls = attrs.get("class") or ""
        top = self._stack[-1] if self._stack else ("", False, False, False, False, False)
        out = top[1] or "cell_output" in cls
        pre = top[2] or tag == "pre"
        code = top[3] or "cell_input" in cls
        claims = top[4] or (tag == "table" and "tfbook-claims" in cls)
        ref = top[5] or (tag == "a" and "reference internal" in cls and "image-reference" not in cls)
        if tag in ("img", "br", "meta", "link", "input", "hr", "source", "wbr"):
            if tag == "img":
                self.images.append(attrs.get("src", ""))
                if out:
                    fig = self._figure[-1] if self._figure else None
                    self.figures.append({"src": attrs.get("src", ""), "alt": attrs.get("alt", ""), "figure": fig})
            return
        if tag == "figure":
            self._figure.append({"caption": ""})
        if claims and tag == "tr":
            self._row = []
        self._stack.append((tag, out, pre, code, claims, ref))
        self._in_title = tag == "title"
        if ref and not top[5]:
            self.references.append("")

    def handle_endtag(self, tag):
        if not any(entry[0] == tag for entry in self._stack):
            return  # a void element (<img/>) or a stray end tag closes nothing
        while self._stack:
            popped = self._stack.pop()
            if popped[0] == "tr" and popped[4] and self._row:
                self.claim_rows.append(" | ".join(self._row))
            if popped[0] == "figure" and self._figure:
                self._figure.pop()
            if popped[0] == tag:
                break
        self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if not self._stack:
            return
        top = self._stack[-1]
        if top[1]:
            self.output_text.append(data)
            if top[2]:
                self.pre_text.append(data)
        if top[3] and top[2]:
            self.code_text.append(data)
        if top[4] and top[0] == "td":
            self._row.append(data.strip())
        elif top[4] and len(self._stack) > 1 and self._stack[-2][0] == "td" and self._row is not None:
            self._row.append(data.strip())
        if top[5]:
            self.references[-1] += data
        if self._figure and any(t[0] == "figcaption" for t in self._stack):
            self._figure[-1]["caption"] += data


def pages():
    files = ["book/intro", "book/run", "book/claims", "book/statements", "book/full_results"]
    files += [f for chapter in toc_chapters(ROOT) for f in chapter]
    files += [p.relative_to(ROOT).with_suffix("").as_posix() for p in (ROOT / "book").glob("*/index.md")]
    return sorted(set(files))


def parse(name: str) -> Page:
    page = Page()
    page.feed((HTML / f"{name}.html").read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module", autouse=True)
def built():
    if not (HTML / "index.html").exists():
        pytest.skip("no _build/html: run make book-stored first")


@pytest.mark.parametrize("name", pages())
def test_no_page_links_to_an_unpublished_repository(name):
    from tfbook.build.repository import settings

    repo = settings(ROOT / "_config.yml")
    if repo.public:
        pytest.skip("the repository is public: its buttons are wanted")
    text = (HTML / f"{name}.html").read_text(encoding="utf-8")
    for target in (repo.url, "mybinder.org", "colab.research.google.com"):
        assert target not in text, f"{name} links to {target} while repository.public is false"


@pytest.mark.parametrize("name", pages())
def test_page_reads_cleanly(name):
    path = HTML / f"{name}.html"
    assert path.exists(), f"{name} is in _toc.yml but was not rendered"
    page = parse(name)
    title = page.title.split("\u2014")[0]
    assert not re.search(r"\\\(|\\\[|\$|\\[a-zA-Z]+", title), f"TeX in the page title: {title!r}"
    text = "".join(page.output_text)
    for bad in REPRS:
        assert bad not in text, f"object repr {bad!r} in an output of {name}"
    long = [line for line in "".join(page.pre_text).splitlines() if len(line) > MAX_LINE]
    assert not long, f"{len(long)} output lines over {MAX_LINE} characters in {name}, e.g. {long[0][:120]!r}"
    long = [line for line in "".join(page.code_text).splitlines() if len(line) > MAX_LINE]
    assert not long, f"{len(long)} code lines over {MAX_LINE} characters in {name}, e.g. {long[0][:120]!r}"
    twice = sorted({row for row in page.claim_rows if page.claim_rows.count(row) > 1})
    assert not twice, f"{len(twice)} claim rows shown twice on {name}, e.g. {twice[0][:120]!r}"
    bare = [text for text in page.references if text.strip() in BARE_REFERENCE]
    assert not bare, f"{len(bare)} references without their text on {name}, e.g. {bare[0]!r}"
    for fig in page.figures:
        assert fig["figure"] is not None, f"an output image without a figure (caption, number) on {name}"
        assert len(fig["figure"]["caption"].strip()) > 20, f"a figure without a caption on {name}"
        alt = fig["alt"].strip()
        assert len(alt) > 20 and not re.fullmatch(r"[0-9a-f]{16,}(\.png)?", alt), f"alt text {alt!r} on {name}"
    for src in page.images:
        url = urlparse(src)
        if url.scheme in ("http", "https", "data"):
            continue
        target = (path.parent / unquote(url.path)).resolve()
        assert target.exists(), f"missing image {src} on {name}"


def test_mathematics_renders_offline():
    """Pages load the MathJax shipped in _static (no CDN), so the book reads without internet."""
    page = (HTML / "book" / "intro.html").read_text(encoding="utf-8")
    assert "_static/mathjax/tex-mml-chtml.js" in page and "cdn.jsdelivr.net/npm/mathjax" not in page
    assert (HTML / "_static" / "mathjax" / "tex-mml-chtml.js").exists()
    assert any((HTML / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))


SCRIPT = re.compile(r"<script([^>]*)>(.*?)</script>", re.S)


@pytest.mark.parametrize("name", pages())
def test_every_script_loads_once(name):
    """MathJax started twice, or a second `const THEBE_JS_URL`, throws in the console
    (tfbook.build.sphinx_scripts removes the copies two extensions add)."""
    text = (HTML / f"{name}.html").read_text(encoding="utf-8")
    seen = []
    for attributes, body in SCRIPT.findall(text):
        src = re.search(r'src="([^"?]+)', attributes)
        key = src.group(1) if src else body.strip()
        if key:
            seen.append(key)
    twice = sorted({k[:80] for k in seen if seen.count(k) > 1})
    assert not twice, f"scripts loaded twice on {name}: {twice}"


@pytest.mark.parametrize("name", pages())
def test_chapters_and_sections_are_numbered(name):
    """Numbered chapters (`numbered: true` in _toc.yml): every chapter page's title starts with
    its number, "3." for a chapter, "3.2." for a section."""
    if not name.startswith("book/") or name.count("/") < 2:
        pytest.skip("appendix pages are not numbered")
    title = parse(name).title
    assert re.match(r"\d+(\.\d+)?\. ", title), f"no chapter number in the title of {name}: {title!r}"


def test_bibliography_labels_are_plain_text():
    """Labels decode LaTeX accents (P{\\'e}rez is Pérez) and an anonymous entry sorts by its name."""
    page = (HTML / "book" / "intro.html").read_text(encoding="utf-8")
    assert "Pérez" in page and "\\'" not in page


REF_LINK = re.compile(r'<tr><td style="white-space:nowrap"><a class="reference internal" href="([^"#]*)#([^"]+)">')


def test_claims_refs_link_to_their_statement_blocks():
    """tfbook.build.sphinx_claims links each claims table's ref to the chapter's statement block it
    names: every link lands on an element with that id, and the chapters' tables carry such links."""
    linked = 0
    for name in pages():
        path = HTML / f"{name}.html"
        for target, anchor in REF_LINK.findall(path.read_text(encoding="utf-8")):
            page = (path.parent / target).resolve() if target else path
            assert f'id="{anchor}"' in page.read_text(encoding="utf-8"), f"{name}: ref link to a missing {anchor}"
            linked += 1
    assert linked > 300, f"only {linked} claims refs link to their statements"


def test_statement_titles_have_one_form():
    """Statement blocks read "Lemma 3 (Squaring)", never "Lemma (Squaring (Lemma 3))" or
    "Lemma (Lemma 2.4 (...))" (tfbook.build.sphinx_statements)."""
    nested = re.compile(r"^(Lemma|Theorem|Definition|Proposition|Corollary) \((.*\()?"
                        r"(Lemmas?|Theorems?|Def|Definition|Prop|Proposition|Corollary|Claim|Section)\.? [A-Z]?\.?\d")
    titles = []
    for name in pages():
        text = (HTML / f"{name}.html").read_text(encoding="utf-8")
        titles += re.findall(r'<p class="admonition-title"[^>]*>(.*?)</p>', text, re.S)
    bad = [t for t in titles if nested.match(t)]
    assert len(titles) > 40 and not bad, f"{len(bad)} statement titles of the old form, e.g. {bad[:2]}"


def test_long_claims_tables_fold_under_a_summary():
    """A claims table of more than 12 rows sits in a dropdown whose summary counts its claims."""
    from tfbook.build.sphinx_claims import FOLD_ROWS

    folded = 0
    for name in pages():
        text = (HTML / f"{name}.html").read_text(encoding="utf-8")
        for summary, table in re.findall(r'<details class="tfbook-claims-fold"><summary>(.*?)</summary>(.*?)</details>',
                                         text, re.S):
            rows = table.count('<tr><td style="white-space:nowrap">')
            assert rows > FOLD_ROWS and f"{rows} claims, all hold" in summary, (name, summary, rows)
            folded += 1
        for table in re.findall(r"<table class=\"tfbook-claims\".*?</table>", re.sub(
                r'<details class="tfbook-claims-fold">.*?</details>', "", text, flags=re.S), re.S):
            assert table.count('<tr><td style="white-space:nowrap">') <= FOLD_ROWS, f"{name}: a long table unfolded"
    assert folded > 10


@pytest.mark.html
def test_links_to_a_page_read_its_section_number():
    """A prose link to another page of a chapter reads "Section 4.5" (``{numref}``), not the page's whole title:
    every internal link to a notebook page's top label is rendered as its section number."""
    labels = re.compile(r'<a class="reference internal" href="[^"#]*#(besov|colsym|icgd|seq2seq|turing)-[a-z0-9]+">'
                        r'<span class="std std-([a-z]+)">([^<]*)</span>')
    seen = 0
    for page in sorted((HTML / "book").glob("*/*.html")):
        for kind, role, text in ((m.group(1), m.group(2), m.group(3)) for m in labels.finditer(page.read_text())):
            seen += 1
            assert role == "numref" and re.fullmatch(r"Section \d+\.\d+", text), (page.name, kind, role, text)
    assert seen >= 60, seen


_CELL = re.compile(r'<div class="cell( [^"]*)?"')
_INPUT_PRE = re.compile(r'class="cell_input[^"]*".*?<pre[^>]*>(.*?)</pre>', re.S)


def visible_code_cells(name: str) -> list[int]:
    """Line counts of the code cells a reader sees unfolded on a rendered page (input neither hidden nor
    folded behind a toggle)."""
    text = (HTML / f"{name}.html").read_text(encoding="utf-8")
    starts = [(m.start(), m.group(1) or "") for m in _CELL.finditer(text)]
    counts = []
    for (start, cls), (end, _) in zip(starts, starts[1:] + [(len(text), "")]):
        if "tag_hide-input" in cls or "tag_hide-cell" in cls or "tag_remove" in cls:
            continue
        match = _INPUT_PRE.search(text, start, end)
        if match:
            counts.append(len(re.sub(r"<[^>]+>", "", match.group(1)).rstrip("\n").splitlines()))
    return counts


def test_no_visible_code_cell_over_40_lines():
    """Every notebook page as rendered: the unfolded code cells are at most 40 lines, their median at most 15."""
    counts = {name: visible_code_cells(name) for chapter in toc_chapters(ROOT) for name in chapter}
    long = {name: [n for n in c if n > 40] for name, c in counts.items() if any(n > 40 for n in c)}
    assert not long, f"visible code cells over 40 lines: {long}"
    every = sorted(n for c in counts.values() for n in c)
    assert len(every) > 200, f"only {len(every)} visible code cells found: is the cell markup still parsed?"
    assert every[len(every) // 2] <= 15, f"median visible code cell {every[len(every) // 2]} lines"
