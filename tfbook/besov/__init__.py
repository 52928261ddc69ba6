"""Chapter: transformers approximating mixed-smooth and anisotropic Besov functions, and token extraction
(paper 001, an anonymous ICLR-2023 submission).

Public API (the chapter's contract):

* references: `bspline(x, m)`, `expansion(X, k, j, coeffs, m)`
* gadgets: `product_net(m_q, R)` (Lemma 4), `bspline_net(m, d, m_q)` (Lemma 5), `bspline_net_error`
* the transformer (Theorems 1-2): `build_transformer(k, j, coeffs, m, m_q, gamma)`, `transformer_sizes`,
  `error_bound`, `paper_width`; every built model has ``to_device(device)`` (`gadgets.BesovConstruction`)
* rates: `smoothness`, `D`, `eta`, `nu`, `num_atoms`, `risk_exponents`, `token_count`
* grids and masks: `aniso_interpolant`, `token_mask`, `quantize`
* Theorem 5 compiled (`masked`): `build_masked_transformer(fs, K, rankings, t, m_q, gamma)`,
  `masked_error_bound`, `thm5_atoms`
* the paper's size formulas (`formulas`, each a `tfbook.claims.paper_formula`): `lemma3_weight_bound`,
  `lemma4_depth`, `lemma5_width`, `lemma5_weight_bound`, `lemma5_depth`, `lemma5_depth_growth`, `thm1_rounds`,
  `thm1_heads`, `thm1_width`, `thm1_width_growth`, `thm1_embedding`, `thm1_nonzero`, `thm1_nonzero_slope`,
  `thm1_weight_scale`, `flat_width`, `flat_width_slope`, `lemma6_attention_lipschitz`

Submodules: `references`, `rates`, `formulas`, `program` (vectorised slot programs), `gadgets`, `transformer`, `grids`,
`masked`.
"""
from __future__ import annotations

import torch

from tfbook.besov import estimation, formulas, masked
from tfbook.besov.estimation import best_grid_mse, fitted_slopes, hat_features, sieve_fit
from tfbook.besov.gadgets import (BSplineNet, ProductNet, bspline_net, bspline_net_error, product_error_range,
                                  product_net, product_reference, spline_factor_constant, yarotsky)
from tfbook.besov.formulas import (flat_width, flat_width_slope, lemma3_weight_bound, lemma4_depth, lemma5_depth,
                                   lemma5_depth_growth, lemma5_weight_bound, lemma5_width, lemma6_attention_lipschitz,
                                   thm1_embedding, thm1_heads, thm1_nonzero, thm1_nonzero_slope, thm1_rounds,
                                   thm1_weight_scale, thm1_width, thm1_width_growth)
from tfbook.besov.grids import (aniso_interpolant, hat_interpolate, levels, quantize, sparse_evaluate, sparse_interpolant, token_mask,
                                weierstrass)
from tfbook.besov.masked import MaskedTransformer, build_masked_transformer, masked_error_bound, thm5_atoms
from tfbook.besov.rates import (D, balance_fit, delta, eta, hat_alpha_tilde, nu, num_atoms, paper_balance_power,
                                paper_scope, risk_exponents, smoothness, token_count)
from tfbook.besov.references import bspline, check_atoms, expansion
from tfbook.besov.transformer import (BesovTransformer, atom_width, build_transformer, error_bound, fnn_baseline, leak, partner,
                                      paper_width, random_atoms, rounds, support_samples, transformer_sizes)

__all__ = [
    "best_grid_mse", "estimation", "formulas", "flat_width", "flat_width_slope", "lemma3_weight_bound", "lemma4_depth",
    "lemma5_depth", "lemma5_depth_growth", "lemma5_weight_bound", "lemma5_width", "lemma6_attention_lipschitz",
    "thm1_embedding", "thm1_heads", "thm1_nonzero", "thm1_nonzero_slope", "thm1_rounds", "thm1_weight_scale",
    "thm1_width", "thm1_width_growth", "hat_features", "BSplineNet", "BesovTransformer", "D", "ProductNet", "aniso_interpolant", "atom_width", "balance_fit",
    "bspline", "bspline_net", "bspline_net_error", "build_transformer", "check_atoms", "delta", "error_bound",
    "eta", "expansion", "fnn_baseline", "hat_interpolate", "leak", "sparse_evaluate", "levels", "nu", "num_atoms", "paper_balance_power", "paper_width", "partner",
    "product_error_range", "product_net", "product_reference", "quantize", "random_atoms", "risk_exponents",
    "rounds", "smoothness", "sparse_interpolant", "spline_factor_constant", "support_samples", "token_count",
    "token_mask", "transformer_sizes", "weierstrass", "yarotsky", "masked", "MaskedTransformer",
    "build_masked_transformer", "masked_error_bound", "thm5_atoms", "fitted_slopes", "sieve_fit", "hat_alpha_tilde",
    "paper_scope",
]


def _bench_build(device: torch.device):
    k, j, c = random_atoms(64, 8, 1, 1, 3, seed=0)
    model = build_transformer(k, j, c, 1, 8, 30.0).to(device)
    X = torch.rand(256, 8, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(device)
    return model, X


def bench_cases() -> dict[str, dict]:
    """The chapter's benchmarked construction (read by `tfbook.build.bench`)."""
    return {"besov: B-spline transformer (N=64, l=8, m=1, m_q=8)":
            {"build": _bench_build, "forward": lambda state: state[0](state[1]), "units": "sentences", "count": 256}}
