"""A 1e-3 perturbation of the core layers must break every construction notebook.

Each notebook runs (quick profile) in a kernel started with ``TFBOOK_PERTURB_CORE=1e-3``, which makes
`tfbook.layers` scale every core layer's update by 1 + 1e-3; the run must stop at a failing claim
(`ClaimError`). Notebooks that build no construction (training experiments, rate tables) are listed
in `EXEMPT` with the reason. Run by ``make test-mutation``.
"""
from __future__ import annotations

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

pytestmark = pytest.mark.mutation
ROOT = pathlib.Path(__file__).resolve().parents[2]
EXEMPT: dict[str, str] = {}
NOTEBOOKS = sorted(p for p in (ROOT / "book").glob("**/*.ipynb") if ".ipynb_checkpoints" not in p.parts)


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.relative_to(ROOT).as_posix() not in EXEMPT],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_core_perturbation_breaks_a_claim(path: pathlib.Path, monkeypatch):
    monkeypatch.setenv("TFBOOK_PERTURB_CORE", "1e-3")
    monkeypatch.setenv("TFBOOK_PROFILE", "quick")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # widgets and timings are not under test here
        if cell.cell_type == "code":
            cell.outputs = []
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    with pytest.raises(CellExecutionError) as err:
        client.execute()
    assert err.value.ename == "ClaimError", f"{path.name} failed with {err.value.ename}, not a failing claim"


def test_exempt_notebooks_exist():
    assert all((ROOT / name).exists() for name in EXEMPT)
