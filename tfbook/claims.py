"""Executed claims: what a paper states, what we measured, the bound, and whether it holds.

>>> claims = Claims("Yarotsky squaring")
>>> claims.check("Lemma 1", "sup |f_m - x^2| on [0,1]", measured=0.015625, bound=4.0**-3, relation="==")
>>> claims.show()   # a fixed-precision table (3 significant digits) stable across machines

A claim that fails raises `ClaimError` right away, so a notebook run fails loudly.
Relations: ``"<="``, ``">="``, ``"=="`` (to a relative tolerance ``rtol``), ``"<"``, ``">"``.
Use ``roundoff=True`` for measurements that are rounding noise: the table then prints
``< bound`` instead of the machine-dependent value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Union

Value = Union[Real, str, bool]
RELATIONS = ("<=", ">=", "==", "<", ">")


class ClaimError(AssertionError):
    """Raised when an executed claim does not hold."""


def fmt(value: Value, digits: int = 3) -> str:
    """Format a number at ``digits`` significant digits (ints exactly if short), strings as they are."""
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, int) or (isinstance(value, Real) and float(value).is_integer() and abs(value) < 1e7):
        return str(int(value))
    x = float(value)
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == 0:
        return "0"
    text = f"{x:.{digits - 1}e}"
    mantissa, exponent = text.split("e")
    exp = int(exponent)
    if -3 <= exp < 5:
        return f"{x:.{max(digits - 1 - exp, 0)}f}"
    return f"{mantissa}e{exp:+03d}"


@dataclass(frozen=True)
class Claim:
    """One executed claim."""

    ref: str
    statement: str
    measured: Value
    bound: Value
    relation: str
    holds: bool
    roundoff: bool = False

    def row(self) -> tuple[str, str, str, str, str]:
        shown = f"< {fmt(self.bound)}" if self.roundoff and self.holds else fmt(self.measured)
        return (self.ref, self.statement, shown, f"{self.relation} {fmt(self.bound)}", "yes" if self.holds else "NO")


def _holds(measured: Value, bound: Value, relation: str, rtol: float) -> bool:
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    if isinstance(measured, (str, bool)) or isinstance(bound, (str, bool)):
        if relation != "==":
            raise ValueError("non-numeric claims only support relation '=='")
        return measured == bound
    m, b = float(measured), float(bound)
    if math.isnan(m):
        return False
    if relation == "==":
        return m == b or abs(m - b) <= rtol * max(abs(b), abs(m))
    return {"<=": m <= b, ">=": m >= b, "<": m < b, ">": m > b}[relation]


class Claims:
    """A chapter's list of executed claims, printed as one table."""

    def __init__(self, title: str):
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
    ) -> Claim:
        """Record a claim; raise `ClaimError` if ``measured relation bound`` is false."""
        if rtol < 0:
            raise ValueError(f"rtol must be non-negative, got {rtol}")
        claim = Claim(ref, statement, measured, bound, relation, _holds(measured, bound, relation, rtol), roundoff)
        self.items.append(claim)
        if not claim.holds:
            raise ClaimError(f"{ref}: {statement}: measured {measured!r} is not {relation} {bound!r}")
        return claim

    def table(self) -> str:
        """The claims as a plain-text table with fixed precision."""
        header = ("ref", "claim", "measured", "bound", "holds")
        rows = [header] + [c.row() for c in self.items]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = [self.title, "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows[1:]]
        return "\n".join(lines)

    def show(self) -> None:
        print(self.table())

    def all_hold(self) -> bool:
        return all(c.holds for c in self.items)

    def __len__(self) -> int:
        return len(self.items)

