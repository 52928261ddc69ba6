"""The chapter's claims as functions, so the notebooks and the mutation tests execute the same checks.

Each function measures on a built `ColsymTransformer` (never on a formula), records its claims in a
`tfbook.claims.Claims` object and returns what it measured (for tables and plots).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch

from tfbook import claims as cl
from tfbook.colsym.algebra import Key, column_monomial, enumerate_multi_indices, max_value, msp
from tfbook.colsym.bounds import paper_depth, paper_width, prop1_depth, prop1_width, recursive_error_bound, sup_norm
from tfbook.colsym.construction import ColsymTransformer
from tfbook.colsym.squaring import product_error
from tfbook.colsym.verify import sup_error

TIGHT = 1e-9  # relative slack on bounds that are attained exactly (rounding of the measured error)


def stable(ratio: float) -> float:
    """A ratio measured/bound rounded to 9 decimals: where a bound is attained the ratio is 1 up to rounding
    (1 - 1e-16 on one machine, 1 + 1e-15 on another); rounded, it prints the same everywhere."""
    return round(float(ratio), 9)


def approx(value: float) -> float:
    """A searched sup error to 2 significant digits: the search sums many terms (n up to thousands), so the
    third digit can depend on the summation order of the machine; two digits do not."""
    return float(f"{float(value):.1e}")


def prop1(claims: cl.Claims, model: ColsymTransformer, X: torch.Tensor) -> float:
    """Prop 1 on the stream entering the attention layer: |m~_alpha - x^alpha| <= (|alpha|-1) e_psi, m~ in
    [0, 1], TF_0's width and depth, no attention in TF_0. Returns the worst ratio error / bound."""
    d, s, N, L, A = model.d, model.s, model.N, model.L, model.attention_block
    e_psi = product_error(N, L)
    H0 = model.stream(X, upto=A)  # (batch, n, D): the output of TF_0
    worst, in_range = 0.0, True
    for alpha in (a for a in enumerate_multi_indices(d, s) if sum(a) >= 2):
        approx = model.read(H0, f"m{alpha}.psi")[..., 0]  # (batch, n)
        worst = max(worst, float((approx - column_monomial(X, alpha)).abs().max()) / ((sum(alpha) - 1) * e_psi))
        in_range &= bool((approx >= 0).all() and (approx <= 1).all())
    worst = stable(worst)
    claims.check("Prop 1", "max over alpha of |m~_alpha - x^alpha| / ((|alpha|-1) e_psi)", worst, 1 + TIGHT)
    claims.check("Prop 1", "every m~_alpha lies in [0, 1]", in_range, True, "==")
    tf0 = model.layers[:A]
    claims.check("Prop 1", "TF_0 width <= 12 s d^s N", max((l.hidden_width for l in tf0), default=0),
                 prop1_width(d, s, N))
    claims.check("Prop 1", "TF_0 depth = (s-1)(L+1) (layers before the attention)", A, prop1_depth(s, L), "==")
    claims.check("Prop 1", "attention layers in TF_0", sum(l.kind == "attn" for l in tf0), 0, "==")
    return worst


def prop2(claims: cl.Claims, model: ColsymTransformer, X: torch.Tensor) -> float:
    """Prop 2 on the stream after the attention layer: weights exactly 1/n, W_Q = W_K = 0, one attention
    layer with one head, |P~_alpha - P_alpha| <= n(|alpha|-1) e_psi, P~_alpha equal in every column.
    Returns the worst ratio error / bound."""
    n, A = model.n, model.attention_block
    e_psi = product_error(model.N, model.L)
    layer = model.attention()
    H0 = model.stream(X, upto=A)  # (batch, n, D): the stream entering the attention layer
    weights = layer.attention_weights(H0)  # (batch, 1, n, n)
    claims.check("Prop 2", "attention weights equal 1/n exactly (max deviation)", float((weights - 1 / n).abs().max()),
                 0.0, "==")
    head = layer.heads[0]
    claims.check("Prop 2", "W_Q = W_K = 0 (largest entry)", float(torch.cat([head.W_Q, head.W_K]).abs().max()), 0.0, "==")
    counts = f"{sum(l.kind == 'attn' for l in model.layers)} / {layer.num_heads}"
    claims.check("Prop 2", "attention layers / heads in the whole model", counts, "1 / 1", "==")
    H1 = layer(H0)
    worst, spread, exact = 0.0, 0.0, 0.0
    for alpha in enumerate_multi_indices(model.d, model.s):
        P = model.read(H1, f"P{((alpha,))}")[..., 0]  # (batch, n)
        spread = max(spread, float((P - P[:, :1]).abs().max()) / n)
        err = float((P[:, 0] - msp((alpha,), X)).abs().max())
        if sum(alpha) == 1:
            exact = max(exact, err / n)
        else:
            worst = max(worst, err / (n * (sum(alpha) - 1) * e_psi))
    claims.check("Prop 2", "degree-1 P~_alpha exact to rounding (relative to n)", exact, 1e-13, roundoff=True)
    worst = stable(worst)
    if model.s >= 2:
        claims.check("Prop 2", "max over alpha of |P~_alpha - P_alpha| / (n (|alpha|-1) e_psi)", worst, 1 + TIGHT)
    claims.check("Prop 2", "P~_alpha is the same in every column (max spread / n)", spread, 1e-13, roundoff=True)
    return worst


def prop3(claims: cl.Claims, model: ColsymTransformer, inputs: Sequence[torch.Tensor]) -> list[tuple]:
    """Prop 3: the error E_T of every P~_T over the given input batches against recursion (4); P~_T = 0 for
    rank > n. Returns rows (rank, T, measured E_T, bound (4), P_T(1))."""
    n, N, L = model.n, model.N, model.L
    values = [(model.msp_values(X), X) for X in inputs]
    rows = []
    for r, Ts in model.keys.items():
        for T in Ts:
            err = max(float((vals[T] - msp(T, X)).abs().max()) for vals, X in values)
            rows.append((r, T, err, recursive_error_bound(T, n, N, L), max_value(T, n)))
    ratios = [stable(e / b) for _, _, e, b, _ in rows if b > 0]
    if ratios:
        claims.check("Prop 3", f"measured E_T <= recursion (4), all {len(ratios)} inexact T (max ratio)", max(ratios),
                     1 + TIGHT)
    beyond = [e for r, _, e, _, _ in rows if r > n]
    if beyond:
        claims.check("Prop 3", f"P~_T = 0 for every T of rank > n = {n} (max |value|)", max(beyond), 0.0, "==")
    return rows


def theorem1(claims: cl.Claims, model: ColsymTransformer, coeffs: Mapping[Key, float], label: str,
             bound: float, n_random: int = 128, ascent_steps: int = 10, seed: int = 0,
             signed: bool = False) -> dict[str, float]:
    """Theorem 1 (or its signed variant, ``bound`` given by the caller): estimated sup |f - TF| <= bound,
    with bound / ||f|| printed in the statement; width and depth against 12(2d)^s N and 2sL+3s."""
    res = sup_error(model, coeffs, n_random=n_random, seed=seed, ascent_steps=ascent_steps)
    ref = "Thm 1 (signed)" if signed else "Thm 1"
    rel = "" if signed else f", bound/||f|| = {cl.fmt(bound / sup_norm(coeffs, model.n))}"
    claims.check(ref, f"{label}: sup |f - TF| (2 digits){rel}", approx(res["sup"]), bound)
    return res


def sizes(claims: cl.Claims, model: ColsymTransformer, label: str) -> None:
    """Width and depth of a built model against Theorem 1's 12(2d)^s N and 2sL + 3s."""
    d, s, N, L = model.d, model.s, model.N, model.L
    claims.check("Thm 1", f"{label}: width <= 12 (2d)^s N", model.width, paper_width(d, s, N))
    claims.check("Thm 1", f"{label}: depth <= 2sL + 3s", model.depth, paper_depth(s, L))

