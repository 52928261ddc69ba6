"""Every widget's callback works. nbval only sees a widget's saved initial state, so ``make nbval`` runs
`tests/widget_harness.py` in each widget notebook's kernel after its last cell (the ``widget controls`` item
of `tests/nbval_plugin.py`, ``TFBOOK_NBVAL_WIDGETS=1``). Here: every notebook of the book whose code calls
``interact``/``interactive`` gets that item and no other notebook does, and the item passes a working widget
and fails one whose callback raises, one whose control changes nothing, and a notebook with no widget built.
"""
import os
import pathlib
import re
import subprocess
import sys

import nbformat
import pytest

from tests import widget_harness

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
NOTEBOOKS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "book").rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts)


def pytest_args(*args: str, widgets: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "TFBOOK_PROFILE": "quick", "OMP_NUM_THREADS": "1"}
    env.pop("TFBOOK_NBVAL_BASELINE", None)
    if widgets:
        env["TFBOOK_NBVAL_WIDGETS"] = "1"
    else:
        env.pop("TFBOOK_NBVAL_WIDGETS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.nbval_plugin",
                           "--nbval", "--nbval-current-env", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True)


def test_every_widget_notebook_and_no_other_gets_the_widget_controls_item():
    listed = pytest_args("--collect-only", "-q", *NOTEBOOKS)
    assert listed.returncode == 0, listed.stdout[-2000:]
    got = {line.split("::")[0] for line in listed.stdout.splitlines() if line.endswith("::widget controls")}
    expected = {n for n in NOTEBOOKS if widget_harness.has_widgets(nbformat.read(ROOT / n, as_version=4))}
    assert got == expected and len(expected) >= 10, (sorted(got), sorted(expected))
    plain = pytest_args("--collect-only", "-q", *NOTEBOOKS, widgets=False)
    assert plain.returncode == 0 and "widget controls" not in plain.stdout


def widget_notebook(path: pathlib.Path, body: str, call: str = "interact(show, n=(1, 5))") -> str:
    source = f"from ipywidgets import interact, interactive\n\n\ndef show(n=3):\n{body}\n\n\nw = {call}"
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["nbval-ignore-output"]})
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    return str(path)


def test_the_harness_passes_a_working_widget_and_fails_broken_ones(tmp_path):
    good = widget_notebook(tmp_path / "good.ipynb", '    print("n" * n)')
    raises = widget_notebook(tmp_path / "raises.ipynb",
                             '    if n == 5:\n        raise ValueError("five")\n    print(n)')
    inert = widget_notebook(tmp_path / "inert.ipynb", '    print("the same")')
    unbuilt = widget_notebook(tmp_path / "unbuilt.ipynb", '    print(n)', call="show  # interact( in a comment")
    done = pytest_args("-rA", good, raises, inert, unbuilt)
    out = done.stdout
    assert done.returncode != 0
    passed = [line for line in out.splitlines() if line.startswith("PASSED ") and "::widget controls" in line]
    assert [re.search(r"(\w+)\.ipynb::", line).group(1) for line in passed] == ["good"], out[-3000:]
    assert "show(n=5) raised ValueError: five" in out, out[-3000:]
    assert "show: changing n never changes the output" in out, out[-3000:]
    assert "no interactive widget was found" in out, out[-3000:]
    failed = [re.search(r"(\w+)\.ipynb::(.*?)(?: - |$)", line).groups() for line in out.splitlines()
              if line.startswith("FAILED ")]  # with the message after " - " where the terminal is wide enough
    assert sorted(failed) == [(name, "widget controls") for name in ("inert", "raises", "unbuilt")], out[-3000:]
