"""Estimating sup |f - TF| honestly: random inputs underestimate it, so add the inputs where it is attained.

Candidate families (each a batch of inputs X (batch, d, n) in [0, 1]), with G = 2^(Lk) the squaring grid:

* ``all ones`` (the maximum of every P_T) and ``all zeros``;
* ``random``: uniform entries;
* ``dyadic midpoints``: entries (2j+1) / 2G, where each squaring error is largest;
* ``adjacent grid pairs``: in each column the coordinates are j/G or (j+1)/G for one j, where the product
  error reaches +2 delta (for alpha = (1, 1) this attains the Prop 1 and Prop 2 bounds exactly);
* ``constant columns``: every column equal to one column drawn from the three structured families above;
* ``equal entries``: X = c 1 for every grid point and midpoint c = i / 2G (a random sample of them when
  there are more than 4 ``n_random``).

Then projected sign-gradient ascent on |f(X) - TF(X)| from the worst inputs found, with a step of the
order of the grid spacing 1/G that halves three times, keeping the best point visited.
"""
from __future__ import annotations

from typing import Mapping

import torch

from tfbook import validate
from tfbook.colsym.algebra import Key, evaluate
from tfbook.colsym.construction import ColsymTransformer
from tfbook.device import DTYPE

FAMILIES = ("all ones", "all zeros", "random", "dyadic midpoints", "adjacent grid pairs", "constant columns",
            "equal entries")
MEMORY = 2**23  # stream entries per chunk: bounds the (batch, n, n) attention weights and the (batch, n, D) states


def chunk_size(model: ColsymTransformer) -> int:
    """Inputs per forward pass so that batch * n * max(n, D, width) stays below `MEMORY`."""
    return max(1, MEMORY // (model.n * max(model.n, model.embed_dim, model.width)))


def candidate_inputs(model: ColsymTransformer, n_random: int, seed: int, device=None) -> dict[str, torch.Tensor]:
    """Named batches of inputs (batch, d, n) in [0, 1], ``n_random`` per random family."""
    n_random = validate.positive_int("n_random", n_random)
    gen = torch.Generator().manual_seed(validate.positive_int("seed", seed, 0))
    d, n, G = model.d, model.n, 2 ** (model.L * model.k)
    shape = (n_random, d, n)
    midpoints = (2 * torch.randint(0, G, shape, generator=gen) + 1).to(DTYPE) / (2 * G)
    j = torch.randint(0, G, (n_random, 1, n), generator=gen)
    pairs = (j + torch.randint(0, 2, shape, generator=gen)).to(DTYPE) / G
    pool = torch.cat([midpoints, pairs, torch.randint(0, G + 1, shape, generator=gen).to(DTYPE) / G])  # (3B, d, n)
    pick = torch.randint(0, pool.shape[0], (n_random,), generator=gen)
    constant = pool[pick, :, :1].expand(-1, -1, n).contiguous()  # one column repeated
    if 2 * G + 1 <= 4 * n_random:  # every grid point and midpoint
        levels = torch.arange(2 * G + 1, dtype=DTYPE) / (2 * G)
    else:  # a random sample of them (never materialise the 2G + 1 levels: G = 2^(Lk) can be 2^40)
        levels = torch.randint(0, 2 * G + 1, (4 * n_random,), generator=gen).to(DTYPE) / (2 * G)
    batches = {
        "all ones": torch.ones(1, d, n, dtype=DTYPE),
        "all zeros": torch.zeros(1, d, n, dtype=DTYPE),
        "random": torch.rand(shape, generator=gen, dtype=DTYPE),
        "dyadic midpoints": midpoints,
        "adjacent grid pairs": pairs,
        "constant columns": constant,
        "equal entries": levels.view(-1, 1, 1).expand(-1, d, n).contiguous(),
    }
    return {name: X.to(device) if device is not None else X for name, X in batches.items()}


def errors(model: ColsymTransformer, coeffs: Mapping[Key, float], X: torch.Tensor) -> torch.Tensor:
    """|f(X) - TF(X)| per input, evaluated in memory-bounded chunks."""
    with torch.no_grad():
        return torch.cat([(model(Xc) - evaluate(coeffs, Xc)).abs() for Xc in torch.split(X, chunk_size(model))])


def _error_gradient(model: ColsymTransformer, coeffs: Mapping[Key, float], X: torch.Tensor) -> torch.Tensor:
    """d|f - TF| / dX per input (batch, d, n), in chunks: a backward pass keeps every layer's states, so a
    chunk holds `chunk_size` / (number of layers) inputs."""
    per_chunk = max(1, chunk_size(model) // max(1, len(model.layers)))
    grads = []
    for Xc in torch.split(X.detach(), per_chunk):
        Xc = Xc.clone().requires_grad_(True)
        loss = (model(Xc) - evaluate(coeffs, Xc)).abs()
        grads.append(torch.autograd.grad(loss.sum(), Xc)[0])
    return torch.cat(grads)


def gradient_ascent(model: ColsymTransformer, coeffs: Mapping[Key, float], X0: torch.Tensor,
                    steps: int = 30, step: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Projected sign-gradient ascent on |f - TF| over [0, 1]^{d x n} from each input of X0.

    The step starts at ``step`` (default: the grid spacing 2^-(Lk)) and halves after each quarter of the
    steps. Returns the best point visited per start and its error.
    """
    h = 2.0 ** -(model.L * model.k) if step is None else validate.real("step", step, low=0, low_open=True)
    X = X0.clone()
    best_X, best_e = X0.clone(), errors(model, coeffs, X0)
    quarter = max(1, steps // 4)
    for t in range(steps):
        X = (X + h * 2.0 ** -(t // quarter) * _error_gradient(model, coeffs, X).sign()).clamp(0.0, 1.0)
        e = errors(model, coeffs, X)
        better = e > best_e
        best_X[better], best_e[better] = X[better], e[better]
    return best_X, best_e


def sup_error(model: ColsymTransformer, coeffs: Mapping[Key, float], n_random: int = 256, seed: int = 0,
              ascent_steps: int = 30, n_starts: int = 8) -> dict[str, float]:
    """Largest |f - TF| per candidate family, ``"gradient ascent"`` (best point visited from the ``n_starts``
    worst candidates) and the overall ``"sup"``."""
    device = next(model.parameters()).device
    batches = candidate_inputs(model, n_random, seed, device)
    result, pool = {}, []
    for name, X in batches.items():
        e = errors(model, coeffs, X)
        result[name] = float(e.max())
        pool.append((e, X))
    if ascent_steps > 0:
        e_all = torch.cat([e for e, _ in pool])
        X_all = torch.cat([X for _, X in pool])
        starts = X_all[torch.topk(e_all, min(n_starts, len(e_all))).indices]
        result["gradient ascent"] = float(gradient_ascent(model, coeffs, starts, ascent_steps)[1].max())
    result["sup"] = max(result.values())
    return result
