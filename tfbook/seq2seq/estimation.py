"""Estimation (paper 003, Section 5): sieve least squares on the trigonometric basis, exact risks, the
oracle inequality of Theorem 5.2 (App. G constants; `oracle_bound` is a `tfbook.claims.paper_formula`)
and the covering bound of Theorem 5.3 (App. H).

A target or an estimate is a dict r -> coefficient over frequency tuples; by orthonormality of ψ the
L²(uniform) risk of an estimate is the squared distance of the coefficient dicts (`l2_risk`).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from tfbook import validate
from tfbook.claims import paper_formula
from tfbook.seq2seq.smoothness import a_dagger, block_frequencies, blocks_below, psi


def _tables(Xf: np.ndarray, keys: np.ndarray) -> list[dict[int, np.ndarray]]:
    return [{int(r): psi(int(r), Xf[:, k]) for r in np.unique(keys[:, k])} for k in range(keys.shape[1])]


def design(Xf: np.ndarray, basis: Sequence[tuple[int, ...]]) -> np.ndarray:
    """(n, len(basis)) matrix of ψ_r(x) for features Xf (n, K)."""
    keys = np.array(basis, dtype=int).reshape(len(basis), Xf.shape[1])
    tabs = _tables(Xf, keys)
    out = np.ones((Xf.shape[0], len(basis)))
    for k, tab in enumerate(tabs):
        for r, col in tab.items():
            out[:, keys[:, k] == r] *= col[:, None]
    return out


def evaluate(coeffs: dict, Xf: np.ndarray, chunk: int = 512) -> np.ndarray:
    """Σ_r coeffs[r] ψ_r(x) for each row of Xf (n, K), in column chunks."""
    keys, vals = list(coeffs.keys()), np.array(list(coeffs.values()), dtype=float)
    out = np.zeros(Xf.shape[0])
    for s in range(0, len(keys), chunk):
        out += design(Xf, keys[s:s + chunk]) @ vals[s:s + chunk]
    return out


def sieve_basis(a: Sequence[float], kind: str, T: float) -> list[tuple[int, ...]]:
    """{r : γ(s(r)) < T}: the frequencies of the truncation at T."""
    return [r for s in blocks_below(a, kind, T) for r in block_frequencies(s)]


def sieve_fit(Xf: np.ndarray, y: np.ndarray, a: Sequence[float], kind: str, T: float) -> dict:
    """Least squares on the sieve {ψ_r : γ(s) < T}; returns the estimated coefficients."""
    basis = sieve_basis(a, kind, T)
    beta = np.linalg.lstsq(design(Xf, basis), y, rcond=None)[0]
    return dict(zip(basis, beta.tolist()))


def l2_risk(estimate: dict, truth: dict) -> float:
    """||f̂ − f||²_{L²(uniform)} = Σ_r (b̂_r − b_r)² (Parseval)."""
    keys = set(estimate) | set(truth)
    return float(sum((estimate.get(r, 0.0) - truth.get(r, 0.0)) ** 2 for r in keys))


def sieve_level(n: int, a: Sequence[float], kind: str) -> float:
    """T = a†/(2a†+1) log₂ n, the truncation of Theorem 5.4."""
    n = validate.positive_int("n", n, 2)
    ad = a_dagger(a, kind)
    return ad / (2 * ad + 1) * math.log2(n)


@paper_formula
def oracle_bound(log_N: float, n: int, R: float, sigma: float, approx: float = 0.0, delta: float = 0.0) -> float:
    """Theorem 5.2 with the App. G constants: 4 approx + 8(R+σ)δ + 32σ²(log N + 1)/n + 8R²(37/9 log N + 40)/n + 20Rδ."""
    n = validate.positive_int("n", n)
    return (4 * approx + 8 * (R + sigma) * delta + 32 * sigma**2 * (log_N + 1) / n
            + 8 * R**2 * (37 / 9 * log_N + 40) / n + 20 * R * delta)


def covering_bound(M: int, L: int, S: int, H: int, D: int, W: int, B: float, delta: float) -> float:
    """App. H: (M(S + 3HD²) + D²) log((6HDBWML)^{36M²L}/δ) (B where the text alternates B and M)."""
    inner = 36 * M**2 * L * math.log(6 * H * D * B * W * M * L)
    return (M * (S + 3 * H * D**2) + D**2) * (inner - math.log(delta))
