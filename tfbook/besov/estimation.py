"""Least squares over a fixed dictionary of hat atoms (the estimation side of Theorems 3 and 4 of paper 001).

The features are the tensor-product hat atoms N_1(2^{k_c} x_c - j_c), j_c = -1..2^{k_c} - 1, of a full grid
with levels ``k``; `best_grid_mse` fits every level K of an anisotropic or isotropic grid and keeps the best
held-out error (the balancing choice of the theorems, up to constants).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from tfbook import validate
from tfbook.besov.grids import levels
from tfbook.besov.references import bspline
from tfbook.device import DTYPE

GRIDS = ("aniso", "iso")


def hat_features(X: torch.Tensor, k: Sequence[int]) -> torch.Tensor:
    """Row-wise Kronecker product of the per-coordinate hat matrices: (n, prod_c (2^k_c + 1))."""
    Phi = torch.ones(X.shape[0], 1, dtype=DTYPE, device=X.device)
    for c, kc in enumerate(k):
        j = torch.arange(-1, 2 ** int(kc), dtype=DTYPE, device=X.device)
        H = bspline(2.0 ** int(kc) * X[:, c:c + 1] - j, 1)  # (n, 2^k + 1)
        Phi = (Phi[:, :, None] * H[:, None, :]).reshape(X.shape[0], -1)
    return Phi


def fit_and_test(k: Sequence[int], X: torch.Tensor, y: torch.Tensor, Xt: torch.Tensor, ft: torch.Tensor) -> float:
    """Ridge-stabilised least squares on the grid ``k``; the mean squared error against ``ft`` at ``Xt``."""
    Phi = hat_features(X, k)
    coef = torch.linalg.lstsq(Phi.T @ Phi + 1e-8 * torch.eye(Phi.shape[1], dtype=DTYPE), Phi.T @ y[:, None]).solution
    return float(((hat_features(Xt, k) @ coef)[:, 0] - ft).pow(2).mean())


def best_grid_mse(target: Callable[[torch.Tensor], torch.Tensor], alpha: Sequence[float], kind: str, n: int,
                  seed: int, max_atoms: int, n_test: int = 5000, max_level: int = 12) -> float:
    """The best held-out MSE over levels K of the ``kind`` grid ("aniso": k_c = floor(K min(alpha)/alpha_c),
    "iso": k_c = K), from n noisy samples (noise N(0, 1)); grids with fewer than 4 samples per atom are skipped."""
    kind = validate.choice("kind", kind, GRIDS)
    n, max_atoms = validate.positive_int("n", n), validate.positive_int("max_atoms", max_atoms)
    gen = torch.Generator().manual_seed(1000 * validate.positive_int("seed", seed, 0) + n % 997)
    D = len(alpha)
    X = torch.rand(n, D, generator=gen, dtype=DTYPE)
    y = target(X) + torch.randn(n, generator=gen, dtype=DTYPE)
    Xt = torch.rand(n_test, D, generator=gen, dtype=DTYPE)
    ft = target(Xt)
    errs = []
    for K in range(0, max_level):
        k = levels(np.array(alpha)[:, None], K)[:, 0] if kind == "aniso" else [K] * D
        if np.prod(2.0 ** np.array(k) + 1) > min(n / 4, max_atoms):  # >= 4 samples per parameter
            break
        errs.append(fit_and_test(k, X, y, Xt, ft))
    if not errs:
        raise ValueError(f"n = {n} is too small for even the coarsest grid (4 samples per atom)")
    return min(errs)
