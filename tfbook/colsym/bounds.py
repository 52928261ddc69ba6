"""Error bounds and size formulas of Takeshita & Imaizumi (Theorem 1, Props 1-3, eq. (4))."""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping

from tfbook.colsym.algebra import Key, degree, lemma3_terms, max_value
from tfbook.colsym.squaring import check_positive_int, product_error


def paper_width(d: int, s: int, N: int) -> int:
    """Theorem 1's width bound 12 (2d)^s N."""
    return 12 * (2 * check_positive_int("d", d)) ** check_positive_int("s", s) * check_positive_int("N", N)


def paper_depth(s: int, L: int) -> int:
    """Theorem 1's depth bound 2sL + 3s."""
    return 2 * check_positive_int("s", s) * check_positive_int("L", L) + 3 * s


def prop1_width(d: int, s: int, N: int) -> int:
    """Prop 1's width bound 12 s d^s N for the column-wise monomials."""
    return 12 * check_positive_int("s", s) * check_positive_int("d", d) ** s * check_positive_int("N", N)


def prop1_depth(s: int, L: int) -> int:
    """Prop 1's depth bound (s - 1)(L + 1)."""
    return (check_positive_int("s", s) - 1) * (check_positive_int("L", L) + 1)


def impl_depth(s: int, L: int) -> int:
    """Depth of our construction: (s-1)(L+1) monomial blocks + 1 attention block + (s-1)(L+2) rank-induction blocks."""
    return prop1_depth(s, L) + 1 + (s - 1) * (L + 2)


def recursive_error_bound(T: Key, n: int, N: int, L: int, rule: str = "lu2021") -> float:
    """Eq. (4): E_alpha = n(|alpha|-1) e_psi; E_T = n E_{T^-} + n^{r-1} E_{alpha_r} + n^r e_psi + sum_j E_{T_j}."""
    e_psi = product_error(N, L, rule)
    n = check_positive_int("n", n)

    @lru_cache(maxsize=None)
    def bound(key: Key) -> float:
        r = len(key)
        if r == 1:
            return n * (degree(key) - 1) * e_psi
        T_minus, last, T_js = lemma3_terms(key)
        return n * bound(T_minus) + n ** (r - 1) * bound((last,)) + n**r * e_psi + sum(bound(t) for t in T_js)

    return bound(tuple(T))


def sup_norm(coeffs: Mapping[Key, float], n: int) -> float:
    """||f||_inf = f(all ones) = sum_T c_T n!/(n-r)! for non-negative coefficients."""
    return sum(float(c) * (1 if T == () else max_value(T, n)) for T, c in coeffs.items())


def theorem1_bound_from(coeffs: Mapping[Key, float], s: int, n: int, N: int, L: int, signed: bool = False) -> float:
    """8^s ||f||_inf N^-L, or with ``signed=True`` 8^s N^-L sum_T |c_T| P_T(1) (our signed variant)."""
    weights = {T: abs(float(c)) for T, c in coeffs.items()} if signed else coeffs
    return 8.0**s * sup_norm(weights, n) * float(N) ** (-L)


def falling_factorial(n: int, r: int) -> int:
    return math.perm(n, r) if r <= n else 0
