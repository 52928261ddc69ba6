"""nbval's runs as the claims audit's runs without a sabotage (``make nbval``, then ``make test-claims``).

The claims audit (`tfbook.build.claims_audit`) executes every notebook once without a sabotage for each
claim's kind and full-precision values (its *baseline*). ``make nbval`` already executes every notebook that
way, so when ``TFBOOK_NBVAL_BASELINE`` names a folder, nbval's plugin (``tests/nbval_plugin.py``) sets
``TFBOOK_CLAIMS_SINK`` for each notebook's kernel and records the run with `start` and `finish`::

    <folder>/<notebook path>.claims.jsonl   every claim the run checked (`tfbook.claims`' sink)
    <folder>/<notebook path>.run.json       hashes, environment, cells run, whether every cell passed,
                                            how many core layers the kernel built (`CORE_LAYERS_CODE`)

``claims_audit run --baseline-from <folder>`` then takes a notebook's baseline from there (`load`) when that
run passed every cell (so no claim failed: in the audit's record-only mode it would have recorded the same
claims), ran every code cell, ran the notebook's current code with the current library, and ran with the
environment the audit's baseline gets (`expected_environment`); otherwise the audit executes the baseline
itself. A run that built no core layer (`tfbook.layers.core_layers_built` is 0 after the last cell) stands
for the audit's sabotaged runs too: both sabotages act inside core layers only. ``make test-portable``'s nbval
run does not set the variable: its numerics differ on purpose.
"""
from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Mapping, Optional

import nbformat

from tfbook.build.audit_file import code_hash

FOLDER_ENV = "TFBOOK_NBVAL_BASELINE"
SINK_ENV = "TFBOOK_CLAIMS_SINK"
NUMERIC_ENV = ("TFBOOK_PROFILE", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_CBWR", "ATEN_CPU_CAPABILITY",
               "TFBOOK_PERTURB_CORE", "TFBOOK_PERTURB_WEIGHTS", "TFBOOK_UNTRAINED", "TFBOOK_CLAIMS")
"""The variables that can change what a notebook computes or records; recorded with each run."""
CORE_LAYERS_CODE = """import sys as _tfbook_sys
_tfbook_hooks = _tfbook_sys.modules.get("tfbook.layers.hooks")
print("core layers built:", 0 if _tfbook_hooks is None else _tfbook_hooks.core_layers_built())
del _tfbook_sys, _tfbook_hooks"""
"""Run in a notebook's kernel after its last cell: prints how many core layers the kernel built (`core_layers`)."""


def core_layers(printed: str) -> Optional[int]:
    """The count `CORE_LAYERS_CODE` printed (None when ``printed`` holds none).

    >>> core_layers("core layers built: 0\\n"), core_layers("")
    (0, None)
    """
    for line in printed.splitlines():
        head, _, count = line.partition(": ")
        if head == "core layers built" and count.strip().isdigit():
            return int(count)
    return None


def _files(folder: pathlib.Path, notebook: str) -> tuple[pathlib.Path, pathlib.Path]:
    base = folder / notebook
    return base.with_name(base.name + ".claims.jsonl"), base.with_name(base.name + ".run.json")


def environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The `NUMERIC_ENV` part of ``environ`` (absent variables as "")."""
    return {k: environ.get(k, "") for k in NUMERIC_ENV}


def expected_environment(kernel_env: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """The `environment` an nbval run must have had to stand for the audit's baseline, whose kernel gets
    ``kernel_env`` on top of ``environ``; nbval raises on a failing claim where the audit records it."""
    expected = environment({**environ, **kernel_env})
    expected["TFBOOK_CLAIMS"] = ""
    return expected


def start(folder: pathlib.Path, notebook: pathlib.Path, root: pathlib.Path, library: str) -> str:
    """Before ``notebook``'s kernel starts: clear its files, write its run record (not finished) and return
    the sink path to put in ``TFBOOK_CLAIMS_SINK``."""
    rel = notebook.resolve().relative_to(root.resolve()).as_posix()
    sink, record = _files(folder, rel)
    sink.parent.mkdir(parents=True, exist_ok=True)
    sink.unlink(missing_ok=True)
    nb = nbformat.read(notebook, as_version=4)
    record.write_text(json.dumps({
        "notebook": rel, "code_hash": code_hash(nb), "library_hash": library, "environment": environment(os.environ),
        "code_cells": sum(c.cell_type == "code" for c in nb.cells), "finished": False}), encoding="utf-8")
    return str(sink.resolve())


def finish(folder: pathlib.Path, notebook: pathlib.Path, root: pathlib.Path, cells_run: int, passed: bool,
           seconds: float, core_layers_built: Optional[int] = None) -> None:
    """After ``notebook``'s last cell: record how many cells ran, whether all passed, the time, and how many
    core layers the kernel built (None: not known)."""
    _, record = _files(folder, notebook.resolve().relative_to(root.resolve()).as_posix())
    run = json.loads(record.read_text(encoding="utf-8"))
    run.update(finished=True, cells_run=cells_run, passed=passed, seconds=round(seconds, 1),
               core_layers_built=core_layers_built)
    record.write_text(json.dumps(run), encoding="utf-8")


def load(folder: pathlib.Path, notebook: pathlib.Path, root: pathlib.Path, library: str,
         expected: Mapping[str, str]) -> tuple[Optional[dict[str, Any]], str]:
    """``({"claims": [...], "seconds": s, "core_layers_built": n or None}, "")`` when nbval's run of
    ``notebook`` can stand for the audit's baseline (see the module docstring), else ``(None, why not)``."""
    rel = notebook.resolve().relative_to(root.resolve()).as_posix()
    sink, record = _files(folder, rel)
    if not record.exists():
        return None, "no nbval run recorded"
    run = json.loads(record.read_text(encoding="utf-8"))
    nb = nbformat.read(notebook, as_version=4)
    problems = [
        (not run.get("finished"), "the run did not finish"),
        (run.get("finished") and not run.get("passed"), "a cell failed"),
        (run.get("cells_run") != run.get("code_cells"), f"{run.get('cells_run')} of {run.get('code_cells')} cells ran"),
        (run.get("code_hash") != code_hash(nb), "the notebook's code changed since"),
        (run.get("library_hash") != library, "the library changed since"),
        (run.get("environment") != dict(expected), f"environment {run.get('environment')} is not {dict(expected)}"),
    ]
    why = [text for bad, text in problems if bad]
    if why:
        return None, "; ".join(why)
    claims = [json.loads(line) for line in sink.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if sink.exists() else []
    built = run.get("core_layers_built")
    return {"claims": claims, "seconds": float(run["seconds"]),
            "core_layers_built": built if isinstance(built, int) and not isinstance(built, bool) else None}, ""
