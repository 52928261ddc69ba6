"""``make screenshots``: a full-page PNG of every rendered page, for review (optional).

Uses a headless Chromium when one is installed (Debian package ``chromium``); otherwise says so and
exits 0. Usage: ``python tests/screenshots.py _build/html _build/screenshots``.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys


def browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    html, out = pathlib.Path(argv[0]), pathlib.Path(argv[1])
    exe = browser()
    if exe is None:
        print("no headless Chromium found (apt-get install chromium): no screenshots taken")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    pages = sorted(p for p in html.rglob("*.html") if "_static" not in p.parts and "_sources" not in p.parts)
    for page in pages:
        target = out / (str(page.relative_to(html)).replace("/", "__")[:-5] + ".png")
        subprocess.run([exe, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                        "--window-size=1280,4000", f"--screenshot={target}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
        print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
