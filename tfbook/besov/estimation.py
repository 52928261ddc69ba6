"""Least squares over hat dictionaries (the estimation side of Theorems 3 and 4 of paper 001).

The features are tensor-product hat atoms N_1(M_c x_c - j_c), j_c = -1..M_c - 1, on a grid with M_c
intervals along coordinate c. The anisotropic grid of Theorem 2 has M_c = 2^{K alpha_min / alpha_c}
(rounded; K may be fractional, so the dictionary grows in small steps), the isotropic grid M_c = 2^K.

* ``hat_features(X, k)``: the dense feature matrix of the dyadic grid with levels ``k`` (M_c = 2^k_c).
* ``sparse_hat_features(X, M)``: the same features as a sparse matrix (2^D non-zeros a row), any M_c.
* ``sieve_fit(...)``: n noisy samples, the level K chosen on a noisy hold-out split (never on the
  noiseless test error) or fixed, least squares on all n samples, test MSE against the noiseless target.
* ``fitted_slopes(ns, mse)``: log-log slopes of the risk against n, pooled and per seed.
* ``exponents(alpha)``: the risk exponents of Theorem 4 (anisotropic grid) and Theorem 3 (isotropic grid).
* ``fine_weierstrass``, ``balanced_amplitudes``, ``product_target``: a target of exact smoothness alpha_c
  along each coordinate whose error falls smoothly with the grid (no dyadic steps), with comparable
  constants along every coordinate.
* ``risk_table(...)``: test MSE of `sieve_fit` over sample sizes and seeds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spl
import torch

from tfbook import validate
from tfbook.besov.rates import smoothness
from tfbook.besov.references import bspline
from tfbook.device import DTYPE
from tfbook.training import untrained

GRIDS = ("aniso", "iso")
FINE_BASE = 2.0**0.25  # frequency ratio of `fine_weierstrass`: the ratio of the grids' level steps
RIDGE = 1e-8  # keeps atoms without samples at coefficient 0
HOLDOUT = 0.2  # fraction of the n samples that chooses the level
MIN_SAMPLES = 4  # samples per atom of the largest dictionary tried


def hat_features(X: torch.Tensor, k: Sequence[int]) -> torch.Tensor:
    """Row-wise Kronecker product of the per-coordinate hat matrices: (n, prod_c (2^k_c + 1))."""
    Phi = torch.ones(X.shape[0], 1, dtype=DTYPE, device=X.device)
    for c, kc in enumerate(k):
        j = torch.arange(-1, 2 ** int(kc), dtype=DTYPE, device=X.device)
        H = bspline(2.0 ** int(kc) * X[:, c:c + 1] - j, 1)  # (n, 2^k + 1)
        Phi = (Phi[:, :, None] * H[:, None, :]).reshape(X.shape[0], -1)
    return Phi


def fit_and_test(k: Sequence[int], X: torch.Tensor, y: torch.Tensor, Xt: torch.Tensor, ft: torch.Tensor) -> float:
    """Least squares on the dyadic grid ``k``; the mean squared error against ``ft`` at ``Xt`` (of the zero
    function, the fit's start, under ``TFBOOK_UNTRAINED=1``: `tfbook.training.untrained`)."""
    M = [2 ** int(kc) for kc in k]
    if untrained("besov.fit_and_test"):
        return float(np.mean(ft.cpu().numpy() ** 2))
    coef = least_squares(sparse_hat_features(X.cpu().numpy(), M), y.cpu().numpy())
    return float(np.mean((sparse_hat_features(Xt.cpu().numpy(), M) @ coef - ft.cpu().numpy()) ** 2))


def sparse_hat_features(X: np.ndarray, M: Sequence[int]) -> sp.csr_matrix:
    """(n, prod_c (M_c + 1)) CSR matrix of the hats N_1(M_c x_c - j_c); column order as `hat_features`."""
    n = X.shape[0]
    idx, w = np.zeros((n, 1), dtype=np.int64), np.ones((n, 1))
    for c, m in enumerate(M):
        u = X[:, c] * m
        i0 = np.clip(np.floor(u), 0, m - 1).astype(np.int64)  # left node of the cell, (n,)
        t = u - i0
        idx = (idx[:, :, None] * (m + 1) + np.stack([i0, i0 + 1], 1)[:, None, :]).reshape(n, -1)
        w = (w[:, :, None] * np.stack([1 - t, t], 1)[:, None, :]).reshape(n, -1)  # (n, 2^(c+1))
    rows = np.repeat(np.arange(n), idx.shape[1])
    return sp.csr_matrix((w.ravel(), (rows, idx.ravel())), shape=(n, int(np.prod([m + 1 for m in M]))))


def least_squares(Phi: sp.spmatrix, y: np.ndarray) -> np.ndarray:
    """Normal equations (Phi^T Phi + RIDGE I) c = Phi^T y, solved by sparse LU."""
    G = (Phi.T @ Phi + RIDGE * sp.identity(Phi.shape[1])).tocsc()
    return np.atleast_1d(spl.spsolve(G, Phi.T @ y))


def resolutions(alpha: Sequence[float], kind: str, K: float) -> list[int]:
    """Intervals M_c per coordinate at level K: round(2^{K alpha_min/alpha_c}) ("aniso") or round(2^K)."""
    a = np.asarray(alpha, dtype=float)
    exps = K * a.min() / a if kind == "aniso" else np.full(a.shape, float(K))
    return [max(1, int(round(2.0**e))) for e in exps]


def atoms(M: Sequence[int]) -> int:
    """Number of hat atoms of the grid with M_c intervals: prod_c (M_c + 1)."""
    return int(np.prod([m + 1 for m in M]))


@dataclass
class Fit:
    """One least-squares fit: the level used, its dictionary size and the test MSE."""

    level: float
    atoms: int
    test_mse: float


def _target(target: Callable, X: torch.Tensor) -> torch.Tensor:
    """target(X) checked: one finite real value per row of X."""
    if not callable(target):
        raise ValueError(f"target must be a callable on (n, D) points, got {type(target).__name__}")
    return validate.tensor("target(X)", target(X), shape=(X.shape[0],))


def _sample(target: Callable, D: int, n: int, seed: int, noise: float, n_test: int):
    gen = torch.Generator().manual_seed(1000 * seed + n % 997)
    X = torch.rand(n, D, generator=gen, dtype=DTYPE)
    y = _target(target, X) + noise * torch.randn(n, generator=gen, dtype=DTYPE)
    Xt = torch.rand(n_test, D, generator=gen, dtype=DTYPE)
    return X.numpy(), y.numpy(), Xt.numpy(), _target(target, Xt).numpy()


def _holdout_level(alpha, kind, X, y, clip: float, step: float, max_atoms: int) -> float:
    """The level K (multiples of ``step``) with the least validation error against the noisy y."""
    n_fit = int(round((1 - HOLDOUT) * len(y)))
    best, K, seen = (math.inf, None), 0.0, set()
    while atoms(resolutions(alpha, kind, K)) <= min(n_fit / MIN_SAMPLES, max_atoms):
        M = tuple(resolutions(alpha, kind, K))
        if M not in seen:
            seen.add(M)
            coef = least_squares(sparse_hat_features(X[:n_fit], M), y[:n_fit])
            pred = np.clip(sparse_hat_features(X[n_fit:], M) @ coef, -clip, clip)
            best = min(best, (float(np.mean((pred - y[n_fit:]) ** 2)), K), key=lambda b: b[0])
        K += step
    if best[1] is None:
        raise ValueError(f"n = {len(y)} is too small for even the coarsest grid ({MIN_SAMPLES} samples per atom)")
    return best[1]


def sieve_fit(target: Callable[[torch.Tensor], torch.Tensor], alpha: Sequence[float], kind: str, n: int,
              seed: int, noise: float = 1.0, clip: Optional[float] = None, level: Optional[float] = None,
              step: float = 0.25, max_atoms: int = 10**6, n_test: int = 4000) -> Fit:
    """Least squares from n samples y = target(x) + N(0, noise^2), x uniform on [0, 1]^D (``target`` maps
    (n, D) points to n finite values, else ValueError), predictions clipped to [-clip, clip] when given
    (the paper's truncation at F). ``level`` None: K chosen on the last 20% of
    the samples among the grids with >= 4 samples per atom, then refitted on all n; else K = ``level``.
    Under ``TFBOOK_UNTRAINED=1`` (`tfbook.training.untrained`) nothing is fitted: the level is ``level`` (0 when
    None) and every coefficient 0, the fit's start."""
    kind = validate.choice("kind", kind, GRIDS)
    smoothness(alpha)
    n, seed = validate.positive_int("n", n, 2), validate.positive_int("seed", seed, 0)
    noise = validate.real("noise", noise, low=0)
    clip = math.inf if clip is None else validate.real("clip", clip, low=0, low_open=True)
    step = validate.real("step", step, low=0, low_open=True)
    X, y, Xt, ft = _sample(target, len(alpha), n, seed, noise, validate.positive_int("n_test", n_test))
    if untrained("besov.sieve_fit"):
        K = 0.0 if level is None else validate.real("level", level, low=0)
        return Fit(K, atoms(resolutions(alpha, kind, K)), float(np.mean(ft ** 2)))
    K = _holdout_level(alpha, kind, X, y, clip, step, max_atoms) if level is None else validate.real("level", level, low=0)
    M = resolutions(alpha, kind, K)
    coef = least_squares(sparse_hat_features(X, M), y)
    mse = float(np.mean((np.clip(sparse_hat_features(Xt, M) @ coef, -clip, clip) - ft) ** 2))
    return Fit(K, atoms(M), mse)


def best_grid_mse(target: Callable[[torch.Tensor], torch.Tensor], alpha: Sequence[float], kind: str, n: int,
                  seed: int, max_atoms: int, n_test: int = 5000) -> float:
    """Test MSE of `sieve_fit` with the hold-out level among grids of at most ``max_atoms`` atoms (noise 1)."""
    max_atoms = validate.positive_int("max_atoms", max_atoms)
    return sieve_fit(target, alpha, kind, n, seed, max_atoms=max_atoms, n_test=n_test).test_mse


def fitted_slopes(ns: Sequence[int], mse) -> tuple[float, np.ndarray]:
    """(slope of log mean-over-seeds MSE, per-seed slopes) against log n; ``mse`` is (len(ns), seeds)."""
    mse = np.asarray(mse, dtype=float)
    if mse.ndim != 2 or mse.shape[0] != len(ns) or len(ns) < 2 or (mse <= 0).any():
        raise ValueError(f"mse must be a positive (len(ns) >= 2, seeds) array, got shape {mse.shape}")
    x = np.log(np.asarray(ns, dtype=float))
    pooled = float(np.polyfit(x, np.log(mse.mean(1)), 1)[0])
    return pooled, np.polyfit(x, np.log(mse), 1)[0]


def exponents(alpha: Sequence[float]) -> tuple[float, float]:
    """(2 alpha_tilde / (2 alpha_tilde + 1), 2 alpha_min / (2 alpha_min + D)): the exponents of n in the squared
    risk of Theorem 4 (the anisotropic grid) and Theorem 3 (an isotropic grid, which resolves every coordinate
    at the roughest one's scale), p = q = r = infinity."""
    _, a_min, a_tilde = smoothness(alpha)
    return 2 * a_tilde / (2 * a_tilde + 1), 2 * a_min / (2 * a_min + len(alpha))


def fine_weierstrass(t, a: float, seed: int = 0, base: float = FINE_BASE, top: float = 2.0**21) -> torch.Tensor:
    """(1 - base^-a) sum_j base^-ja cos(2 pi base^j t + theta_j) over base^j <= ``top``: |value| <= 1, Hölder
    exponent a (Hardy's Weierstrass function with frequency ratio ``base`` > 1). With base 2 it is
    `tfbook.besov.grids.weierstrass`, whose L2 error on a grid falls in dyadic steps; with base 2^(1/4) (the
    default, the ratio of the grids' level steps) it falls smoothly. Phases theta_j from numpy's
    default_rng(seed)."""
    a = validate.real("a", a, low=0, low_open=True)
    base = validate.real("base", base, low=1, low_open=True)
    top = validate.real("top", top, low=1)
    t = validate.tensor("t", t)
    terms = int(math.floor(math.log(top) / math.log(base) + 1e-9)) + 1
    theta = torch.as_tensor(np.random.default_rng(validate.positive_int("seed", seed, 0)).random(terms) * 2 * np.pi,
                            dtype=DTYPE, device=t.device)
    lam = base ** torch.arange(terms, dtype=DTYPE, device=t.device)
    return (1 - base**-a) * (lam**-a * torch.cos(2 * np.pi * lam * t[..., None] + theta)).sum(-1)


def balanced_amplitudes(alpha: Sequence[float], amp: float = 0.5) -> list[float]:
    """amp (2 pi)^(alpha_min - alpha_c): amplitudes that give every factor cos(2 pi x_c) the same derivative of
    its own order alpha_c (up to the factor amp (2 pi)^alpha_min), so that the anisotropic ball's radius is
    comparable along every coordinate, as the levels of Theorem 2 assume (they balance unit constants)."""
    _, a_min, _ = smoothness(alpha)
    amp = validate.real("amp", amp, low=0, low_open=True)
    return [amp * (2 * math.pi) ** (a_min - float(a)) for a in alpha]


def product_target(alpha: Sequence[float], amps: Sequence[float], base: float = FINE_BASE) -> Callable:
    """x -> prod_c (1 + amps_c fine_weierstrass(x_c, alpha_c, seed=c, base)): exact smoothness alpha_c along
    coordinate c; values in prod_c [1 - amps_c, 1 + amps_c]."""
    smoothness(alpha)
    if len(amps) != len(alpha):
        raise ValueError(f"amps must have one entry per coordinate ({len(alpha)}), got {len(amps)}")
    amps = [validate.real("amps", a, low=0) for a in amps]
    alpha = [float(a) for a in alpha]

    def target(X: torch.Tensor) -> torch.Tensor:
        out = torch.ones(X.shape[0], dtype=DTYPE, device=X.device)
        for c, (a, amp) in enumerate(zip(alpha, amps)):
            out = out * (1 + amp * fine_weierstrass(X[:, c], a, seed=c, base=base))
        return out

    return target


def risk_table(target: Callable, alpha: Sequence[float], kind: str, ns: Sequence[int], seeds: Sequence[int],
               noise: float, clip: Optional[float] = None, n_test: int = 4000) -> np.ndarray:
    """(len(ns), len(seeds)) test MSE of `sieve_fit` with the level chosen on the hold-out."""
    return np.array([[sieve_fit(target, alpha, kind, n, s, noise=noise, clip=clip, n_test=n_test).test_mse
                      for s in seeds] for n in ns])
