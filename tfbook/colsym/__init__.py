"""Chapter: column-symmetric polynomials with a one-head transformer (Takeshita & Imaizumi, 2025).

Public API (the issue's contract):

* `build_transformer(coeffs, d, n, N, L)` -> `ColsymTransformer`, ``model(X)`` for X (batch, d, n) in [0, 1]
* `msp(T, X)`: P_T evaluated exactly
* `theorem1_bound(coeffs, d, n, N, L)` = 8^s ||f||_inf N^-L, `paper_width(d, s, N)`, `paper_depth(s, L)`
* the paper's size formulas, registered with `tfbook.claims.paper_formula` (the bounds of the size claims):
  `paper_width`, `paper_depth`, `prop1_width`, `prop1_depth`, `prop3_depth`, `paper_ff_layers`, `paper_heads`,
  `paper_attention_layers`, `prop1_attention_layers`, `prop2_query_key_weight`, `lemma1_width`, `product_width`,
  `lemma2_depth`, `lemma2_width`, `values_over_n`, `flattened_increments`, `flattened_increment_floor`

Submodules: `algebra` (the P_T basis, Lemmas 3 and 6, counts), `squaring` (Lemmas 1, 2, 7 on `tfbook.gadgets`),
`construction` (Props 1-3 and the read-out, `paper_sizes`), `bounds` (eq. (4), Section 8's constant, size
formulas), `verify` (sup-error search), `checks` (the claims, shared by notebooks and mutation tests),
`flatten` (the Section 9.1 network on the flattened input, built).
"""
from __future__ import annotations

from typing import Mapping

import torch

from tfbook.colsym.algebra import (canonical, count_bounds, degree, decompose_column_symmetric, enumerate_msp,
                                   enumerate_multi_indices, evaluate, expand, lemma3_terms, max_value, msp,
                                   msp_bruteforce, msp_partition, msp_symbolic, term_coefficient)
from tfbook.colsym.bounds import (flattened_increment_floor, flattened_increments, impl_depth, lemma1_width,
                                  lemma2_depth, lemma2_width, paper_attention_layers, paper_depth, paper_ff_layers,
                                  paper_heads, paper_width, product_width, prop1_attention_layers, prop1_depth,
                                  prop1_width, prop2_query_key_weight, prop3_depth, recursion_constant,
                                  recursive_error_bound, section8_constant, sup_norm, theorem1_bound_from,
                                  values_over_n)
from tfbook.colsym.construction import (ColsymTransformer, build_transformer, example1_coeffs, paper_size_formulas,
                                        paper_sizes, random_coeffs, validate_coeffs)
from tfbook.colsym.squaring import (FNN, build_product, build_product_fnn, build_sawtooth, build_square_fnn, choose_k,
                                    fnn_to_transformer, product_error, run_converted, run_slots, squaring_error)
from tfbook import validate
from tfbook.device import DTYPE


def theorem1_bound(coeffs: Mapping, d: int, n: int, N: int, L: int, signed: bool = False) -> float:
    """Theorem 1: sup |f - TF| <= 8^s ||f||_inf N^-L, s the degree of f and ||f||_inf = f(1).

    With ``signed=True`` negative coefficients are allowed and the bound is 8^s N^-L sum |c_T| P_T(1).
    """
    d, n = validate.positive_int("d", d), validate.positive_int("n", n)
    N, L = validate.positive_int("N", N), validate.positive_int("L", L)
    c = validate_coeffs(coeffs, d, signed)
    s = max([degree(T) for T in c] + [1])
    return theorem1_bound_from(c, s, n, N, L, signed)


def _bench_build(device: torch.device) -> tuple[ColsymTransformer, torch.Tensor]:
    coeffs = example1_coeffs(2, 3)
    model = build_transformer(coeffs, d=2, n=1024, N=4, L=4).to(device)
    X = torch.rand(8, 2, 1024, dtype=DTYPE, device=device)
    return model, X


def bench_cases() -> dict[str, dict]:
    """The chapter's benchmarked construction (read by `tfbook.build.bench`)."""
    return {"colsym: Theorem 1, d=2 s=3 N=4 L=4, n=1024, batch 8":
            {"build": _bench_build, "forward": lambda state: state[0](state[1]), "units": "inputs", "count": 8}}

__all__ = [
    "flattened_increment_floor", "flattened_increments", "lemma1_width", "lemma2_depth", "lemma2_width",
    "paper_attention_layers", "paper_ff_layers", "paper_heads", "paper_size_formulas", "product_width",
    "prop1_attention_layers", "prop2_query_key_weight", "prop3_depth", "values_over_n",
    "ColsymTransformer", "FNN", "build_product", "build_product_fnn", "build_sawtooth", "build_square_fnn", "build_transformer", "canonical",
    "choose_k", "count_bounds", "decompose_column_symmetric", "enumerate_msp", "enumerate_multi_indices",
    "evaluate", "example1_coeffs", "expand", "fnn_to_transformer", "impl_depth", "lemma3_terms", "max_value",
    "msp", "msp_bruteforce", "msp_partition", "msp_symbolic", "paper_depth", "paper_sizes", "paper_width",
    "product_error", "prop1_depth", "prop1_width", "random_coeffs", "recursion_constant", "recursive_error_bound",
    "run_converted", "run_slots", "section8_constant",
    "squaring_error", "sup_norm", "term_coefficient", "theorem1_bound", "theorem1_bound_from",
]
