"""Executed claims: what a paper states, what we measured, the bound, the ratio, and whether it holds.

>>> claims = Claims("Yarotsky squaring")
>>> claims.check("Lemma 1", "sup |f_m - x^2| on [0,1], m = 2", measured=0.015625, bound=4.0**-3, relation="<=",
...              trivial=1.0)   # the trivial scale: sup |x^2| on [0,1]
>>> claims.check("Lemma 1", "f_m(x) - x^2 at a dyadic point", measured=3e-17, bound=1e-12, roundoff=True)
>>> @paper_formula
... def hidden_width(m: int) -> int:
...     return 3 * m
>>> claims.check("Lemma 1", "hidden width, m = 2", measured=6, kind="size", formula=hidden_width, params={"m": 2},
...              relation="==")
>>> claims.show()   # outside IPython: the plain-text table; in a notebook: text, HTML and a JSON record
Yarotsky squaring
ref      claim                        kind    measured      bound  measured/bound  holds
-------  ---------------------------  ------  --------  ---------  --------------  -----
Lemma 1  sup |f_m - x^2| on [0,1], m  constr    0.0156  <= 0.0156               1  yes
         = 2
         trivial scale 1;
         bound/trivial 0.0156
Lemma 1  f_m(x) - x^2 at a dyadic     constr   < 1e-12   <= 1e-12               -  yes
         point
Lemma 1  hidden width, m = 2          size           6       == 6               1  yes
>>> claims.check("Lemma 1", "sup |f_m - x^2| on [0,1], m = 3", measured=2**-8, bound=4.0**-4)
>>> claims.show()   # a second show prints only the claims added since the first
Yarotsky squaring (claim 4)
ref      claim                       kind    measured       bound  measured/bound  holds
-------  --------------------------  ------  --------  ----------  --------------  -----
Lemma 1  sup |f_m - x^2| on [0,1],   constr   0.00391  <= 0.00391               1  yes
         m = 3

`check` returns nothing and raises `ClaimError` when the claim fails, so a notebook run fails
loudly, except in *record-only mode* (``TFBOOK_CLAIMS=record``, set by ``make full``): then a
failing claim is recorded and printed as ``NO``. Every claim, held or not and in either mode, is
appended to the JSON-lines file named by ``TFBOOK_CLAIMS_SINK`` when it is set (the claims audit
reads it; `tfbook.build.notebooks.execute` counts the claims a notebook executed from it).

Every claim has a *kind* (`KINDS`), shown in every table (abbreviated in the plain text):
``"construction"`` (the default: measured on a built model, e.g. its error, exactness, states or
attention), ``"size"`` (a count or norm of the built model against a paper's formula),
``"paper"`` (the paper's mathematics, computed without a construction), ``"experiment"`` (a
trained model or a statistical experiment: it must fail when the training is skipped,
``TFBOOK_UNTRAINED=1``), and the yardsticks beside an experiment or a construction: ``"control"``
(a check that would pass if the claim beside it were false, e.g. an ablated or mutated model, a wrong
label, a stalled estimator) and ``"baseline"`` (a model-free rule, a fixed comparator or a property of
the data); neither may depend on the training. A size claim computes its own bound:
``formula=fn, params={...}`` with ``fn`` registered by `paper_formula` (its arguments are numbers
only), and the bound is ``fn(**params)``. ``trivial=x`` prints the trivial scale beside an upper
bound (``||f||``, or the do-nothing model's error) and bound/trivial; a construction claim whose
bound is not below it is rejected: such a bound is not a claim.

Relations: ``"<="``, ``">="``, ``"=="`` (to a relative tolerance ``rtol``), ``"<"``, ``">"``.
Numbers are printed at 3 significant digits by `fmt`, which never prints rounding noise:
a nonzero measured value below `NOISE` (1e-12) prints as ``< 1e-12``, and a ``roundoff=True``
claim prints ``< bound`` instead of its machine-dependent value. The ratio measured/bound is
printed for numeric claims (``-`` where it is undefined or would be rounding noise).

`Claims.show` displays one output with three representations: ``text/plain`` (lines of at most
100 characters, the statement column wrapped; what nbval compares), ``text/html`` (the book's
table) and ``application/vnd.tfbook.claims+json`` (a machine-readable record, read by
`tfbook.build.claims_page` to list every claim of the book from the stored notebooks). All three are
built from the formatted strings only, so they are identical on every machine.
"""
from __future__ import annotations

import functools
import hashlib
import html
import inspect
import json
import math
import os
import textwrap
from dataclasses import asdict, dataclass
from fractions import Fraction
from numbers import Real
from typing import Any, Callable, Optional, Union

Value = Union[Real, str, bool]
RELATIONS = ("<=", ">=", "==", "<", ">")
NOISE = 1e-12
"""Nonzero measured values below this magnitude are float64 rounding noise for O(1) quantities."""
INTEGRAL_RTOL = 1e-9
"""A float this close (relatively) to a nonzero integer below 1e7 prints as that integer."""
MIME = "application/vnd.tfbook.claims+json"
"""The mime type of the machine-readable claims record stored with every `Claims.show` output."""
SCHEMA = 2
"""Version of the record: 2 added each claim's ``kind``, ``trivial``, ``bound_over_trivial`` and ``formula``."""
KINDS = {"construction": "constr", "size": "size", "paper": "paper", "experiment": "expt", "control": "ctrl",
         "baseline": "base"}
"""The kinds of claim, each with its label in the plain-text table."""
UPPER = ("<=", "<")
"""The relations of an upper bound: the only ones that take a trivial scale."""
WIDTH = 88
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
    return text.replace("1.00e-", "1e-") if isinstance(value, float) and text.lstrip("-").startswith("1.00e-") else text


FORMULAS: dict[str, Callable[..., Real]] = {}
"""The registry of `paper_formula` functions, by ``module.qualname``: the only bounds of size claims."""


def _check_parameter(where: str, name: str, value: Any) -> None:
    """Raise ValueError unless ``value`` is a real number (not bool, not NaN) or a list/tuple of such."""
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_parameter(where, name, item)
    elif isinstance(value, bool) or not isinstance(value, Real) or value != value:  # NaN
        raise ValueError(f"{where}: argument {name} must be a real number (a paper's parameter), "
                         f"got {type(value).__name__}")


def paper_formula(fn: Callable[..., Real]) -> Callable[..., Real]:
    """Register ``fn``, a formula of a paper in its parameters, as the bound of size claims.

    The wrapper accepts numbers only: each argument must be a real number (int, float, Fraction,
    a NumPy scalar; not bool, not NaN; infinities allowed, e.g. p = inf) or a list/tuple of them.
    Anything else (a built module, a tensor, an array, a string) raises ValueError naming the
    argument, so the bound cannot be read off the model it bounds.

    >>> @paper_formula
    ... def depth(T: int) -> int:
    ...     return 2 * T + 1
    >>> depth(3)
    7
    >>> depth("3")
    Traceback (most recent call last):
    ...
    ValueError: depth: argument T must be a real number (a paper's parameter), got str
    """
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Real:
        try:
            arguments = signature.bind(*args, **kwargs).arguments
        except TypeError as exc:
            raise ValueError(f"{fn.__qualname__}: {exc}") from None
        for name, value in arguments.items():
            values = value.values() if isinstance(value, dict) else [value]  # **kwargs
            for v in values:
                _check_parameter(fn.__qualname__, name, v)
        return fn(*args, **kwargs)

    FORMULAS[_formula_name(wrapper)] = wrapper
    return wrapper


def _formula_name(fn: Callable) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _size_bound(formula: Callable, params: Any) -> tuple[Real, str]:
    """The bound ``formula(**params)`` of a registered formula, and the call as text for the record."""
    if not callable(formula) or FORMULAS.get(_formula_name(formula)) is not formula:
        raise ValueError(f"formula must be a function registered with @paper_formula, got {formula!r}")
    params = {} if params is None else params
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise ValueError(f"params must be a dict of the formula's arguments by name, got {params!r}")
    bound = _number(formula(**params), "the formula's value")
    if isinstance(bound, (str, bool)):
        raise ValueError(f"formula must return a real number, got {bound!r}")
    return bound, f"{_formula_name(formula)}({', '.join(f'{k}={v}' for k, v in params.items())})"


def mode() -> str:
    """``"raise"`` (default: a failing claim raises) or ``"record"`` (``TFBOOK_CLAIMS=record``)."""
    value = os.environ.get(MODE_ENV, "").strip().lower() or "raise"
    if value not in MODES:
        raise ValueError(f"{MODE_ENV} must be one of {MODES}, got {value!r}")
    return value


def attempt(fn: Callable[..., Any], *args: Any, fallback: Any = math.nan, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; in record-only mode a `ValueError` (the library refusing an input its guarantee
    does not cover, such as a certificate asked of weights that are not the construction's) returns
    ``fallback`` (NaN by default) instead, so that the claims computed from it fail where they are reached
    and the notebook goes on (the claims audit's sabotaged runs, the full profile). In raise mode the error
    propagates. A refusal is printed, naming the function and the error.

    >>> attempt(math.sqrt, 4.0)
    2.0
    """
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        if mode() != "record":
            raise
        print(f"tfbook.claims.attempt: {getattr(fn, '__name__', fn)!s} refused: {exc}")
        return fallback


def quotient(a: Real, b: Real) -> float:
    """``a / b`` as a float that a broken model cannot turn into an exception: inf (with a's sign) where b is 0,
    NaN for 0 / 0, so that a ratio of two measurements fails its claim instead of stopping the notebook.

    >>> quotient(1, 4), quotient(1.0, 0.0), quotient(0.0, 0.0)
    (0.25, inf, nan)
    """
    a, b = float(a), float(b)
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b


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
    kind: str = "construction"
    trivial: Optional[str] = None
    bound_over_trivial: Optional[str] = None
    formula: Optional[str] = None

    def row(self) -> tuple[str, str, str, str, str, str, str]:
        """(ref, claim, kind, measured, bound, measured/bound, holds) as printed (kind abbreviated)."""
        return (self.ref, self.statement, KINDS[self.kind], self.measured, f"{self.relation} {self.bound}",
                self.ratio, "yes" if self.holds else "NO")

    def trivial_note(self) -> Optional[str]:
        """``trivial scale x; bound/trivial r``, printed below the statement, or None without a trivial scale."""
        if self.trivial is None:
            return None
        return f"trivial scale {self.trivial}; bound/trivial {self.bound_over_trivial}"


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


def _trivial(trivial: Any, bound: Value, relation: str, kind: str) -> tuple[str, str]:
    """The printed trivial scale and bound/trivial; raise ValueError when the bound is not a claim."""
    trivial = _number(trivial, "trivial")
    if isinstance(trivial, (str, bool)) or not 0 < float(trivial) < math.inf:
        raise ValueError(f"trivial must be a positive finite real number, got {trivial!r}")
    if relation not in UPPER or isinstance(bound, (str, bool)):
        raise ValueError(f"trivial is the scale of an upper bound (relation '<=' or '<'), got relation {relation!r}")
    if kind == "construction" and float(bound) >= float(trivial):
        raise ValueError(f"trivial: the bound {bound!r} is not below the trivial scale {trivial!r}: not a claim")
    return _fmt_bound(trivial), fmt(float(bound) / float(trivial), noise=0)


def _is_argument_error(exc: ValueError) -> bool:
    """A trivial scale of the wrong type or relation (the caller's mistake), not a value that a broken model can
    produce (a bound not below its scale, a scale of 0 or NaN measured on the model)."""
    text = str(exc)
    return not ("not below the trivial scale" in text or "must be a positive finite real number" in text)


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

    def __init__(self, title: str, scratch: bool = False):
        """``scratch=True``: claims about a deliberately changed model (a mutation shown inside a notebook);
        they are never appended to the claims sink (``TFBOOK_CLAIMS_SINK``), so reports and the claims audit count only the
        chapter's own claims. Read their outcome with `all_hold` (record-only mode raises nothing)."""
        if not isinstance(title, str) or not title:
            raise ValueError(f"title must be a non-empty str, got {title!r}")
        if not isinstance(scratch, bool):
            raise ValueError(f"scratch must be a bool, got {scratch!r}")
        self.title, self.scratch = title, scratch
        self.items: list[Claim] = []
        self.shown = 0  # claims already displayed by `show`: the next table starts after them

    def check(
        self,
        ref: str,
        statement: str,
        measured: Value,
        bound: Optional[Value] = None,
        relation: str = "<=",
        rtol: float = 0.0,
        roundoff: bool = False,
        *,
        kind: str = "construction",
        formula: Optional[Callable[..., Real]] = None,
        params: Optional[dict[str, Any]] = None,
        trivial: Optional[Real] = None,
    ) -> None:
        """Record a claim; raise `ClaimError` if ``measured relation bound`` is false (unless recording).

        ``kind``: one of `KINDS`. ``formula``, ``params``: the bound is ``formula(**params)``, with
        ``formula`` registered by `paper_formula` (required for ``kind="size"``; ``bound`` is then not
        given). ``trivial``: the trivial scale of an upper bound, printed with bound/trivial; a
        construction claim whose bound is not below it raises ValueError. Arguments that are not
        valid raise ValueError naming the argument, in every mode.
        """
        if not isinstance(ref, str) or not ref or not isinstance(statement, str) or not statement:
            raise ValueError("ref and statement must be non-empty strings")
        if not isinstance(rtol, Real) or isinstance(rtol, bool) or not rtol >= 0:
            raise ValueError(f"rtol must be a non-negative real, got {rtol!r}")
        if not isinstance(kind, str) or kind not in KINDS:
            raise ValueError(f"kind must be one of {tuple(KINDS)}, got {kind!r}")
        name = None
        if formula is not None:
            if bound is not None:
                raise ValueError("give bound or formula, not both: the formula computes the bound")
            bound, name = _size_bound(formula, params)
        elif kind == "size":
            raise ValueError("formula is required for a size claim: a function registered with @paper_formula")
        elif params is not None:
            raise ValueError("params are the arguments of a formula; give formula too")
        elif bound is None:
            raise ValueError("bound is required (or formula for a bound computed from a paper's formula)")
        measured, bound = _number(measured, "measured"), _number(bound, "bound")
        holds = _holds(measured, bound, relation, float(rtol))
        try:
            shown_trivial, over = (None, None) if trivial is None else _trivial(trivial, bound, relation, kind)
        except ValueError as exc:  # recording: a bound that is no claim is a failed claim, and the run goes on
            if mode() != "record" or _is_argument_error(exc):
                raise
            shown_trivial, over, holds = str(trivial), "-", False
        # a roundoff claim shows which side of its bound the value lies on, never its rounding digits
        side = ">" if relation in (">=", ">") else "<"
        shown = f"{side} {_fmt_bound(bound)}" if roundoff and holds else fmt(measured)
        claim = Claim(ref, statement, shown, _fmt_bound(bound), "-" if roundoff else _ratio(measured, bound, shown),
                      relation, holds, bool(roundoff), _current_cell(), kind, shown_trivial, over, name)
        self.items.append(claim)
        recording = mode() == "record"
        sink = None if self.scratch else os.environ.get(SINK_ENV)
        if sink:  # every executed claim, in either mode: the audit reads them, the executor counts them
            with open(sink, "a", encoding="utf-8") as f:
                f.write(json.dumps({"title": self.title, **asdict(claim), "raw_measured": repr(measured),
                                    "raw_bound": repr(bound)}) + "\n")
        if not holds and not recording:
            raise ClaimError(f"{ref}: {statement}: measured {measured!r} is not {relation} {bound!r}")

    def table(self, width: int = WIDTH, start: int = 0) -> str:
        """The claims from number ``start`` on as a plain-text table, lines of at most ``width`` characters.

        Columns too wide for ``width`` wrap at spaces: first the claim (down to 16 characters), then
        the bound and measured values (down to 12 and 10, which every number fits: only lists and
        other strings wrap), then the ref (down to 8).
        """
        header = ("ref", "claim", "kind", "measured", "bound", "measured/bound", "holds")
        items = self._items_from(start)
        rows = [c.row() for c in items]
        notes = [c.trivial_note() for c in items]
        widths = [max([len(header[i])] + [len(r[i]) for r in rows]) for i in range(7)]
        widths[1] = max([widths[1]] + [len(n) for n in notes if n])
        widths[0] = min(widths[0], 18)
        excess = sum(widths) + 2 * 6 - width
        for i, floor in ((1, 16), (4, 12), (3, 10), (0, 8)):
            cut = max(0, min(excess, widths[i] - floor))
            widths[i], excess = widths[i] - cut, excess - cut
        right = (False, False, False, True, True, True, False)

        def line(cells: tuple[str, ...], note: Optional[str] = None) -> list[str]:
            wrapped = [_wrap(c, w) if i in (0, 1, 3, 4) else [c] for i, (c, w) in enumerate(zip(cells, widths))]
            wrapped[1] += _wrap(note, widths[1]) if note else []
            out = []
            for k in range(max(len(w) for w in wrapped)):
                parts = [(w[k] if k < len(w) else "") for w in wrapped]
                out.append("  ".join(p.rjust(w) if r else p.ljust(w) for p, w, r in zip(parts, widths, right)).rstrip())
            return out

        lines = [*_wrap(self.caption(start), width), *line(header), "  ".join("-" * w for w in widths)]
        for r, note in zip(rows, notes):
            lines += line(r, note)
        return "\n".join(lines)

    def html(self, start: int = 0) -> str:
        """The claims from number ``start`` on as an HTML table (wrapping text, numbers right-aligned, a
        visible holds mark)."""
        esc = html.escape
        num = 'style="text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums"'
        head = ("<tr><th style=\"text-align:left\">ref</th><th style=\"text-align:left\">claim</th>"
                "<th style=\"text-align:left\">kind</th>"
                "<th style=\"text-align:right\">measured</th><th style=\"text-align:right\">bound</th>"
                "<th style=\"text-align:right\">measured/bound</th><th style=\"text-align:center\">holds</th></tr>")
        body = []
        for c in self._items_from(start):
            mark = ('<span style="color:#1a7f37;font-weight:bold">&#10004; yes</span>' if c.holds
                    else '<span style="color:#cf222e;font-weight:bold">&#10008; NO</span>')
            note = c.trivial_note()
            note = f"<br><small>{esc(note)}</small>" if note else ""
            body.append(f"<tr><td style=\"white-space:nowrap\">{esc(c.ref)}</td>"
                        f"<td style=\"white-space:normal\">{esc(c.statement)}{note}</td>"
                        f"<td style=\"white-space:nowrap\">{esc(c.kind)}</td>"
                        f"<td {num}>{esc(c.measured)}</td><td {num}>{esc(c.relation)}&nbsp;{esc(c.bound)}</td>"
                        f"<td {num}>{esc(c.ratio)}</td><td style=\"text-align:center;white-space:nowrap\">{mark}</td></tr>")
        return ("<table class=\"tfbook-claims\" style=\"width:100%;border-collapse:collapse;table-layout:auto\">"
                f"<caption style=\"caption-side:top;text-align:left;font-weight:bold\">{esc(self.caption(start))}</caption>"
                f"<thead>{head}</thead><tbody>{''.join(body)}</tbody></table>")

    def _items_from(self, start: int) -> list[Claim]:
        if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start <= len(self.items):
            raise ValueError(f"start must be an int in [0, {len(self.items)}], got {start!r}")
        return self.items[start:]

    def caption(self, start: int = 0) -> str:
        """The table's title; a table that continues an earlier one names the claims it shows."""
        if start == 0:
            return self.title
        if start == len(self.items):
            return f"{self.title} (no claims since claim {start})"
        if start + 1 == len(self.items):
            return f"{self.title} (claim {start + 1})"
        return f"{self.title} (claims {start + 1} to {len(self.items)})"

    def record(self) -> dict[str, Any]:
        """The machine-readable record stored with the table (display strings only)."""
        return {"schema": SCHEMA, "title": self.title, "claims": [asdict(c) for c in self.items]}

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return {"text/plain": self.table(), "text/html": self.html(), MIME: self.record()}

    def show(self) -> None:
        """Display the claims added since the previous `show` (all of them the first time): a mimebundle
        in IPython, the plain text elsewhere. The bundle's machine-readable record holds every claim so
        far, so the last record of a page is its complete list."""
        start, self.shown = self.shown, len(self.items)
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            get_ipython = None
        if get_ipython is None or get_ipython() is None:
            print(self.table(start=start))
            return
        bundle = {"text/plain": self.table(start=start), "text/html": self.html(start), MIME: self.record()}
        display(bundle, raw=True)

    def verdicts(self, width: int = WIDTH) -> str:
        """Each claim's ref, kind, statement, relation, bound and verdict, without the measured value.

        For claims on trained float32 models, whose measured digits change between CPUs while the frozen
        thresholds and the verdicts do not: the stored outputs can then still be compared by the tests.
        """
        lines = [f"{self.title}: {len(self.items)} claims, {'all hold' if self.all_hold() else 'some FAIL'}"]
        for c in self.items:
            text = f"{c.ref} ({c.kind}): {c.statement} ({c.relation} {c.bound}): {'holds' if c.holds else 'FAILS'}"
            lines += textwrap.wrap(text, width, initial_indent="* ", subsequent_indent="  ", break_on_hyphens=False)
        return "\n".join(lines)

    def all_hold(self) -> bool:
        return all(c.holds for c in self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"Claims({self.title!r}, {len(self.items)} claims, {'all hold' if self.all_hold() else 'some fail'})"


class InSetting:
    """``claims`` seen through one setting: `check` appends " (setting)" to every statement. For a library
    check run once per setting (a size, a seed) whose statements would otherwise repeat word for word.

    >>> c = Claims("demo", scratch=True)
    >>> InSetting(c, "n = 4").check("Thm 1", "error <= bound", 0.5, 1.0)
    >>> c.items[0].statement
    'error <= bound (n = 4)'
    """

    def __init__(self, claims: Claims, setting: str):
        if not isinstance(claims, Claims):
            raise ValueError(f"claims must be a Claims object, got {type(claims).__name__}")
        if not isinstance(setting, str) or not setting:
            raise ValueError(f"setting must be a non-empty str, got {setting!r}")
        self.claims, self.setting = claims, setting

    def check(self, ref: str, statement: str, *args: Any, **kwargs: Any) -> None:
        """`Claims.check` with the setting named at the end of ``statement``."""
        if not isinstance(statement, str) or not statement:
            raise ValueError("ref and statement must be non-empty strings")
        return self.claims.check(ref, f"{statement} ({self.setting})", *args, **kwargs)
