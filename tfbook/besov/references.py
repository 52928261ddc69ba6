"""Exact references: the cardinal B-spline N_m and finite expansions in tensor B-spline atoms.

The constructions never call these; tests and notebooks compare the built networks against them.

* ``bspline(x, m)``: N_0 = 1 on [0, 1], N_{m+1} = N_m * N_0 (support [0, m+1]), by the stable
  recursion N_m(x) = (x N_{m-1}(x) + (m+1-x) N_{m-1}(x-1)) / m.
* ``expansion(X, k, j, coeffs, m)``: g(X) = sum_n c_n prod_{i,c} N_m(2^{k[n,i,c]} X[:,i,c] - j[n,i,c]).
* ``check_atoms``: the shared validation of (k, j, coeffs) against the paper's index set J_m(k).
* ``check_memory``: every builder's guard: its estimated memory against ``MEMORY_LIMIT``, before building.
"""
from __future__ import annotations

import numpy as np
import torch

from tfbook import validate
from tfbook.device import DTYPE

CHUNK = 2**22  # batch x atoms x l x d entries evaluated at once
MEMORY_LIMIT = 8 * 2**30  # bytes a builder may plan to allocate; raise it on a larger machine


def order(name: str, value, minimum: int = 1) -> int:
    """An order, depth or dimension: a Python/NumPy int >= ``minimum`` (floats and bools rejected)."""
    return validate.positive_int(name, value, minimum)


def check_memory(name: str, value, atoms: int, estimate: float) -> None:
    """ValueError naming the argument, the atom count, the estimate and the limit when a build of ``atoms``
    atoms (set by ``name`` = ``value``) is estimated at more than ``MEMORY_LIMIT`` bytes."""
    if estimate > MEMORY_LIMIT:
        raise ValueError(f"{name} = {value!r} gives {atoms} atoms, estimated at {estimate / 2**30:.3g} GiB: over "
                         f"the limit of {MEMORY_LIMIT / 2**30:.3g} GiB (tfbook.besov.references.MEMORY_LIMIT)")


def bspline(x, m: int) -> torch.Tensor:
    """N_m(x) elementwise for any real tensor ``x`` (float64); N_0 is the indicator of [0, 1]."""
    m = order("m", m, 0)
    x = validate.tensor("x", x)
    if m == 0:
        return ((x >= 0) & (x <= 1)).to(DTYPE)
    # half-open indicators make the recursion continuous at the knots for m >= 1
    shifts = torch.arange(m + 1, dtype=DTYPE, device=x.device)  # N_0(x - s), s = 0..m
    y = x.unsqueeze(-1) - shifts  # (..., m+1)
    values = ((y >= 0) & (y < 1)).to(DTYPE)
    for r in range(1, m + 1):
        y = x.unsqueeze(-1) - shifts[: m + 1 - r]  # N_r(x - s), s = 0..m-r
        values = (y * values[..., :-1] + (r + 1 - y) * values[..., 1:]) / r
    return values[..., 0]


def check_atoms(k, j, coeffs, m: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validate atoms: ``k``, ``j`` integer arrays (N, l, d), k >= 0, j in J_m(k) = {-m..2^k}; ``coeffs`` (N,) finite."""
    out = []
    for name, value in (("k", k), ("j", j)):
        arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name} must be an integer array of shape (N, l, d), got dtype {arr.dtype}")
        if arr.ndim != 3 or min(arr.shape) < 1:
            raise ValueError(f"{name} must have shape (N, l, d) with N, l, d >= 1, got {arr.shape}")
        out.append(arr.astype(np.int64))
    k_arr, j_arr = out
    if k_arr.shape != j_arr.shape:
        raise ValueError(f"k and j must have the same shape, got {k_arr.shape} and {j_arr.shape}")
    if (k_arr < 0).any():
        raise ValueError(f"k must be >= 0, got a minimum of {k_arr.min()}")
    if (k_arr > 52).any():
        raise ValueError(f"k must be <= 52 (float64 resolution), got a maximum of {k_arr.max()}")
    if ((j_arr < -m) | (j_arr > 2**k_arr)).any():
        raise ValueError(f"j must lie in J_m(k) = {{-m, ..., 2^k}} (m = {m})")
    c = validate.tensor("coeffs", coeffs, shape=(k_arr.shape[0],))
    return torch.as_tensor(k_arr), torch.as_tensor(j_arr), c


def expansion(X, k, j, coeffs, m: int) -> torch.Tensor:
    """The exact g(X) = sum_n coeffs[n] prod_{i,c} N_m(2^k X - j), shape (batch,)."""
    m = order("m", m)
    k, j, c = check_atoms(k, j, coeffs, m)
    N, l, d = k.shape
    X = validate.tensor("X", X, shape=(None, l, d))
    scale, shift = (2.0 ** k).to(DTYPE), j.to(DTYPE)
    B = X.shape[0]
    out = torch.zeros(B, dtype=DTYPE, device=X.device)
    step = max(1, CHUNK // max(1, B * l * d))
    for s in range(0, N, step):
        u = X[:, None] * scale[s:s + step].to(X.device) - shift[s:s + step].to(X.device)  # (B, n, l, d)
        out = out + bspline(u, m).flatten(-2).prod(-1) @ c[s:s + step].to(X.device)
    return out
