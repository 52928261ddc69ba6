"""Levelled ReLU circuits: feed-forward networks *without* skip connections, built gadget by gadget.

The slot gadgets of this package add into a residual stream, which keeps every value for free. A network
without skip connections (Definition 1 of Takeshita and Imaizumi, 2025; the FFN f_m of Takakura and
Suzuki, 2023) must carry every value it still needs through each ReLU layer. A `Circuit` does that
bookkeeping: its ReLU units sit in levels, a `Val` is an affine combination of the units of one level
(level 0 = the inputs), and a value needed later is lifted one level up through the exact identity
relu(x) - relu(-x) (one unit, relu(x), when x >= 0 is known). `Circuit.affine_maps` returns the
network's (A_1, b_1), ..., (A_L, b_L), which `tfbook.gadgets.FNN` runs on core layers.

Gadgets (an `Approx` carries a-priori bounds: ``mag`` >= |true value|, ``err`` >= |value - true value|):

* exact: `identity`, `absolute`, `clip`, and `sawtooth` (dist(2^b z, Z), b hats);
* Yarotsky (the hat expansion of `tfbook.gadgets.squaring.sawtooth_coefficients` with k = 1, one hat
  per level): `square` = f_m with error `squaring_error(1, m)`, `product` (polarisation on |x +- y|, any
  signs), `tree_product`;
* trigonometric (Eq. (7) of Takakura and Suzuki, 2023): `cos_of_sawtooth` (a Horner/Taylor polynomial in u^2 with
  Yarotsky products), `TrigFeatures` (cos and sin of 2 pi n x by angle addition over the bits of n),
  `taylor_terms`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from tfbook import validate
from tfbook.gadgets.squaring import sawtooth_coefficients, squaring_error

Maps = list[tuple[sp.csr_matrix, np.ndarray]]  # [(A_l (n_l, n_{l-1}), b_l (n_l,))], l = 1..L


class Val:
    """sum_j coeffs[j] * (unit j of ``level``) + const; ``nonneg`` marks values known to be >= 0."""

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

    def known_nonnegative(self) -> "Val":
        """This value, marked >= 0 (the caller's promise; lifting it then costs one unit)."""
        self.nonneg = True
        return self


class Circuit:
    """ReLU units by level; the pre-activation of a level-l unit (l >= 1) is affine in level l - 1."""

    def __init__(self, n_in: int):
        self.n_in = validate.positive_int("n_in", n_in)
        self.levels: list[list[tuple[dict[int, float], float]]] = [[]]  # levels[0] unused (the inputs)

    def input(self, k: int) -> Val:
        k = validate.positive_int("k", k, 0)
        if k >= self.n_in:
            raise ValueError(f"k must be < n_in = {self.n_in}, got {k}")
        return Val(self, 0, {k: 1.0})

    def const(self, value: float) -> Val:
        return Val(self, 0, {}, float(value))

    def relu(self, v: Val) -> Val:
        level = v.level + 1
        while len(self.levels) <= level:
            self.levels.append([])
        self.levels[level].append((dict(v.coeffs), v.const))
        return Val(self, level, {len(self.levels[level]) - 1: 1.0}, 0.0, nonneg=True)

    def lift(self, v: Val, level: int) -> Val:
        """``v`` re-expressed at ``level`` >= v.level through exact identity units (memoised)."""
        if level < v.level:
            raise ValueError(f"level must be >= the value's level {v.level}, got {level}")
        if v.is_const:
            return Val(self, level, {}, v.const, v.nonneg)
        current = v
        while current.level < level:
            nxt = current._lifted.get(current.level + 1)
            if nxt is None:
                nxt = identity(current)
                current._lifted[current.level + 1] = nxt
            current = nxt
        return current

    def affine_maps(self, outputs: Sequence[Val]) -> Maps:
        """(A_l, b_l) for l = 1..L computing ``outputs`` (all lifted to the deepest level); L = depth + 1."""
        top = max([o.level for o in outputs] + [0])
        outs = [self.lift(o, top) for o in outputs]
        widths = [self.n_in] + [len(self.levels[ell]) for ell in range(1, top + 1)]
        maps = []
        for ell in range(1, top + 2):
            rows = self.levels[ell] if ell <= top else [(o.coeffs, o.const) for o in outs]
            entries = [(i, j, c) for i, (coeffs, _) in enumerate(rows) for j, c in coeffs.items() if c != 0.0]
            i, j, c = (list(t) for t in zip(*entries)) if entries else ([], [], [])
            A = sp.csr_matrix((c, (i, j)), shape=(len(rows), widths[ell - 1]))
            maps.append((A, np.array([const for _, const in rows], dtype=float)))
        return maps


def run_maps(maps: Sequence[tuple[sp.spmatrix, np.ndarray]], x: np.ndarray) -> np.ndarray:
    """Reference evaluation of A_L relu(... relu(A_1 x + b_1) ...) + b_L in NumPy, columns x (n_0, batch)."""
    h = np.asarray(x, dtype=float)
    for ell, (A, b) in enumerate(maps):
        h = A @ h + b[:, None]
        if ell < len(maps) - 1:
            h = np.maximum(h, 0.0)
    return h


def sizes_of(maps: Sequence[tuple[sp.spmatrix, np.ndarray]]) -> dict[str, float]:
    """Paper 003's L (affine maps), W (largest dimension, input and output included), S (non-zeros), B (max |entry|)."""
    W = max(max(A.shape) for A, _ in maps)
    S = sum(A.count_nonzero() + int(np.count_nonzero(b)) for A, b in maps)
    B = max(max(float(abs(A).max()) if A.nnz else 0.0, float(np.abs(b).max()) if b.size else 0.0) for A, b in maps)
    return {"L": len(maps), "W": W, "S": S, "B": B}


# --- exact gadgets ----------------------------------------------------------------------------------
def identity(v: Val) -> Val:
    """``v`` one level up: relu(v) - relu(-v), or relu(v) alone when v >= 0 is known."""
    c = v.circuit
    out = c.relu(v) if v.nonneg else c.relu(v) - c.relu(-v)
    out.nonneg = v.nonneg
    return out


def absolute(v: Val) -> Val:
    """|v| = relu(v) + relu(-v), one level up."""
    c = v.circuit
    return (c.relu(v) + c.relu(-v)).known_nonnegative()


def clip(v: Val, low: float, high: float) -> Val:
    """min(max(v, low), high) = low + relu(v - low) - relu(v - high), one level up."""
    low = validate.real("low", low)
    high = validate.real("high", high, low=low)
    c = v.circuit
    return c.relu(v - low) - c.relu(v - high) + low


def sawtooth(x: Val, b: int, shift: float = 0.0) -> Val:
    """S(2^b (x - shift)) = dist(2^b (x - shift), Z), exact for x - shift in [-1/4, 1]: b + 1 levels.

    The first level folds z = x - shift to dist(z, Z) in [0, 1/2]; each further level applies the hat
    S -> g(2S)/2 = sum_t a_t relu(S - t/4), a = `sawtooth_coefficients(1)[0]` = (2, -4).
    """
    b = validate.positive_int("b", b, 0)
    a, _ = sawtooth_coefficients(1)
    c = x.circuit
    z = x - shift
    S = (c.relu(z) + c.relu(-z) - 2 * c.relu(z - 0.5)).known_nonnegative()
    for _ in range(b):
        S = (float(a[0]) * c.relu(S) + float(a[1]) * c.relu(S - 0.25)).known_nonnegative()
    return S


# --- Yarotsky ---------------------------------------------------------------------------------------
@dataclass
class Approx:
    """A circuit value with |true value| <= mag and |value - true value| <= err."""

    val: Val
    mag: float
    err: float


def square(t: Val, m: int) -> Val:
    """Yarotsky's f_m(t) = t - sum_{s <= m} g_s(t) / 4^s for t in [0, 1]: m levels of two hat units and a carry.

    Level l holds relu(y - j/2), j = 0, 1, for y = g_{l-1}(t) (y = t at level 1): the next hat is
    g_l = sum_j a_j relu(y - j/2) and y - f_1(y) = sum_j b_j relu(y - j/2) (`sawtooth_coefficients(1)`).
    Error 0 <= f_m - t^2 <= `squaring_error(1, m)` = 4^-(m+1), attained at the grid midpoints.
    """
    m = validate.positive_int("m", m)
    a, b = (tuple(float(x) for x in v) for v in sawtooth_coefficients(1))
    c = t.circuit
    y, acc = t, None
    for level in range(1, m + 1):
        units = [c.relu(y - j / 2) for j in range(2)]
        drop = (b[0] * units[0] + b[1] * units[1]) * 4.0 ** -(level - 1)
        acc = (units[0] if acc is None else acc) - drop  # at level 1, t = relu(t) is the j = 0 unit
        acc.nonneg = True
        y = (a[0] * units[0] + a[1] * units[1]).known_nonnegative()
    return acc


def product(x: Approx, y: Approx, m: int) -> Approx:
    """xy ~ R^2 [f_m(|x+y|/2R) - f_m(|x-y|/2R)], R >= |x|, |y| a power of 2; exact for a constant factor.

    Error <= the propagated input errors + 2 R^2 `squaring_error(1, m)`.
    """
    mag, err = x.mag * y.mag, x.err * (y.mag + y.err) + x.mag * y.err
    if x.val.is_const or y.val.is_const:
        k, v = (x.val.const, y.val) if x.val.is_const else (y.val.const, x.val)
        return Approx(v * k, mag, err)
    R = 2.0 ** math.ceil(math.log2(max(x.mag + x.err, y.mag + y.err, 1e-300)))
    plus, minus = absolute((x.val + y.val) * (0.5 / R)), absolute((x.val - y.val) * (0.5 / R))
    val = (square(plus, m) - square(minus, m)) * (R * R)
    return Approx(val, mag, err + 2 * R * R * squaring_error(1, m))


def tree_product(factors: list[Approx], m: int) -> Approx:
    """prod factors through a balanced binary tree of Yarotsky products (depth ceil(log2 len) products)."""
    if not factors:
        raise ValueError("factors must hold at least one value")
    while len(factors) > 1:
        nxt = [product(factors[i], factors[i + 1], m) for i in range(0, len(factors) - 1, 2)]
        factors = nxt + ([factors[-1]] if len(factors) % 2 else [])
    return factors[0]


# --- trigonometric ----------------------------------------------------------------------------------
def taylor_terms(tol: float) -> int:
    """Smallest J with (pi/2)^(2J+3) / (2J+3)! <= tol: the degree-(2J+1) Taylor polynomial of sin(pi u/2) on [-1, 1]."""
    tol = validate.real("tol", tol, low=0, low_open=True)
    J = 0
    while (math.pi / 2) ** (2 * J + 3) / math.factorial(2 * J + 3) > tol:
        J += 1
    return J


def cos_of_sawtooth(S: Val, m: int, J: int) -> Approx:
    """cos(2 pi S) for an exact S in [0, 1/2]: -sin(pi u/2), u = 4S - 1, by Horner in u^2 with Yarotsky products."""
    c = S.circuit
    u = S * 4.0 - 1.0
    v = Approx(square(absolute(u), m), 1.0, squaring_error(1, m))
    coef = [(-1) ** j * (math.pi / 2) ** (2 * j + 1) / math.factorial(2 * j + 1) for j in range(J + 1)]
    h = Approx(c.const(coef[J]), abs(coef[J]), 0.0)
    for j in range(J - 1, -1, -1):
        p = product(v, h, m)
        h = Approx(p.val + coef[j], abs(coef[j]) + p.mag, p.err)
    s = product(Approx(u, 1.0, 0.0), h, m)
    trunc = (math.pi / 2) ** (2 * J + 3) / math.factorial(2 * J + 3)
    return Approx(-s.val, 1.0, s.err + trunc)


class TrigFeatures:
    """cos(2 pi n x_k) and sin(2 pi n x_k) of inputs x_k in [0, 1], shared between terms.

    cos and sin of 2 pi 2^b x come from the exact sawtooth and `cos_of_sawtooth` (sin through the shift
    2^-(b+2)); other frequencies by angle addition over the bits of n.
    """

    def __init__(self, circuit: Circuit, m: int, J: int):
        self.c, self.m, self.J = circuit, validate.positive_int("m", m), validate.positive_int("J", J, 0)
        self._memo: dict[tuple[int, int], tuple[Approx, Approx]] = {}
        self._bits: dict[tuple[int, int], tuple[Approx, Approx]] = {}

    def bit(self, k: int, b: int) -> tuple[Approx, Approx]:
        """cos and sin of 2 pi 2^b x_k."""
        if (k, b) not in self._bits:
            x = self.c.input(k)
            self._bits[(k, b)] = (cos_of_sawtooth(sawtooth(x, b), self.m, self.J),
                                  cos_of_sawtooth(sawtooth(x, b, 2.0 ** (-b - 2)), self.m, self.J))
        return self._bits[(k, b)]

    def pair(self, k: int, n: int) -> tuple[Approx, Approx]:
        """cos and sin of 2 pi n x_k, n >= 1."""
        n = validate.positive_int("n", n)
        if (k, n) in self._memo:
            return self._memo[(k, n)]
        top = n.bit_length() - 1
        cb, sb = self.bit(k, top)
        rest = n - 2**top
        if rest == 0:
            out = (cb, sb)
        else:
            C, S = self.pair(k, rest)
            pc, ps, qc, qs = (product(C, cb, self.m), product(S, sb, self.m), product(S, cb, self.m),
                              product(C, sb, self.m))
            out = (Approx(pc.val - ps.val, 1.0, pc.err + ps.err), Approx(qc.val + qs.val, 1.0, qc.err + qs.err))
        self._memo[(k, n)] = out
        return out
