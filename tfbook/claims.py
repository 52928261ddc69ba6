"""Executed claims: what a paper states, what we measured, the bound, the ratio, and whether it holds.

>>> claims = Claims("Yarotsky squaring")
>>> claims.check("Lemma 1", "sup |f_m - x^2| on [0,1], m = 2", measured=0.015625, bound=4.0**-3, relation="<=")
>>> claims.check("Lemma 1", "f_m(x) - x^2 at a dyadic point", measured=3e-17, bound=1e-12, roundoff=True)
>>> claims.show()   # outside IPython: the plain-text table; in a notebook: text, HTML and a JSON record
Yarotsky squaring
ref      claim                            measured      bound  measured/bound  holds
-------  -------------------------------  --------  ---------  --------------  -----
Lemma 1  sup |f_m - x^2| on [0,1], m = 2    0.0156  <= 0.0156               1  yes
Lemma 1  f_m(x) - x^2 at a dyadic point    < 1e-12   <= 1e-12               -  yes

`check` returns nothing and raises `ClaimError` when the claim fails, so a notebook run fails
loudly, except in *record-only mode* (``TFBOOK_CLAIMS=record``, set by ``make full``): then a
failing claim is recorded, printed as ``NO`` and appended to the JSON-lines file named by
``TFBOOK_CLAIMS_SINK`` (every claim is appended there in that mode, held or not).

Relations: ``"<="``, ``">="``, ``"=="`` (to a relative tolerance ``rtol``), ``"<"``, ``">"``.
Numbers are printed at 3 significant digits by `fmt`, which never prints rounding noise:
a nonzero measured value below `NOISE` (1e-12) prints as ``< 1e-12``, and a ``roundoff=True``
claim prints ``< bound`` instead of its machine-dependent value. The ratio measured/bound is
printed for numeric claims (``-`` where it is undefined or would be rounding noise).

`Claims.show` displays one output with three representations: ``text/plain`` (lines of at most
100 characters, the statement column wrapped; what nbval compares), ``text/html`` (the book's
table) and ``application/vnd.tfbook.claims+json`` (a machine-readable record, read by
`tfbook.claims_page` to list every claim of the book from the stored notebooks). All three are
built from the formatted strings only, so they are identical on every machine.
"""
from __future__ import annotations

import hashlib
import html
import json
import math
import os
import textwrap
from dataclasses import asdict, dataclass
from fractions import Fraction
from numbers import Real
from typing import Any, Optional, Union

Value = Union[Real, str, bool]
RELATIONS = ("<=", ">=", "==", "<", ">")
NOISE = 1e-12
"""Nonzero measured values below this magnitude are float64 rounding noise for O(1) quantities."""
INTEGRAL_RTOL = 1e-9
"""A float this close (relatively) to a nonzero integer below 1e7 prints as that integer."""
MIME = "application/vnd.tfbook.claims+json"
"""The mime type of the machine-readable claims record stored with every `Claims.show` output."""
SCHEMA = 1
WIDTH = 100
"""Maximum line length of the plain-text table."""
MODE_ENV, SINK_ENV = "TFBOOK_CLAIMS", "TFBOOK_CLAIMS_SINK"
MODES = ("raise", "record")


class ClaimError(AssertionError):
    """Raised when an executed claim does not hold."""


def fmt(value: Value, digits: int = 3, noise: float = NOISE) -> str:
    """Format a number at ``digits`` significant digits; never print rounding noise.

    Integers, and floats within a relative 1e-9 of a nonzero integer below 1e7 (so that 2.0 and
    1.9999999999999998 print alike), print as integers; strings and bools as they are,
    Fractions as ``p/q`` when short. A nonzero float with magnitude below ``noise`` prints as
    ``< 1e-12`` (pass ``noise=0`` for values that are not measurements, e.g. bounds).

    >>> fmt(0.000123456), fmt(12), fmt(0.0156), fmt(2.5e9), fmt(8.9e-16), fmt(1e-13, noise=0)
    ('1.23e-04', '12', '0.0156', '2.50e+09', '< 1e-12', '1.00e-13')
    >>> fmt(2.0), fmt(1.9999999999999998), fmt(1.9996), fmt(-3.0000000000000004)
    ('2', '2', '2.00', '-3')
    """
    if isinstance(value, (bool, str)):
        return str(value)
    if isinstance(value, Fraction) and value.denominator != 1 and len(str(value)) <= 9:
        return str(value)
    if isinstance(value, int):
        return str(value)
    x = float(value)
    if x == 0 or (math.isfinite(x) and 0.5 <= abs(x) < 1e7 and abs(x - round(x)) <= INTEGRAL_RTOL * abs(x)):
        return str(int(round(x)))  # 2.0 and 1.9999999999999998 print alike
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if abs(x) < noise:
        return f"< {noise:.0e}".replace("e-0", "e-")
    text = f"{x:.{digits - 1}e}"
    mantissa, exponent = text.split("e")
    exp = int(exponent)
    if -3 <= exp < 5:
        return f"{x:.{max(digits - 1 - exp, 0)}f}"
    return f"{mantissa}e{exp:+03d}"


def _fmt_bound(value: Value) -> str:
    """A bound is a formula's value, not a measurement: print small bounds as they are."""
    text = fmt(value, noise=0)
    return text.replace("1.00e-", "1e-") if isinstance(value, float) and text.startswith("1.00e-") else text


def mode() -> str:
    """``"raise"`` (default: a failing claim raises) or ``"record"`` (``TFBOOK_CLAIMS=record``)."""
    value = os.environ.get(MODE_ENV, "").strip().lower() or "raise"
    if value not in MODES:
        raise ValueError(f"{MODE_ENV} must be one of {MODES}, got {value!r}")
    return value


@dataclass(frozen=True)
class Claim:
    """One executed claim, with its display strings (identical on every machine)."""

    ref: str
    statement: str
    measured: str
    bound: str
    ratio: str
    relation: str
    holds: bool
    roundoff: bool = False
    cell: Optional[str] = None

    def row(self) -> tuple[str, str, str, str, str, str]:
        """(ref, claim, measured, bound, measured/bound, holds) as printed."""
        return (self.ref, self.statement, self.measured, f"{self.relation} {self.bound}", self.ratio,
                "yes" if self.holds else "NO")


def _number(value: Any, name: str) -> Value:
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        value = value.item()  # torch / numpy scalars
    if not isinstance(value, (Real, str, bool)):
        raise ValueError(f"{name} must be a real number, str or bool, got {type(value).__name__}")
    return value


def _holds(measured: Value, bound: Value, relation: str, rtol: float) -> bool:
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    if isinstance(measured, (str, bool)) or isinstance(bound, (str, bool)):
        if relation != "==":
            raise ValueError("non-numeric claims only support relation '=='")
        return measured == bound
    m, b = float(measured), float(bound)
    if math.isnan(m) or math.isnan(b):
        return False
    if relation == "==":
        return m == b or abs(m - b) <= rtol * max(abs(b), abs(m))
    return {"<=": m <= b, ">=": m >= b, "<": m < b, ">": m > b}[relation]


def _ratio(measured: Value, bound: Value, shown_measured: str) -> str:
    numeric = not isinstance(measured, (str, bool)) and not isinstance(bound, (str, bool))
    if not numeric or shown_measured.startswith("<") or float(bound) == 0 or not math.isfinite(float(measured)):
        return "-"
    return fmt(float(measured) / float(bound))


def _current_cell() -> Optional[str]:
    """A short hash of the notebook cell being executed (to place a claim in its section), if any.

    Read from the kernel's current execute request, so it is the same under Jupyter, nbclient and
    nbval (which runs cells without storing history).
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None or not hasattr(kernel, "get_parent"):
        return None
    try:
        parent = kernel.get_parent("shell")
    except TypeError:  # ipykernel < 6
        parent = kernel.get_parent()
    code = (parent or {}).get("content", {}).get("code")
    return cell_id(code) if isinstance(code, str) else None


def cell_id(source: str) -> str:
    """The id stored with a claim: the first 12 hex digits of the SHA-1 of its cell's source."""
    return hashlib.sha1(source.encode()).hexdigest()[:12]


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


class Claims:
    """A chapter's list of executed claims, displayed as one table."""

    def __init__(self, title: str):
        if not isinstance(title, str) or not title:
            raise ValueError(f"title must be a non-empty str, got {title!r}")
        self.title = title
        self.items: list[Claim] = []

    def check(
        self,
        ref: str,
        statement: str,
        measured: Value,
        bound: Value,
        relation: str = "<=",
        rtol: float = 0.0,
        roundoff: bool = False,
    ) -> None:
        """Record a claim; raise `ClaimError` if ``measured relation bound`` is false (unless recording)."""
        if not isinstance(ref, str) or not ref or not isinstance(statement, str) or not statement:
            raise ValueError("ref and statement must be non-empty strings")
        if not isinstance(rtol, Real) or isinstance(rtol, bool) or not rtol >= 0:
            raise ValueError(f"rtol must be a non-negative real, got {rtol!r}")
        measured, bound = _number(measured, "measured"), _number(bound, "bound")
        holds = _holds(measured, bound, relation, float(rtol))
        shown = f"< {_fmt_bound(bound)}" if roundoff and holds else fmt(measured)
        claim = Claim(ref, statement, shown, _fmt_bound(bound), "-" if roundoff else _ratio(measured, bound, shown),
                      relation, holds, bool(roundoff), _current_cell())
        self.items.append(claim)
        recording = mode() == "record"
        if recording:
            sink = os.environ.get(SINK_ENV)
            if sink:
                with open(sink, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"title": self.title, **asdict(claim), "raw_measured": repr(measured)}) + "\n")
        if not holds and not recording:
            raise ClaimError(f"{ref}: {statement}: measured {measured!r} is not {relation} {bound!r}")

    def table(self, width: int = WIDTH) -> str:
        """The claims as a plain-text table, lines of at most ``width`` characters."""
        header = ("ref", "claim", "measured", "bound", "measured/bound", "holds")
        rows = [c.row() for c in self.items]
        widths = [max([len(header[i])] + [len(r[i]) for r in rows]) for i in range(6)]
        widths[0] = min(widths[0], 18)
        widths[1] = max(16, min(widths[1], width - 2 * 5 - sum(widths[i] for i in (0, 2, 3, 4, 5))))
        right = (False, False, True, True, True, False)

        def line(cells: tuple[str, ...]) -> list[str]:
            wrapped = [_wrap(c, w) if i < 2 else [c] for i, (c, w) in enumerate(zip(cells, widths))]
            out = []
            for k in range(max(len(w) for w in wrapped)):
                parts = [(w[k] if k < len(w) else "") for w in wrapped]
                out.append("  ".join(p.rjust(w) if r else p.ljust(w) for p, w, r in zip(parts, widths, right)).rstrip())
            return out

        lines = [self.title, *line(header), "  ".join("-" * w for w in widths)]
        for r in rows:
            lines += line(r)
        return "\n".join(lines)

    def html(self) -> str:
        """The claims as an HTML table (wrapping text, numbers right-aligned, a visible holds mark)."""
        esc = html.escape
        num = 'style="text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums"'
        head = ("<tr><th style=\"text-align:left\">ref</th><th style=\"text-align:left\">claim</th>"
                "<th style=\"text-align:right\">measured</th><th style=\"text-align:right\">bound</th>"
                "<th style=\"text-align:right\">measured/bound</th><th style=\"text-align:center\">holds</th></tr>")
        body = []
        for c in self.items:
            mark = ('<span style="color:#1a7f37;font-weight:bold">&#10004; yes</span>' if c.holds
                    else '<span style="color:#cf222e;font-weight:bold">&#10008; NO</span>')
            body.append(f"<tr><td style=\"white-space:nowrap\">{esc(c.ref)}</td>"
                        f"<td style=\"white-space:normal\">{esc(c.statement)}</td>"
                        f"<td {num}>{esc(c.measured)}</td><td {num}>{esc(c.relation)}&nbsp;{esc(c.bound)}</td>"
                        f"<td {num}>{esc(c.ratio)}</td><td style=\"text-align:center;white-space:nowrap\">{mark}</td></tr>")
        return ("<table class=\"tfbook-claims\" style=\"width:100%;border-collapse:collapse;table-layout:auto\">"
                f"<caption style=\"caption-side:top;text-align:left;font-weight:bold\">{esc(self.title)}</caption>"
                f"<thead>{head}</thead><tbody>{''.join(body)}</tbody></table>")

    def record(self) -> dict[str, Any]:
        """The machine-readable record stored with the table (display strings only)."""
        return {"schema": SCHEMA, "title": self.title, "claims": [asdict(c) for c in self.items]}

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return {"text/plain": self.table(), "text/html": self.html(), MIME: self.record()}

    def show(self) -> None:
        """Display the table: a mimebundle in IPython, the plain text elsewhere."""
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            get_ipython = None
        if get_ipython is None or get_ipython() is None:
            print(self.table())
            return
        display(self._repr_mimebundle_(), raw=True)

    def verdicts(self, width: int = WIDTH) -> str:
        """Each claim's ref, statement, relation, bound and verdict, without the measured value.

        For claims on trained float32 models, whose measured digits change between CPUs while the frozen
        thresholds and the verdicts do not: the stored outputs can then still be compared by the tests.
        """
        lines = [f"{self.title}: {len(self.items)} claims, {'all hold' if self.all_hold() else 'some FAIL'}"]
        for c in self.items:
            text = f"{c.ref}: {c.statement} ({c.relation} {c.bound}): {'holds' if c.holds else 'FAILS'}"
            lines += textwrap.wrap(text, width, initial_indent="* ", subsequent_indent="  ", break_on_hyphens=False)
        return "\n".join(lines)

    def all_hold(self) -> bool:
        return all(c.holds for c in self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"Claims({self.title!r}, {len(self.items)} claims, {'all hold' if self.all_hold() else 'some fail'})"
