"""The construction's approximants in closed form, from the paper's recipe and not from the network.

Yarotsky's f_m (m = Lk sawtooth levels) is the piecewise-linear interpolant of x^2 on the grid j 2^-m of
[0, 1], so f_m(x) = x^2 + (x - a)(a + 2^-m - x) with a the grid point below x (it lies above the convex x^2). From it, with the same
recursions as the paper (and nothing read from the model but its parameters d, n, s, L, k, clip, keys):

* psi(u, v) = relu(2 f((u + v)/2) - f(u)/2 - f(v)/2) (paper 000's product);
* TF_0 (Prop 1): m~_alpha = psi(m~_beta, x_i) with i the last coordinate of alpha and beta = alpha - e_i;
* the attention (Prop 2): P~_alpha = sum over the columns of m~_alpha;
* the rank induction (eq. (3)): P~_T = clip_[0, M_r](n^r psi(P~_{T^-} / n^{r-1}, P~_{alpha_r} / n) - sum_j P~_{T_j}),
  M_r = n!/(n-r)! (falling clip) or n^r (the paper's).

The network must agree with these values up to rounding: unlike the error bounds of Props 1-3, which hold
with room to spare for most inputs, this notices a change of any single layer.
"""
from __future__ import annotations

import torch

from tfbook.colsym.algebra import Key, column_monomial, enumerate_multi_indices, lemma3_terms
from tfbook.colsym.bounds import falling_factorial
from tfbook.colsym.construction import ColsymTransformer
from tfbook.colsym.algebra import as_batch


def interpolated_square(x: torch.Tensor, m: int) -> torch.Tensor:
    """f_m(x) on [0, 1]: the linear interpolant of x^2 between the grid points a = floor(x 2^m) 2^-m and a + 2^-m."""
    h = 2.0**-m
    a = torch.clamp(torch.floor(x / h), 0, 2**m - 1) * h
    return x * x + (x - a) * (a + h - x)


def product(u: torch.Tensor, v: torch.Tensor, m: int) -> torch.Tensor:
    """psi(u, v) = relu(2 f_m((u + v)/2) - f_m(u)/2 - f_m(v)/2)."""
    return torch.relu(2 * interpolated_square((u + v) / 2, m) - interpolated_square(u, m) / 2
                      - interpolated_square(v, m) / 2)


def approximant_values(model: ColsymTransformer, X: torch.Tensor) -> tuple[dict, dict[Key, torch.Tensor]]:
    """({alpha: m~_alpha (batch, n)} for 2 <= |alpha| <= s, {T: P~_T (batch,)} for every key of the model)."""
    X = as_batch(X)
    m = model.L * model.k
    mono = {a: column_monomial(X, a) for a in enumerate_multi_indices(model.d, 1)}
    for alpha in (a for a in enumerate_multi_indices(model.d, model.s) if sum(a) >= 2):
        i = max(j for j in range(model.d) if alpha[j] > 0)
        beta = tuple(a - (j == i) for j, a in enumerate(alpha))
        mono[alpha] = product(mono[beta], X[:, i, :], m)
    n = model.n
    P = {T: mono[T[0]].sum(-1) for T in model.keys[1]}
    for r in sorted(model.keys):
        if r < 2:
            continue
        M = falling_factorial(n, r) if getattr(model, "clip", "falling") == "falling" else n**r
        for T in model.keys[r]:
            T_minus, last, T_js = lemma3_terms(T)
            value = n**r * product(P[T_minus] / n ** (r - 1), P[((last,))] / n, m) - sum(P[Tj] for Tj in T_js)
            P[T] = value.clamp(0.0, float(M))
    return {a: v for a, v in mono.items() if sum(a) >= 2}, P
