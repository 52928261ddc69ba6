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
from nbclient.exceptions import CellExecutionError

from tfbook.build.notebooks import execute_notebook

pytestmark = pytest.mark.mutation
ROOT = pathlib.Path(__file__).resolve().parents[2]
EXEMPT: dict[str, str] = {
    "book/colsym/01_basis.ipynb": "the algebra of the P_T basis (Lemmas 3-6), no network",
    "book/besov/01_rates_and_spaces.ipynb": "rate exponents, atom and token counts, no network",
    "book/besov/06_estimation.ipynb": "least squares over fixed B-spline atoms, no network",
    "book/icgd/01_deep_net_gradient.ipynb": "Lemma 1 by hand against autograd on the deep network, no transformer",
    "book/icgd/02_sum_of_relus.ipynb": "Definition 4's sums of ReLUs as functions, before they become heads",
    "book/icgd/07_icl_experiments.ipynb": "App. G trains standard transformers; no explicit construction",
    "book/seq2seq/07_masking_experiment.ipynb": "Section 6 trains a small ViT; no explicit construction",
}
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
    with pytest.raises(CellExecutionError) as err:
        execute_notebook(nb, path.parent, path=str(path.relative_to(ROOT)), timeout=600)
    assert err.value.ename == "ClaimError", f"{path.name} failed with {err.value.ename}, not a failing claim"


def test_exempt_notebooks_exist():
    assert all((ROOT / name).exists() for name in EXEMPT)
