"""make nbval's runs as the claims audit's runs without a sabotage (`tfbook.build.nbval_baseline`,
`tests/nbval_plugin.py`): a passing run records every claim it checked, with the values the audit reads;
a run with a failed cell, a run of other code, another library or other numerics is refused; a run that
built no core layer stands for the audit's sabotaged runs too."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import nbformat
import pytest

from tfbook.build import claims_audit, nbval_baseline

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
CLAIM = "from tfbook.claims import Claims\nc = Claims('t')\nc.check('L1', 'a claim', {value}, 1.0)"


@pytest.fixture
def book():
    """A folder inside the repository (the plugin records notebooks under it only), removed afterwards."""
    (ROOT / "_build").mkdir(exist_ok=True)
    folder = pathlib.Path(tempfile.mkdtemp(dir=ROOT / "_build", prefix="test_nbval_baseline_"))
    yield folder
    shutil.rmtree(folder)


BUILD_LAYER = ("import torch\nfrom tfbook.layers import FeedForward\n"
               "f = FeedForward(torch.eye(2), None, torch.eye(2), None)")


def notebook(path: pathlib.Path, value: str, setup: str = "x = 0.25") -> pathlib.Path:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(setup),
                                                   nbformat.v4.new_code_cell(CLAIM.format(value=value))]), path)
    return path


def nbval(folder: pathlib.Path, *notebooks: pathlib.Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "TFBOOK_PROFILE": "quick", "OMP_NUM_THREADS": "1",
               nbval_baseline.FOLDER_ENV: str(folder / "records"), **env}
    for name in ("TFBOOK_CLAIMS", "TFBOOK_CLAIMS_SINK", "MKL_CBWR", "ATEN_CPU_CAPABILITY", "MKL_NUM_THREADS"):
        environ.pop(name, None)
    environ.update(env)
    args = ["-q", "-p", "no:cacheprovider", "-p", "tests.nbval_plugin", "--nbval", "--nbval-current-env",
            *map(str, notebooks)]
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT, env=environ, capture_output=True,
                          text=True)


def load(folder: pathlib.Path, path: pathlib.Path, library: str = "") -> tuple:
    expected = nbval_baseline.expected_environment(claims_audit._ENV_BASE, {})
    return nbval_baseline.load(folder / "records", path, ROOT, library or claims_audit.library_hash(ROOT), expected)


def test_a_passing_run_records_its_claims_and_stands_for_the_baseline(book):
    good = notebook(book / "good.ipynb", "x")
    done = nbval(book, good)
    assert done.returncode == 0, done.stdout[-2000:]
    run, why = load(book, good)
    assert why == "" and run is not None
    [claim] = run["claims"]
    assert (claim["ref"], claim["holds"], claim["raw_measured"], claim["raw_bound"]) == ("L1", True, "0.25", "1.0")
    assert claim["cell"] == claims_audit.cell_id(CLAIM.format(value="x"))
    # the audit turns it into its baseline run, not executed again
    [(path, base)] = claims_audit.nbval_baselines(book / "records", [good], ROOT, log=lambda *_: None).items()
    assert path == good and base.status == "completed" and base.same_as == "nbval" and base.claims == run["claims"]


def test_a_run_with_a_failed_cell_other_code_library_or_numerics_is_refused(book):
    failing, changed = notebook(book / "failing.ipynb", "4 * x + 0.5"), notebook(book / "changed.ipynb", "x")
    assert nbval(book, failing, changed).returncode != 0  # the failing claim raises in nbval's (default) mode
    assert load(book, failing) == (None, "a cell failed")
    assert load(book, changed)[0] is not None
    assert load(book, changed, library="another library") == (None, "the library changed since")
    notebook(changed, "x / 2")
    assert load(book, changed) == (None, "the notebook's code changed since")
    assert load(book, book / "never.ipynb") == (None, "no nbval run recorded")
    portable = notebook(book / "portable.ipynb", "x")
    assert nbval(book, portable, MKL_CBWR="COMPATIBLE").returncode == 0
    run, why = load(book, portable)
    assert run is None and why.startswith("environment ") and "'MKL_CBWR': 'COMPATIBLE'" in why


def test_a_run_cut_short_is_refused(book):
    good = notebook(book / "good.ipynb", "x")
    assert nbval(book, good).returncode == 0
    record = book / "records" / good.relative_to(ROOT).with_name("good.ipynb.run.json")
    run = json.loads(record.read_text())
    record.write_text(json.dumps({**run, "cells_run": 1}))
    assert load(book, good) == (None, "1 of 2 cells ran")
    record.write_text(json.dumps({**run, "finished": False}))
    assert load(book, good) == (None, "the run did not finish")


def test_a_run_that_built_no_core_layer_stands_for_the_sabotaged_runs(book, monkeypatch):
    free = notebook(book / "free.ipynb", "x")
    core = notebook(book / "core.ipynb", "x", setup=f"x = 0.25\n{BUILD_LAYER}")
    assert nbval(book, free, core).returncode == 0
    assert load(book, free)[0]["core_layers_built"] == 0 and load(book, core)[0]["core_layers_built"] == 1
    baselines = claims_audit.nbval_baselines(book / "records", [free, core], ROOT, log=lambda *_: None)
    executed = []

    def run_one(path, sabotage, *_args, **_kw):
        executed.append((path.name, sabotage))
        return claims_audit.Run(path.name, sabotage, "completed", 1.0, hits=3, claims=baselines[path].claims)

    monkeypatch.setattr(claims_audit, "run_one", run_one)
    entries = claims_audit.run_audit([free, core], ROOT, jobs=1, scratch=book / "scratch", log=lambda *_: None,
                                     baselines=baselines)
    assert sorted(executed) == sorted(("core.ipynb", s) for s in claims_audit.SABOTAGES)
    free_runs = entries[free.relative_to(ROOT).as_posix()]["runs"]
    assert all(free_runs[s] == {"status": "completed", "seconds": 0.0, "hits": 0, "error": "", "same_as": "nbval"}
               for s in claims_audit.SABOTAGES)
    assert all(run["hits"] == 3 and "same_as" not in run
               for run in entries[core.relative_to(ROOT).as_posix()]["runs"].values())
