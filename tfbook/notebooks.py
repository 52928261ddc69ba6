"""Maintainers' tool: ``python -m tfbook.notebooks execute NB.ipynb ...`` re-executes notebooks in
place and stores their outputs (and ipywidgets state, so widgets render in the static book).

Run it under ``TFBOOK_PROFILE=quick`` (``make notebooks`` does) so that the stored outputs are
what ``pytest --nbval`` compares against.
"""
from __future__ import annotations

import argparse
import pathlib
import time

import nbformat
from nbclient import NotebookClient


def execute(path: pathlib.Path, timeout: int = 1800) -> float:
    """Execute one notebook in its own folder, write it back with outputs; return wall seconds."""
    if path.suffix != ".ipynb" or not path.exists():
        raise ValueError(f"path must be an existing .ipynb file, got {str(path)!r}")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True, record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="re-execute notebooks in place")
    parser.add_argument("command", choices=["execute"])
    parser.add_argument("notebooks", nargs="+", type=pathlib.Path)
    args = parser.parse_args(argv)
    for path in args.notebooks:
        print(f"{path}: {execute(path):.1f} s", flush=True)


if __name__ == "__main__":
    main()
