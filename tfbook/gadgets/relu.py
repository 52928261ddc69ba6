"""Exact piecewise-linear gadgets: one feed-forward layer each.

Each writes its value into the linear form ``out`` (``out += value``; a dict writes scaled copies into
several slots). On a dyadic grid (inputs, knots and slopes dyadic) every value is computed exactly.
"""
from __future__ import annotations

from typing import Sequence

from tfbook import validate
from tfbook.gadgets.plan import FFStage, Form, Gadget, combine, form


def _scaled(out: Form, c: float) -> dict:
    return {k: c * v for k, v in form(out).items()}


def identity(x: Form, out: Form, nonnegative: bool = False, tag: str = "id") -> Gadget:
    """``out += x`` through ReLUs: relu(x) - relu(-x) (one unit, relu(x), if x >= 0 is promised)."""
    stage = FFStage()
    stage.unit(form(x), out)
    if not nonnegative:
        stage.unit(combine((-1.0, x)), _scaled(out, -1.0))
    return Gadget(tag, [stage])


def absolute(x: Form, out: Form, tag: str = "abs") -> Gadget:
    """``out += |x| = relu(x) + relu(-x)``."""
    stage = FFStage()
    stage.unit(form(x), out)
    stage.unit(combine((-1.0, x)), out)
    return Gadget(tag, [stage])


def maximum(x: Form, y: Form, out: Form, tag: str = "max") -> Gadget:
    """``out += max(x, y) = relu(x - y) + relu(y) - relu(-y)`` (independent of what ``out`` held)."""
    stage = FFStage()
    stage.unit(combine((1.0, x), (-1.0, y)), out)
    stage.unit(form(y), out)
    stage.unit(combine((-1.0, y)), _scaled(out, -1.0))
    return Gadget(tag, [stage])


def clip(x: Form, out: Form, low: float, high: float, tag: str = "clip") -> Gadget:
    """``out += clip(x, low, high) = low + relu(x - low) - relu(x - high)``; two units (low in the bias b_2)."""
    low = validate.real("low", low)
    high = validate.real("high", high, low=low)
    stage = FFStage()
    stage.unit(form(x), out, bias=-low)
    stage.unit(form(x), _scaled(out, -1.0), bias=-high)
    if low != 0.0:
        stage.constant = _scaled(out, low)
    return Gadget(tag, [stage])


def relu_sum(x: Form, knots: Sequence[float], coeffs: Sequence[float], out: Form, constant: float = 0.0,
             tag: str = "relu_sum") -> Gadget:
    """``out += constant + sum_t coeffs[t] relu(x - knots[t])``: any continuous piecewise-linear function of x
    that is constant left of its first knot."""
    if len(knots) != len(coeffs) or len(knots) == 0:
        raise ValueError(f"knots and coeffs must be non-empty and of equal length, got {len(knots)} and {len(coeffs)}")
    stage = FFStage()
    for t, c in zip(knots, coeffs):
        stage.unit(form(x), _scaled(out, validate.real("coeffs", c)), bias=-validate.real("knots", t))
    if constant:
        stage.constant = _scaled(out, validate.real("constant", constant))
    return Gadget(tag, [stage])


def interpolant_coefficients(knots: Sequence[float], values: Sequence[float]) -> tuple[list[float], float]:
    """ReLU coefficients c_t and constant of the piecewise-linear interpolant of (knots, values), constant
    outside [knots[0], knots[-1]]: c_0 = slope_0, c_t = slope_t - slope_{t-1}, c_last = -slope_last."""
    if len(knots) != len(values) or len(knots) < 2:
        raise ValueError(f"knots and values must have equal length >= 2, got {len(knots)} and {len(values)}")
    ks = [validate.real("knots", t) for t in knots]
    vs = [validate.real("values", v) for v in values]
    if any(b <= a for a, b in zip(ks, ks[1:])):
        raise ValueError("knots must be strictly increasing")
    slopes = [(vs[i + 1] - vs[i]) / (ks[i + 1] - ks[i]) for i in range(len(ks) - 1)]
    coeffs = [slopes[0]] + [b - a for a, b in zip(slopes, slopes[1:])] + [-slopes[-1]]
    return coeffs, vs[0]


def interpolant(x: Form, knots: Sequence[float], values: Sequence[float], out: Form, tag: str = "interp") -> Gadget:
    """``out += p(x)``, p the piecewise-linear interpolant of (knots, values), constant outside the knots:
    one unit per knot (units with a zero coefficient are dropped)."""
    coeffs, c0 = interpolant_coefficients(knots, values)
    kept = [(t, c) for t, c in zip(knots, coeffs) if c != 0.0]
    return relu_sum(x, [t for t, _ in kept], [c for _, c in kept], out, constant=c0, tag=tag)
