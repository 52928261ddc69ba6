"""The claims audit (`tfbook.build.claims_audit`): a tiny notebook that builds a real core layer, run under the
three sabotages; which claims break, which survive, which are mis-kinded; hashes and the allow-list."""
import copy
import json
import pathlib

import nbformat
import pytest

from tfbook import claims as cl
from tfbook.build import claims_audit as ca
from tfbook.build import claims_page

NB = "book/colsym/01_tiny.ipynb"
SETUP = """\
import torch
from tfbook import claims as cl
from tfbook.layers import FeedForward

@cl.paper_formula
def width(m):
    return m
"""
CHECKS = """\
ff = FeedForward(torch.eye(2), None, torch.eye(2), None, name="ff")  # relu(H) added to H: doubles H >= 0
H = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
out = ff(H)
c = cl.Claims("Tiny")
c.check("Lemma 1", "ff doubles a positive input (max error)", float((out - 2 * H).abs().max()), 1e-12, roundoff=True)
c.check("Lemma 2", "a constant that cannot fail", 1.0, 2.0)
c.check("Lemma 3", "the first output", float(out[0, 0]), 10.0, kind="paper")
c.check("Lemma 4", "hidden width", ff.hidden_width, kind="size", formula=width, params={"m": 2}, relation="==")
"""
STOP = """\
if float(out[0, 0]) < 1.5:
    raise RuntimeError("the model does nothing")
"""
LAST = """\
c.check("Lemma 5", "reached only when the previous cell ran", 1.0, 2.0)
c.show()
"""


def _notebook(root: pathlib.Path) -> pathlib.Path:
    """The notebook with stored outputs as an unsabotaged run leaves them: its cells executed here,
    each claim carrying the id of its cell, the Claims record displayed by the last cell."""
    import tfbook.claims

    sources = [SETUP, CHECKS, STOP, LAST]
    namespace = {"__name__": "__main__"}
    original = tfbook.claims._current_cell
    try:
        for source in sources:
            tfbook.claims._current_cell = lambda source=source: cl.cell_id(source)
            exec(source.replace("c.show()", ""), namespace)
    finally:
        tfbook.claims._current_cell = original
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# Tiny"), *(nbformat.v4.new_code_cell(s) for s in sources)]
    nb.cells[-1].outputs = [nbformat.v4.new_output("display_data", data=namespace["c"]._repr_mimebundle_())]
    path = root / NB
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    (root / "_toc.yml").write_text(f"format: jb-book\nroot: book/intro\nchapters:\n  - file: {NB[:-6]}\n")
    (root / "tfbook").mkdir(exist_ok=True)
    (root / "tfbook" / "chapter.py").write_text("X = 1\n")
    return path


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """The synthetic repository and its audit (one execution per sabotage, two at a time)."""
    root = tmp_path_factory.mktemp("repo")
    path = _notebook(root)
    entries = ca.run_audit([path], root, jobs=2, scratch=root / ca.SCRATCH)
    audit = ca.write(root / ca.AUDIT, entries, merge=False)
    return root, audit


def _claims(audit) -> dict[str, dict]:
    return {c["ref"]: c for c in audit["notebooks"][NB]["claims"]}


def test_sabotages_break_the_construction_and_stop_the_notebook(audited):
    root, audit = audited
    entry = audit["notebooks"][NB]
    assert entry["chapter"] == "colsym" and not entry["stale_outputs"]
    assert all(run["hits"] > 0 for run in entry["runs"].values()), entry["runs"]
    assert entry["runs"]["zero"]["status"] == "error" and "the model does nothing" in entry["runs"]["zero"]["error"]
    assert entry["runs"]["eps"]["status"] == entry["runs"]["weights"]["status"] == "completed"
    claims = _claims(audit)
    assert claims["Lemma 1"]["broken_by"] == ["zero", "eps", "weights"]
    assert claims["Lemma 1"]["outcome"] == {"zero": "failed", "eps": "failed", "weights": "failed"}
    assert claims["Lemma 2"]["broken_by"] == [] and claims["Lemma 2"]["kind"] == "construction"
    assert claims["Lemma 5"]["broken_by"] == ["zero"] and claims["Lemma 5"]["not_reached"] == ["zero"]
    assert claims["Lemma 3"]["moved_under"] == ["zero", "eps", "weights"]
    assert claims["Lemma 3"]["measured_under"]["zero"] == "1" and claims["Lemma 3"]["measured"] == "2"
    assert claims["Lemma 4"]["moved_under"] == [] and claims["Lemma 4"]["broken_by"] == []
    assert ca.stops(audit) == [f"{NB} [zero]: error after {entry['runs']['zero']['seconds']} s "
                               f"(RuntimeError: the model does nothing); 1 claims not reached count as broken"]


def test_check_fails_on_unbroken_and_mis_kinded_claims(audited):
    root, audit = audited
    failures = ca.check(root / ca.AUDIT, root / ca.ALLOW, root=root, log=lambda *_: None)
    assert len(failures) == 6, failures
    assert failures[0].startswith(f"unbroken construction claim (held under zero, eps, weights): {NB}, cell 2 (")
    assert failures[0].endswith("Lemma 2: a constant that cannot fail")
    # full precision, against the run without a sabotage; Lemma 4, a size claim, does not move
    assert failures[1].startswith("mis-kinded paper claim (its value moves: unsabotaged 2.0, zero 1.0, eps 2.001, weights 2.00")
    assert failures[1].endswith("Lemma 3: the first output")
    assert failures[2].startswith("construction claim broken only where a run stopped before it (zero): ")
    assert failures[2].endswith("Lemma 5: reached only when the previous cell ran")
    assert failures[3] == f"{NB} [zero]: the run stopped (error: RuntimeError: the model does nothing)"
    assert failures[4:] == [f"{NB}: statement 'Lemma {n}': no construction claim fails under eps or weights (a 1e-3 "
                            "sabotage)" for n in (2, 5)]  # Lemma 1 fails under both


def test_allow_list_excuses_survivors_and_must_match(audited, tmp_path):
    root, audit = audited
    allow = tmp_path / "allow.json"
    survivors = ca.unbroken(audit)
    assert len(survivors) == 1 and set(survivors.values()) == {"colsym"}
    found = {key: chapter for key, (chapter, _) in ca.violations(audit).items()}
    assert sorted(k.split("::", 1)[0] for k in found) == [NB, "mis-kinded", "stop", "unreached", "zero-only",
                                                          "zero-only"]
    assert ca.write_allow(audit, allow, seed=True) == found
    assert ca.rules(audit, ca.load_allow(allow)) == []  # every violation listed
    gone = f"{NB}::0123456789ab::Lemma 9::a claim that was made a real check"
    allow.write_text(json.dumps({**found, gone: "colsym", next(iter(survivors)) + "::#2": "colsym"}))
    failures = ca.rules(audit, ca.load_allow(allow))
    assert sum(f.startswith("allow-list entry matches no violation of colsym: ") for f in failures) == 2
    assert any(f.endswith(gone) for f in failures)
    assert ca.write_allow(audit, allow) == found  # pruned
    allow.write_text(json.dumps({k: "foundation" for k in survivors}))
    assert all("not one of" in f or "unbroken" in f or "mis-kinded" in f or "stop" in f or "sabotage" in f
               for f in ca.rules(audit, ca.load_allow(allow)))


def test_hashes_and_fresh_runs_are_compared(audited, tmp_path):
    root, audit = audited
    quiet = lambda *_: None  # noqa: E731
    assert ca.staleness(audit, root) == []
    fresh = copy.deepcopy(audit)
    fresh["notebooks"][NB]["claims"][1]["broken_by"] = ["weights"]
    ca.write(tmp_path / "fresh.json", fresh["notebooks"], merge=False)
    failures = ca.check(root / ca.AUDIT, root / ca.ALLOW, tmp_path / "fresh.json", root=root, log=quiet)
    assert failures[0].startswith(f"{ca.AUDIT} differs from the fresh run: run make claims-audit\n  {NB}::")
    assert "Lemma 2" in failures[0] and "stored broken by [], fresh ['weights']" in failures[0]
    library = root / "tfbook" / "chapter.py"
    library.write_text("X = 2\n")
    try:
        assert ca.staleness(audit, root) == [f"{NB}: tfbook/**/*.py changed"]
    finally:
        library.write_text("X = 1\n")
    path = root / NB
    before = path.read_text()
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].source += "\n# edited"
    nbformat.write(nb, path)
    try:
        failures = ca.check(root / ca.AUDIT, root / ca.ALLOW, root=root, log=quiet)
        assert failures[0] == f"{ca.AUDIT} is not current: run make claims-audit\n  {NB}: its code cells changed"
    finally:
        path.write_text(before)
    assert ca.check(tmp_path / "none.json", root / ca.ALLOW, root=root, log=quiet)[0].endswith("no stored audit")


def test_sabotage_that_hits_nothing_fails(audited):
    _, audit = audited
    broken = copy.deepcopy(audit)
    broken["notebooks"][NB]["runs"]["weights"]["hits"] = 0
    assert any(f == f"{NB}: sabotage weights hit nothing (TFBOOK_PERTURB_WEIGHTS count 0) in a notebook with "
                    f"3 construction claims" for f in ca.rules(broken, {}))
    for c in broken["notebooks"][NB]["claims"]:
        c["kind"] = "paper"
        c["moved_under"] = []
    assert [f for f in ca.rules(broken, {}) if "hit nothing" in f] == []  # no construction claims: nothing to hit


def test_claims_page_shows_broken_by_and_counts(audited):
    root, audit = audited
    page = claims_page.render(claims_page.collect(root), audit=audit)
    assert "| chapter | construction | size | paper | experiment |" in page
    assert "| chapter | zero | eps | weights | unbroken |" in page
    assert "| 1 | 5 | 5 | 0 |" in page and "| 3 | 1 | 1 | 0 |" in page
    assert "| 2 | 1 | 1 | 1 |" in page  # zero breaks Lemmas 1 and 5
    assert "| Lemma 1 | ff doubles a positive input (max error) | ✔ yes | zero, eps, weights | construction |" in page
    assert page.count("| zero, eps, weights |") == 1 and page.count("| none |") == 3 and "| zero† |" in page
    stale = copy.deepcopy(audit)
    stale["notebooks"][NB]["code_hash"] = "0"
    page = claims_page.render(claims_page.collect(root), audit=stale)
    assert "The claims audit has not run on this notebook's current code." in page
    assert "| 3 | 1 | 1 | 0 |" in page and "| - | - | - | - |" in page and "| none |" not in page


def test_timeout_stops_a_run(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import time\ntime.sleep(60)")]
    path = tmp_path / "book" / "ch" / "slow.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    run = ca.run_one(path, "eps", tmp_path / "scratch", root=tmp_path, timeout=2, log=lambda *_: None)
    assert (run.status, run.error, run.hits, run.claims) == ("timeout", "the run passed its 2 s", 0, [])


def test_matching_keys_occurrences_and_leftovers():
    def claim(ref, statement, cell="a"):
        return {"cell": cell, "ref": ref, "statement": statement}

    stored = [claim("L1", "s"), claim("L1", "s"), claim("L2", "error 0.5"), claim("L3", "t"), claim("L4", "u", "b")]
    ran = [claim("L1", "s"), claim("L2", "error 0.7"), claim("L1", "s"), claim("L5", "new")]
    assert ca.keyed(stored)[:2] == [("a", "L1", "s", 0), ("a", "L1", "s", 1)]
    found, extra = ca.match(stored, ran)
    assert found == [0, 2, 1, None, None] and extra == [3]
    assert ca.allow_key("book/x.ipynb", {**claim("L1", "s"), "occurrence": 1}) == "book/x.ipynb::a::L1::s::#2"


def test_stored_records_keep_the_last_record_of_each_claims_object():
    def output(title, n):
        c = cl.Claims(title)
        for i in range(n):
            c.check(f"L{i}", "s", 1.0, 2.0)
        return nbformat.v4.new_output("display_data", data={cl.MIME: c.record()})

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("a"), nbformat.v4.new_code_cell("b"), nbformat.v4.new_code_cell("c")]
    nb.cells[0].outputs = [output("A", 1), output("B", 2)]
    nb.cells[1].outputs = [output("A", 3)]  # A shown again with more claims
    nb.cells[2].outputs = [output("B", 1)]  # B's claims are no prefix of its last record: a new object
    records = claims_page.stored_records(nb)
    assert [(r["title"], len(r["claims"]), cell.source) for r, cell in records] == \
        [("A", 3, "b"), ("B", 2, "a"), ("B", 1, "c")]


def test_timeout_from_quick_seconds():
    nb = nbformat.v4.new_notebook()
    assert ca.timeout_seconds(nb) == 1800
    nb.metadata["tfbook"] = {"quick_seconds": 7}
    assert ca.timeout_seconds(nb) == 60
    nb.metadata["tfbook"] = {"quick_seconds": 40}
    assert ca.timeout_seconds(nb) == 240


def test_tooling_left_out_of_the_library_hash_is_imported_by_no_notebook():
    import re

    import nbformat

    pattern = re.compile(rf"tfbook\.{ca.TOOLING}\b|from tfbook import[^\n]*\b{ca.TOOLING}\b")
    for path in sorted((ca.ROOT / "book").rglob("*.ipynb")):
        code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        assert not pattern.search(code), f"{path.name} imports tooling that the audit's library hash leaves out"


@pytest.mark.parametrize("hinted, zero_hits, executed", [
    (True, 0, {"zero", "weights"}),  # stored and fresh runs reach no core: eps and the baseline are the zero run
    (True, 3, {"zero", "weights", "eps", ca.BASELINE}),  # the fresh zero run reaches the core: all executed
    (False, 0, {"zero", "weights", "eps", ca.BASELINE}),  # no stored hint: all executed
])
def test_a_notebook_that_reaches_no_core_runs_zero_for_eps_and_the_baseline(tmp_path, monkeypatch, hinted,
                                                                              zero_hits, executed):
    path = _notebook(tmp_path)
    if hinted:
        runs = {s: {"status": "completed", "hits": 0} for s in ca.SABOTAGES}
        (tmp_path / ca.AUDIT).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / ca.AUDIT).write_text(json.dumps({"notebooks": {NB: {"runs": runs}}}))
    calls = []

    def fake_run_one(p, sabotage, scratch, root, timeout, log):
        calls.append(sabotage)
        claims = [{"cell": "x", "ref": "Lemma 9", "statement": sabotage, "kind": "paper", "holds": True,
                   "measured": "1", "bound": "2"}]
        return ca.Run(NB, sabotage, "completed", 1.0, "", zero_hits if sabotage == "zero" else 0, claims)

    monkeypatch.setattr(ca, "run_one", fake_run_one)
    entry = ca.run_audit([path], tmp_path, jobs=2, log=lambda *_: None)[NB]
    assert set(calls) == executed and len(calls) == len(executed)
    derived = {s for s in ("eps", ca.BASELINE) if s not in executed}
    for s in derived:
        run = entry["baseline"] if s == ca.BASELINE else entry["runs"][s]
        assert run["same_as"] == "zero" and run["status"] == "completed" and run["seconds"] == 0.0
    assert all("same_as" not in entry["runs"][s] for s in ca.SABOTAGES if s in executed)
    assert ca.no_core({s: ca.Run(NB, s, "completed", hits=0) for s in ca.NO_CORE})
    stopped = {"zero": ca.Run(NB, "zero", "completed", hits=0), "weights": ca.Run(NB, "weights", "timeout", hits=0)}
    assert not ca.no_core(stopped)
