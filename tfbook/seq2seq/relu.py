"""Explicit ReLU feed-forward networks without skip connections, written as levelled circuits.

A `Circuit` holds ReLU units arranged in levels; a `Val` is an affine combination of the units of
one level (level 0 = the inputs). `Circuit.relu` adds a unit one level up; values needed later
are carried up exactly by the identity η(x) − η(−x) (or η(x) for a value known to be >= 0).
`Circuit.affine_maps` returns the paper's (A_1, b_1), ..., (A_L, b_L) (Ψ(L, W, S, B), Section 3).

The gadgets carry an a-priori bound: an `Approx` is a value with ``mag`` >= |true value| and
``err`` >= |value − true value|. They follow Lemma D.1 / Eq. (7) scaling: the exact sawtooth
S(2^b z) by composed tents, cos on one period by a Horner polynomial whose products are
Yarotsky squares, higher frequencies by angle addition, products of factors by a tree.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import scipy.sparse as sp


class Val:
    """Σ_j coeffs[j] · (unit j of ``level``) + const; ``nonneg`` marks values known to be >= 0."""

    def __init__(self, circuit: "Circuit", level: int, coeffs: dict[int, float], const: float = 0.0,
                 nonneg: bool = False):
        self.circuit, self.level, self.coeffs, self.const, self.nonneg = circuit, level, coeffs, const, nonneg
        self._lifted: dict[int, "Val"] = {}

    def _combine(self, other, sign: float) -> "Val":
        if not isinstance(other, Val):
            return Val(self.circuit, self.level, dict(self.coeffs), self.const + sign * float(other))
        level = max(self.level, other.level)
        a, b = self.circuit.lift(self, level), self.circuit.lift(other, level)
        coeffs = dict(a.coeffs)
        for j, c in b.coeffs.items():
            coeffs[j] = coeffs.get(j, 0.0) + sign * c
        return Val(self.circuit, level, coeffs, a.const + sign * b.const)

    def __add__(self, other) -> "Val":
        return self._combine(other, 1.0)

    __radd__ = __add__

    def __sub__(self, other) -> "Val":
        return self._combine(other, -1.0)

    def __rsub__(self, other) -> "Val":
        return (-1.0 * self) + other

    def __mul__(self, scalar: float) -> "Val":
        s = float(scalar)
        return Val(self.circuit, self.level, {j: s * c for j, c in self.coeffs.items()}, s * self.const,
                   self.nonneg and s >= 0)

    __rmul__ = __mul__

    def __neg__(self) -> "Val":
        return -1.0 * self

    @property
    def is_const(self) -> bool:
        return not self.coeffs


class Circuit:
    """ReLU units by level; level ℓ >= 1 units have pre-activations affine in level ℓ−1."""

    def __init__(self, n_in: int):
        self.n_in = n_in
        self.levels: list[list[tuple[dict[int, float], float]]] = [[]]  # levels[0] unused (inputs)

    def input(self, k: int) -> Val:
        return Val(self, 0, {k: 1.0})

    def relu(self, v: Val) -> Val:
        level = v.level + 1
        while len(self.levels) <= level:
            self.levels.append([])
        self.levels[level].append((dict(v.coeffs), v.const))
        return Val(self, level, {len(self.levels[level]) - 1: 1.0}, 0.0, nonneg=True)

    def lift(self, v: Val, level: int) -> Val:
        """``v`` re-expressed at ``level`` >= v.level through exact identity units (memoised)."""
        if level < v.level:
            raise ValueError(f"cannot lift a value from level {v.level} down to {level}")
        if v.is_const:
            return Val(self, level, {}, v.const, v.nonneg)
        current = v
        while current.level < level:
            nxt = current._lifted.get(current.level + 1)
            if nxt is None:
                nxt = self.relu(current) if current.nonneg else self.relu(current) - self.relu(-current)
                nxt.nonneg = current.nonneg
                current._lifted[current.level + 1] = nxt
            current = nxt
        return current

    def affine_maps(self, outputs: Sequence[Val]) -> list[tuple[sp.csr_matrix, np.ndarray]]:
        """(A_l, b_l) for l = 1..L computing ``outputs`` (all lifted to the deepest level)."""
        top = max([o.level for o in outputs] + [0])
        outs = [self.lift(o, top) for o in outputs]
        widths = [self.n_in] + [len(self.levels[ell]) for ell in range(1, top + 1)]
        maps = []
        for ell in range(1, top + 2):
            rows = self.levels[ell] if ell <= top else [(o.coeffs, o.const) for o in outs]
            A = sp.lil_matrix((len(rows), widths[ell - 1]))
            for i, (coeffs, _) in enumerate(rows):
                for j, c in coeffs.items():
                    if c != 0.0:
                        A[i, j] = c
            maps.append((A.tocsr(), np.array([const for _, const in rows], dtype=float)))
        return maps


def run_maps(maps: Sequence[tuple[sp.spmatrix, np.ndarray]], x: np.ndarray) -> np.ndarray:
    """Evaluate A_L η(... η(A_1 x + b_1) ...) + b_L on columns x of shape (n_0, batch)."""
    h = np.asarray(x, dtype=float)
    for ell, (A, b) in enumerate(maps):
        h = A @ h + b[:, None]
        if ell < len(maps) - 1:
            h = np.maximum(h, 0.0)
    return h


def sizes_of(maps: Sequence[tuple[sp.spmatrix, np.ndarray]]) -> dict[str, float]:
    """L, W (largest dimension, input and output included), S (non-zeros) and B (largest |entry|)."""
    W = max(max(A.shape) for A, _ in maps)
    S = sum(A.count_nonzero() + int(np.count_nonzero(b)) for A, b in maps)
    B = max(max(float(abs(A).max()) if A.nnz else 0.0, float(np.abs(b).max()) if b.size else 0.0) for A, b in maps)
    return {"L": len(maps), "W": W, "S": S, "B": B}


# --- gadgets with a-priori error bounds -------------------------------------------------------------
@dataclass
class Approx:
    """A circuit value with |true| <= mag and |value − true| <= err."""

    val: Val
    mag: float
    err: float


def square01(t: Val, m: int) -> Val:
    """Yarotsky: t − Σ_{s<=m} g_s(t)/4^s ≈ t² on [0, 1] with error <= 2^{-2m-2} (g_s = s-fold tent)."""
    c = t.circuit
    g, acc = t, Val(c, t.level, dict(t.coeffs), t.const, nonneg=True)
    for s in range(1, m + 1):
        g = 2 * c.relu(g) - 4 * c.relu(g - 0.5) + 2 * c.relu(g - 1.0)
        g.nonneg = True
        acc = acc - g * (4.0**-s)
        acc.nonneg = True
    return acc


def product(x: Approx, y: Approx, m: int) -> Approx:
    """xy ≈ R²[sq(|x+y|/2R) − sq(|x−y|/2R)] with R >= |x|, |y| (inputs included); exact for a constant factor."""
    mag, err = x.mag * y.mag, x.err * (y.mag + y.err) + x.mag * y.err
    if x.val.is_const or y.val.is_const:
        k, v = (x.val.const, y.val) if x.val.is_const else (y.val.const, x.val)
        return Approx(v * k, mag, err)
    R = 2.0 ** math.ceil(math.log2(max(x.mag + x.err, y.mag + y.err, 1e-300)))
    c = x.val.circuit
    a, b = (x.val + y.val) * (0.5 / R), (x.val - y.val) * (0.5 / R)
    ta, tb = c.relu(a) + c.relu(-a), c.relu(b) + c.relu(-b)
    ta.nonneg = tb.nonneg = True
    val = (square01(ta, m) - square01(tb, m)) * (R * R)
    return Approx(val, mag, err + 2 * R * R * 2.0 ** (-2 * m - 2))


def taylor_terms(tol: float) -> int:
    """Smallest J with (π/2)^{2J+3}/(2J+3)! <= tol: the degree-(2J+1) Taylor polynomial of sin(πu/2) on [-1, 1]."""
    J = 0
    while (math.pi / 2) ** (2 * J + 3) / math.factorial(2 * J + 3) > tol:
        J += 1
    return J


def cos_of_sawtooth(S: Val, m: int, J: int) -> Approx:
    """cos(2πS) for an exact S in [0, 1/2]: −sin(πu/2), u = 4S − 1, by Horner in u² with Yarotsky products."""
    c = S.circuit
    u = S * 4.0 - 1.0
    au = c.relu(u) + c.relu(-u)
    au.nonneg = True
    v = Approx(square01(au, m), 1.0, 2.0 ** (-2 * m - 2))
    coef = [(-1) ** j * (math.pi / 2) ** (2 * j + 1) / math.factorial(2 * j + 1) for j in range(J + 1)]
    h = Approx(Val(c, 0, {}, coef[J]), abs(coef[J]), 0.0)
    for j in range(J - 1, -1, -1):
        p = product(v, h, m)
        h = Approx(p.val + coef[j], abs(coef[j]) + p.mag, p.err)
    s = product(Approx(u, 1.0, 0.0), h, m)
    trunc = (math.pi / 2) ** (2 * J + 3) / math.factorial(2 * J + 3)
    return Approx(-s.val, 1.0, s.err + trunc)


def sawtooth(x: Val, b: int, shift: float = 0.0) -> Val:
    """S(2^b (x − shift)) = dist(2^b (x − shift), Z), exact for x − shift in [−1/4, 1]: b composed tents."""
    c = x.circuit
    z = x - shift
    S = c.relu(z) + c.relu(-z) - 2 * c.relu(z - 0.5)
    S.nonneg = True
    for _ in range(b):
        S = 2 * c.relu(S) - 4 * c.relu(S - 0.25)
        S.nonneg = True
    return S


class TrigFeatures:
    """cos(2πnx), sin(2πnx) of the inputs x_k in [0, 1], shared between terms (angle addition over bits of n)."""

    def __init__(self, circuit: Circuit, m: int, J: int):
        self.c, self.m, self.J = circuit, m, J
        self._memo: dict[tuple[int, int], tuple[Approx, Approx]] = {}
        self._bits: dict[tuple[int, int], tuple[Approx, Approx]] = {}

    def bit(self, k: int, b: int) -> tuple[Approx, Approx]:
        """cos and sin of 2π 2^b x_k."""
        if (k, b) not in self._bits:
            x = self.c.input(k)
            self._bits[(k, b)] = (cos_of_sawtooth(sawtooth(x, b), self.m, self.J),
                                  cos_of_sawtooth(sawtooth(x, b, 2.0 ** (-b - 2)), self.m, self.J))
        return self._bits[(k, b)]

    def pair(self, k: int, n: int) -> tuple[Approx, Approx]:
        if (k, n) in self._memo:
            return self._memo[(k, n)]
        top = n.bit_length() - 1
        cb, sb = self.bit(k, top)
        rest = n - 2**top
        if rest == 0:
            out = (cb, sb)
        else:
            C, S = self.pair(k, rest)
            pc, ps, qc, qs = product(C, cb, self.m), product(S, sb, self.m), product(S, cb, self.m), product(C, sb, self.m)
            out = (Approx(pc.val - ps.val, 1.0, pc.err + ps.err), Approx(qc.val + qs.val, 1.0, qc.err + qs.err))
        self._memo[(k, n)] = out
        return out

    def psi_unit(self, k: int, r: int) -> Approx:
        """ψ_r(x_k)/√2 for r != 0."""
        C, S = self.pair(k, abs(r))
        return C if r < 0 else S


def tree_product(factors: list[Approx], m: int) -> Approx:
    """Π factors through a balanced binary tree of Yarotsky products."""
    while len(factors) > 1:
        nxt = [product(factors[i], factors[i + 1], m) for i in range(0, len(factors) - 1, 2)]
        factors = nxt + ([factors[-1]] if len(factors) % 2 else [])
    return factors[0]


def trig_poly_maps(coeffs: dict[tuple[int, ...], float], K: int, m: int, J: int,
                   pre: Optional[sp.spmatrix] = None) -> tuple[list, float]:
    """ReLU maps for Σ_r coeffs[r] Π_k ψ_{r_k}(x_k) on [0, 1]^K, and their a-priori sup-error bound.

    ``pre`` (K, D) is a read-out merged into A_1 (f_1 = f̂ ∘ C in App. E).
    """
    c = Circuit(K)
    feats = TrigFeatures(c, m, J)
    total, bound = Val(c, 0, {}, 0.0), 0.0
    for r, coef in coeffs.items():
        nz = [(k, rk) for k, rk in enumerate(r) if rk != 0]
        if not nz:
            total = total + float(coef)
            continue
        term = tree_product([feats.psi_unit(k, rk) for k, rk in nz], m)
        scale = float(coef) * math.sqrt(2.0) ** len(nz)
        total = total + term.val * scale
        bound += abs(scale) * term.err
    maps = c.affine_maps([total])
    if pre is not None:
        A1, b1 = maps[0]
        maps[0] = ((A1 @ sp.csr_matrix(pre)).tocsr(), b1)
    return maps, bound
