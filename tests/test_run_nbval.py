"""The nbval runner of `make nbval` / `make test-portable` (`tests/run_nbval.py`): a notebook whose
cell timed out once passes on its whole-notebook rerun; a real mismatch fails twice; an xfail that
nbval assigns after a timeout is a failure (`tests/nbval_plugin.py`)."""
import pathlib
import subprocess
import sys

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def write(path: pathlib.Path, sources: list[str], texts: list[str]) -> str:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    for cell, text in zip(nb.cells, texts):
        cell.execution_count = 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    nbformat.write(nb, path)
    return str(path)


def run(*notebooks: str) -> subprocess.CompletedProcess:
    args = ["-q", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env",
            "--nbval-cell-timeout=3", *notebooks]
    return subprocess.run([sys.executable, "tests/run_nbval.py", *args], cwd=ROOT, capture_output=True, text=True)


def test_a_notebook_that_stalled_once_passes_on_its_rerun(tmp_path):
    mark = tmp_path / "stalled-once"
    stall = f"import os, time\nif not os.path.exists({str(mark)!r}):\n    open({str(mark)!r}, 'w').close()\n" \
            "    time.sleep(30)\nprint(2)"
    flaky = write(tmp_path / "flaky.ipynb", ["print(1)", stall, "print(3)"], ["1\n", "2\n", "3\n"])
    done = run(flaky)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "rerunning 1 notebook(s)" in done.stdout and "counted as a failure" in done.stdout


def test_a_real_mismatch_fails_after_its_rerun(tmp_path):
    good = write(tmp_path / "good.ipynb", ["print(1)"], ["1\n"])
    wrong = write(tmp_path / "wrong.ipynb", ["print(1)"], ["one\n"])
    done = run(good, wrong)
    assert done.returncode != 0
    assert f"rerunning 1 notebook(s) with a failed cell, once, in a fresh process: {wrong}" in done.stdout
