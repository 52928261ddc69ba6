"""The paper's size formulas, in the paper's parameters only (numbers, never a built model).

Each function is registered with `tfbook.claims.paper_formula`, so that a size claim computes its bound
from the paper's statement: counts and norms of the built networks (widths, depths, attention layers,
heads, largest weights) are compared with these values, never with a recount of the same network.
Each checks its arguments against the paper's ranges (counts: ints >= 1, kmax >= 0; accuracies and
constants: reals > 0) and raises ValueError naming the argument and the allowed values.

* Lemma 3 (squaring, as printed): ``lemma3_weight_bound()`` = B_1 = 1.
* Lemma 4 (product, as printed): ``lemma4_depth(R, eps)`` = L = log2(R / eps).
* Lemma 5 (ReLU B-spline, cited from Suzuki 2019): ``lemma5_width(d, m)`` = W_0 = 6dm(m+2) + 2d,
  ``lemma5_weight_bound(m)`` = B_0 = 2(m+1)^m, ``lemma5_depth(d, m, eps, c)`` = L_0 =
  3 + 2 ceil(log2(3^(d v m) / (eps c))) + 5 ceil(log2(d v m)) and ``lemma5_depth_growth``.
* Theorem 1: ``thm1_rounds(l)`` = T = T_0 = ceil(log2 l), ``thm1_heads()`` = H = 1,
  ``thm1_width(N, l, d, m)`` = W = W_0 N + E with E = l, ``thm1_width_growth``, ``thm1_embedding(l)`` = E = l,
  ``thm1_nonzero(N, l, d, m, eps, C, c)`` = S = C(N l + L_1) + L_2 W_0^2 N + C T_0 (N + E + L_3) + N (C and
  c = c_(d,m) unspecified by the paper), ``thm1_nonzero_slope``, its log-log slope in N, and
  ``thm1_weight_scale(gamma, kmax, m)``, the largest weight the proof writes (its B is an order statement).
* The fully connected comparison (Suzuki 2019, Lemma 5 on the flattened input of dimension D = d l):
  ``flat_width(N, D, m)`` = W_0(D) N and ``flat_width_slope(ls, N, d, m)``, its log-log slope in l.
* Lemma 6 (as printed): ``lemma6_attention_lipschitz(H, W, B)`` = H W^2 B^2 + 1.
"""
from __future__ import annotations

import math

import numpy as np

from tfbook import validate
from tfbook.claims import paper_formula


def _count(name: str, value, minimum: int = 1) -> int:
    """A count of the paper (N, l, d, m, H, W, ...): an int >= ``minimum``."""
    return validate.positive_int(name, value, minimum)


def _positive(name: str, value) -> float:
    """An accuracy or a constant of the paper (eps, R, C, c, gamma): a finite real > 0."""
    return validate.real(name, value, low=0, low_open=True)


@paper_formula
def lemma3_weight_bound() -> int:
    """Lemma 3's weight bound B_1 = 1, as printed (the sawtooth 2 relu(x) - 4 relu(x - 1/2) needs 4)."""
    return 1


@paper_formula
def lemma4_depth(R: float, eps: float) -> float:
    """Lemma 4's depth L = log2(R / eps) for a product on [0, R]^2 with accuracy eps, as printed."""
    return math.log2(_positive("R", R) / _positive("eps", eps))


@paper_formula
def lemma5_width(d: int, m: int) -> int:
    """Lemma 5's width W_0 = 6 d m (m + 2) + 2 d (no term in the accuracy)."""
    d, m = _count("d", d), _count("m", m)
    return 6 * d * m * (m + 2) + 2 * d


@paper_formula
def lemma5_weight_bound(m: int) -> int:
    """Lemma 5's weight bound B_0 = 2 (m + 1)^m."""
    m = _count("m", m)
    return 2 * (m + 1) ** m


@paper_formula
def lemma5_depth(d: int, m: int, eps: float, c: float = 1.0) -> int:
    """Lemma 5's depth L_0 = 3 + 2 ceil(log2(3^(d v m) / (eps c))) + 5 ceil(log2(d v m)); c = c_(d,m) is
    not specified by the paper."""
    d, m, eps, c = _count("d", d), _count("m", m), _positive("eps", eps), _positive("c", c)
    k = max(d, m)
    return 3 + 2 * math.ceil(math.log2(3.0**k / (eps * c))) + 5 * math.ceil(math.log2(k))


@paper_formula
def lemma5_depth_growth(d: int, m: int, eps_from: float, eps_to: float, c: float = 1.0) -> int:
    """L_0(eps_to) - L_0(eps_from): the depth Lemma 5 adds for the finer accuracy (c cancels up to the
    rounding of the ceilings)."""
    return lemma5_depth(d, m, eps_to, c) - lemma5_depth(d, m, eps_from, c)


@paper_formula
def thm1_rounds(l: int) -> int:
    """Theorem 1's T = T_0 = ceil(log2 l) attention layers (0 for l = 1)."""
    return (_count("l", l) - 1).bit_length()


@paper_formula
def thm1_heads() -> int:
    """Theorem 1's H = 1 head per attention layer."""
    return 1


@paper_formula
def thm1_width(N: int, l: int, d: int, m: int) -> int:
    """Theorem 1's width W = W_0 N + E with W_0 = 6 d m (m + 2) + 2 d and E = l."""
    return lemma5_width(d, m) * _count("N", N) + _count("l", l)


@paper_formula
def thm1_width_growth(N: int, d: int, m: int, l_from: int, l_to: int) -> int:
    """W(l_to) - W(l_from) of Theorem 1: the width grows with l only through E = l (token-wise sharing)."""
    return thm1_width(N, l_to, d, m) - thm1_width(N, l_from, d, m)


@paper_formula
def thm1_embedding(l: int) -> int:
    """Theorem 1's embedding dimension E = l (one-hot positions)."""
    return _count("l", l)


@paper_formula
def thm1_nonzero(N: int, l: int, d: int, m: int, eps: float, C: float = 1.0, c: float = 1.0) -> float:
    """Theorem 1's S = C (N l + L_1) + L_2 W_0^2 N + C T_0 (N + E + L_3) + N with L_1 = C log2(4 d l / eps),
    L_2 = 3 + 2 ceil(log2(4 l 3^(d v m) / (eps c))) + 5 ceil(log2(d v m)), L_3 = C log2(6 T_0 / eps), E = l;
    C and c = c_(d,m) are not specified by the paper (the paper's log is read as log2)."""
    N, d, m = _count("N", N), _count("d", d), _count("m", m)
    eps, C, c = _positive("eps", eps), _positive("C", C), _positive("c", c)
    T0 = thm1_rounds(l)
    k = max(d, m)
    L1 = C * math.log2(4 * d * l / eps)
    L2 = 3 + 2 * math.ceil(math.log2(4 * l * 3.0**k / (eps * c))) + 5 * math.ceil(math.log2(k))
    L3 = C * math.log2(6 * T0 / eps) if T0 else 0.0
    return C * (N * l + L1) + L2 * lemma5_width(d, m) ** 2 * N + C * T0 * (N + l + L3) + N


@paper_formula
def thm1_nonzero_slope(Ns, l: int, d: int, m: int, eps: float, C: float = 1.0, c: float = 1.0) -> float:
    """Log-log slope in N of `thm1_nonzero` over the atom counts ``Ns`` (close to 1: S is affine in N)."""
    if len(Ns) < 2:
        raise ValueError(f"Ns must hold at least two atom counts, got {Ns!r}")
    S = [thm1_nonzero(N, l, d, m, eps, C, c) for N in Ns]
    return float(np.polyfit(np.log(np.asarray(Ns, dtype=float)), np.log(S), 1)[0])


@paper_formula
def thm1_weight_scale(gamma: float, kmax: int, m: int) -> float:
    """The largest weight Theorem 1's proof writes: gamma (attention logits), 2^kmax (the scales 2^k of
    M_(1,1)) and B_0 = 2 (m + 1)^m (Lemma 5); the paper's B <~ N^(...) is the order of 2^kmax."""
    return max(_positive("gamma", gamma), 2.0 ** _count("kmax", kmax, 0), float(lemma5_weight_bound(m)))


@paper_formula
def flat_width(N: int, D: int, m: int) -> int:
    """Width W_0(D) N of the fully connected network of Suzuki (2019) on the flattened input of dimension D."""
    return lemma5_width(D, m) * _count("N", N)


@paper_formula
def flat_width_slope(ls, N: int, d: int, m: int) -> float:
    """Log-log slope in l of `flat_width` at D = d l over the sentence lengths ``ls`` (1: linear in l)."""
    if len(ls) < 2:
        raise ValueError(f"ls must hold at least two sentence lengths, got {ls!r}")
    widths = [flat_width(N, _count("d", d) * _count("l", l), m) for l in ls]
    return float(np.polyfit(np.log(np.asarray(ls, dtype=float)), np.log(widths), 1)[0])


@paper_formula
def lemma6_attention_lipschitz(H: int, W: int, B: float) -> float:
    """Lemma 6's Lipschitz constant H W^2 B^2 + 1 of an attention layer in the sup norm, as printed."""
    H, W = _count("H", H), _count("W", W)
    validate.real("B", B, low=0)
    return H * W**2 * B**2 + 1


__all__ = ["lemma3_weight_bound", "lemma4_depth", "lemma5_width", "lemma5_weight_bound", "lemma5_depth",
           "lemma5_depth_growth", "thm1_rounds", "thm1_heads", "thm1_width", "thm1_width_growth", "thm1_embedding",
           "thm1_nonzero", "thm1_nonzero_slope", "thm1_weight_scale", "flat_width",
           "flat_width_slope", "lemma6_attention_lipschitz"]
