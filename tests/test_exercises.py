"""Every exercise has a folded solution, and every solution that computes checks its answer as a claim.

A page's exercises are the numbered list under its "## Exercises" heading. Exercise N's solution is a
dropdown titled "Solution to exercise N" (the derivation, folded), optionally followed by code cells folded
under the same title (``hide-cell``, prompt "Solution to exercise N: ...") whose checks are claims of a
`tfbook.claims.Claims` titled "Solutions to the exercises" (a second one, "...: the trained models", keeps
trained values out of the other tables, whose records nbval compares). Pages still without solutions are listed in
`PENDING`; the list may only shrink (a listed page that has all its solutions fails too).
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p.relative_to(ROOT).with_suffix("").as_posix() for p in (ROOT / "book").glob("*/*.ipynb"))
PENDING: set[str] = set()  # pages whose exercises have no solutions yet (the list shrinks to empty)
SOLUTION = re.compile(r"^:::\{dropdown\} Solution to exercise (\d+)\s*$", re.M)


def _exercises(nb) -> int:
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    part = text.split("## Exercises", 1)
    if len(part) < 2:
        return 0
    listing = re.split(r"\n:::|\n#", part[1], maxsplit=1)[0]
    return len(re.findall(r"^\d+\. ", listing, re.M))


def _solutions(nb) -> set[int]:
    return {int(n) for c in nb.cells if c.cell_type == "markdown" for n in SOLUTION.findall(c.source)}


def _solution_code(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"
            and str(c.metadata.get("mystnb", {}).get("code_prompt_show", "")).startswith("Solution to exercise")]


@pytest.mark.parametrize("name", PAGES)
def test_every_exercise_has_a_folded_solution(name):
    nb = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
    count, solved = _exercises(nb), _solutions(nb)
    assert count > 0, f"{name}: no numbered exercises under '## Exercises'"
    if name in PENDING:
        assert solved != set(range(1, count + 1)), f"{name} has every solution: remove it from PENDING"
        return
    assert solved == set(range(1, count + 1)), f"{name}: solutions {sorted(solved)} for {count} exercises"
    for cell in _solution_code(nb):
        assert "hide-cell" in cell.metadata.get("tags", []), f"{name}: a solution's code must be folded"
        assert ".check(" in cell.source or ".show()" in cell.source, (
            f"{name}: a solution's computation must check its answer as a claim")
        text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in cell.outputs)
        assert "Solutions to the exercises" in text or ".check(" not in cell.source, (
            f"{name}: a solution's claims must be executed and shown (stored outputs)")


def test_pending_pages_exist():
    assert PENDING <= set(PAGES), sorted(PENDING - set(PAGES))
