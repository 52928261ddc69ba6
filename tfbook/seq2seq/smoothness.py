"""Sequences, the trigonometric basis, dyadic frequency blocks, γ-smoothness, codes and rates
(Takakura and Suzuki, 2023, §3, §5).

Everything here is a pure function of its arguments:

* `shift` is the shift operator (Σ_j X)_i = x_{i+j} on one period of a periodic sequence.
* `psi`, `frequency_block`, `gamma`, `a_dagger`, `blocks_below`, `G_count`, `important_coords`
  describe the function spaces of Definitions 3.1-3.2 (the block index δ_s corrected so that
  block s holds the frequencies 2^{s-1} <= |r| < 2^s).
* `unit_ball_coeffs` draws a target in the unit ball of F^γ_{2,1} (κ_s normalised per coordinate).
* `codes`, `coherence`, `lemma_c3_dim`: the approximately orthonormal position codes of Thm 4.5.
* `estimation_rate`: the rates of Theorems 5.4 and 5.5.
"""
from __future__ import annotations

import itertools
import math
from typing import Optional, Sequence

import numpy as np
import torch

from tfbook import validate
from tfbook.device import DTYPE

KINDS = ("mixed", "anisotropic")
CODE_KINDS = ("onehot", "random")


def shift(X: torch.Tensor, j: int) -> torch.Tensor:
    """(Σ_j X)_i = x_{i+j} for a (..., d, N) tensor read as one period of a periodic sequence."""
    return torch.roll(X, shifts=-int(j), dims=-1)


def psi(r: int, x):
    """ψ_r(x): √2 cos(2π|r|x) for r < 0, 1 for r = 0, √2 sin(2πrx) for r > 0 (tensor or array in, same out)."""
    r = validate.positive_int("r", abs(r), 0) * (1 if r >= 0 else -1)
    lib = torch if isinstance(x, torch.Tensor) else np
    if (x.is_complex() if lib is torch else np.iscomplexobj(x)):
        raise ValueError(f"x must be real, got a complex {'tensor' if lib is torch else 'array'}")
    x = x if isinstance(x, torch.Tensor) else np.asarray(x, dtype=float)
    if r == 0:
        return lib.ones_like(x)
    if r < 0:
        return math.sqrt(2.0) * lib.cos(2 * math.pi * abs(r) * x)
    return math.sqrt(2.0) * lib.sin(2 * math.pi * r * x)


def frequency_block(r: int) -> int:
    """s with 2^{s-1} <= |r| < 2^s (0 for r = 0): the corrected dyadic block of frequency r."""
    return abs(validate.positive_int("r", abs(r), 0)).bit_length()


def _check_a(a: Sequence[float], kind: str) -> tuple[float, ...]:
    validate.choice("kind", kind, KINDS)
    if len(a) == 0:
        raise ValueError("a must be a non-empty sequence of positive reals")
    return tuple(validate.real("a", v, low=0, low_open=True) for v in a)


def gamma(s: Sequence[int], a: Sequence[float], kind: str) -> float:
    """γ(s) = <a, s> (mixed) or max_k a_k s_k (anisotropic)."""
    a = _check_a(a, kind)
    if len(s) != len(a):
        raise ValueError(f"s must have len(a) = {len(a)} entries, got {len(s)}")
    s = [validate.real("s", v, low=0) for v in s]
    if kind == "mixed":
        return float(sum(ak * sk for ak, sk in zip(a, s)))
    return float(max(ak * sk for ak, sk in zip(a, s)))


def a_dagger(a: Sequence[float], kind: str) -> float:
    """a† = min a (mixed) or (Σ_k 1/a_k)^{-1} (anisotropic)."""
    a = _check_a(a, kind)
    return min(a) if kind == "mixed" else 1.0 / sum(1.0 / v for v in a)


def blocks_below(a: Sequence[float], kind: str, T: float) -> list[tuple[int, ...]]:
    """Every block index s in N_0^K with γ(s) < T, in lexicographic order."""
    a = _check_a(a, kind)
    T = validate.real("T", T)
    ranges = [range(0, max(0, math.ceil(T / ak)) + 1) for ak in a]
    return [s for s in itertools.product(*ranges) if gamma(s, a, kind) < T]


def block_frequencies(s: Sequence[int]) -> list[tuple[int, ...]]:
    """The 2^{|s|} frequency tuples r of block s (per coordinate: r = 0, or 2^{s-1} <= |r| < 2^s)."""
    per = []
    for sk in s:
        sk = validate.positive_int("s", sk, 0)
        mags = [0] if sk == 0 else list(range(2 ** (sk - 1), 2**sk))
        per.append([0] if sk == 0 else [sign * m for m in mags for sign in (-1, 1)])
    return list(itertools.product(*per))


def G_count(a: Sequence[float], kind: str, T: float) -> int:
    """G(T, γ) = Σ_{γ(s) < T} 2^{s_1 + ... + s_K}: the number of frequencies below the truncation T."""
    return sum(2 ** sum(s) for s in blocks_below(a, kind, T))


def important_coords(a: Sequence[float], kind: str, T: float) -> list[int]:
    """I(T, γ): the coordinates k with a_k < T (the only ones with a non-zero block below T)."""
    a = _check_a(a, kind)
    T = validate.real("T", T)
    return [k for k, ak in enumerate(a) if ak < T]


def unit_ball_coeffs(a: Sequence[float], kind: str, T: float, seed: int = 0) -> dict[tuple[int, ...], float]:
    """Coefficients b_r = ±2^{-γ(s)} 2^{-|s|/2} κ_s of a target in the unit ball of F^γ_{2,1}, truncated at T.

    κ_s = Π_k 6/(π²(1+s_k)²) sums to at most 1 over all blocks, so ||δ_s f||_2 = 2^{-γ(s)} κ_s and
    Σ_s 2^{γ(s)} ||δ_s f||_2 <= 1.
    """
    gen = np.random.default_rng(validate.positive_int("seed", seed, 0))
    out: dict[tuple[int, ...], float] = {}
    for s in blocks_below(a, kind, T):
        kappa = math.prod(6.0 / (math.pi**2 * (1 + sk) ** 2) for sk in s)
        size = 2.0 ** (-gamma(s, a, kind)) * 2.0 ** (-sum(s) / 2) * kappa
        for r in block_frequencies(s):
            out[r] = float(size * gen.choice((-1.0, 1.0)))
    return out


def trig_eval(coeffs: dict[tuple[int, ...], float], values: torch.Tensor) -> torch.Tensor:
    """Σ_r coeffs[r] Π_k ψ_{r_k}(values[..., k]) for values of shape (..., K)."""
    if values.is_complex():
        raise ValueError(f"values must be a real tensor, got dtype {values.dtype}")
    out = torch.zeros(values.shape[:-1], dtype=values.dtype, device=values.device)
    for r, c in coeffs.items():
        term = torch.full_like(out, float(c))
        for k, rk in enumerate(r):
            if rk != 0:
                term = term * psi(rk, values[..., k])
        out = out + term
    return out


def codes(n: int, dim: int, kind: str = "onehot", seed: int = 0, device=None) -> torch.Tensor:
    """(n, dim) unit rows: e_1..e_n (one-hot, needs dim >= n) or i.i.d. ±1/√dim signs drawn from ``seed``
    (on the CPU, so every device gets the same codes), on ``device`` (default: the CPU)."""
    n, dim = validate.positive_int("n", n), validate.positive_int("dim", dim)
    validate.choice("kind", kind, CODE_KINDS)
    if kind == "onehot":
        if dim < n:
            raise ValueError(f"dim must be >= n = {n} for one-hot codes, got {dim}")
        return torch.eye(n, dim, dtype=DTYPE, device=device)
    gen = torch.Generator().manual_seed(validate.positive_int("seed", seed, 0))
    signs = torch.randint(0, 2, (n, dim), generator=gen).to(DTYPE) * 2 - 1
    return (signs / math.sqrt(dim)).to(device)


def coherence(u: torch.Tensor) -> float:
    """max_{i != j} |<u_i, u_j>| of the rows of ``u`` (0 for a single row)."""
    u = validate.tensor("u", u, shape=(None, None))
    if u.shape[0] < 2:
        return 0.0
    G = (u @ u.T).abs()
    G.fill_diagonal_(0.0)
    return float(G.max())


def lemma_c3_dim(count: int, eps: float) -> int:
    """Lemma C.3: d' = ⌈4 log(2·count)/ε²⌉ random sign codes are ε-orthonormal with probability >= 3/4."""
    count = validate.positive_int("count", count)
    eps = validate.real("eps", eps, low=0, low_open=True)
    return math.ceil(4 * math.log(2 * count) / eps**2)


def estimation_rate(n: float, a_dag: float, alpha: float, V: Optional[float] = None) -> float:
    """n^{-2a†/(2a†+1)} (log₂ n)^e with e = 2/α+2+max(4/α,4) (Thm 5.4), or 5/α+... times (log₂ V)³ (Thm 5.5)."""
    n = validate.real("n", n, low=2)
    a_dag = validate.real("a_dag", a_dag, low=0, low_open=True)
    alpha = validate.real("alpha", alpha, low=0, low_open=True)
    tail = 2 + max(4 / alpha, 4)
    if V is None:
        return n ** (-2 * a_dag / (2 * a_dag + 1)) * math.log2(n) ** (2 / alpha + tail)
    V = validate.real("V", V, low=1)
    return n ** (-2 * a_dag / (2 * a_dag + 1)) * math.log2(n) ** (5 / alpha + tail) * math.log2(V) ** 3
