"""Sums of ReLUs (Definition 4 of Wu et al. 2025) and the piecewise-linear interpolant.

A `ReluSum` is ``rs(t) = sum_h c_h relu(a_h[0] t + a_h[1])`` with every ``||a_h||_1 <= 1``.
`interpolant(g, R, M)` is the linear interpolant of ``g`` at the ``M + 1`` knots
``-R + 2Rm/M``: constant ``g(-R)`` left of ``-R``, linear between knots, continued with the
last slope right of ``R``. Its sup error on ``[-R, R]`` is at most ``(2R/M)^2/8 max|g''|``.
`tailed_interpolant(g, c, M, right_slope)` is the same with ``M + 1`` terms too, but ``M - 1`` pieces on
``[-c, c]`` and the right tail continued with the slope ``right_slope`` (g's own slope at infinity)
instead of the last piece's: for a g that flattens out (tanh, sigmoid, their derivatives) or turns
linear (softplus) its error outside ``[-c, c]`` is the tail's, ``sup_{|t| >= c} |g(t) - tail(t)|``,
whatever the range of the arguments.
`ramp(delta)` is ``(relu(t) - relu(t - delta))/delta``, ReLU's derivative away from ``(0, delta)``.
Builders build on the CPU; ``ReluSum.to(device)`` moves a sum, which then takes arguments on that device.
"""
from __future__ import annotations

from typing import Callable

import torch

from tfbook import validate
from tfbook.device import DTYPE
from tfbook.layers import FeedForward


class ReluSum:
    """``sum_h c_h relu(a_h[0] t + a_h[1])``; ``a`` (H, 2), ``c`` (H,).

    ``a`` and ``c`` are the paper's coefficients; evaluation goes through one core `FeedForward`
    (hidden width H, no residual) built from them, so the core's hooks reach every interpolant.
    """

    def __init__(self, a, c):
        a = torch.as_tensor(a, dtype=DTYPE)
        c = torch.as_tensor(c, dtype=DTYPE)
        if a.ndim != 2 or a.shape[1] != 2:
            raise ValueError(f"a must have shape (H, 2), got {tuple(a.shape)}")
        if c.shape != (a.shape[0],):
            raise ValueError(f"c must have shape ({a.shape[0]},), got {tuple(c.shape)}")
        if not (torch.isfinite(a).all() and torch.isfinite(c).all()):
            raise ValueError("a and c must be finite")
        self.a, self.c = a.clone(), c.clone()
        self.layer = FeedForward(a[:, :1], a[:, 1], c[None, :], None, residual=False, name="relu_sum")

    def to(self, device) -> "ReluSum":
        """Move the coefficients and the feed-forward layer to ``device`` (in place); returns self."""
        self.a, self.c = self.a.to(device), self.c.to(device)
        self.layer.to(device)
        return self

    @property
    def num_terms(self) -> int:
        return int(self.a.shape[0])

    @property
    def C(self) -> float:
        """``sum_h |c_h|``, the C of Definition 4."""
        return float(self.c.abs().sum())

    def l1_norms(self) -> torch.Tensor:
        """``||a_h||_1`` for every term, (H,)."""
        return self.a.abs().sum(dim=1)

    def __call__(self, t) -> torch.Tensor:
        t = torch.as_tensor(t, dtype=DTYPE)
        return self.layer(t.unsqueeze(-1)).squeeze(-1)  # (...,): one token of width 1 per argument

    def closed_form(self, t) -> torch.Tensor:
        """``sum_h c_h relu(a_h[0] t + a_h[1])`` from the stored coefficients, without the core layer: the
        reference of the table's own definition, which no sabotage of the core moves (bounds use it)."""
        t = torch.as_tensor(t, dtype=DTYPE, device=self.a.device)
        return torch.relu(t.unsqueeze(-1) * self.a[:, 0] + self.a[:, 1]) @ self.c  # (...,)

    def __repr__(self) -> str:
        return f"ReluSum(num_terms={self.num_terms}, C={self.C:.3g})"


def _unit_terms(slopes: torch.Tensor, knots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``slope * relu(t - knot)`` written as ``c relu(a . [t; 1])`` with ``||a||_1 <= 1``; (H, 2) and (H,)."""
    scale = 1.0 + knots.abs()
    a = torch.stack([1.0 / scale, -knots / scale], dim=1)
    over = a.abs().sum(1) > 1.0  # rounding: shrink a by one part in 2^50, keep the product with c
    shrink = torch.where(over, 1 - 2.0 ** -50, 1.0).to(DTYPE)
    return a * shrink[:, None], slopes * scale / shrink


def interpolant(g: Callable[[torch.Tensor], torch.Tensor], R: float, M: int) -> ReluSum:
    """The linear interpolant of ``g`` on ``M`` equal pieces of ``[-R, R]``, ``M + 1`` terms."""
    R = float(validate.real("R", R, low=0.0, low_open=True))
    M = validate.positive_int("M", M)
    knots = -R + 2 * R * torch.arange(M + 1, dtype=DTYPE) / M  # (M + 1,): -R + 2Rm/M
    try:
        values = torch.as_tensor(g(knots), dtype=DTYPE).reshape(M + 1)
    except (TypeError, RuntimeError, ValueError):  # a scalar function (e.g. math.tanh): one knot at a time
        values = torch.tensor([float(g(float(k))) for k in knots], dtype=DTYPE)
    slopes = (values[1:] - values[:-1]) / (knots[1:] - knots[:-1])  # (M,)
    changes = torch.cat([slopes[:1], slopes[1:] - slopes[:-1]])
    a, c = _unit_terms(changes, knots[:-1])
    a = torch.cat([torch.tensor([[0.0, 1.0]], dtype=DTYPE), a])  # the constant g(-R) first
    c = torch.cat([values[:1], c])
    return ReluSum(a, c)


def tailed_interpolant(g: Callable[[torch.Tensor], torch.Tensor], c: float, M: int,
                       right_slope: float = 0.0) -> ReluSum:
    """``M + 1`` terms: the linear interpolant of ``g`` on ``M - 1`` equal pieces of ``[-c, c]`` (M >= 2),
    constant ``g(-c)`` left of ``-c`` and ``g(c) + right_slope (t - c)`` right of ``c``.

    The last term is a kink at ``c`` changing the last piece's slope into ``right_slope``. Its sup error
    on the real line is at most max((2c/(M-1))^2/8 max|g''|, the tails' errors).
    """
    c = float(validate.real("c", c, low=0.0, low_open=True))
    M = validate.positive_int("M", M, minimum=2)
    right_slope = float(validate.real("right_slope", right_slope))
    core = interpolant(g, c, M - 1)
    h = 2 * c / (M - 1)
    ends = core.closed_form(torch.tensor([c - h, c], dtype=DTYPE))  # the table's design: never through the core
    last = float(ends[1] - ends[0]) / h
    a, coef = _unit_terms(torch.tensor([right_slope - last], dtype=DTYPE), torch.tensor([c], dtype=DTYPE))
    return ReluSum(torch.cat([core.a, a]), torch.cat([core.c, coef]))


def ramp(delta: float) -> ReluSum:
    """``(relu(t) - relu(t - delta)) / delta``: 1 for t >= delta, 0 for t <= 0 (2 terms)."""
    delta = float(validate.real("delta", delta, low=0.0, low_open=True))
    a, c = _unit_terms(torch.tensor([1.0 / delta, -1.0 / delta], dtype=DTYPE), torch.tensor([0.0, delta], dtype=DTYPE))
    return ReluSum(a, c)


def identity_relu() -> ReluSum:
    """ReLU itself, one term."""
    return ReluSum([[1.0, 0.0]], [1.0])


def sup_error(g: Callable[[torch.Tensor], torch.Tensor], rs: ReluSum, R: float, points: int = 20001,
              closed_form: bool = False) -> float:
    """``max |g - rs|`` on a fine grid of ``[-R, R]`` (includes every knot when ``points - 1`` is a multiple of M).

    ``closed_form``: evaluate the sum from its coefficients (`ReluSum.closed_form`) instead of through the
    core layer, as the bounds do: a measured error through the core is a construction's value, the
    closed form's is the table's own error.
    """
    t = torch.linspace(-R, R, points, dtype=DTYPE, device=rs.a.device)  # on the sum's device
    table = rs.closed_form(t) if closed_form else rs(t)
    return float((torch.as_tensor(g(t), dtype=DTYPE) - table).abs().max())
