"""The full profile of icgd/07 is one configuration on every device, sized to the H100 budget.

Exempt from the core-sabotage check: it counts operations and reads the notebook's settings; no construction is checked.
"""
from __future__ import annotations

import ast
import pathlib
from dataclasses import replace

import nbformat

from tfbook.icgd import experiments as ex
from tfbook.build.opcount import OpCounter

NB = pathlib.Path(__file__).resolve().parents[1] / "book" / "icgd" / "07_icl_experiments.ipynb"


def _code() -> str:
    nb = nbformat.read(NB, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


def test_full_profile_does_not_depend_on_the_device():
    code = _code()
    assert "cuda" not in code, "the full profile must run the same configuration on a CPU and on a GPU"
    tree = ast.parse(code)
    picks = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "pick"
             and isinstance(n.func.value, ast.Name) and n.func.value.id == "P"]
    assert picks and all(not isinstance(a, ast.IfExp) for n in picks for a in n.args)


def _per_step(cfg: ex.ExperimentConfig, members: int):
    counts = []
    for steps in (1, 2):
        with OpCounter() as oc:
            ex.train_ensemble([replace(cfg, steps=steps, seed=s) for s in range(members)], "softmax")
        counts.append(oc.counts)
    return (counts[1].launches - counts[0].launches, counts[1].flops - counts[0].flops,
            counts[1].bytes - counts[0].bytes)


def test_one_training_step_count_at_a_tiny_size():
    """One step of the ensemble is a few hundred kernels; doubling the members doubles the flops, and
    adds launches only for the per-member prompt sampling (the model runs batched)."""
    cfg = ex.ExperimentConfig(d=3, train_points=4, test_points=6, width=8, blocks=1, heads=2, batch=4,
                              test_prompts=4)
    l3, f3, b3 = _per_step(cfg, 3)
    l6, f6, b6 = _per_step(cfg, 6)
    assert 100 < l3 < 1000, l3
    assert f3 > 0 and b3 > 0
    assert 1.8 < f6 / f3 < 2.2, (f3, f6)
    assert l6 - l3 < 0.25 * l3, (l3, l6)
