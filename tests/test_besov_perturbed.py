"""A 1e-3 perturbation of the core breaks every construction notebook of the besov chapter.

Each notebook's checked code cells (not plots, widgets or the profile cell) run in order, once with every core
layer's update scaled by 1 + 1e-3 (`tfbook.layers.perturb`), which must raise `ClaimError`, and once unperturbed up
to the same cell, which must not. (Notebooks 01, 06 and 07 build no network: rates, least squares, masks.)
"""
import pathlib

import matplotlib
import nbformat
import pytest

from tfbook import notebooks
from tfbook.claims import ClaimError
from tfbook.layers import perturb

matplotlib.use("Agg")
ROOT = pathlib.Path(__file__).resolve().parent.parent
CONSTRUCTIONS = ["besov/02_relu_gadgets", "besov/03_partner_attention", "besov/04_bspline_transformer",
                 "besov/05_anisotropic_grids"]


def checked_cells(name: str) -> list[str]:
    nb = nbformat.read(ROOT / "book" / f"{name}.ipynb", as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code" and not notebooks.is_install_cell(c)
            and "nbval-ignore-output" not in c.metadata.get("tags", [])]


def run_until_claim_error(cells: list[str]) -> int | None:
    """Execute the cells in one namespace; the index of the cell that raised ClaimError, or None."""
    namespace: dict = {"__name__": "__notebook__"}
    for i, source in enumerate(cells):
        try:
            exec(compile(source, f"cell{i}", "exec"), namespace)
        except ClaimError:
            return i
    return None


@pytest.mark.parametrize("name", CONSTRUCTIONS)
def test_perturbed_core_fails_a_claim(name, monkeypatch):
    monkeypatch.setenv("TFBOOK_PROFILE", "quick")
    monkeypatch.delenv("TFBOOK_CLAIMS", raising=False)
    monkeypatch.chdir(ROOT / "book" / name.split("/")[0])
    cells = checked_cells(name)
    with perturb(scale=1 + 1e-3) as p:
        failed = run_until_claim_error(cells)
    assert failed is not None and p.hits > 0, f"{name}: no claim noticed a 1e-3 perturbation of the core"
    assert run_until_claim_error(cells[: failed + 1]) is None, f"{name}: cell {failed} fails unperturbed"
