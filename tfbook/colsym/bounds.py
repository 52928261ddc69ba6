"""Error bounds and size formulas of Takeshita & Imaizumi (Theorem 1, Props 1-3, eq. (4)).

The paper's size formulas are registered with `tfbook.claims.paper_formula` (numbers in, numbers out): the
bounds of the chapter's size claims, evaluated from the paper's parameters and never from a built model.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping

from tfbook.colsym.algebra import Key, degree, enumerate_msp, lemma3_terms, max_value
from tfbook import validate
from tfbook.claims import paper_formula
from tfbook.colsym.squaring import product_error


@paper_formula
def paper_width(d: int, s: int, N: int) -> int:
    """Theorem 1's width bound 12 (2d)^s N."""
    return 12 * (2 * validate.positive_int("d", d)) ** validate.positive_int("s", s) * validate.positive_int("N", N)


@paper_formula
def paper_depth(s: int, L: int) -> int:
    """Theorem 1's depth bound 2sL + 3s."""
    return 2 * validate.positive_int("s", s) * validate.positive_int("L", L) + 3 * s


@paper_formula
def prop1_width(d: int, s: int, N: int) -> int:
    """Prop 1's width bound 12 s d^s N for the column-wise monomials."""
    return 12 * validate.positive_int("s", s) * validate.positive_int("d", d) ** s * validate.positive_int("N", N)


@paper_formula
def prop1_depth(s: int, L: int) -> int:
    """Prop 1's depth bound (s - 1)(L + 1)."""
    return (validate.positive_int("s", s) - 1) * (validate.positive_int("L", L) + 1)


@paper_formula
def prop3_depth(s: int, L: int) -> int:
    """Props 1-3's depth: (s-1)(L+1) layers of TF_0, one attention layer, (s-1)(L+2) layers of the rank
    induction (L+1 for each product, one for the clip); at most 2sL + 3s."""
    return prop1_depth(s, L) + 1 + (s - 1) * (L + 2)


def impl_depth(s: int, L: int) -> int:
    """Depth of our construction: (s-1)(L+1) monomial blocks + 1 attention block + (s-1)(L+2) rank-induction blocks
    (Props 1-3's depth, `prop3_depth`)."""
    return prop3_depth(s, L)


@paper_formula
def paper_ff_layers(s: int, L: int) -> int:
    """Feed-forward layers of Props 1 and 3, (s-1)(L+1) + (s-1)(L+2) = (s-1)(2L+3): about 2sL (Sec. 9.2)."""
    s, L = validate.positive_int("s", s), validate.positive_int("L", L)
    return (s - 1) * (2 * L + 3)


@paper_formula
def paper_heads() -> int:
    """Theorem 1: a single attention head, used in a single layer."""
    return 1


@paper_formula
def paper_attention_layers() -> int:
    """Theorem 1: attention is used in a single layer."""
    return 1


@paper_formula
def prop1_attention_layers() -> int:
    """Prop 1: TF_0 consists of feed-forward layers only."""
    return 0


@paper_formula
def prop2_query_key_weight() -> int:
    """Prop 2: W_Q = W_K = 0, so the largest |entry| of the query and key maps is 0."""
    return 0


@paper_formula
def lemma1_width(N: int) -> int:
    """Lemma 1: the squaring network with width parameter N has width at most 3N."""
    return 3 * validate.positive_int("N", N)


@paper_formula
def product_width(N: int) -> int:
    """Sections 5.1-5.3 (Prop 1's 12 N per monomial): the product network psi has width at most 12N."""
    return 12 * validate.positive_int("N", N)


@paper_formula
def lemma2_depth(L: int) -> int:
    """Lemma 2's layers as displayed: one residual feed-forward layer per affine map of a depth-L FNN (L hidden
    maps and the output map): L + 1 layers."""
    return validate.positive_int("L", L) + 1


@paper_formula
def lemma2_width(W: int) -> int:
    """Lemma 2's layers as displayed: [A_l; I] sigma-reads 2W units of a width-W FNN (A_l padded to W rows)."""
    return 2 * validate.positive_int("W", W)


@paper_formula
def values_over_n() -> int:
    """Theorem 1 and Sec. 9.2: width, depth and the number of parameters do not depend on n, so over any set of
    n they take a single value."""
    return 1


@paper_formula
def flattened_increments() -> int:
    """Sec. 9.1: the parameters of a ReLU network on the flattened dn-vector grow linearly with n (separate
    parameters per column): one and the same increment per extra column."""
    return 1


@paper_formula
def flattened_increment_floor() -> int:
    """Sec. 9.1: the parameters of the flattened network increase with n: the increment per column exceeds 0."""
    return 0


@lru_cache(maxsize=None)
def recursion_constant(T: Key, n: int) -> int:
    """E_T / e_psi from eq. (4), an integer: E_alpha = n(|alpha|-1), E_T = n E_{T^-} + n^{r-1} E_{alpha_r} + n^r
    + sum_j E_{T_j} (in units of e_psi)."""
    n, r = validate.positive_int("n", n), len(T)
    if r == 1:
        return n * (degree(T) - 1)
    T_minus, last, T_js = lemma3_terms(T)
    return (n * recursion_constant(T_minus, n) + n ** (r - 1) * recursion_constant((last,), n) + n**r
            + sum(recursion_constant(t, n) for t in T_js))


def recursive_error_bound(T: Key, n: int, N: int, L: int, rule: str = "lu2021") -> float:
    """Eq. (4): E_alpha = n(|alpha|-1) e_psi; E_T = n E_{T^-} + n^{r-1} E_{alpha_r} + n^r e_psi + sum_j E_{T_j}."""
    return recursion_constant(tuple(T), validate.positive_int("n", n)) * product_error(N, L, rule)


def section8_constant(d: int, s: int, n_max: int) -> tuple[float, Key, int]:
    """Section 8's last step, executed: the largest E_T / (P_T(1) e_psi) over canonical T of degree <= s and
    rank(T) <= n <= n_max, with the T and n where it is reached. The proof bounds it by 8^s / 2."""
    d, s, n_max = validate.positive_int("d", d), validate.positive_int("s", s), validate.positive_int("n_max", n_max)
    best = (0.0, (), 0)
    for Ts in enumerate_msp(d, s).values():
        for T in Ts:
            for n in range(len(T), n_max + 1):
                ratio = recursion_constant(T, n) / max_value(T, n)
                if ratio > best[0]:
                    best = (ratio, T, n)
    return best


def sup_norm(coeffs: Mapping[Key, float], n: int) -> float:
    """||f||_inf = f(all ones) = sum_T c_T n!/(n-r)! for non-negative coefficients."""
    return sum(float(c) * (1 if T == () else max_value(T, n)) for T, c in coeffs.items())


def theorem1_bound_from(coeffs: Mapping[Key, float], s: int, n: int, N: int, L: int, signed: bool = False) -> float:
    """8^s ||f||_inf N^-L, or with ``signed=True`` 8^s N^-L sum_T |c_T| P_T(1) (our signed variant)."""
    weights = {T: abs(float(c)) for T, c in coeffs.items()} if signed else coeffs
    return 8.0**s * sup_norm(weights, n) * float(N) ** (-L)


def falling_factorial(n: int, r: int) -> int:
    return math.perm(n, r) if r <= n else 0
