"""Column-symmetric polynomials and their monomial basis P_T (Takeshita & Imaizumi, Defs 3-6, Lemmas 3-6).

A multi-index is a length-d tuple of non-negative ints (not all zero); a key ``T`` is a tuple of
multi-indices, stored canonically sorted, standing for

    P_T(X) = sum over distinct columns (i_1, ..., i_r) of prod_j x_{i_j}^{alpha_j},   X in R^{d x n},

which is 0 when r > n. The references here (`msp_bruteforce`, `msp_partition`) are independent of
the Lemma 3 recursion that the construction uses.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction
from typing import Iterable, Mapping, Sequence

import torch

from tfbook.device import DTYPE

MultiIndex = tuple[int, ...]
Key = tuple[MultiIndex, ...]
BRUTEFORCE_TERMS = 2**22  # products held at once by `msp_bruteforce`: (inputs per chunk) x (column tuples)


def check_multi_index(alpha: Sequence[int], d: int, name: str = "multi-index") -> MultiIndex:
    """Validate one multi-index of length d with non-negative ints, not all zero."""
    alpha = tuple(alpha)
    if len(alpha) != d:
        raise ValueError(f"{name} {alpha!r} must have length d = {d}")
    if any(isinstance(a, bool) or not isinstance(a, int) or a < 0 for a in alpha):
        raise ValueError(f"{name} {alpha!r} must contain non-negative ints")
    if sum(alpha) == 0:
        raise ValueError(f"{name} {alpha!r} must not be all zero (the constant term has key ())")
    return alpha


def canonical(T: Iterable[Sequence[int]], d: int) -> Key:
    """Validate a key and return it as a sorted tuple of multi-indices (P_T is symmetric in its arguments)."""
    return tuple(sorted(check_multi_index(a, d) for a in T))


def degree(T: Key) -> int:
    return sum(sum(a) for a in T)


def enumerate_multi_indices(d: int, s: int) -> list[MultiIndex]:
    """All alpha in N^d with 1 <= |alpha| <= s, by degree then lexicographically."""
    out = []
    for total in range(1, s + 1):
        for combo in itertools.combinations_with_replacement(range(d), total):
            alpha = [0] * d
            for i in combo:
                alpha[i] += 1
            out.append(tuple(alpha))
    return sorted(set(out), key=lambda a: (sum(a), tuple(-x for x in a)))


def enumerate_msp(d: int, s: int) -> dict[int, list[Key]]:
    """Canonical keys T of rank r = 1..s and degree <= s, grouped by rank (multisets built with a degree budget)."""
    alphas = enumerate_multi_indices(d, s)
    by_rank: dict[int, list[Key]] = {r: [] for r in range(1, s + 1)}

    def extend(prefix: list[MultiIndex], start: int, budget: int) -> None:
        for i in range(start, len(alphas)):
            cost = sum(alphas[i])
            if cost > budget:
                continue
            key = prefix + [alphas[i]]
            by_rank[len(key)].append(tuple(sorted(key)))
            extend(key, i, budget - cost)

    extend([], 0, s)
    return {r: sorted(set(Ts), key=lambda T: (degree(T), T)) for r, Ts in by_rank.items()}


def term_coefficient(T: Key) -> int:
    """Coefficient of x_1^{alpha_1} ... x_r^{alpha_r} in P_T: prod of m! over repeated multi-indices."""
    return math.prod(math.factorial(m) for m in Counter(T).values())


def max_value(T: Key, n: int) -> int:
    """P_T(all-ones) = n! / (n - r)! (0 when r > n), the maximum of P_T on [0, 1]^{d x n}."""
    r = len(T)
    return math.perm(n, r) if r <= n else 0


def lemma3_terms(T: Key) -> tuple[Key, MultiIndex, list[Key]]:
    """Lemma 3: P_T = P_{T^-} P_{alpha_r} - sum_j P_{T_j}, with alpha_r the last entry of canonical T."""
    if len(T) < 2:
        raise ValueError(f"Lemma 3 needs rank >= 2, got T = {T!r}")
    *rest, last = T
    T_minus = tuple(rest)
    T_js = []
    for j in range(len(rest)):
        merged = list(rest)
        merged[j] = tuple(a + b for a, b in zip(rest[j], last))
        T_js.append(tuple(sorted(merged)))
    return T_minus, last, T_js


def as_batch(X: torch.Tensor) -> torch.Tensor:
    """X as a float64 batch (batch, d, n); a single input (d, n) becomes a batch of one."""
    X = torch.as_tensor(X, dtype=DTYPE)
    if X.ndim == 2:
        X = X.unsqueeze(0)
    if X.ndim != 3:
        raise ValueError(f"X must have shape (d, n) or (batch, d, n), got {tuple(X.shape)}")
    return X


def column_monomial(X: torch.Tensor, alpha: MultiIndex) -> torch.Tensor:
    """x_i^alpha for every column i: (batch, d, n) -> (batch, n)."""
    powers = torch.tensor(alpha, dtype=DTYPE, device=X.device).view(1, -1, 1)
    return torch.prod(X**powers, dim=1)


def msp_bruteforce(T: Key, X: torch.Tensor) -> torch.Tensor:
    """P_T by summing over all ordered tuples of distinct columns (cost n^r: small n only), all tuples of a
    chunk of inputs in one product."""
    X = as_batch(X)
    n, r = X.shape[-1], len(T)
    if r > n:
        return torch.zeros(X.shape[0], dtype=DTYPE, device=X.device)
    tuples = torch.tensor(list(itertools.permutations(range(n), r)), device=X.device).view(-1, r)  # (P, r)
    rows = max(1, BRUTEFORCE_TERMS // tuples.shape[0])  # inputs per chunk
    totals = []
    for Xc in torch.split(X, rows):
        cols = [column_monomial(Xc, a) for a in T]  # r x (chunk, n)
        terms = cols[0][:, tuples[:, 0]]  # (chunk, P)
        for j in range(1, r):
            terms = terms * cols[j][:, tuples[:, j]]
        totals.append(terms.sum(-1))
    return torch.cat(totals)


def _set_partitions(items: list[int]) -> Iterable[list[list[int]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in _set_partitions(rest):
        yield [[first]] + partition
        for i in range(len(partition)):
            yield partition[:i] + [[first] + partition[i]] + partition[i + 1:]


def msp_partition(T: Key, X: torch.Tensor) -> torch.Tensor:
    """P_T by Moebius inversion over set partitions of the r arguments (cost Bell(r) * n: any n).

    P_T = sum_{partitions pi} prod_{B in pi} (-1)^{|B|-1} (|B|-1)! * p_{sum_{j in B} alpha_j}(X),
    with power sums p_beta(X) = sum_i x_i^beta.
    """
    X = as_batch(X)
    total = torch.zeros(X.shape[0], dtype=DTYPE, device=X.device)
    for partition in _set_partitions(list(range(len(T)))):
        term = torch.ones_like(total)
        for block in partition:
            beta = tuple(sum(T[j][k] for j in block) for k in range(len(T[0])))
            sign = (-1) ** (len(block) - 1) * math.factorial(len(block) - 1)
            term = term * sign * column_monomial(X, beta).sum(-1)
        total = total + term
    return total


def msp_symbolic(T: Key, columns: Sequence[Sequence]) -> "sympy.Expr":
    """P_T over symbolic columns (a list of n length-d tuples of sympy symbols), by its definition."""
    import sympy

    n = len(columns)
    if len(T) > n:
        return sympy.Integer(0)
    return sum(math.prod(math.prod(c**a for c, a in zip(columns[i], alpha)) for i, alpha in zip(idx, T))
               for idx in itertools.permutations(range(n), len(T)))


def msp(T: Iterable[Sequence[int]], X: torch.Tensor) -> torch.Tensor:
    """P_T(X) for X of shape (d, n) or (batch, d, n): brute force when n^r is small, else partitions."""
    X = as_batch(X)
    key = canonical(T, X.shape[1]) if len(tuple(T)) else ()
    if key == ():
        return torch.ones(X.shape[0], dtype=DTYPE, device=X.device)
    n, r = X.shape[-1], len(key)
    return msp_bruteforce(key, X) if math.perm(n, min(r, n)) <= 5000 else msp_partition(key, X)


def evaluate(coeffs: Mapping[Key, float], X: torch.Tensor) -> torch.Tensor:
    """f(X) = coeffs[()] + sum_T coeffs[T] P_T(X), exactly (reference for the construction)."""
    X = as_batch(X)
    total = torch.zeros(X.shape[0], dtype=DTYPE, device=X.device)
    for T, c in coeffs.items():
        total = total + float(c) * msp(T, X)
    return total


# --- Lemma 6: monomials of X -> P_T basis -------------------------------------------------------

Monomial = tuple[MultiIndex, ...]  # the exponent matrix A as n column multi-indices (zeros allowed)


def expand(coeffs: Mapping[Key, float], d: int, n: int) -> dict[Monomial, Fraction]:
    """Write sum_T c_T P_T as a dict {exponent matrix (n columns): coefficient} (exact, Fractions)."""
    poly: dict[Monomial, Fraction] = {}
    zero = (0,) * d
    for T, c in coeffs.items():
        if T == ():
            poly[(zero,) * n] = poly.get((zero,) * n, Fraction(0)) + Fraction(c)
            continue
        for idx in itertools.permutations(range(n), len(T)):
            cols = [zero] * n
            for a, i in zip(T, idx):
                cols[i] = a
            key = tuple(cols)
            poly[key] = poly.get(key, Fraction(0)) + Fraction(c)
    return {k: v for k, v in poly.items() if v != 0}


def decompose_column_symmetric(poly: Mapping[Monomial, float], d: int, n: int) -> dict[Key, Fraction]:
    """Lemma 6: coefficients c_T with f = sum_T c_T P_T; raises ValueError if f is not column-symmetric."""
    orbit_coeff: dict[Key, Fraction] = {}
    zero = (0,) * d
    for A, c in poly.items():
        if len(A) != n or any(len(col) != d for col in A):
            raise ValueError(f"monomial {A!r} must have n = {n} columns of length d = {d}")
        T = tuple(sorted(col for col in A if col != zero))
        c = Fraction(c)
        if T in orbit_coeff and orbit_coeff[T] != c:
            raise ValueError(f"poly is not column-symmetric: coefficients {orbit_coeff[T]} and {c} on the orbit of {T}")
        orbit_coeff[T] = c
    result = {}
    for T, c in orbit_coeff.items():
        orbit = expand({T: 1}, d, n) if T else {(zero,) * n: 1}
        if any(poly.get(A, 0) != c for A in orbit):
            raise ValueError(f"poly is not column-symmetric: the orbit of {T} is incomplete")
        result[T] = c / term_coefficient(T) if T else c
    return result


def count_bounds(d: int, s: int) -> dict[str, list[int] | int]:
    """Counts of canonical T per rank against C(s, r) d^s, the total against (2d)^s, monomials against C(s+d, d) - 1."""
    keys = enumerate_msp(d, s)
    return {
        "per_rank": [len(keys[r]) for r in range(1, s + 1)],
        "per_rank_bound": [math.comb(s, r) * d**s for r in range(1, s + 1)],
        "total": sum(len(v) for v in keys.values()),
        "total_bound": (2 * d) ** s,
        "monomials": len(enumerate_multi_indices(d, s)),
        "monomials_formula": math.comb(s + d, d) - 1,
    }
