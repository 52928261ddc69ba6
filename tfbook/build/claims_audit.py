"""The claims audit: does each executed claim notice when the model is broken? (``make test-claims``)

Every notebook is executed (quick profile, claims in record-only mode) under three process-wide
sabotages of the core layers (`tfbook.layers`, read from the environment at import):

``zero``     ``TFBOOK_PERTURB_CORE=-1``: every core layer's update removed, the model does nothing;
``eps``      ``TFBOOK_PERTURB_CORE=1e-3``: every update scaled by 1 + 1e-3;
``weights``  ``TFBOOK_PERTURB_WEIGHTS=1e-3``: noise of 1e-3 * max|w| on every stored weight.

The unsabotaged values are the stored ones: the claims records of the stored notebook outputs
(`tfbook.build.claims_page.stored_records`, every Claims object's last record). Each claim recorded under
a sabotage (``TFBOOK_CLAIMS_SINK``) is matched to a stored claim by its *key*: the id of the cell
that checked it, its ref, its statement and its occurrence (0, 1, ...) among the claims with the same
cell, ref and statement; claims left over are then matched by cell and ref in order (a statement that
prints a measured number changes under a sabotage). Per sabotage a stored claim's *outcome* is
``held``, ``failed``, ``not reached`` (the run stopped, by an error or the timeout, before the claim)
or ``missing`` (the run completed without it). A claim is *broken* by every sabotage whose outcome is
not ``held``.

Rules (``check``), each failure naming notebook, cell and claim:

* a *construction* claim broken by no sabotage fails, unless it is on the allow-list
  (`ALLOW`, only for the chapters in `PAPER_CHAPTERS`);
* a *construction* claim whose printed bound under a sabotage differs from its stored bound fails
  (a bound must come from the paper's constants, settings or references computed without the core,
  never from the sabotaged model), unless it is on the allow-list under ``moving-bound::``;
* a claim of another kind whose measured value moves where its kind says it cannot (`HELD_TO`: a
  *paper* claim under any run, a *size* or *baseline* claim under ``zero``, ``eps`` or ``untrained``,
  an *experiment* claim under ``zero`` or ``eps``, a *control* under ``untrained``) is mis-kinded and fails. Values are
  compared at full precision (``repr``) with the same claim's value in a run without a sabotage
  (`BASELINE`, executed beside the three), whose kind is the one judged; a claim that run did not
  reach is compared by its printed value with the stored one (for a table whose stored digits are not
  machine-stable, tagged ``nbval-ignore-output``, with the value under ``weights``);
* in a notebook with construction claims, a sabotage that hit nothing
  (`tfbook.layers.sabotage_hits`: zero layer calls or stored tensors changed) fails;
* an allow-list entry that names no unbroken construction claim of its chapter fails;
* stored outputs older than the notebook's code (a claim's cell id that no code cell has) fail;
* a run without a sabotage that does not complete fails (no full-precision reference).
* a notebook with experiment claims is run once more without training (`UNTRAINED`,
  ``TFBOOK_UNTRAINED=1``: every training routine keeps its initial parameters, `tfbook.training.untrained`):
  an *experiment* claim that does not fail there needs no training and fails (allow-list key
  ``needs-no-training::<key>``), and so does that run when no training routine asked the hook (it hit
  nothing) or stopped.

* a statement (a notebook's ``ref``) with construction claims none of which *fails* under ``eps``
  or ``weights`` (a 1e-3 sabotage; only ``zero`` breaks it) fails, unless listed under
  ``zero-only::<notebook>::<ref>``: a loose bound needs a tight claim beside it;
* a run that stops under a sabotage (a cell raised, or the run passed its timeout) fails, and so does
  a construction claim that only such stops "broke" (not reached, never judged): a notebook must go on
  under a sabotage (a library's refusal inside `tfbook.claims.attempt` becomes NaN in record mode, a
  bound refused by ``trivial=`` is recorded as failed), unless the allow-list names it under ``stop::``
  or ``unreached::``.

``check`` also lists the stops apart, with the claims each left unreached. A run the executor could
not complete (the kernel stalled on every attempt, or the executor raised) gives no verdict and fails.

Each execution goes through `tfbook.build.notebooks.execute_notebook`, two at a time (``--jobs``), on an
in-memory copy of the notebook (outputs cleared) with one cell put first: it registers an IPython
``post_run_cell`` hook that writes the sabotage hit counts to a file after every cell, so the counts
survive a cell that raises. The kernel's environment is ``TFBOOK_PROFILE=quick``,
``OMP_NUM_THREADS=1``, ``TFBOOK_CLAIMS=record``, ``TFBOOK_CLAIMS_SINK=<scratch file>`` and the
sabotage's variable (the other one emptied). A notebook's whole run is bounded by
``6 x metadata.tfbook.quick_seconds`` (300 s when the notebook has none; never under 60 s); the
scratch files go to ``_build/claims_audit/<sabotage>/``. A notebook that never reaches the core
(`no_core`: no core layer called under ``zero``, no tensor stored through one under ``weights``) is not
executed under ``eps`` nor without a sabotage: both would run exactly what its ``zero`` run ran, which
stands for them (``"same_as": "zero"`` in their entries). With ``--baseline-from`` (``make test-claims``,
after ``make nbval``) a notebook whose nbval run qualifies (`tfbook.build.nbval_baseline`: every cell passed,
the same code, library and environment) takes that run's claims as its baseline (``"same_as": "nbval"``);
when that run built no core layer at all (`tfbook.layers.core_layers_built`), it stands for the three
sabotaged runs as well (``"same_as": "nbval"`` in each), since both sabotages act inside core layers only.

The stored audit, `AUDIT` (``book/claims_audit.json``, one claim per line)::

    {"schema": 1, "sabotages": {"zero": {"TFBOOK_PERTURB_CORE": "-1"}, ...},
     "notebooks": {"book/ch/01.ipynb": {
        "chapter": "ch", "code_hash": "<sha256 of the code cells>", "library_hash": "<sha256 of tfbook/**/*.py>",
        "timeout_s": 90, "stale_outputs": false, "baseline": {"status": "completed", "seconds": 11.9, "error": ""},
        "runs": {"zero": {"status": "completed" | "error" | "timeout" | "stalled" | "crashed", "seconds": 12.3,
                          "hits": 140, "error": ""}, ...},
        "claims": [{"cell": "<12 hex>", "cell_index": 7, "ref": "Lemma 1", "statement": "...",
                    "occurrence": 0, "kind": "construction", "measured": "<stored>",
                    "broken_by": ["zero", "eps"], "not_reached": [], "outcome": {"zero": "failed", ...},
                    "measured_under": {"zero": "0.5", "eps": "0.0156", "weights": null},
                    "exact": true, "bound": "<repr, unsabotaged>", "bound_under": {"zero": "0.01", ...},
                    "raw": "<repr, unsabotaged>", "raw_under": {"zero": "0.5", ...},
                    "moved_under": ["zero"]  (raw and the rest: claims of other kinds only)}, ...],
        "extra": [claims recorded under a sabotage that match no stored claim]}}}

``code_hash`` hashes the notebook's code-cell sources, ``library_hash`` every ``tfbook/**/*.py``
but the tooling no notebook imports (paths and contents): file times mean nothing in a fresh clone. ``check`` recomputes both and
fails when they differ from the stored audit (``run make claims-audit``).

The allow-list, `ALLOW` (``tests/claims_audit_allow.json``): a JSON object mapping a claim's
allow key, ``"<notebook>::<cell id>::<ref>::<statement>"`` (with ``::#<n>`` appended for the n-th,
n >= 2, claim of the same cell, ref and statement), to its chapter (the notebook's folder under
``book/``); an unbroken claim is listed under its key, the other violations under ``moving-bound::<key>``,
``unreached::<key>``, ``mis-kinded::<key>``, ``needs-no-training::<key>``, ``stop::<notebook>::<sabotage>``
and ``zero-only::<notebook>::<ref>``. It may only shrink: ``allow`` prunes entries that no longer match,
``allow --seed`` adds every violation of the paper chapters (when a rule is introduced; the chapters' issues empty it).

Command line::

    python -m tfbook.build.claims_audit run [--jobs 2] [--output book/claims_audit.json] [NB.ipynb ...]
        execute the notebooks (default: every notebook of _toc.yml, replacing the whole output;
        given notebooks are merged into an existing output) and write the audit.
    python -m tfbook.build.claims_audit check [--audit book/claims_audit.json] [--fresh AUDIT] [--allow FILE]
        no execution: the stored audit's hashes must be current; the rules above are applied to
        ``--fresh`` (a run into a scratch file, as ``make test-claims`` does; its broken-by sets must
        equal the stored ones) or else to the stored audit. Exit 1 on any failure.
    python -m tfbook.build.claims_audit allow [--seed]
        rewrite the allow-list from the stored audit (prune; ``--seed``: add every violation).

``make test-claims`` (CI) is ``run --output _build/claims_audit/audit.json`` then
``check --fresh`` that file; ``make claims-audit`` writes the stored audit and the claims page.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pathlib
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import nbformat

from tfbook.build import claims_page, nbval_baseline
from tfbook.build.audit_file import AUDIT, SABOTAGES, SCHEMA, UNTRAINED, code_hash, keyed, load
from tfbook.claims import cell_id

ROOT = pathlib.Path(__file__).resolve().parents[2]
ALLOW = "tests/claims_audit_allow.json"
SCRATCH = "_build/claims_audit"
BASELINE = "none"
"""The run without a sabotage: its full-precision values and bounds, and each claim's kind, are what the
sabotaged runs are compared with (printed digits would hide a small move)."""
RUN_ENV = {**SABOTAGES, UNTRAINED: {"TFBOOK_UNTRAINED": "1"}}
"""The environment of every audit run but the baseline."""
HIT_COUNTER = {"zero": "TFBOOK_PERTURB_CORE", "eps": "TFBOOK_PERTURB_CORE", "weights": "TFBOOK_PERTURB_WEIGHTS",
               UNTRAINED: "TFBOOK_UNTRAINED"}
"""The hit count (`tfbook.layers.sabotage_hits`, `tfbook.training.untrained_hits`) that tells whether each run's
change hit anything."""
NO_CORE = ("zero", "weights")
"""The runs whose hit counts together tell whether a notebook reaches the core at all (`no_core`)."""
CORE_SABOTAGES = ("zero", "eps")
"""A size, experiment or baseline claim must not move under these."""
HELD_TO = {"paper": (*SABOTAGES, UNTRAINED), "size": (*CORE_SABOTAGES, UNTRAINED), "experiment": CORE_SABOTAGES,
           "baseline": (*CORE_SABOTAGES, UNTRAINED), "control": (UNTRAINED,)}
"""The runs under which a claim of each kind but construction must not move: a paper claim reads no model, a
size claim counts an untrained construction, an experiment or baseline claim reads no core layer, a control
(an ablated model, a stalled estimator) may go through the core but not through the training."""
PAPER_CHAPTERS = ("colsym", "turing", "icgd", "seq2seq", "besov")
"""The chapters (folders under ``book/``) whose unbroken construction claims may be allow-listed."""
TIMEOUT_FACTOR, DEFAULT_QUICK_SECONDS, MIN_TIMEOUT = 6, 300, 60
"""A run's bound over its recorded quick time: a sabotage can slow a run (turing/03 under ``eps``: 1.8 x its quick
time) and a machine can run twice as slowly as the one that recorded it (measured here on 2026-12-03, when 3 x
timed out turing/03 under ``eps`` at 425 s); a silent stall is caught apart, by the executor's watchdog."""
UNSTABLE_TAG = "nbval-ignore-output"
_ENV_BASE = {"TFBOOK_PROFILE": "quick", "OMP_NUM_THREADS": "1", "TFBOOK_CLAIMS": "record",
             "TFBOOK_PERTURB_CORE": "", "TFBOOK_PERTURB_WEIGHTS": "", "TFBOOK_UNTRAINED": ""}
_HOOK_MARK = "# tfbook.build.claims_audit hook"
_HOOK = _HOOK_MARK + """: after every cell, write the sabotage hit counts so far (never stored in a notebook)
def _tfbook_audit_hits(*_args, _path={path!r}):
    import json, sys
    layers, training = sys.modules.get("tfbook.layers"), sys.modules.get("tfbook.training")
    hits = dict(layers.sabotage_hits()) if layers is not None else {{}}
    hits["TFBOOK_UNTRAINED"] = training.untrained_hits() if training is not None else 0
    with open(_path, "w") as f:
        json.dump(hits, f)
get_ipython().events.register("post_run_cell", _tfbook_audit_hits)
del _tfbook_audit_hits
"""


# --- hashes -----------------------------------------------------------------------------------------

# The book's machinery, which no notebook imports (running, reporting, rendering): a change there cannot move
# a claim.
TOOLING = "build"


def library_hash(root: pathlib.Path = ROOT) -> str:
    """SHA-256 of every ``tfbook/**/*.py`` outside ``tfbook/build/`` (`TOOLING`): relative path and contents,
    in path order."""
    h = hashlib.sha256()
    base = root / "tfbook"
    for path in sorted(base.rglob("*.py"), key=lambda p: p.relative_to(base).as_posix()):
        if path.relative_to(base).parts[0] == TOOLING:
            continue
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


# --- stored claims, keys and matching ---------------------------------------------------------------

def stored_claims(nb: nbformat.NotebookNode) -> list[dict[str, Any]]:
    """The notebook's stored claims (every Claims object's last record), each with its ``kind``
    (``construction`` for records of schema 1) and ``unstable`` (its table is not compared by nbval)."""
    out = []
    for record, cell in claims_page.stored_records(nb):
        unstable = UNSTABLE_TAG in cell.metadata.get("tags", [])
        out += [{**c, "kind": c.get("kind", "construction"), "unstable": unstable} for c in record["claims"]]
    return out


def match(stored: list[dict], ran: list[dict]) -> tuple[list[Optional[int]], list[int]]:
    """For each stored claim, the index of its claim in ``ran`` (None when absent); and the indices of
    ``ran`` that match no stored claim. First by key, then what is left by (cell, ref) in order when
    both sides have as many left of that (cell, ref)."""
    skeys, rkeys = keyed(stored), keyed(ran)
    where = {k: j for j, k in enumerate(rkeys)}
    found: list[Optional[int]] = [where.get(k) for k in skeys]
    used = {j for j in found if j is not None}
    left_s: dict[tuple, list[int]] = defaultdict(list)
    left_r: dict[tuple, list[int]] = defaultdict(list)
    for i, k in enumerate(skeys):
        if found[i] is None:
            left_s[k[:2]].append(i)
    for j, k in enumerate(rkeys):
        if j not in used:
            left_r[k[:2]].append(j)
    for group, indices in left_s.items():
        if len(left_r.get(group, [])) == len(indices):
            for i, j in zip(indices, left_r.pop(group)):
                found[i] = j
    used = {j for j in found if j is not None}
    return found, [j for j in range(len(ran)) if j not in used]


def allow_key(notebook: str, claim: dict[str, Any]) -> str:
    """The allow-list key of an audited claim (see the module docstring)."""
    key = f"{notebook}::{claim['cell']}::{claim['ref']}::{claim['statement']}"
    return key + (f"::#{claim['occurrence'] + 1}" if claim.get("occurrence") else "")


# --- running ------------------------------------------------------------------------------------------

@dataclass
class Run:
    """One notebook executed under one sabotage."""

    notebook: str
    sabotage: str
    status: str = "not run"  # "completed", "error", "timeout", "stalled"
    seconds: float = 0.0
    error: str = ""
    hits: Optional[int] = None
    claims: list[dict[str, Any]] = field(default_factory=list)
    same_as: str = ""  # not executed here: the run that stands for it (`NO_CORE`'s zero run, or "nbval")
    core_layers_built: Optional[int] = None  # nbval's record (`tfbook.layers.core_layers_built`), else unknown


def quick_seconds(nb: nbformat.NotebookNode) -> Optional[float]:
    value = nb.metadata.get("tfbook", {}).get("quick_seconds")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def timeout_seconds(nb: nbformat.NotebookNode) -> int:
    """The bound of a notebook's whole run: `TIMEOUT_FACTOR` x its quick run time (300 s unknown), at least 60 s."""
    return max(MIN_TIMEOUT, int(math.ceil(TIMEOUT_FACTOR * (quick_seconds(nb) or DEFAULT_QUICK_SECONDS))))


def _relative(path: pathlib.Path, root: pathlib.Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()


def run_one(path: pathlib.Path, sabotage: str, scratch: pathlib.Path, root: pathlib.Path = ROOT,
            timeout: Optional[int] = None, log=print) -> Run:
    """Execute one notebook under one sabotage (the stored file is not touched); never raises on a stop."""
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    from tfbook.build.notebooks import KernelStall, execute_notebook

    rel = _relative(path, root)
    run = Run(rel, sabotage)
    base = scratch / sabotage / rel
    base.parent.mkdir(parents=True, exist_ok=True)
    sink, hits_file = base.with_suffix(".claims.jsonl"), base.with_suffix(".hits.json")
    sink.unlink(missing_ok=True)
    hits_file.unlink(missing_ok=True)
    nb = nbformat.read(path, as_version=4)
    budget = timeout if timeout is not None else timeout_seconds(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.cells.insert(0, nbformat.v4.new_code_cell(_HOOK.format(path=str(hits_file.resolve()))))
    deadline = [time.monotonic() + budget]

    def remaining(cell) -> int:  # the whole run's budget, reset by the hook cell of each (re)start
        now = time.monotonic()
        if cell.source.startswith(_HOOK_MARK):
            deadline[0] = now + budget
        return max(1, int(math.ceil(deadline[0] - now)))

    env = {**_ENV_BASE, "TFBOOK_CLAIMS_SINK": str(sink.resolve()), **RUN_ENV.get(sabotage, {})}
    start = time.perf_counter()
    try:
        execute_notebook(nb, path.resolve().parent, path=f"{rel} [{sabotage}]", env=env, timeout_func=remaining,
                         log=log)
        run.status = "completed"
    except CellTimeoutError:
        run.status, run.error = "timeout", f"the run passed its {budget} s"
    except CellExecutionError as exc:
        run.status, run.error = "error", f"{exc.ename}: {str(exc.evalue).strip()[:300]}"
    except KernelStall as exc:
        run.status, run.error = "stalled", str(exc)[:300]
    except Exception as exc:  # the executor itself failed: no verdict on the claims (check fails on it)
        run.status, run.error = "crashed", f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    run.seconds = time.perf_counter() - start
    if sink.exists():
        run.claims = [json.loads(line) for line in sink.read_text(encoding="utf-8").splitlines() if line.strip()]
    if hits_file.exists() and sabotage in HIT_COUNTER:
        run.hits = int(json.loads(hits_file.read_text()).get(HIT_COUNTER[sabotage], 0))
    log(f"tfbook.build.claims_audit: {rel} [{sabotage}]: {run.status} in {run.seconds:.1f} s, "
        f"{len(run.claims)} claims recorded, {run.hits} hits" + (f" ({run.error})" if run.error else ""))
    return run


def audit_notebook(path: pathlib.Path, runs: dict[str, Run], root: pathlib.Path = ROOT,
                   library: Optional[str] = None, baseline: Optional[Run] = None,
                   untrained: Optional[Run] = None) -> dict[str, Any]:
    """The audit entry of one notebook from its stored claims, its runs under each sabotage, its run
    without one (``baseline``: each claim's kind, full-precision value and bound; without it the printed
    stored values are compared) and its run without training (``untrained``, for a notebook with experiment
    claims: each claim's outcome there, under ``"untrained"``, and whether it moved, in ``moved_under``)."""
    nb = nbformat.read(path, as_version=4)
    rel = _relative(path, root)
    stored = stored_claims(nb)
    index = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            index.setdefault(cell_id(cell.source), i)
    matched = {s: match(stored, run.claims) for s, run in runs.items()}
    fresh_of = match(stored, baseline.claims)[0] if baseline is not None else [None] * len(stored)
    compared = {**runs, **({UNTRAINED: untrained} if untrained is not None else {})}
    matched.update({UNTRAINED: match(stored, untrained.claims)} if untrained is not None else {})
    claims = []
    for i, (c, key) in enumerate(zip(stored, keyed(stored))):
        fresh = None if fresh_of[i] is None else baseline.claims[fresh_of[i]]
        # full precision from the baseline run, except for a roundoff claim: its value is rounding noise, and
        # only the side of its bound it prints is fixed
        exact = fresh is not None and "raw_bound" in fresh and not c.get("roundoff")
        outcome, measured, bounds, raw = {}, {}, {}, {}
        for s, run in compared.items():
            j = matched[s][0][i]
            if j is None:
                outcome[s], measured[s] = ("missing" if run.status == "completed" else "not reached"), None
                bounds[s] = raw[s] = None
            else:
                ran = run.claims[j]
                outcome[s], measured[s] = ("held" if ran["holds"] else "failed"), ran["measured"]
                bounds[s] = ran.get("raw_bound") if exact else ran["bound"]
                raw[s] = ran.get("raw_measured") if exact else ran["measured"]
        kind = fresh["kind"] if fresh is not None else c["kind"]
        entry = {"cell": c.get("cell"), "cell_index": index.get(c.get("cell")), "ref": c["ref"],
                 "statement": c["statement"], "occurrence": key[3], "kind": kind, "measured": c["measured"],
                 "broken_by": [s for s in runs if outcome[s] != "held"],
                 "not_reached": [s for s in runs if outcome[s] in ("not reached", "missing")],
                 "outcome": outcome, "measured_under": measured,
                 "exact": exact, "bound": fresh["raw_bound"] if exact else c["bound"], "bound_under": bounds}
        if untrained is not None:
            entry["untrained"] = outcome.pop(UNTRAINED)
            del bounds[UNTRAINED]
        if kind != "construction":
            if exact:
                reference, entry["raw"], entry["raw_under"] = fresh["raw_measured"], fresh["raw_measured"], raw
            else:
                reference = c["measured"]
                if c["unstable"] and measured.get("weights") is not None:
                    reference = measured["weights"]  # stored digits are not machine-stable: same-machine value
            entry["moved_under"] = [s for s in compared if raw[s] is not None and raw[s] != reference]
        if untrained is not None and kind == "construction":
            del raw[UNTRAINED], measured[UNTRAINED]
        claims.append(entry)
    extra = [{"sabotage": s, "cell": run.claims[j].get("cell"), "ref": run.claims[j]["ref"],
              "statement": run.claims[j]["statement"]} for s, run in runs.items() for j in matched[s][1]]
    return {
        "chapter": pathlib.PurePosixPath(rel).parent.name,
        "code_hash": code_hash(nb),
        "library_hash": library or library_hash(root),
        "timeout_s": timeout_seconds(nb),
        "stale_outputs": any(c.get("cell") not in index for c in stored),
        "runs": {s: {"status": r.status, "seconds": round(r.seconds, 1), "hits": r.hits, "error": r.error,
                     **({"same_as": r.same_as} if r.same_as else {})} for s, r in runs.items()},
        "baseline": None if baseline is None else {"status": baseline.status, "seconds": round(baseline.seconds, 1),
                                                   "error": baseline.error,
                                                   **({"same_as": baseline.same_as} if baseline.same_as else {})},
        "untrained": None if untrained is None else {"status": untrained.status, "hits": untrained.hits,
                                                     "seconds": round(untrained.seconds, 1), "error": untrained.error},
        "claims": claims,
        "extra": extra,
    }


def notebooks(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """The notebooks of ``_toc.yml``, in book order."""
    return [root / f"{name}.ipynb" for chapter in claims_page.toc_chapters(root) for name in chapter]


def no_core(runs: dict[str, Run]) -> bool:
    """Whether a notebook's runs under `NO_CORE` prove that it never reaches the core: it called no core
    layer under ``zero`` and stored no non-zero tensor through one under ``weights``, and both completed. The
    sabotages act there only, so every run without training (``eps``, the baseline) executes what ``zero``
    did."""
    return all(s in runs and runs[s].status == "completed" and runs[s].hits == 0 for s in NO_CORE)


def _core_free_hint(root: pathlib.Path) -> set[str]:
    """Notebooks whose stored audit found them `no_core` (only the order of the runs depends on it)."""
    stored = root / AUDIT
    if not stored.exists():
        return set()
    entries = json.loads(stored.read_text(encoding="utf-8")).get("notebooks", {})
    return {nb for nb, e in entries.items()
            if all(e["runs"].get(s, {}).get("status") == "completed" and e["runs"][s].get("hits") == 0
                   for s in NO_CORE)}


def run_audit(paths: list[pathlib.Path], root: pathlib.Path = ROOT, jobs: int = 2,
              scratch: Optional[pathlib.Path] = None, log=print,
              baselines: Optional[dict[pathlib.Path, Run]] = None) -> dict[str, dict[str, Any]]:
    """Execute ``paths`` under every sabotage, ``jobs`` runs at a time (the longest first); return
    their audit entries by notebook path (relative to ``root``).

    A notebook the stored audit found `no_core` runs ``zero`` and ``weights`` first; when the fresh runs
    are `no_core` too, its ``eps`` and baseline runs are not executed but are that ``zero`` run
    (``same_as``), otherwise they are executed after the others. A notebook in ``baselines`` (nbval's runs,
    `nbval_baselines`) takes its baseline from there instead of executing it, and when that run built no core
    layer (`tfbook.layers.core_layers_built`), its three sabotaged runs too: neither sabotage can change a run
    that never built a core layer."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    scratch = scratch or root / SCRATCH
    baselines = baselines or {}
    budgets = {p: timeout_seconds(nbformat.read(p, as_version=4)) for p in paths}
    trains = {p for p in paths if trained(nbformat.read(p, as_version=4))}
    built_none = {p for p, run in baselines.items() if run.core_layers_built == 0}
    hint = _core_free_hint(root)
    deferred = [p for p in paths if _relative(p, root) in hint and p not in built_none]
    later = ("eps", BASELINE)
    tasks = sorted(((p, s) for p in paths for s in (*SABOTAGES, BASELINE, *([UNTRAINED] if p in trains else []))
                    if not (p in deferred and s in later) and not (p in baselines and s == BASELINE)
                    and not (p in built_none and s in SABOTAGES)),
                   key=lambda t: -budgets[t[0]])
    futures: dict[tuple[pathlib.Path, str], Any] = {}
    with ThreadPoolExecutor(jobs) as pool:
        for p, run in baselines.items():
            futures[(p, BASELINE)] = pool.submit(lambda run=run: run)
            if p in built_none:
                log(f"tfbook.build.claims_audit: {_relative(p, root)} [{', '.join(SABOTAGES)}]: nbval's run "
                    f"(no core layer built)")
                for s in SABOTAGES:
                    futures[(p, s)] = pool.submit(lambda s=s, run=run: replace(run, sabotage=s, seconds=0.0, hits=0))
        for task in tasks:
            futures[task] = pool.submit(run_one, task[0], task[1], scratch, root, budgets[task[0]], log)
        for p in sorted(deferred, key=lambda p: -budgets[p]):
            first = {s: futures[(p, s)].result() for s in NO_CORE}
            for s in (x for x in later if (p, x) not in futures):
                if no_core(first):
                    run = replace(first["zero"], sabotage=s, seconds=0.0, same_as="zero")
                    log(f"tfbook.build.claims_audit: {_relative(p, root)} [{s}]: the zero run (no core reached)")
                    futures[(p, s)] = pool.submit(lambda run=run: run)
                else:
                    futures[(p, s)] = pool.submit(run_one, p, s, scratch, root, budgets[p], log)
    library = library_hash(root)
    return {_relative(p, root): audit_notebook(p, {s: futures[(p, s)].result() for s in SABOTAGES}, root, library,
                                               futures[(p, BASELINE)].result(),
                                               futures[(p, UNTRAINED)].result() if p in trains else None)
            for p in paths}


def nbval_baselines(folder: pathlib.Path, paths: list[pathlib.Path], root: pathlib.Path = ROOT,
                    log=print) -> dict[pathlib.Path, Run]:
    """The baselines nbval's recorded runs in ``folder`` can stand for (`tfbook.build.nbval_baseline`), by
    notebook; each other notebook is logged with the reason and gets its baseline executed."""
    library, expected = library_hash(root), nbval_baseline.expected_environment(_ENV_BASE, os.environ)
    found = {}
    for p in paths:
        run, why = nbval_baseline.load(folder, p, root, library, expected)
        if run is None:
            log(f"tfbook.build.claims_audit: {_relative(p, root)} [{BASELINE}]: executed ({why})")
            continue
        found[p] = Run(_relative(p, root), BASELINE, "completed", run["seconds"], claims=run["claims"],
                       same_as="nbval", core_layers_built=run["core_layers_built"])
    log(f"tfbook.build.claims_audit: {len(found)} of {len(paths)} runs without a sabotage taken from nbval's")
    return found


def trained(nb: nbformat.NotebookNode) -> bool:
    """Whether a notebook's stored claims include an experiment claim (it gets a run without training)."""
    return any(c["kind"] == "experiment" for c in stored_claims(nb))


# --- the stored file ----------------------------------------------------------------------------------

def dumps(audit: dict[str, Any]) -> str:
    """The audit as JSON, one claim per line (small, reviewable diffs)."""
    lines = ["{", f' "schema": {json.dumps(audit["schema"])},', f' "sabotages": {json.dumps(audit["sabotages"])},',
             ' "notebooks": {']
    names = list(audit["notebooks"])
    for n, name in enumerate(names):
        entry = audit["notebooks"][name]
        lines.append(f"  {json.dumps(name)}: {{")
        head = [k for k in entry if k not in ("claims", "extra")]
        for k in head:
            lines.append(f"   {json.dumps(k)}: {json.dumps(entry[k], ensure_ascii=False)},")
        for k in ("claims", "extra"):
            items = entry.get(k, [])
            last = k == "extra"
            if not items:
                lines.append(f"   {json.dumps(k)}: []" + ("" if last else ","))
                continue
            lines.append(f"   {json.dumps(k)}: [")
            lines += [f"    {json.dumps(c, ensure_ascii=False)}" + ("," if i < len(items) - 1 else "")
                      for i, c in enumerate(items)]
            lines.append("   ]" + ("" if last else ","))
        lines.append("  }" + ("," if n < len(names) - 1 else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def write(path: pathlib.Path, entries: dict[str, dict[str, Any]], merge: bool) -> dict[str, Any]:
    """Write the audit: ``entries`` alone, or merged into the audit already at ``path``."""
    old = load(path) if merge else None
    notebooks_ = dict(old["notebooks"]) if old else {}
    notebooks_.update(entries)
    audit = {"schema": SCHEMA, "sabotages": SABOTAGES, "notebooks": dict(sorted(notebooks_.items()))}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(audit), encoding="utf-8")
    return audit


def load_allow(path: pathlib.Path) -> dict[str, str]:
    if not path.exists():
        return {}
    allow = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(allow, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in allow.items()):
        raise ValueError(f"{path} must be a JSON object mapping allow keys to chapters")
    return allow


# --- checking -----------------------------------------------------------------------------------------

def _name(notebook: str, c: dict[str, Any]) -> str:
    where = f"cell {c['cell_index']} ({c['cell']})" if c.get("cell_index") is not None else f"cell {c['cell']}"
    return f"{notebook}, {where}: {c['ref']}: {c['statement']}"


MOVING_BOUND, UNREACHED, MIS_KINDED, STOP = "moving-bound::", "unreached::", "mis-kinded::", "stop::"
ZERO_ONLY, NEEDS_NO_TRAINING = "zero-only::", "needs-no-training::"
ALLOW_PREFIXES = (MOVING_BOUND, UNREACHED, MIS_KINDED, STOP, ZERO_ONLY, NEEDS_NO_TRAINING)  # keys other than unbroken
SMALL_SABOTAGES = ("eps", "weights")  # a 1e-3 change: every statement needs a claim one of them breaks


def moved_bound(c: dict[str, Any]) -> list[str]:
    """The sabotages under which a claim's printed bound differs from its stored bound."""
    return [s for s, b in c.get("bound_under", {}).items() if b is not None and b != c.get("bound")]


def unbroken(audit: dict[str, Any]) -> dict[str, str]:
    """The allow keys of the construction claims that no sabotage broke, with their chapters."""
    return {allow_key(nb, c): entry["chapter"] for nb, entry in audit["notebooks"].items()
            for c in entry["claims"] if c["kind"] == "construction" and not c["broken_by"]}


def staleness(audit: Optional[dict[str, Any]], root: pathlib.Path = ROOT) -> list[str]:
    """Why the audit does not describe the current notebooks and library (empty when it does)."""
    if audit is None:
        return ["no stored audit"]
    out, library = [], library_hash(root)
    current = {_relative(p, root): p for p in notebooks(root)}
    for rel, path in current.items():
        entry = audit["notebooks"].get(rel)
        if entry is None:
            out.append(f"{rel}: not audited")
        elif entry["code_hash"] != code_hash(nbformat.read(path, as_version=4)):
            out.append(f"{rel}: its code cells changed")
        elif entry["library_hash"] != library:
            out.append(f"{rel}: tfbook/**/*.py changed")
    out += [f"{rel}: not in _toc.yml" for rel in audit["notebooks"] if rel not in current]
    return out


def _mis_kinded(c: dict[str, Any]) -> list[str]:
    """The runs under which a claim that is not a construction claim moves, and must not (`HELD_TO`)."""
    return [s for s in c.get("moved_under", []) if s in HELD_TO.get(c["kind"], ())]


def violations(audit: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Every violation the allow-list may excuse, by allow key: (chapter, what failed). Keys: an unbroken
    construction claim's `allow_key`; ``moving-bound::``, ``unreached::`` (a construction claim that only
    runs which stopped before it "broke") and ``mis-kinded::`` before a claim's key; ``stop::<notebook>::<sabotage>``
    for a run that stopped."""
    out: dict[str, tuple[str, str]] = {}
    for nb, entry in audit["notebooks"].items():
        chapter = entry["chapter"]
        for c in entry["claims"]:
            key, name = allow_key(nb, c), _name(nb, c)
            if c["kind"] == "construction":
                if not c["broken_by"]:
                    out[key] = chapter, f"unbroken construction claim (held under {', '.join(SABOTAGES)}): {name}"
                elif set(c["broken_by"]) <= set(c.get("not_reached", [])):
                    out[UNREACHED + key] = chapter, (f"construction claim broken only where a run stopped before it "
                                                     f"({', '.join(c['broken_by'])}): {name}")
                moved = moved_bound(c)
                if moved:
                    values = ", ".join(f"{s} {c['bound_under'][s]}" for s in moved)
                    out[MOVING_BOUND + key] = chapter, (f"construction claim whose bound moves under a sabotage "
                                                        f"(unsabotaged {c['bound']}, {values}): {name}")
            if c["kind"] == "experiment" and c.get("untrained", "failed") != "failed":
                out[NEEDS_NO_TRAINING + key] = chapter, (f"experiment claim {c['untrained']} without training "
                                                         f"({UNTRAINED}): {name}")
            moved = _mis_kinded(c)
            if moved:
                under = c["raw_under"] if c.get("exact") else c["measured_under"]
                values = ", ".join(f"{s} {under[s]}" for s in moved)
                reference = "unsabotaged " + c["raw"] if c.get("exact") else "stored " + c["measured"]
                out[MIS_KINDED + key] = chapter, (f"mis-kinded {c['kind']} claim (its value moves: {reference}, "
                                                  f"{values}): {name}")
        for s, run in _all_runs(entry).items():
            if run["status"] in ("error", "timeout"):
                out[f"{STOP}{nb}::{s}"] = chapter, f"{nb} [{s}]: the run stopped ({run['status']}: {run['error']})"
        statements: dict[str, bool] = {}
        for c in entry["claims"]:
            if c["kind"] == "construction":
                small = any(c["outcome"].get(s) == "failed" for s in SMALL_SABOTAGES)
                statements[c["ref"]] = statements.get(c["ref"], False) or small
        for ref, broken in statements.items():
            if not broken:
                out[f"{ZERO_ONLY}{nb}::{ref}"] = chapter, (f"{nb}: statement {ref!r}: no construction claim fails under "
                                                           f"{' or '.join(SMALL_SABOTAGES)} (a 1e-3 sabotage)")
    return out


def _all_runs(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A notebook's runs under the sabotages and, where it has one, its run without training."""
    return {**entry["runs"], **({UNTRAINED: entry["untrained"]} if entry.get("untrained") else {})}


def rules(audit: dict[str, Any], allow: dict[str, str], complete: bool = True) -> list[str]:
    """The failures of an audit under the rules of the module docstring. ``complete``: the audit
    covers every notebook (else allow-list entries of notebooks it lacks are not judged)."""
    failures = []
    for nb, entry in audit["notebooks"].items():
        experiments = sum(c["kind"] == "experiment" for c in entry["claims"])
        if experiments and not entry.get("untrained"):
            failures.append(f"{nb}: {experiments} experiment claims and no run without training ({UNTRAINED})")
        elif experiments and not entry["untrained"].get("hits"):
            failures.append(f"{nb} [{UNTRAINED}]: no training routine asked tfbook.training.untrained "
                            f"(count {entry['untrained'].get('hits')}) in a notebook with {experiments} experiment "
                            f"claims: its training is not one the hook knows")
        for s, run in _all_runs(entry).items():
            if run["status"] in ("crashed", "stalled", "not run"):
                failures.append(f"{nb} [{s}]: the executor could not run it ({run['status']}: {run['error']}): "
                                f"no verdict on its claims")
        base = entry.get("baseline")
        if base is not None and base["status"] != "completed":
            failures.append(f"{nb} [{BASELINE}]: the run without a sabotage did not complete ({base['status']}: "
                            f"{base['error']}): no full-precision reference")
        if entry.get("stale_outputs"):
            failures.append(f"{nb}: stored claims come from cells the notebook no longer has: run make notebooks")
        constr = [c for c in entry["claims"] if c["kind"] == "construction"]
        if constr:
            for s, run in entry["runs"].items():
                if not run.get("hits"):
                    failures.append(f"{nb}: sabotage {s} hit nothing ({HIT_COUNTER[s]} count {run.get('hits')}) "
                                    f"in a notebook with {len(constr)} construction claims")
    found = violations(audit)
    failures += [what for key, (chapter, what) in found.items() if allow.get(key) != chapter]
    for key, chapter in allow.items():
        bare = key.split("::", 1)[1] if key.startswith(ALLOW_PREFIXES) else key
        notebook = bare.split("::", 1)[0]
        if chapter not in PAPER_CHAPTERS:
            failures.append(f"allow-list entry for chapter {chapter!r}, not one of {PAPER_CHAPTERS}: {key}")
        elif not complete and notebook not in audit["notebooks"]:
            continue
        elif found.get(key, ("",))[0] != chapter:
            failures.append(f"allow-list entry matches no violation of {chapter}: {key}")
    return failures


def differences(stored: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
    """Where a fresh audit's claims or broken-by sets differ from the stored audit's."""
    out = []
    for nb, entry in fresh["notebooks"].items():
        old = stored["notebooks"].get(nb)
        if old is None:
            out.append(f"{nb}: not in the stored audit")
            continue
        before = {allow_key(nb, c): c["broken_by"] for c in old["claims"]}
        after = {allow_key(nb, c): c["broken_by"] for c in entry["claims"]}
        for key in before.keys() | after.keys():
            if sorted(before.get(key, ["(no such claim)"])) != sorted(after.get(key, ["(no such claim)"])):
                out.append(f"{key}: stored broken by {before.get(key, '(no such claim)')}, "
                           f"fresh {after.get(key, '(no such claim)')}")
    return sorted(out)


def stops(audit: dict[str, Any]) -> list[str]:
    """The runs that stopped, and how many claims each left unreached (reported apart: not failures)."""
    out = []
    for nb, entry in audit["notebooks"].items():
        for s, run in _all_runs(entry).items():
            if run["status"] in ("error", "timeout"):
                n = sum((c.get("untrained") if s == UNTRAINED else c["outcome"].get(s)) == "not reached"
                        for c in entry["claims"])
                out.append(f"{nb} [{s}]: {run['status']} after {run['seconds']} s ({run['error']}); "
                           f"{n} claims not reached count as broken")
    return out


def _untrained_column(entry: dict[str, Any]) -> str:
    """'failed/experiment claims' in the run without training, '-' for a notebook without one."""
    expt = [c for c in entry["claims"] if c["kind"] == "experiment"]
    return f"{sum(c.get('untrained') == 'failed' for c in expt)}/{len(expt)}" if expt else "-"


def summary(audit: dict[str, Any]) -> str:
    """A table: per notebook, claims by kind, construction claims broken by each sabotage, unbroken, stops."""
    header = ("notebook", "claims", "constr", "other", *SABOTAGES, "unbroken", "expt failed untrained", "stops")
    rows = [header]
    for nb, entry in audit["notebooks"].items():
        constr = [c for c in entry["claims"] if c["kind"] == "construction"]
        rows.append((nb, str(len(entry["claims"])), str(len(constr)), str(len(entry["claims"]) - len(constr)),
                     *(str(sum(s in c["broken_by"] for c in constr)) for s in SABOTAGES),
                     str(sum(not c["broken_by"] for c in constr)), _untrained_column(entry),
                     ",".join(s for s, r in _all_runs(entry).items() if r["status"] != "completed") or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def check(audit_path: pathlib.Path, allow_path: pathlib.Path, fresh_path: Optional[pathlib.Path] = None,
          root: pathlib.Path = ROOT, log=print) -> list[str]:
    """Every failure of the stored audit (and of a fresh one); printed through ``log``, returned."""
    failures = []
    stored = load(audit_path)
    stale = staleness(stored, root)
    if stale:
        failures.append(f"{_display(audit_path, root)} is not current: run make claims-audit\n  "
                        + "\n  ".join(stale))
    fresh = load(fresh_path) if fresh_path is not None else None
    if fresh_path is not None and fresh is None:
        failures.append(f"no fresh audit at {fresh_path}")
    if fresh is not None and stored is not None:
        diff = differences(stored, fresh)
        if diff:
            failures.append(f"{_display(audit_path, root)} differs from the fresh run: run make claims-audit\n  "
                            + "\n  ".join(diff))
    judged = fresh or stored
    if judged is not None:
        complete = set(judged["notebooks"]) >= {_relative(p, root) for p in notebooks(root)}
        failures += rules(judged, load_allow(allow_path), complete)
        log(summary(judged))
        halted = stops(judged)
        if halted:
            log("runs that stopped (the claims they did not reach count as broken):\n  " + "\n  ".join(halted))
    for f in failures:
        log(f"FAIL {f}")
    log(f"tfbook.build.claims_audit: {len(failures)} failures" if failures else "tfbook.build.claims_audit: ok")
    return failures


def _display(path: pathlib.Path, root: pathlib.Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def write_allow(audit: dict[str, Any], path: pathlib.Path, seed: bool = False) -> dict[str, str]:
    """Rewrite the allow-list: keep the entries that still name a violation (`violations`) of their chapter;
    with ``seed``, add every violation of the paper chapters."""
    survivors = {key: chapter for key, (chapter, _) in violations(audit).items()}
    allow = {k: v for k, v in load_allow(path).items() if survivors.get(k) == v}
    if seed:
        allow.update({k: v for k, v in survivors.items() if v in PAPER_CHAPTERS})
    path.write_text(json.dumps(dict(sorted(allow.items())), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return allow


def main(argv: Optional[list[str]] = None, root: pathlib.Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="execute notebooks under the sabotages and write the audit")
    run_p.add_argument("notebooks", nargs="*", type=pathlib.Path, help="default: every notebook of _toc.yml")
    run_p.add_argument("--jobs", type=int, default=2)
    run_p.add_argument("--output", type=pathlib.Path, default=root / AUDIT)
    run_p.add_argument("--scratch", type=pathlib.Path, default=root / SCRATCH)
    run_p.add_argument("--baseline-from", type=pathlib.Path, default=None,
                       help="nbval's recorded runs (make nbval) as the runs without a sabotage, where they qualify")
    check_p = sub.add_parser("check", help="hashes current and the rules hold (no execution)")
    check_p.add_argument("--audit", type=pathlib.Path, default=root / AUDIT)
    check_p.add_argument("--fresh", type=pathlib.Path, default=None)
    check_p.add_argument("--allow", type=pathlib.Path, default=root / ALLOW)
    allow_p = sub.add_parser("allow", help="prune the allow-list (--seed: add every violation)")
    allow_p.add_argument("--seed", action="store_true")
    allow_p.add_argument("--audit", type=pathlib.Path, default=root / AUDIT)
    allow_p.add_argument("--allow", type=pathlib.Path, default=root / ALLOW)
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.jobs < 1:
            parser.error(f"--jobs must be >= 1, got {args.jobs}")
        paths = [p.resolve() for p in args.notebooks] or notebooks(root)
        start = time.perf_counter()
        baselines = nbval_baselines(args.baseline_from, paths, root) if args.baseline_from else None
        entries = run_audit(paths, root, args.jobs, args.scratch, baselines=baselines)
        write(args.output, entries, merge=bool(args.notebooks))
        print(summary({"notebooks": entries}))
        print(f"tfbook.build.claims_audit: audited {len(paths)} notebooks in {time.perf_counter() - start:.1f} s "
              f"into {_display(args.output, root)} (judge it with `python -m tfbook.build.claims_audit check`)")
        return 0
    if args.command == "check":
        return 1 if check(args.audit, args.allow, args.fresh, root) else 0
    audit = load(args.audit)
    if audit is None:
        print(f"no audit at {args.audit}: run make claims-audit")
        return 1
    allow = write_allow(audit, args.allow, seed=args.seed)
    print(f"{_display(args.allow, root)}: {len(allow)} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
