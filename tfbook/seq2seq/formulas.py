"""The paper's size formulas (Takakura and Suzuki, 2023), in the paper's parameters only (numbers, never a built model).

Each function is registered with `tfbook.claims.paper_formula`, so that a size claim computes its bound
from the paper's statement: counts of the built models (widths, depths, non-zeros, heads) are compared
with these values, never with a recount of the same model.

* Eq. (7) of Lemma D.1 (the FNN f̂_T): ``eq7_width(d_max, G)`` = W = 21 d_max G;
  ``eq7_growth(T_from, T_to, d_max, G, f_max)``: the factor by which L = 2K max{d_max², T², (log G)², log f_max}
  and S = 1764 K d_max² max{...} G grow from T_from to T_to at fixed d_max and G (the unspecified
  constant K cancels; logarithms in base 2, the unit of T).
* App. E (the proof of Theorem 4.2): ``app_e_embedding_width(d, d_max)`` = D = d + d_max + 2,
  ``app_e_heads(d_max)`` = H = d_max (one head per important coordinate) and ``app_e_chi(U, H, eps)`` =
  U² log(2HU/ε), the attention scale at which App. E's extraction bound 2HU e^{−χ/U²} equals ε.
"""
from __future__ import annotations

import math

from tfbook.claims import paper_formula


@paper_formula
def eq7_width(d_max: int, G: int) -> int:
    """Eq. (7)'s width W = 21 d_max G of an FNN for a trigonometric polynomial of G frequencies in d_max variables."""
    return 21 * d_max * G


def _eq7_factor(T: float, d_max: int, G: int, f_max: int) -> float:
    """max{d_max², T², (log2 G)², log2 f_max}: L / (2K) in Eq. (7)."""
    return max(d_max**2, T**2, math.log2(G) ** 2, math.log2(max(f_max, 1)))


@paper_formula
def eq7_growth(T_from: float, T_to: float, d_max: int, G: int, f_max: int) -> float:
    """L(T_to) / L(T_from) of Eq. (7) at fixed d_max, G, f_max (also S(T_to) / S(T_from)); K cancels."""
    return _eq7_factor(T_to, d_max, G, f_max) / _eq7_factor(T_from, d_max, G, f_max)


@paper_formula
def app_e_embedding_width(d: int, d_max: int) -> int:
    """App. E's embedding width D = d + d_max + 2: the tokens, one slot per extracted feature, cos and sin."""
    return d + d_max + 2


@paper_formula
def app_e_heads(d_max: int) -> int:
    """App. E's number of heads H = d_max: one head per important coordinate (i_h, j_h)."""
    return d_max


@paper_formula
def app_e_chi(U: int, H: int, eps: float) -> float:
    """App. E's scale χ = U² log(2HU/ε): its bound 2HU e^{−χ/U²} on the extraction error is then ε."""
    return U**2 * math.log(2 * H * U / eps)
