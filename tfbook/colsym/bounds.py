"""Error bounds and size formulas of Takeshita & Imaizumi (Theorem 1, Props 1-3, eq. (4))."""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping

from tfbook.colsym.algebra import Key, degree, enumerate_msp, lemma3_terms, max_value
from tfbook import validate
from tfbook.colsym.squaring import product_error


def paper_width(d: int, s: int, N: int) -> int:
    """Theorem 1's width bound 12 (2d)^s N."""
    return 12 * (2 * validate.positive_int("d", d)) ** validate.positive_int("s", s) * validate.positive_int("N", N)


def paper_depth(s: int, L: int) -> int:
    """Theorem 1's depth bound 2sL + 3s."""
    return 2 * validate.positive_int("s", s) * validate.positive_int("L", L) + 3 * s


def prop1_width(d: int, s: int, N: int) -> int:
    """Prop 1's width bound 12 s d^s N for the column-wise monomials."""
    return 12 * validate.positive_int("s", s) * validate.positive_int("d", d) ** s * validate.positive_int("N", N)


def prop1_depth(s: int, L: int) -> int:
    """Prop 1's depth bound (s - 1)(L + 1)."""
    return (validate.positive_int("s", s) - 1) * (validate.positive_int("L", L) + 1)


def impl_depth(s: int, L: int) -> int:
    """Depth of our construction: (s-1)(L+1) monomial blocks + 1 attention block + (s-1)(L+2) rank-induction blocks."""
    return prop1_depth(s, L) + 1 + (s - 1) * (L + 2)


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
