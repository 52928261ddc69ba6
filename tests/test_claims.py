"""Executed claims: check returns nothing, failing claims raise (or are recorded), the formatter never
prints rounding noise, and the three display forms (text, HTML, JSON record) are stable and readable."""
import html.parser
import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from tfbook import claims as cl


def sample() -> cl.Claims:
    c = cl.Claims("t")
    c.check("Thm 1", "a <= b", 1.0, 2.0)
    c.check("Thm 1", "equal with tolerance", 1.0 + 1e-12, 1.0, "==", rtol=1e-9)
    c.check("Thm 1", "roundoff", 3e-16, 1e-13, "<=", roundoff=True)
    c.check("Prop 2", "a count", torch.tensor(12), np.int64(16), "<=")
    c.check("Prop 2", "exact", "abc", "abc", "==")
    return c


def test_check_returns_none_and_fails_loudly(monkeypatch):
    monkeypatch.delenv(cl.MODE_ENV, raising=False)
    c = cl.Claims("t")
    assert c.check("Thm 1", "a <= b", 1.0, 2.0) is None
    with pytest.raises(cl.ClaimError, match="is not <= "):
        c.check("Thm 2", "fails", 3.0, 2.0)
    with pytest.raises(cl.ClaimError):
        c.check("x", "nan never holds", float("nan"), 1.0)
    assert len(c) == 3 and not c.all_hold()
    assert "NO" in c.table()


@pytest.mark.parametrize("bad, match", [
    (dict(relation="~"), "relation must be one of"),
    (dict(rtol=-1.0), "rtol must be a non-negative real"),
    (dict(measured=[1.0]), "measured must be a real number"),
    (dict(ref=""), "ref and statement must be non-empty"),
])
def test_bad_arguments_raise_value_error(bad, match):
    args = dict(ref="x", statement="y", measured=1.0, bound=1.0, relation="<=") | bad
    with pytest.raises(ValueError, match=match):
        cl.Claims("t").check(**args)
    with pytest.raises(ValueError, match="title must be"):
        cl.Claims("")


def test_formatter_never_prints_rounding_noise():
    assert cl.fmt(0.000123456) == "1.23e-04" and cl.fmt(12) == "12" and cl.fmt(0.0156) == "0.0156"
    assert cl.fmt(math.pi) == "3.14" and cl.fmt(2.5e9) == "2.50e+09" and cl.fmt(Fraction(1, 3)) == "1/3"
    for noise in (8.9e-16, -2.2e-16, 4.44e-16, 1e-13, np.float64(3e-15)):
        assert cl.fmt(noise) == "< 1e-12"
    assert cl.fmt(0.0) == "0" and cl.fmt(1e-13, noise=0) == "1.00e-13"
    c = sample()
    table = c.table()
    assert "< 1e-13" in table and "3.00e-16" not in table and "e-16" not in table
    # a roundoff claim prints `< bound` and no ratio, whatever the rounding noise was
    a, b = cl.Claims("t"), cl.Claims("t")
    a.check("L", "noise", 0.0, 1e-12, roundoff=True)
    b.check("L", "noise", 8.9e-16, 1e-12, roundoff=True)
    assert a.table() == b.table() and a.html() == b.html() and a.record() == b.record()
    # and so does a noise-level measured value without the flag
    a.check("L", "small", 2e-16, 1e-3)
    b.check("L", "small", 4e-16, 1e-3)
    assert a.table() == b.table()


def test_rows_carry_ratio_and_machine_independent_digits():
    c = sample()
    rows = {claim.statement: claim for claim in c.items}
    assert rows["a <= b"].ratio == "0.500" and rows["a count"].ratio == "0.750"
    assert rows["roundoff"].ratio == "-" and rows["exact"].ratio == "-"
    # digits past the third do not change what is stored
    d, e = cl.Claims("t"), cl.Claims("t")
    d.check("P", "s", 0.9976613862288294, 1.0)
    e.check("P", "s", 0.9976613852163327, 1.0)
    assert d.table() == e.table() and d.html() == e.html() and d.record() == e.record()


def test_plain_table_lines_fit_in_the_book_column():
    c = cl.Claims("A long chapter title")
    c.check("Lemma 6 (Decomposition)", "every orbit sum of degree at most s decomposes into products "
            "of power sums, checked on all multi-indices of the full profile grid " * 2, 0.25, 1.0)
    c.check("Prop 1", "short", 1, 1, "==")
    lines = c.table().splitlines()
    assert cl.WIDTH == 88 and max(len(line) for line in lines) <= cl.WIDTH
    assert "decomposes into" in c.table() and "full profile grid" in c.table() and len(lines) > 5  # wrapped, not cut
    c.check("Section 1 (sharing)", "counts", "[36, 2, 4, 377, 1, 12, 8]", "[36, 2, 4, 377, 1, 12, 8]", "==")
    c.check("Thm 1", "a number never wraps", -1.2345e-5, -1.2345e-4, ">=")
    lines = c.table().splitlines()
    assert max(len(line) for line in lines) <= cl.WIDTH  # long string values wrap too
    assert "-1.23e-05" in c.table() and ">= -1.23e-04" in c.table()  # numbers stay whole


class _Cells(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.cells, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        if self.tags and self.tags[-1][0] in ("td", "th", "span"):
            self.cells.append(data)


def test_html_table_has_holds_column_and_right_aligned_numbers(monkeypatch):
    monkeypatch.setenv(cl.MODE_ENV, "record")
    monkeypatch.delenv(cl.SINK_ENV, raising=False)
    c = sample()
    c.check("Thm 9", "fails <b>here</b>", 3.0, 2.0)
    page = c.html()
    parser = _Cells()
    parser.feed(page)
    assert "holds" in parser.cells and "measured/bound" in parser.cells
    assert any("yes" in x for x in parser.cells) and any("NO" in x for x in parser.cells)
    assert "<b>here</b>" not in page and "&lt;b&gt;" in page  # escaped
    tds = [attrs for tag, attrs in parser.tags if tag == "td"]
    assert sum("text-align:right" in a.get("style", "") for a in tds) == 3 * len(c)
    again = sample()
    again.check("Thm 9", "fails <b>here</b>", 3.0, 2.0)
    assert page == again.html()  # deterministic


def test_mimebundle_and_record(monkeypatch):
    c = sample()
    bundle = c._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", cl.MIME}
    record = json.loads(json.dumps(bundle[cl.MIME]))
    assert record["title"] == "t" and record["schema"] == cl.SCHEMA
    assert [r["ref"] for r in record["claims"]] == [x.ref for x in c.items]
    assert all(isinstance(r["measured"], str) and isinstance(r["holds"], bool) for r in record["claims"])


def test_show_prints_plain_text_outside_ipython(capsys):
    c = sample()
    c.show()
    assert capsys.readouterr().out.strip() == c.table()


def bundle_caption(bundle: dict) -> str:
    return bundle["text/plain"].splitlines()[0]


def test_show_prints_each_claim_once_while_the_record_stays_cumulative(capsys, monkeypatch):
    c = sample()
    first = len(c)
    c.show()
    capsys.readouterr()
    c.check("Thm 7", "a later claim", 1.0, 2.0)
    c.check("Thm 8", "another later claim", 1.0, 2.0)
    c.show()
    out = capsys.readouterr().out
    assert f"(claims {first + 1} to {first + 2})" in out
    assert "a later claim" in out and "another later claim" in out
    assert not any(x.statement in out for x in c.items[:first])
    c.show()
    assert f"no claims since claim {first + 2}" in capsys.readouterr().out
    shown = []
    import IPython.display

    class Shell:
        pass

    monkeypatch.setattr("IPython.get_ipython", lambda: Shell())
    monkeypatch.setattr(IPython.display, "display", lambda bundle, raw: shown.append(bundle))
    c.check("Thm 9", "the last claim", 1.0, 2.0)
    c.show()
    assert bundle_caption(shown[0]) == f"t (claim {first + 3})"
    (bundle,) = shown
    assert [r["statement"] for r in bundle[cl.MIME]["claims"]] == [x.statement for x in c.items]
    assert "the last claim" in bundle["text/html"] and "a later claim" not in bundle["text/html"]
    assert "the last claim" in bundle["text/plain"] and "a later claim" not in bundle["text/plain"]
    with pytest.raises(ValueError, match="start must be"):
        c.table(start=len(c) + 1)


def test_record_mode_records_failures_to_the_sink(monkeypatch, tmp_path):
    sink = tmp_path / "claims.jsonl"
    monkeypatch.setenv(cl.MODE_ENV, "record")
    monkeypatch.setenv(cl.SINK_ENV, str(sink))
    c = cl.Claims("t")
    assert c.check("Thm 1", "fails", 3.0, 2.0) is None
    c.check("Thm 2", "holds", 1.0, 2.0)
    rows = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [r["holds"] for r in rows] == [False, True] and rows[0]["title"] == "t"
    monkeypatch.setenv(cl.MODE_ENV, "shout")
    with pytest.raises(ValueError, match="TFBOOK_CLAIMS must be one of"):
        c.check("Thm 3", "x", 1.0, 2.0)


def test_scratch_claims_stay_out_of_the_sink(monkeypatch, tmp_path):
    sink = tmp_path / "claims.jsonl"
    monkeypatch.setenv(cl.MODE_ENV, "record")
    monkeypatch.setenv(cl.SINK_ENV, str(sink))
    mutant = cl.Claims("mutant", scratch=True)
    mutant.check("Thm 1", "fails on a broken model", 3.0, 2.0)
    assert not mutant.all_hold() and not sink.exists()
    cl.Claims("chapter").check("Thm 1", "holds", 1.0, 2.0)
    assert [json.loads(line)["title"] for line in sink.read_text().splitlines()] == ["chapter"]
    monkeypatch.delenv(cl.MODE_ENV)
    with pytest.raises(cl.ClaimError):  # outside record-only mode a scratch claim raises like any other
        cl.Claims("mutant", scratch=True).check("Thm 1", "fails", 3.0, 2.0)
    with pytest.raises(ValueError, match="scratch"):
        cl.Claims("t", scratch="yes")


def test_integral_values_print_alike_whatever_the_last_bit():
    assert cl.fmt(2.0) == cl.fmt(1.9999999999999998) == cl.fmt(2.0000000000000004) == "2"
    assert cl.fmt(1.9996) == "2.00" and cl.fmt(0.0) == "0" and cl.fmt(1e-10) == "1.00e-10"
    assert cl.fmt(-1.0000000000000002) == "-1" and cl.fmt(1234567.0000001) == "1234567"


def test_verdicts_omit_measured_values_and_show_failures(monkeypatch):
    a, b = cl.Claims("t"), cl.Claims("t")
    a.check("Sec. 6", "accuracy of a trained model " + "word " * 30, 0.9123, 0.85, ">=")
    b.check("Sec. 6", "accuracy of a trained model " + "word " * 30, 0.9678, 0.85, ">=")
    text = a.verdicts()
    assert text == b.verdicts() and "0.912" not in text and "0.850" in text
    assert text.splitlines()[0] == "t: 1 claims, all hold" and text.endswith("holds")
    assert all(len(line) <= 100 for line in text.splitlines())
    monkeypatch.setenv(cl.MODE_ENV, "record")
    a.check("Sec. 6", "a failing claim", 0.1, 0.85, ">=")
    assert "some FAIL" in a.verdicts() and a.verdicts().endswith("FAILS")


@cl.paper_formula
def _width(T: int, P: int = 1) -> int:
    """A registered formula: a width of 3T + P."""
    return 3 * T + P


def test_kind_shows_in_every_form(monkeypatch, tmp_path):
    sink = tmp_path / "claims.jsonl"
    monkeypatch.setenv(cl.MODE_ENV, "record")
    monkeypatch.setenv(cl.SINK_ENV, str(sink))
    c = cl.Claims("t")
    c.check("Thm 1", "error of the built model", 0.5, 1.0)
    c.check("Thm 2", "width", 7, kind="size", formula=_width, params={"T": 2}, relation="==")
    c.check("Eq. 3", "an identity of the paper", 1.0, 1.0, "==", kind="paper")
    c.check("Sec. 6", "accuracy of a trained model", 0.9, 0.85, ">=", kind="experiment")
    lines = c.table().splitlines()
    assert lines[1].split()[:3] == ["ref", "claim", "kind"]
    assert [line.split()[-6] for line in lines[3:]] == ["constr", "size", "paper", "expt"]
    assert all(len(line) <= cl.WIDTH for line in lines)
    parser = _Cells()
    parser.feed(c.html())
    assert "kind" in parser.cells and {"construction", "size", "paper", "experiment"} <= set(parser.cells)
    assert [r["kind"] for r in c.record()["claims"]] == ["construction", "size", "paper", "experiment"]
    sunk = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [r["kind"] for r in sunk] == [r["kind"] for r in c.record()["claims"]]
    assert "Thm 2 (size): width (== 7): holds" in c.verdicts()
    assert c.record()["claims"][1]["formula"] == f"{__name__}._width(T=2)" and c.items[1].bound == "7"


def test_size_claims_compute_their_bound_from_a_registered_formula():
    c = cl.Claims("t")
    c.check("Thm 2", "width", 8, kind="size", formula=_width, params={"T": 2, "P": 2}, relation="==")
    with pytest.raises(cl.ClaimError):
        c.check("Thm 2", "width", 8, kind="size", formula=_width, params={"T": 2}, relation="==")

    def unregistered(T: int) -> int:
        return 3 * T

    for bad, match in [(dict(bound=7), "formula is required"),
                       (dict(formula=unregistered, params={"T": 2}), "registered with @paper_formula"),
                       (dict(formula=_width.__wrapped__, params={"T": 2}), "registered with @paper_formula"),
                       (dict(formula=_width, params={"T": 2}, bound=7), "not both"),
                       (dict(formula=_width, params=[2]), "params must be a dict")]:
        with pytest.raises(ValueError, match=match):
            c.check("Thm 2", "width", 7, relation="==", **{"kind": "size", **bad})
    with pytest.raises(ValueError, match="params are the arguments of a formula"):
        c.check("Thm 2", "width", 7, 7, params={"T": 2})
    with pytest.raises(ValueError, match="bound is required"):
        c.check("Thm 2", "width", 7)
    assert len(c) == 2


@pytest.mark.parametrize("value", [torch.nn.Linear(2, 2), torch.tensor(2.0), np.array([2]), "2", True, None,
                                   float("nan"), [1, torch.zeros(1)]])
def test_a_formula_takes_numbers_only(value):
    with pytest.raises(ValueError, match="_width: argument T must be a real number"):
        _width(value)
    with pytest.raises(ValueError, match="argument P must be a real number"):
        cl.Claims("t").check("Thm 2", "width", 7, kind="size", formula=_width, params={"T": 2, "P": value})
    assert _width(2, P=Fraction(1, 2)) == Fraction(13, 2) and _width(np.int64(2), 1.0) == 7.0


def test_trivial_scale_is_printed_and_a_bound_above_it_is_not_a_claim():
    c = cl.Claims("t")
    c.check("Thm 1", "sup error of the construction", 0.01, 0.02, trivial=0.8)
    below = [line.strip() for line in c.table().splitlines()[4:]]  # the lines under the claim's row
    assert " ".join(below) == "trivial scale 0.800; bound/trivial 0.0250"
    record = c.record()["claims"][0]
    assert record["trivial"] == "0.800" and record["bound_over_trivial"] == "0.0250"
    assert "trivial scale 0.800; bound/trivial 0.0250" in c.html()
    c.check("Thm 1", "a very long statement " * 8, 0.01, 0.02, "<", trivial=np.float64(0.8))
    assert all(len(line) <= cl.WIDTH for line in c.table().splitlines())
    c.check("Eq. 3", "a paper's rate may exceed the trivial scale", 1.0, 2.0, kind="paper", trivial=0.8)
    for bound in (0.8, 0.9):
        with pytest.raises(ValueError, match="trivial: the bound .* is not below the trivial scale .*not a claim"):
            c.check("Thm 1", "a bound at or above the trivial scale", 0.01, bound, trivial=0.8)
    assert len(c) == 3


@pytest.mark.parametrize("bad, match", [
    (dict(kind="theorem"), "kind must be one of"),
    (dict(kind=None), "kind must be one of"),
    (dict(trivial=-1.0), "trivial must be a positive finite"),
    (dict(trivial=0.0), "trivial must be a positive finite"),
    (dict(trivial=float("inf")), "trivial must be a positive finite"),
    (dict(trivial=float("nan")), "trivial must be a positive finite"),
    (dict(trivial=True), "trivial must be a positive finite"),
    (dict(trivial="1"), "trivial must be a positive finite"),
    (dict(trivial=[1.0]), "trivial must be a real number"),
    (dict(trivial=2.0, relation=">="), "trivial is the scale of an upper bound"),
    (dict(trivial=2.0, relation="==", measured="a", bound="a"), "trivial is the scale of an upper bound"),
])
def test_kind_and_trivial_are_validated(bad, match):
    args = dict(ref="x", statement="y", measured=0.5, bound=1.0, relation="<=") | bad
    with pytest.raises(ValueError, match=match):
        cl.Claims("t").check(**args)


def test_a_roundoff_claim_shows_the_side_of_its_bound():
    """A roundoff claim that a value is >= a negative bound prints '> bound', not '< bound'."""
    claims = cl.Claims("sides")
    claims.check("L", "f >= x^2 up to rounding", -3e-17, -1e-15, ">=", roundoff=True)
    claims.check("L", "|f - x^2| up to rounding", 3e-17, 1e-12, roundoff=True)
    assert [c.measured for c in claims.items] == ["> -1e-15", "< 1e-12"]
    assert [c.bound for c in claims.items] == ["-1e-15", "1e-12"]


def test_attempt_returns_the_fallback_only_when_recording(monkeypatch, capsys):
    def refuse(radius: float) -> float:
        if radius <= 0:
            raise ValueError(f"radius must be > 0, got {radius}")
        return 2 * radius

    monkeypatch.delenv(cl.MODE_ENV, raising=False)
    assert cl.attempt(refuse, 1.5) == 3.0
    with pytest.raises(ValueError, match="radius must be > 0"):
        cl.attempt(refuse, 0.0)
    monkeypatch.setenv(cl.MODE_ENV, "record")
    assert math.isnan(cl.attempt(refuse, 0.0)) and cl.attempt(refuse, radius=-1.0, fallback=None) is None
    assert "refuse refused: radius must be > 0, got 0.0" in capsys.readouterr().out
    with pytest.raises(TypeError):  # only the library's refusals (ValueError) are caught
        cl.attempt(refuse, "x")


def test_a_bound_not_below_its_trivial_scale_fails_the_claim_when_recording(monkeypatch, tmp_path):
    sink = tmp_path / "sink.jsonl"
    monkeypatch.setenv(cl.SINK_ENV, str(sink))
    c = cl.Claims("T")
    with pytest.raises(ValueError, match="not below the trivial scale"):
        c.check("Lemma 1", "loose", 0.1, 2.0, trivial=1.0)
    monkeypatch.setenv(cl.MODE_ENV, "record")
    c.check("Lemma 1", "loose", 0.1, 2.0, trivial=1.0)  # recorded as failed, the run goes on
    c.check("Lemma 1", "scale measured on a dead model", 0.1, 0.5, trivial=0.0)
    with pytest.raises(ValueError, match="scale of an upper bound"):  # the caller's mistake still raises
        c.check("Lemma 1", "lower bound with a scale", 0.1, 0.5, ">=", trivial=1.0)
    assert [claim.holds for claim in c.items] == [False, False]
    records = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [r["holds"] for r in records] == [False, False] and records[0]["raw_bound"] == "2.0"
