"""The stored claims audit's file, read by the audit (`tfbook.build.claims_audit`, which writes it) and by the
claims page (`tfbook.build.claims_page`): its path `AUDIT`, `SCHEMA`, the `SABOTAGES`, claim keys (`keyed`),
notebook code hashes (`code_hash`) and `load`. It imports neither module, so that neither imports the other's
importers (the executor, `tfbook.build.notebooks`, writes the claims page).
"""
from __future__ import annotations

import hashlib
import json
import pathlib
from collections import defaultdict
from typing import Any, Iterable, Optional

import nbformat

AUDIT = "book/claims_audit.json"
SCHEMA = 1
SABOTAGES: dict[str, dict[str, str]] = {
    "zero": {"TFBOOK_PERTURB_CORE": "-1"},
    "eps": {"TFBOOK_PERTURB_CORE": "1e-3"},
    "weights": {"TFBOOK_PERTURB_WEIGHTS": "1e-3"},
}
"""The three sabotages, by name, with the environment each sets in the kernel."""
UNTRAINED = "untrained"
"""The run without training (``TFBOOK_UNTRAINED=1``, `tfbook.training.untrained`), only for the notebooks with
experiment claims: every experiment claim must fail in it, and no other claim may move."""

Key = tuple[Optional[str], str, str, int]


def code_hash(nb: nbformat.NotebookNode) -> str:
    """SHA-256 of a notebook's code-cell sources, in order."""
    sources = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    return hashlib.sha256(json.dumps(sources).encode()).hexdigest()


def keyed(claims: Iterable[dict[str, Any]]) -> list[Key]:
    """Each claim's key (cell, ref, statement, occurrence among claims of the same cell, ref, statement)."""
    seen: dict[tuple, int] = defaultdict(int)
    keys = []
    for c in claims:
        base = (c.get("cell"), c["ref"], c["statement"])
        keys.append((*base, seen[base]))
        seen[base] += 1
    return keys


def load(path: pathlib.Path) -> Optional[dict[str, Any]]:
    if not path.exists():
        return None
    audit = json.loads(path.read_text(encoding="utf-8"))
    if audit.get("schema") != SCHEMA:
        raise ValueError(f"{path}: audit schema {audit.get('schema')!r}, expected {SCHEMA}: run make claims-audit")
    return audit
