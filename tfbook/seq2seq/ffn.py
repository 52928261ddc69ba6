"""The FFN f̂_T of Theorem 4.2 (Lemma D.1, Eq. (7)): a trigonometric polynomial as a ReLU network without
skip connections, assembled from the circuit gadgets of `tfbook.gadgets.circuit`.

Each factor ψ_r(x_k) = √2 cos(2π|r|x_k) or √2 sin(2πr x_k) is a `TrigFeatures` pair (exact sawtooth,
Horner/Yarotsky cosine, angle addition), shared between terms; the factors of a term are multiplied by a
`tree_product`; the a-priori errors of every piece add up to the network's sup-error bound.
"""
from __future__ import annotations

import math
from typing import Optional

import scipy.sparse as sp

from tfbook import validate
from tfbook.gadgets import circuit as cc


def trig_poly_maps(coeffs: dict[tuple[int, ...], float], K: int, m: int, J: int,
                   pre: Optional[sp.spmatrix] = None) -> tuple[cc.Maps, float]:
    """ReLU maps for Σ_r coeffs[r] Π_k ψ_{r_k}(x_k) on [0, 1]^K at Yarotsky level m and Taylor degree 2J+1,
    and their a-priori sup-error bound. ``pre`` (K, D) is a read-out merged into A_1 (f_1 = f̂ ∘ C in App. E).
    """
    c = cc.Circuit(K)
    feats = cc.TrigFeatures(c, m, J)
    total, bound = c.const(0.0), 0.0
    for r, coef in coeffs.items():
        nz = [(k, rk) for k, rk in enumerate(r) if rk != 0]
        if not nz:
            total = total + float(coef)
            continue
        factors = [feats.pair(k, abs(rk))[0 if rk < 0 else 1] for k, rk in nz]  # ψ_r / √2
        term = cc.tree_product(factors, m)
        scale = float(coef) * math.sqrt(2.0) ** len(nz)
        total = total + term.val * scale
        bound += abs(scale) * term.err
    maps = c.affine_maps([total])
    if pre is not None:
        A1, b1 = maps[0]
        maps[0] = ((A1 @ sp.csr_matrix(pre)).tocsr(), b1)
    return maps, bound


def trig_network(coeffs: dict, K: int, tol: float, pre: Optional[sp.spmatrix] = None) -> tuple[cc.Maps, float]:
    """ReLU maps for Σ_r coeffs[r] Π_k ψ_{r_k}(x_k) on [0, 1]^K with a-priori sup error <= tol: (maps, bound).

    The cheapest Yarotsky level m (and the Taylor degree for 4^-m) whose bound passes; ``pre`` is a read-out
    merged into A_1.
    """
    tol = validate.real("tol", tol, low=0, low_open=True)
    scale = sum(abs(c) * math.sqrt(2.0) ** sum(r != 0 for r in key) for key, c in coeffs.items()) + 1.0
    m = max(1, math.floor(math.log(scale / tol, 4)))
    while True:
        maps, bound = trig_poly_maps(coeffs, K, m, cc.taylor_terms(4.0**-m), pre=pre)
        if bound <= tol:
            return maps, bound
        m += 1
