"""Anisotropic and sparse hat grids (Theorems 2 and 6), and Theorem 5's token masks.

* ``aniso_interpolant(f, alpha, K)``: the tensor-product hat (m = 1) interpolant of f on the grid with
  levels k_ic = floor(K alpha_min / alpha_ic + 1e-9) (0 where alpha = inf), as atoms (k, j, coeffs).
* ``sparse_interpolant(f, D, K)``: the combination-technique sparse grid on [0, 1]^D as atoms, with
  coefficients (-1)^q binom(D-1, q) f(node) on the levels |k|_1 = K - q, q = 0..D-1; ``sparse_count``
  counts them. Both interpolants refuse grids estimated above `references.MEMORY_LIMIT`.
* ``token_mask(X, regions, rankings, t)``: Definition 10's S_k with the oracle region.
* ``quantize(X, keep, u)``: Q_{t,u}; kept tokens unchanged, the others rounded up to the grid 1/u.
* ``weierstrass(t, a)``: W_a(t) = (1 - 2^-a) sum_{j<J} 2^-ja cos(2 pi 2^j t + theta_j), Hölder-a.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np
import torch

from tfbook import validate
from tfbook.besov.references import check_memory, order
from tfbook.device import DTYPE

CHUNK = 2**16  # nodes per call of f
ATOM_BYTES = 256  # peak bytes per atom and coordinate while listing atoms (index tuples, k, j, nodes)


def levels(alpha, K: int) -> np.ndarray:
    """k_ic = floor(K alpha_min / alpha_ic + 1e-9), 0 where alpha_ic = inf."""
    a = np.asarray(alpha, dtype=float)
    if a.ndim != 2 or a.size == 0 or np.isnan(a).any() or (a <= 0).any():
        raise ValueError(f"alpha must be an (l, d) array of positive numbers (inf allowed), got {alpha!r}")
    if np.isinf(a).all():
        raise ValueError("alpha must have at least one finite entry")
    K = order("K", K, 0)
    amin = a.min()
    with np.errstate(divide="ignore"):
        k = np.floor(K * amin / a + 1e-9)
    return np.where(np.isinf(a), 0, k).astype(np.int64)


def _evaluate(f: Callable, nodes: torch.Tensor) -> torch.Tensor:
    if not callable(f):
        raise ValueError(f"f must be a callable returning one real value per node, got {type(f).__name__}")
    values = []
    for s in range(0, nodes.shape[0], CHUNK):
        v = validate.tensor("f(nodes)", f(nodes[s:s + CHUNK])).reshape(-1)
        if v.shape[0] != min(CHUNK, nodes.shape[0] - s):
            raise ValueError(f"f must return one value per node, got shape {tuple(v.shape)}")
        values.append(v)
    return torch.cat(values)


def aniso_interpolant(f: Callable, alpha, K: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(k, j, coeffs): every j with j_ic in {-1..2^k_ic - 1}, coeffs = f at the nodes x_ic = (j_ic + 1)/2^k_ic."""
    k_lvl = levels(alpha, K)  # (l, d)
    l, d = k_lvl.shape
    count = int(np.prod([2 ** int(kk) + 1 for kk in k_lvl.ravel()], dtype=object))
    check_memory("K", K, count, ATOM_BYTES * count * l * d)
    ranges = [range(-1, 2 ** int(kk)) for kk in k_lvl.ravel()]
    j = torch.tensor(list(itertools.product(*ranges)), dtype=torch.int64).reshape(-1, l, d)
    k = torch.as_tensor(k_lvl).expand_as(j).clone()
    nodes = (j + 1).to(DTYPE) / 2.0**k
    return k, j, _evaluate(f, nodes)


def sparse_interpolant(f: Callable, D: int, K: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Combination-technique sparse grid on [0, 1]^D (l = D tokens of d = 1) as hat atoms (k, j, coeffs)."""
    D, K = order("D", D), order("K", K, 0)
    count = sparse_count(D, K)
    check_memory("K", K, count, ATOM_BYTES * count * D)
    ks, js, cs = [], [], []
    for q in range(min(D, K + 1)):
        weight = (-1) ** q * math.comb(D - 1, q)
        for lv in itertools.product(range(K - q + 1), repeat=D):
            if sum(lv) != K - q:
                continue
            j = torch.tensor(list(itertools.product(*[range(-1, 2**v) for v in lv])), dtype=torch.int64)
            k = torch.tensor(lv, dtype=torch.int64).expand_as(j)
            ks.append(k)
            js.append(j)
            cs.append(torch.full((len(j),), float(weight), dtype=DTYPE))
    k, j = torch.cat(ks)[:, :, None], torch.cat(js)[:, :, None]
    nodes = (j + 1).to(DTYPE) / 2.0**k
    return k, j, torch.cat(cs) * _evaluate(f, nodes)


def sparse_count(D: int, K: int) -> int:
    """Atoms of `sparse_interpolant`: sum_{q < min(D, K+1)} sum_{|k|_1 = K - q} prod_c (2^k_c + 1), counted
    with the generating polynomial (sum_v (2^v + 1) z^v)^D, never by listing them."""
    D, K = order("D", D), order("K", K, 0)
    poly = [1] + [0] * K  # coefficients of z^0..z^K
    for _ in range(D):
        poly = [sum(poly[s - v] * (2**v + 1) for v in range(s + 1)) for s in range(K + 1)]
    return sum(poly[K - q] for q in range(min(D, K + 1)))


def token_mask(X, regions: Callable, rankings, t: int) -> torch.Tensor:
    """keep[b, j] = rankings[regions(X)[b], j] <= t (boolean (batch, l))."""
    R = torch.as_tensor(np.asarray(rankings))
    if R.ndim != 2 or R.dtype in (torch.float32, torch.float64, torch.bool):
        raise ValueError(f"rankings must be an integer array (num_regions, l), got {tuple(R.shape)} {R.dtype}")
    l = R.shape[1]
    perm = torch.arange(1, l + 1)
    if not bool((R.sort(dim=1).values == perm).all()):
        raise ValueError("rankings must have every row a permutation of 1..l")
    X = validate.tensor("X", X, shape=(None, l, None))
    t = order("t", t, 0)
    reg = torch.as_tensor(regions(X))
    if reg.shape != (X.shape[0],) or reg.is_floating_point() or reg.dtype == torch.bool:
        raise ValueError(f"regions(X) must return a (batch,) integer tensor, got {tuple(reg.shape)} {reg.dtype}")
    if bool(((reg < 0) | (reg >= R.shape[0])).any()):
        raise ValueError(f"regions(X) must lie in 0..{R.shape[0] - 1}")
    return R[reg.cpu()].to(X.device) <= t


def quantize(X, keep, u) -> torch.Tensor:
    """Q_{t,u}: tokens with keep = True unchanged, the others x -> ceil(u x)/u; keep (batch, l) or (l,)."""
    X = validate.tensor("X", X, shape=(None, None, None), low=0.0, high=1.0)
    u = validate.real("u", u, low=1.0)
    keep = torch.as_tensor(keep)
    if keep.dtype != torch.bool:
        raise ValueError(f"keep must be a boolean tensor, got dtype {keep.dtype}")
    if keep.shape not in ((X.shape[1],), (X.shape[0], X.shape[1])):
        raise ValueError(f"keep must have shape ({X.shape[1]},) or ({X.shape[0]}, {X.shape[1]}), got {tuple(keep.shape)}")
    keep = keep.to(X.device).expand(X.shape[0], X.shape[1])[..., None]
    return torch.where(keep, X, torch.ceil(u * X) / u)


def weierstrass(t, a: float, terms: int = 22, seed: int = 0) -> torch.Tensor:
    """W_a(t) = (1 - 2^-a) sum_{j < terms} 2^-ja cos(2 pi 2^j t + theta_j), |W_a| <= 1, Hölder exponent a."""
    a = validate.real("a", a, low=0, low_open=True)
    gen = np.random.default_rng(validate.positive_int("seed", seed, 0))
    t = validate.tensor("t", t)
    theta = torch.as_tensor(gen.random(terms) * 2 * np.pi, dtype=DTYPE, device=t.device)
    j = torch.arange(terms, dtype=DTYPE, device=t.device)
    return (1 - 2.0**-a) * (2.0 ** (-j * a) * torch.cos(2 * np.pi * 2.0**j * t[..., None] + theta)).sum(-1)


def hat_interpolate(f: Callable, lv, Y) -> torch.Tensor:
    """Reference evaluator: the tensor-product hat interpolant of f on the full grid with levels ``lv`` (D,),
    at points Y (n, D) (multilinear interpolation; equals `expansion` of the atoms of `aniso_interpolant`).
    Interpolates with scipy on the host (it reads Y's values); the result is on Y's device."""
    from scipy.interpolate import RegularGridInterpolator

    axes = [np.linspace(0.0, 1.0, 2 ** int(k) + 1) for k in np.ravel(lv)]
    mesh = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(axes))
    values = _evaluate(f, torch.as_tensor(mesh, dtype=DTYPE)).numpy().reshape([len(a) for a in axes])
    Y = validate.tensor("Y", Y, shape=(None, len(axes)), low=0.0, high=1.0)
    return torch.as_tensor(RegularGridInterpolator(axes, values)(Y.cpu().numpy()), dtype=DTYPE, device=Y.device)


def sparse_evaluate(f: Callable, D: int, K: int, Y) -> torch.Tensor:
    """Reference evaluator of `sparse_interpolant` by the combination technique on full grids."""
    D, K = order("D", D), order("K", K, 0)
    out = torch.zeros(len(Y), dtype=DTYPE, device=torch.as_tensor(Y).device)
    for q in range(min(D, K + 1)):
        for lv in itertools.product(range(K - q + 1), repeat=D):
            if sum(lv) == K - q:
                out += (-1) ** q * math.comb(D - 1, q) * hat_interpolate(f, lv, Y)
    return out
