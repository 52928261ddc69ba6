"""Maintainers' tool for the book's notebooks.

``python -m tfbook.notebooks execute NB.ipynb ...``
    re-executes notebooks in place (run it under ``TFBOOK_PROFILE=quick``, as ``make notebooks``
    does), stores their outputs and widget state, then regenerates the every-claim page.
``python -m tfbook.notebooks install-cell NB.ipynb ...``
    puts the install cell (`install_cell_source`) first in each notebook, or updates it.
``python -m tfbook.notebooks claims-page [--check]``
    regenerates ``book/claims.md`` from the stored outputs (``--check``: fail if it is stale).

The install cell makes a notebook run where tfbook is not installed (Colab, a bare kernel): it
installs the package from the repository named in ``_config.yml`` (the one place the URL lives).
It is tagged ``remove-cell`` (hidden in the book) and ``nbval-skip`` (not run by the tests).
"""
from __future__ import annotations

import argparse
import pathlib
import time
from typing import Optional

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
INSTALL_TAGS = ("remove-cell", "nbval-skip")
INSTALL_MARK = "# Install tfbook when it is missing"


def repository_url(config: Optional[pathlib.Path] = None) -> str:
    """The repository URL from ``_config.yml`` (``repository.url``)."""
    import yaml

    path = config or ROOT / "_config.yml"
    url = (yaml.safe_load(path.read_text()) or {}).get("repository", {}).get("url", "")
    if not isinstance(url, str) or not url.startswith("https://"):
        raise ValueError(f"repository.url in {path} must be an https URL, got {url!r}")
    return url.rstrip("/")


def install_cell_source(url: Optional[str] = None) -> str:
    """The source of the first cell of every notebook (installs tfbook when it is missing).

    Where torch is already installed (Colab), tfbook is installed without its dependencies so the
    platform's torch build is kept; the light dependencies are installed if missing.
    """
    url = url or repository_url()
    return "\n".join([
        f"{INSTALL_MARK} (e.g. on Colab); hidden in the book, skipped by the tests.",
        "import importlib.util, subprocess, sys",
        'if importlib.util.find_spec("tfbook") is None:',
        '    pip = [sys.executable, "-m", "pip", "install", "--quiet"]',
        f'    package = "tfbook @ git+{url}"',
        '    if importlib.util.find_spec("torch") is None:',
        "        subprocess.run(pip + [package], check=True)",
        "    else:  # keep the platform's torch build",
        '        subprocess.run(pip + ["--no-deps", package], check=True)',
        '        subprocess.run(pip + ["numpy", "scipy", "sympy", "matplotlib", "ipywidgets"], check=True)',
        "    importlib.invalidate_caches()",
    ])


def is_install_cell(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith(INSTALL_MARK)


def ensure_install_cell(nb, url: Optional[str] = None) -> bool:
    """Insert or update the install cell as the notebook's first cell; return whether it changed."""
    source = install_cell_source(url)
    existing = [i for i, c in enumerate(nb.cells) if is_install_cell(c)]
    if existing and existing[0] == 0 and len(existing) == 1:
        cell = nb.cells[0]
        tags = cell.metadata.get("tags", [])
        if cell.source == source and all(t in tags for t in INSTALL_TAGS):
            return False
        cell.source = source
        cell.metadata["tags"] = list(dict.fromkeys(list(tags) + list(INSTALL_TAGS)))
        return True
    for i in reversed(existing):
        del nb.cells[i]
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": list(INSTALL_TAGS)})
    cell.pop("id", None)
    if nb.nbformat_minor >= 5:
        cell["id"] = "install-tfbook"
    nb.cells.insert(0, cell)
    return True


def execute(path: pathlib.Path, timeout: int = 1800, output: Optional[pathlib.Path] = None) -> float:
    """Execute one notebook in its own folder and write it (to ``output``, default in place) with
    outputs and widget state; return wall seconds. The kernel inherits this process's environment."""
    path = pathlib.Path(path)
    if path.suffix != ".ipynb" or not path.exists():
        raise ValueError(f"path must be an existing .ipynb file, got {str(path)!r}")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True, record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(nb, output or path)
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="maintain the book's notebooks")
    parser.add_argument("command", choices=["execute", "install-cell", "claims-page"])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path)
    parser.add_argument("--check", action="store_true", help="claims-page: fail if book/claims.md is stale")
    args = parser.parse_args(argv)
    if args.command in ("execute", "install-cell") and not args.notebooks:
        parser.error(f"{args.command} needs at least one notebook")
    if args.command == "install-cell":
        for path in args.notebooks:
            nb = nbformat.read(path, as_version=4)
            if ensure_install_cell(nb):
                nbformat.write(nb, path)
                print(f"{path}: install cell written")
        return
    if args.command == "execute":
        for path in args.notebooks:
            print(f"{path}: {execute(path):.1f} s", flush=True)
    from tfbook import claims_page

    raise SystemExit(claims_page.main(["--check"] if args.check else []))


if __name__ == "__main__":
    main()
