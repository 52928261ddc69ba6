"""The printed book (`make pdf`, run after `make book-stored`; part of `make test-html`).

Every page of the book is in the PDF with every claim's verdict, every solution (dropdowns open in
print), every figure, and no raw TeX delimiters (MathJax typeset before printing). Each page's own
PDF (``_build/pdf/pages``) is compared with the page's HTML. Text comes from ``pdftotext`` (Debian's
poppler-utils) when installed, else from pypdf (slower). A missing PDF fails: run ``make pdf``.
"""
import pathlib
import re
import shutil
import subprocess
from html import unescape

import pytest

from tfbook.build import pdf

ROOT = pathlib.Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
pytestmark = pytest.mark.html
VERDICT = re.compile(r"(?:&#10004;|✔) yes|(?:&#10008;|✘) NO")
RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$")
PRE = re.compile(r"<pre[^>]*>.*?</pre>", re.S)


def text_of(path: pathlib.Path) -> str:
    if shutil.which("pdftotext"):
        return subprocess.run(["pdftotext", "-enc", "UTF-8", str(path), "-"], check=True,
                              capture_output=True, text=True).stdout
    from pypdf import PdfReader

    return "\n".join(page.extract_text() for page in PdfReader(path).pages)


def page_pdf(name: str) -> pathlib.Path:
    return pdf.OUT / "pages" / f"{name.replace('/', '__')}.pdf"


@pytest.fixture(scope="module", autouse=True)
def printed():
    if not (HTML / "index.html").exists():
        pytest.skip("no _build/html: run make book-stored first")
    assert pdf.BOOK.is_file(), "no _build/pdf/tfbook.pdf: run make pdf (it needs Debian's chromium)"


def test_the_book_pdf_joins_every_page_in_order():
    from pypdf import PdfReader

    reader = PdfReader(pdf.BOOK)
    outline = [item.title for item in reader.outline if not isinstance(item, list)]
    assert outline == [pdf.title(HTML / f"{name}.html") for name in pdf.pages()]
    assert len(reader.pages) >= len(outline)
    assert (HTML / "tfbook.pdf").read_bytes() == pdf.BOOK.read_bytes(), "the header's copy is stale"


@pytest.mark.parametrize("name", pdf.pages())
def test_page_prints_whole(name):
    html = (HTML / f"{name}.html").read_text(encoding="utf-8")
    text = text_of(page_pdf(name))
    shown = len(VERDICT.findall(html))
    printed = len(re.findall(r"✔ yes|✘ NO", text))
    assert printed == shown, f"{name}: {shown} claim verdicts on the page, {printed} in its PDF"
    solutions = html.count("Solution to exercise")
    assert text.count("Solution to exercise") >= min(solutions, 1), f"{name}: folded solutions not printed"
    in_code = sum(len(RAW_TEX.findall(unescape(re.sub(r"<[^>]+>", "", block)))) for block in PRE.findall(html))
    raw = len(RAW_TEX.findall(text))
    assert raw <= in_code, f"{name}: {raw} TeX delimiters in its PDF, {in_code} in its code and outputs"


def _images(page) -> int:
    """The image XObjects a PDF page draws (not decoded)."""
    objects = (page.get("/Resources") or {}).get("/XObject") or {}
    return sum(1 for ref in objects.values() if ref.get_object().get("/Subtype") == "/Image")


@pytest.mark.parametrize("name", [n for n in pdf.pages() if n.count("/") >= 2 and not n.endswith("index")])
def test_every_figure_is_printed(name):
    from pypdf import PdfReader

    html = (HTML / f"{name}.html").read_text(encoding="utf-8")
    figures = len(re.findall(r"<img ", html))
    if figures == 0:
        pytest.skip(f"{name} has no figure")
    images = sum(_images(page) for page in PdfReader(page_pdf(name)).pages)
    assert images >= figures, f"{name}: {figures} images on the page, {images} in its PDF"
