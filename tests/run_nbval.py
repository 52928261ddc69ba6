"""Run nbval; rerun once, whole and in a fresh pytest process, each notebook that had a failed or
timed-out cell (``make nbval`` and ``make test-portable``).

    python tests/run_nbval.py PYTEST_ARGS... NOTEBOOKS...

Both runs load `tests/nbval_plugin.py` (an xfail counts as a failure), which lists the notebooks
with a failing cell; those are run again once, as whole notebooks, never as single cells
(after a timeout nbval marks the rest of a notebook xfail, so a cell-level rerun could turn a stall
green). The exit status is the rerun's (0 when the first run passed). A real mismatch fails twice.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile

FAILED_ENV = "TFBOOK_NBVAL_FAILED"  # read by tests/nbval_plugin.py, which this script loads


def failed_notebooks(listing: pathlib.Path, notebooks: list[str]) -> list[str]:
    """The notebooks (of ``notebooks``, in that order) whose paths `tests/nbval_plugin.py` listed."""
    listed = {pathlib.Path(line).resolve() for line in listing.read_text().splitlines() if line.strip()}
    return [n for n in notebooks if pathlib.Path(n).resolve() in listed]


def main(argv: list[str]) -> int:
    notebooks = [a for a in argv if a.endswith(".ipynb")]
    options = [a for a in argv if not a.endswith(".ipynb")]
    if not notebooks:
        print("run_nbval.py: no notebooks given", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        listing = pathlib.Path(tmp) / "failed.txt"
        listing.touch()
        env = {**os.environ, FAILED_ENV: str(listing)}
        first = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.nbval_plugin", *options, *notebooks], env=env)
        if first.returncode == 0:
            return 0
        failed = failed_notebooks(listing, notebooks)
    if not failed:  # a failure outside the notebooks' cells (collection, an internal error)
        return first.returncode
    print(f"run_nbval.py: rerunning {len(failed)} notebook(s) with a failed cell, once, in a fresh process: "
          + " ".join(failed), flush=True)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.nbval_plugin", *options, *failed]).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
