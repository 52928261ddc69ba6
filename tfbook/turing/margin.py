"""All-layer margins (Wei, Chen & Ma, Section 2): the toy product example, exactly, and flip radii.

The all-layer margin rho(theta, x, y) = min ||delta||_2 such that (y - 1/2) F(x, theta + delta) <= 0.
For the toy product f(W) = (prod_i W_i) x - 1/2 at W = 1, x = y = 1, the minimiser is symmetric,
delta_i = 2^(-1/d) - 1, so rho_f = sqrt(d) (1 - 2^(-1/d)) -> ln 2 / sqrt(d). Inserting round(z) =
clip(3z - 1, 0, 1) after every factor (f~) keeps rho >= 1/3 for every d (Claim 3.5).
Margins of large networks cannot be computed exactly: random-direction flip radii are (weak) upper bounds;
`tfbook.turing.robustness` has targeted attacks (upper bounds) and certified lower bounds.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch
from scipy.optimize import minimize, minimize_scalar

from tfbook.device import DTYPE


def round_fn(z):
    """round(z) = 3 relu(z - 1/3) - 3 relu(z - 2/3) = clip(3z - 1, 0, 1)."""
    return np.clip(3 * np.asarray(z) - 1, 0.0, 1.0)


def toy_margin_closed_form(d: int) -> float:
    """rho_f = sqrt(d) (1 - 2^(-1/d)) for f(W) = prod W_i - 1/2 at W = 1."""
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be an int >= 1, got {d!r}")
    return math.sqrt(d) * (1 - 2 ** (-1 / d))


def toy_output(delta: np.ndarray, rounded: bool) -> float:
    h = 1.0
    for di in delta:
        h = (1 + di) * h
        if rounded:
            h = float(round_fn(h))
    return h - 0.5


def toy_margin_numeric(d: int, rounded: bool = False, starts: int = 20, seed: int = 0) -> float:
    """min ||delta|| s.t. toy_output(delta) <= 0, found numerically (an upper bound on rho).

    Plain product: SLSQP over all d factors with analytic gradients, from random starts. Rounded product:
    any |delta_i| < 1/3 is erased by the next rounding and unperturbed factors stay exactly 1, so we search
    the last two factors (a, b): either a <= -1/2 alone, or (1 + a)(2 + 3b) = 1/2 with b in (-2/3, -1/3),
    a one-dimensional minimisation; the value is the same for every d >= 2.
    """
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be an int >= 1, got {d!r}")
    if rounded:
        if d == 1:
            return 0.5
        a_of = lambda b: 0.5 / (2 + 3 * b) - 1  # noqa: E731
        res = minimize_scalar(lambda b: a_of(b) ** 2 + b**2, bounds=(-2 / 3 + 1e-9, -1 / 3), method="bounded",
                              options={"xatol": 1e-12})
        b = float(res.x)
        assert toy_output(np.array([0.0] * (d - 2) + [b, a_of(b) - 1e-12]), True) <= 0
        return min(0.5, math.hypot(a_of(b), b))
    rng = np.random.default_rng(seed)
    constraint = {"type": "ineq", "fun": lambda v: 0.5 - float(np.prod(1 + v)),
                  "jac": lambda v: -float(np.prod(1 + v)) / (1 + v)}
    best = math.inf
    for _ in range(starts):
        res = minimize(lambda v: float(v @ v), -rng.uniform(0, 1.0, d), jac=lambda v: 2 * v, method="SLSQP",
                       constraints=[constraint], options={"maxiter": 200, "ftol": 1e-12})
        if toy_output(res.x, False) <= 1e-9:
            best = min(best, float(np.linalg.norm(res.x)))
    return best


def random_direction(params: Sequence[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """A uniformly random unit direction (global L2 norm 1) over the given parameters."""
    gen = torch.Generator().manual_seed(seed)
    dirs = [torch.randn(p.shape, generator=gen, dtype=DTYPE) for p in params]
    norm = math.sqrt(sum(float((d**2).sum()) for d in dirs))
    return [d / norm for d in dirs]


def flip_radius(params: Sequence[torch.Tensor], changed: Callable[[], bool], seed: int, lo: float = 1e-12,
                hi: float = 1e3, iters: int = 14) -> float:
    """Smallest radius r (bisection on a log scale) with ``changed()`` after moving ``params`` by r u for a random
    unit direction u. An upper bound on the all-layer margin of the inputs ``changed`` checks; an illustration,
    since random directions in many dimensions are weak attacks. The tensors are restored exactly afterwards."""
    chosen = list(params)
    direction = [d.to(p.device) for d, p in zip(random_direction(chosen, seed), chosen)]
    originals = [p.detach().clone() for p in chosen]

    def flips(r: float) -> bool:
        with torch.no_grad():
            for p, o, d in zip(chosen, originals, direction):
                p.copy_(o + r * d)
        try:
            return changed()
        finally:
            with torch.no_grad():
                for p, o in zip(chosen, originals):
                    p.copy_(o)

    if not flips(hi):
        return math.inf
    for _ in range(iters):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if flips(mid) else (mid, hi)
    return hi
