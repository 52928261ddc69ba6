"""``make screenshots``: PNGs of rendered pages at a desktop and a phone width, for review (optional).

Uses a headless Chromium when one is installed (Debian package ``chromium``); otherwise says so and
exits 0. By default it shoots the landing page, the first page of every chapter and the claims page,
each at 1400 and 412 pixels wide; ``--all`` shoots every page. The book ships MathJax
(``_static/mathjax``), so the mathematics renders without internet.

Usage: ``python tests/screenshots.py _build/html _build/screenshots [--all]``.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tfbook.build.claims_page import toc_chapters  # noqa: E402

WIDTHS = {"desktop": (1400, 2400), "phone": (412, 2400)}


def browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def selected(html: pathlib.Path, every: bool) -> list[pathlib.Path]:
    if every:
        return sorted(p for p in html.rglob("*.html") if "_static" not in p.parts and "_sources" not in p.parts)
    names = ["book/intro"] + [chapter[0] for chapter in toc_chapters(ROOT)] + ["book/claims"]
    return [html / f"{name}.html" for name in names]


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--all"]
    if len(args) != 2:
        print(__doc__)
        return 2
    html, out = pathlib.Path(args[0]), pathlib.Path(args[1])
    exe = browser()
    if exe is None:
        print("no headless Chromium found (apt-get install chromium): no screenshots taken")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for page in selected(html, "--all" in argv):
        stem = str(page.relative_to(html)).replace("/", "__")[:-5]
        for label, (width, height) in WIDTHS.items():
            target = out / f"{stem}.{label}.png"
            subprocess.run([exe, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                            "--allow-file-access-from-files", "--virtual-time-budget=15000",
                            f"--window-size={width},{height}", f"--screenshot={target.resolve()}",
                            page.resolve().as_uri()], check=True, capture_output=True, timeout=180)
            print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
