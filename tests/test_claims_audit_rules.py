"""The claims audit's rules, each on a hand-made audit so that dropping the rule fails a test: stale stored
outputs, runs the executor could not complete, claims that vanish from a fresh run, a library hash over every
subpackage; and the wall between the sabotage machinery (`tfbook.layers.hooks`) and everything else, read
from the imports with `ast` and checked on the imported modules."""
from __future__ import annotations

import ast
import importlib
import pathlib
import pkgutil

import nbformat
import pytest

import tfbook
from tfbook import claims as cl
from tfbook.build import claims_audit as ca
from tfbook.layers import hooks

NB = "book/colsym/01_tiny.ipynb"
ROOT = pathlib.Path(tfbook.__file__).resolve().parent.parent
# where the sabotage machinery may be named: the core that holds it and the audit that switches it on (and names its
# sabotages in the stored audit's file)
MAY_READ_HOOKS = ("tfbook/layers/", "tfbook/build/claims_audit.py", "tfbook/build/audit_file.py",
                  "tfbook/build/nbval_baseline.py")  # the audit; the last records the sabotage variables
MACHINERY = {"sabotage_hits", "WeightNoise", "PERTURB_ENV", "WEIGHTS_ENV"}  # its public names, for the audit alone


def _claim(ref: str, broken_by: list[str], kind: str = "construction") -> dict:
    return {"cell": "c1", "cell_index": 1, "ref": ref, "statement": f"{ref} statement", "occurrence": 1,
            "kind": kind, "measured": "1", "broken_by": broken_by, "not_reached": [],
            "outcome": {s: ("failed" if s in broken_by else "held") for s in ca.SABOTAGES},
            "measured_under": {s: "2" for s in ca.SABOTAGES}, "bound": "1.5",
            "bound_under": {s: "1.5" for s in ca.SABOTAGES}}


def _audit(**entry) -> dict:
    """An audit of one notebook whose every claim is broken and every run completed (no rule fails)."""
    runs = {s: {"status": "completed", "seconds": 1.0, "hits": 3, "error": ""} for s in ca.SABOTAGES}
    base = {"chapter": "colsym", "code_hash": "c", "library_hash": "l", "timeout_s": 60, "stale_outputs": False,
            "runs": runs, "claims": [_claim("Lemma 1", ["eps"]), _claim("Lemma 2", ["zero", "weights"])], "extra": []}
    return {"schema": 1, "notebooks": {NB: {**base, **entry}}}


def test_a_clean_audit_passes_the_rules():
    assert ca.rules(_audit(), {}) == []


def test_stale_stored_outputs_fail_the_rules():
    failures = ca.rules(_audit(stale_outputs=True), {})
    assert failures == [f"{NB}: stored claims come from cells the notebook no longer has: run make notebooks"]


@pytest.mark.parametrize("status", ["crashed", "stalled", "not run"])
def test_a_run_the_executor_could_not_complete_fails_the_rules(status):
    audit = _audit()
    audit["notebooks"][NB]["runs"]["eps"].update(status=status, error="kernel died")
    failures = ca.rules(audit, {})
    assert failures == [f"{NB} [eps]: the executor could not run it ({status}: kernel died): no verdict on its claims"]


def test_a_construction_bound_that_moves_under_a_sabotage_fails_unless_allowed():
    audit = _audit()
    claim = audit["notebooks"][NB]["claims"][0]
    claim["bound_under"]["weights"] = "3.0"
    name = f"{NB}, cell 1 (c1): Lemma 1: Lemma 1 statement"
    assert ca.rules(audit, {}) == [
        f"construction claim whose bound moves under a sabotage (unsabotaged 1.5, weights 3.0): {name}"]
    key = ca.MOVING_BOUND + ca.allow_key(NB, claim)
    assert set(ca.violations(audit)) == {key} and ca.rules(audit, {key: "colsym"}) == []
    claim["bound_under"]["weights"] = None  # not reached: no bound to compare
    assert ca.rules(audit, {}) == []
    assert ca.rules(audit, {key: "colsym"}) == [f"allow-list entry matches no violation of colsym: {key}"]
    paper = _audit()
    paper["notebooks"][NB]["claims"][0].update(kind="paper", moved_under=[], bound_under={"zero": "9"})
    assert ca.rules(paper, {}) == []  # the rule is about construction claims


def test_a_statement_that_only_zero_breaks_fails_unless_allowed():
    audit = _audit()
    lemma2 = audit["notebooks"][NB]["claims"][1]
    lemma2.update(broken_by=["zero"], outcome={"zero": "failed", "eps": "held", "weights": "held"})
    key = f"{ca.ZERO_ONLY}{NB}::Lemma 2"
    message = f"{NB}: statement 'Lemma 2': no construction claim fails under eps or weights (a 1e-3 sabotage)"
    assert ca.rules(audit, {}) == [message] and ca.rules(audit, {key: "colsym"}) == []
    lemma2["outcome"]["weights"] = "not reached"  # a claim not reached was not broken by the sabotage
    assert ca.rules(audit, {}) == [message]
    audit["notebooks"][NB]["claims"][0]["ref"] = "Lemma 2"  # a second claim of the statement, broken by eps
    assert ca.rules(audit, {}) == []


def test_a_claim_that_vanishes_from_the_fresh_run_is_a_difference():
    stored, fresh = _audit(), _audit()
    fresh["notebooks"][NB]["claims"].pop()
    assert ca.differences(stored, fresh) == [
        f"{ca.allow_key(NB, _claim('Lemma 2', []))}: stored broken by ['zero', 'weights'], fresh (no such claim)"]
    assert ca.differences(fresh, stored) == [
        f"{ca.allow_key(NB, _claim('Lemma 2', []))}: stored broken by (no such claim), fresh ['zero', 'weights']"]


def test_the_stored_outputs_are_stale_when_a_claims_cell_is_gone(tmp_path: pathlib.Path):
    source = "c = 1"
    claim = {"cell": cl.cell_id(source), "ref": "Lemma 1", "statement": "s", "kind": "construction", "measured": "1",
             "bound": "2", "holds": True}
    record = cl.Claims("Tiny")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    path = tmp_path / NB
    path.parent.mkdir(parents=True)
    for cells, stale in ((nb.cells, False), ([nbformat.v4.new_code_cell("c = 2")], True)):
        nb.cells = cells
        nb.cells[-1].outputs = [nbformat.v4.new_output("display_data", data=record._repr_mimebundle_())]
        nbformat.write(nb, path)
        stored = [{**claim, "unstable": False}]
        entry = _entry_with(path, tmp_path, stored)
        assert entry["stale_outputs"] is stale


def _entry_with(path: pathlib.Path, root: pathlib.Path, stored: list[dict]) -> dict:
    """`ca.audit_notebook` of ``path`` with ``stored`` as its stored claims and no runs."""
    original = ca.stored_claims
    ca.stored_claims = lambda nb: stored
    try:
        return ca.audit_notebook(path, {}, root, library="l")
    finally:
        ca.stored_claims = original


def test_the_library_hash_covers_every_subpackage(tmp_path: pathlib.Path):
    deep = tmp_path / "tfbook" / "chapter" / "deep" / "module.py"
    deep.parent.mkdir(parents=True)
    deep.write_text("X = 1\n")
    (tmp_path / "tfbook" / "top.py").write_text("Y = 1\n")
    before = ca.library_hash(tmp_path)
    deep.write_text("X = 2\n")
    assert ca.library_hash(tmp_path) != before
    deep.write_text("X = 1\n")
    assert ca.library_hash(tmp_path) == before
    machinery = tmp_path / "tfbook" / ca.TOOLING / "runner" / "module.py"  # tfbook/build/, which no notebook
    machinery.parent.mkdir(parents=True)                                     # imports, is left out
    machinery.write_text("Z = 1\n")
    (machinery.parent.parent / "__init__.py").write_text("W = 1\n")
    assert ca.library_hash(tmp_path) == before


def _hooks_private_names() -> set[str]:
    tree = ast.parse(pathlib.Path(hooks.__file__).read_text())
    names = set()
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def hooks_uses(source: str, module: str = "tfbook.notebook") -> list[str]:
    """What ``source`` (the module named ``module``) does with the sabotage machinery: imports of
    `tfbook.layers.hooks` (absolute or relative), reads of ``.hooks``, of its private names or of `MACHINERY`,
    and the sabotages' variable names."""
    private = _hooks_private_names() | MACHINERY
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.startswith("tfbook.layers.hooks")]
        elif isinstance(node, ast.ImportFrom):
            origin = node.module or ""
            if node.level:  # relative to the module's package
                base = module.split(".")[: len(module.split(".")) - node.level]
                origin = ".".join(base + ([origin] if origin else []))
            names = [f"{origin}.{a.name}" for a in node.names]
            found += [f"from {origin} import {n}" for n in names
                      if n.startswith("tfbook.layers.hooks") or n.rsplit(".", 1)[1] in MACHINERY]
        elif isinstance(node, ast.Attribute) and (node.attr == "hooks" or node.attr in private):
            found.append(f"reads .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in MACHINERY:
            found.append(f"reads {node.id}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                hooks.PERTURB_ENV in node.value or hooks.WEIGHTS_ENV in node.value):
            found.append(f"names {node.value!r}")
    return found


@pytest.mark.parametrize("source, module", [
    ("from tfbook.layers import hooks\nx = hooks._WEIGHTS is not None or bool(hooks._ACTIVE)", "tfbook.turing"),
    ("import tfbook.layers.hooks", "tfbook.besov"),
    ("from tfbook.layers.hooks import _ACTIVE", "tfbook.besov"),
    ("from ..layers import hooks", "tfbook.besov.program"),
    ("from .. import layers\nw = layers.hooks._CORE", "tfbook.besov.__init__"),
    ("from tfbook import layers\ny = layers.hooks", "tfbook.icgd"),
    ("import os\nz = os.environ.get('TFBOOK_PERTURB_CORE')", "tfbook.seq2seq"),
    ("from tfbook.layers import sabotage_hits", "tfbook.colsym"),
    ("from tfbook import layers\nn = layers.sabotage_hits()", "tfbook.colsym"),
])
def test_the_import_check_sees_every_way_to_reach_the_hooks(source, module):
    assert hooks_uses(source, module)


def test_no_module_outside_the_core_and_the_audit_reaches_the_hooks():
    offenders = {}
    for path in sorted((ROOT / "tfbook").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(MAY_READ_HOOKS):
            continue
        uses = hooks_uses(path.read_text(encoding="utf-8"), ".".join(path.relative_to(ROOT).with_suffix("").parts))
        if uses:
            offenders[rel] = uses
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        code = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        uses = [u for source in code for u in hooks_uses(_python_only(source))]
        if uses:
            offenders[path.relative_to(ROOT).as_posix()] = uses
    assert offenders == {}


def _python_only(source: str) -> str:
    """A code cell without its IPython magics and shell lines."""
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))


def test_no_imported_module_outside_the_core_and_the_audit_holds_the_hooks():
    private = {id(getattr(hooks, n)) for n in _hooks_private_names() if isinstance(getattr(hooks, n), (list, dict))}
    held = {}
    for info in pkgutil.walk_packages(tfbook.__path__, "tfbook."):
        if info.name.startswith("tfbook.layers") or info.name == "tfbook.build.claims_audit":
            continue
        module = importlib.import_module(info.name)
        refs = [name for name, value in vars(module).items() if value is hooks or id(value) in private]
        if refs:
            held[info.name] = refs
    assert held == {}


def _trained_audit(untrained: str = "failed", hits: int = 2, status: str = "completed") -> dict:
    """An audit whose notebook has one experiment claim and its run without training."""
    audit = _audit()
    entry = audit["notebooks"][NB]
    entry["untrained"] = {"status": status, "hits": hits, "seconds": 1.0, "error": ""}
    entry["claims"].append({**_claim("Sec. 6", [], kind="experiment"), "untrained": untrained, "moved_under": []})
    return audit


def test_an_experiment_claim_that_holds_without_training_fails_unless_allowed():
    assert ca.rules(_trained_audit(), {}) == []
    audit = _trained_audit("held")
    claim = audit["notebooks"][NB]["claims"][-1]
    key = ca.NEEDS_NO_TRAINING + ca.allow_key(NB, claim)
    assert ca.rules(audit, {}) == [f"experiment claim held without training (untrained): {NB}, cell 1 (c1): "
                                   f"Sec. 6: Sec. 6 statement"]
    assert ca.rules(audit, {key: "colsym"}) == []
    assert key in ca.violations(_trained_audit("not reached"))  # a stop judges nothing


def test_an_experiment_notebook_needs_a_run_without_training_that_hits_a_trainer():
    audit = _trained_audit()
    del audit["notebooks"][NB]["untrained"]
    assert ca.rules(audit, {}) == [f"{NB}: 1 experiment claims and no run without training (untrained)"]
    failures = ca.rules(_trained_audit(hits=0), {})
    assert len(failures) == 1 and failures[0].startswith(f"{NB} [untrained]: no training routine asked")
    stopped = _trained_audit(status="error")
    assert f"{ca.STOP}{NB}::untrained" in ca.violations(stopped)


@pytest.mark.parametrize("kind, moves, bad", [
    ("control", "untrained", True), ("control", "zero", False), ("baseline", "untrained", True),
    ("baseline", "eps", True), ("baseline", "weights", False), ("experiment", "untrained", False),
    ("size", "untrained", True), ("paper", "untrained", True)])
def test_each_kind_is_held_to_the_runs_it_cannot_depend_on(kind, moves, bad):
    audit = _audit()
    claim = {**_claim("Lemma 3", [], kind=kind), "moved_under": [moves], "exact": True, "raw": "1",
             "raw_under": {moves: "2"}}
    audit["notebooks"][NB]["claims"].append(claim)
    assert (ca.MIS_KINDED + ca.allow_key(NB, claim) in ca.violations(audit)) == bad
