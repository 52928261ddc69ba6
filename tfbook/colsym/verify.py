"""Estimating sup |f - TF| honestly: random inputs underestimate it, so add adversarial candidates.

Candidates: all ones (the maximum of every P_T), all zeros, random inputs, random dyadic midpoints of
the squaring grid 2^-(Lk) (where each squaring error is largest), and projected gradient ascent on
|f(X) - TF(X)| over [0, 1]^{d x n} starting from the worst of those.
"""
from __future__ import annotations

from typing import Mapping

import torch

from tfbook.colsym.algebra import Key, evaluate
from tfbook.colsym.construction import ColsymTransformer
from tfbook.device import DTYPE


def candidate_inputs(model: ColsymTransformer, n_random: int, seed: int, device=None) -> dict[str, torch.Tensor]:
    """Named batches of inputs (batch, d, n) in [0, 1]."""
    gen = torch.Generator().manual_seed(seed)
    shape = (n_random, model.d, model.n)
    grid = 2 ** (model.L * model.k)
    midpoints = (2 * torch.randint(0, grid, shape, generator=gen) + 1).to(DTYPE) / (2 * grid)
    batches = {
        "all ones": torch.ones(1, model.d, model.n, dtype=DTYPE),
        "all zeros": torch.zeros(1, model.d, model.n, dtype=DTYPE),
        "random": torch.rand(shape, generator=gen, dtype=DTYPE),
        "dyadic midpoints": midpoints,
    }
    return {name: X.to(device) if device is not None else X for name, X in batches.items()}


def errors(model: ColsymTransformer, coeffs: Mapping[Key, float], X: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """|f(X) - TF(X)| per input, evaluated in chunks."""
    with torch.no_grad():
        return torch.cat([(model(Xc) - evaluate(coeffs, Xc)).abs() for Xc in torch.split(X, chunk)])


def gradient_ascent(model: ColsymTransformer, coeffs: Mapping[Key, float], X0: torch.Tensor,
                    steps: int = 30, step: float = 0.02) -> torch.Tensor:
    """Projected sign-gradient ascent on |f - TF| over [0, 1]^{d x n}; returns the final inputs."""
    X = X0.clone()
    for _ in range(steps):
        X.requires_grad_(True)
        loss = (model(X) - evaluate(coeffs, X)).abs().sum()
        (grad,) = torch.autograd.grad(loss, X)
        X = (X.detach() + step * grad.sign()).clamp(0.0, 1.0)
    return X.detach()


def sup_error(model: ColsymTransformer, coeffs: Mapping[Key, float], n_random: int = 256, seed: int = 0,
              ascent_steps: int = 30, n_starts: int = 8) -> dict[str, float]:
    """Largest |f - TF| per candidate family, plus ``"gradient ascent"`` and the overall ``"sup"``."""
    device = next(model.parameters()).device
    batches = candidate_inputs(model, n_random, seed, device)
    result, pool = {}, []
    for name, X in batches.items():
        e = errors(model, coeffs, X)
        result[name] = float(e.max())
        pool.append((e, X))
    e_all = torch.cat([e for e, _ in pool])
    X_all = torch.cat([X for _, X in pool])
    starts = X_all[torch.topk(e_all, min(n_starts, len(e_all))).indices]
    if ascent_steps > 0:
        result["gradient ascent"] = float(errors(model, coeffs, gradient_ascent(model, coeffs, starts, ascent_steps)).max())
    result["sup"] = max(result.values())
    return result
