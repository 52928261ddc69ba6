"""``make pdf``: the whole book as one PDF, printed by a headless Chromium from the built HTML.

Each page of ``_toc.yml`` (landing page first, then every chapter, section and appendix page in book
order) is opened from ``_build/html`` with ``?print`` (``_static/tfbook-print.js`` then opens every
folded dropdown and cell, and the print rules of ``_static/tfbook.css`` drop the sidebars, keep
tables whole and wrap code), given time for MathJax to typeset, and printed to its own PDF in
``_build/pdf/pages/``; the pages are joined, with one bookmark per page, into ``_build/pdf/tfbook.pdf``.
A copy goes to ``_build/html/tfbook.pdf`` and ``_build/html/_static/tfbook-pdf.js`` switches on the
header's PDF button (`tfbook-print.js` adds it).

Chromium comes from Debian's package ``chromium`` (``make pdf`` installs it when it runs as root and
it is missing); the joining uses ``pypdf``. Usage: ``python -m tfbook.build.pdf [--jobs N]``.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
OUT = ROOT / "_build" / "pdf"
BOOK = OUT / "tfbook.pdf"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def browser() -> pathlib.Path:
    """The headless Chromium to print with; a RuntimeError says how to install one."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return pathlib.Path(found)
    raise RuntimeError("no Chromium found: install Debian's package (apt-get install chromium)")


def pages(root: pathlib.Path = ROOT) -> list[str]:
    """Every page of ``_toc.yml`` in book order (paths without suffix, relative to the book)."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    out = [toc["root"]]

    def walk(entry: dict) -> None:
        if "file" in entry:
            out.append(entry["file"])
        for sub in entry.get("sections", []):
            walk(sub)

    for part in toc.get("parts", [{"chapters": toc.get("chapters", [])}]):
        for chapter in part.get("chapters", []):
            walk(chapter)
    return out


def title(html: pathlib.Path) -> str:
    """The page's title without the book's name."""
    found = re.search(r"<title>(.*?)</title>", html.read_text(encoding="utf-8"), re.S)
    text = re.sub(r"&#8212;.*|\s+—.*", "", found.group(1)) if found else html.stem
    return re.sub(r"&#\d+;|&\w+;", " ", text).strip()


def print_page(exe: pathlib.Path, html: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    """One page to one PDF (MathJax given up to 20 s of virtual time to finish)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(exe), "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
                    "--allow-file-access-from-files", "--virtual-time-budget=20000",
                    f"--print-to-pdf={target}", html.resolve().as_uri() + "?print"],
                   check=True, capture_output=True, timeout=300)
    if not target.is_file() or target.stat().st_size == 0:
        raise RuntimeError(f"Chromium printed nothing for {html}")
    return target


def build(jobs: int = 2, html: pathlib.Path = HTML, out: pathlib.Path = OUT) -> pathlib.Path:
    """Print every page and join them into ``out/tfbook.pdf``; returns its path."""
    from pypdf import PdfWriter

    if not (html / "index.html").is_file():
        raise RuntimeError(f"no built book in {html}: run make book-stored (or make book) first")
    exe = browser()
    names = pages()
    files = [html / f"{name}.html" for name in names]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise RuntimeError(f"pages of _toc.yml not built: {missing}")
    targets = [out / "pages" / f"{name.replace('/', '__')}.pdf" for name in names]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(print_page, [exe] * len(files), files, targets))
    writer = PdfWriter()
    for page_file, target in zip(files, targets):
        start = len(writer.pages)
        writer.append(str(target))
        writer.add_outline_item(title(page_file), start)
    book = out / "tfbook.pdf"
    with open(book, "wb") as handle:
        writer.write(handle)
    shutil.copyfile(book, html / "tfbook.pdf")
    (html / "_static" / "tfbook-pdf.js").write_text("window.TFBOOK_PDF = true;\n")
    return book


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        book = build(args.jobs)
    except RuntimeError as exc:
        print(f"make pdf: {exc}", file=sys.stderr)
        return 1
    print(f"{book} ({book.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
