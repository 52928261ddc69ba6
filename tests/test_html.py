"""The rendered book as a reader sees it (run after `make book-stored`; `make test-html`).

No object reprs in outputs, no output line over 100 characters, no TeX in page titles, every image
present, every page of the TOC rendered. Parses _build/html with the standard library.
"""
import html.parser
import pathlib
import re
from urllib.parse import unquote, urlparse

import pytest

from tfbook.claims_page import toc_chapters

ROOT = pathlib.Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
pytestmark = pytest.mark.html
REPRS = ("Claim(", "Claims(", "<matplotlib", " at 0x", "<Figure size", "<torch.", "<function ")
MAX_LINE = 100


class Page(html.parser.HTMLParser):
    """Collects the title, image sources and the text of cell outputs (by line, for <pre> blocks)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.title, self.images, self.output_text, self.pre_text = "", [], [], []
        self._stack: list[tuple[str, bool, bool]] = []  # (tag, inside output, inside pre)
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        out = bool(self._stack and self._stack[-1][1]) or "cell_output" in (attrs.get("class") or "")
        pre = bool(self._stack and self._stack[-1][2]) or tag == "pre"
        if tag in ("img", "br", "meta", "link", "input", "hr", "source", "wbr"):
            if tag == "img":
                self.images.append(attrs.get("src", ""))
            return
        self._stack.append((tag, out, pre))
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        while self._stack:
            if self._stack.pop()[0] == tag:
                break
        self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._stack and self._stack[-1][1]:
            self.output_text.append(data)
            if self._stack[-1][2]:
                self.pre_text.append(data)


def pages():
    files = ["book/intro", "book/run", "book/claims", "book/statements", "book/full_results"]
    files += [f for chapter in toc_chapters(ROOT) for f in chapter]
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
    from tfbook.repository import settings

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
    for src in page.images:
        url = urlparse(src)
        if url.scheme in ("http", "https", "data"):
            continue
        target = (path.parent / unquote(url.path)).resolve()
        assert target.exists(), f"missing image {src} on {name}"
