"""Estimation (paper 003, Section 5): sieve least squares on the trigonometric basis, exact risks, the
oracle inequality of Theorem 5.2 (App. G constants; `oracle_bound` is a `tfbook.claims.paper_formula`),
ERM over a finite class, the covering bound of Theorem 5.3 (App. H) and the Lipschitz bound of
Lemma C.4 it rests on, difference quotients of a map (a built model) and window features at any
length.

A target or an estimate is a dict r -> coefficient over frequency tuples; by orthonormality of ψ the
L²(uniform) risk of an estimate is the squared distance of the coefficient dicts (`l2_risk`).
`evaluate` is separable: the coordinate with the highest frequency is summed by Horner's rule in
e^{2πix}, the others through 1-D tables of ψ_r and a coefficient matrix, so a target of ~2000
terms costs about (highest frequency + number of terms) operations per point.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import scipy.linalg
import torch

from tfbook import validate
from tfbook.claims import paper_formula
from tfbook.training import untrained
from tfbook.seq2seq.smoothness import a_dagger, block_frequencies, blocks_below

ROWS = 8192
"""Rows of points evaluated at a time by `evaluate` (bounds the tables' memory)."""


def psi_table(x: np.ndarray, freqs: np.ndarray) -> np.ndarray:
    """(n, len(freqs)) matrix of ψ_r(x) for points x (n,) and integer frequencies r."""
    freqs = np.asarray(freqs, dtype=int)
    ang = 2 * math.pi * np.outer(np.asarray(x, dtype=float), np.abs(freqs))       # (n, len(freqs))
    out = np.ones_like(ang)
    neg, pos = freqs < 0, freqs > 0
    out[:, neg], out[:, pos] = math.sqrt(2.0) * np.cos(ang[:, neg]), math.sqrt(2.0) * np.sin(ang[:, pos])
    return out


def design(Xf: np.ndarray, basis: Sequence[tuple[int, ...]]) -> np.ndarray:
    """(n, len(basis)) matrix of ψ_r(x) for features Xf (n, K): products of one 1-D table per coordinate."""
    keys = np.array(basis, dtype=int).reshape(len(basis), Xf.shape[1])
    out = np.ones((Xf.shape[0], len(basis)))
    for k in range(keys.shape[1]):
        values, inverse = np.unique(keys[:, k], return_inverse=True)
        out *= psi_table(Xf[:, k], values)[:, inverse.ravel()]
    return out


def _fourier_rows(x: np.ndarray, freqs: np.ndarray, A: np.ndarray) -> np.ndarray:
    """Σ_j A[j, i] ψ_{freqs[j]}(x_i) for each point i, by Horner's rule in z = e^{2πix}: with
    c_m = A[−m] − i A[m] (c_0 = A[0]/√2), the sum is √2 Re Σ_m c_m z^m. freqs distinct, A (len(freqs), n)."""
    mags = np.abs(freqs)
    c = np.zeros((int(mags.max()) + 1, A.shape[1]), dtype=complex)
    c.real[mags[freqs < 0]] = A[freqs < 0]
    c.imag[mags[freqs > 0]] = -A[freqs > 0]
    c.real[0] += A[freqs == 0].sum(0) / math.sqrt(2.0)
    z = np.exp(2j * math.pi * x)
    acc = c[-1].copy()
    for m in range(len(c) - 2, -1, -1):
        acc *= z
        acc += c[m]
    return math.sqrt(2.0) * acc.real


def evaluate(coeffs: dict, Xf: np.ndarray, rows: int = ROWS) -> np.ndarray:
    """Σ_r coeffs[r] ψ_r(x) for each row of Xf (n, K), separably (see the module docstring)."""
    Xf = np.asarray(Xf, dtype=float).reshape(len(Xf), -1)
    if not coeffs:
        return np.zeros(Xf.shape[0])
    keys = np.array(list(coeffs.keys()), dtype=int).reshape(len(coeffs), Xf.shape[1])
    vals = np.array(list(coeffs.values()), dtype=float)
    split = int(np.argmax(np.abs(keys).max(0)))
    rest = [k for k in range(keys.shape[1]) if k != split]
    main, i_main = np.unique(keys[:, split], return_inverse=True)
    tuples, i_rest = np.unique(keys[:, rest].reshape(len(keys), len(rest)), axis=0, return_inverse=True)
    C = np.zeros((len(main), len(tuples)))                                           # dense: BLAS beats sparse here
    C[i_main.ravel(), i_rest.ravel()] = vals
    out = np.zeros(Xf.shape[0])
    for s in range(0, Xf.shape[0], rows):
        x = Xf[s:s + rows]
        inner = C @ design(x[:, rest], [tuple(t) for t in tuples]).T                 # (len(main), rows)
        out[s:s + rows] = _fourier_rows(x[:, split], main, inner)
    return out


def sieve_basis(a: Sequence[float], kind: str, T: float) -> list[tuple[int, ...]]:
    """{r : γ(s(r)) < T}: the frequencies of the truncation at T."""
    return [r for s in blocks_below(a, kind, T) for r in block_frequencies(s)]


def sieve_fit(Xf: np.ndarray, y: np.ndarray, a: Sequence[float], kind: str, T: float) -> dict:
    """Least squares on the sieve {ψ_r : γ(s) < T}; returns the estimated coefficients.

    Solved by the normal equations (Cholesky) when there are at least 4 points per basis function: the ψ_r
    are orthonormal under the uniform law, so the Gram matrix is then well conditioned; else by lstsq.
    Under ``TFBOOK_UNTRAINED=1`` (`tfbook.training.untrained`) every coefficient is 0, the fit's start."""
    basis = sieve_basis(a, kind, T)
    if untrained("seq2seq.sieve_fit"):
        return dict.fromkeys(basis, 0.0)
    Phi = design(Xf, basis)                                                       # (n, len(basis))
    if Phi.shape[0] >= 4 * Phi.shape[1]:
        beta = scipy.linalg.cho_solve(scipy.linalg.cho_factor(Phi.T @ Phi), Phi.T @ y)
    else:
        beta = np.linalg.lstsq(Phi, y, rcond=None)[0]
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


def lemma_c4_lipschitz(d: int, D: int, H: int, L: int, W: int, B: float) -> float:
    """The ∞-norm Lipschitz bound of f_1 ∘ g_1 ∘ Enc_P in X that Lemma C.4 gives (the step App. H uses):
    (BW)^L for f_1, 6HB³D⁴r² for g_1 on tokens bounded by r = 2BD (App. H's bound on EX + P), dB for E."""
    d, D, H, L, W = (validate.positive_int(k, v) for k, v in (("d", d), ("D", D), ("H", H), ("L", L), ("W", W)))
    B = validate.real("B", B, low=1)
    r = 2 * B * D
    return (B * W) ** L * 6 * H * B**3 * D**4 * r**2 * d * B


def difference_quotients(X: torch.Tensor, Y: torch.Tensor) -> np.ndarray:
    """||Y_a − Y_b||_∞ / ||X_a − X_b||_∞ over every pair a < b of a batch of inputs X (batch, ...) and
    the outputs Y = F(X) (batch, ...) of one map: its empirical Lipschitz quotients in the ∞-norm."""
    X, Y = validate.tensor("X", X), torch.as_tensor(Y)
    if X.shape[0] != Y.shape[0] or X.shape[0] < 2:
        raise ValueError(f"X and Y must hold the same batch of at least 2 inputs, got {X.shape[0]} and {Y.shape[0]}")
    a, b = torch.triu_indices(X.shape[0], X.shape[0], 1, device=X.device)
    den = (X[a] - X[b]).abs().flatten(1).amax(1)
    if not bool((den > 0).all()):
        raise ValueError("X must hold distinct inputs")
    return ((Y[a] - Y[b]).abs().flatten(1).amax(1) / den).cpu().numpy()


def finite_class_losses(truth: dict, deltas: Sequence[float], dirs: Sequence[tuple[int, ...]], n: int,
                        positions: int, sigma: float, gen: np.random.Generator) -> np.ndarray:
    """One data set for ERM over {F^(k)_i(X) = g_k(X_{0,i})}, g_k = f + δ_k ψ_{r_k}: the squared errors of
    every member k summed over n sequences of ``positions`` positions, (len(deltas),).

    Tokens are i.i.d. uniform (one feature each) and Y = F°(X) + σξ, F° = f at every position. ERM over
    any sub-class is the argmin over its members; the risk R_{0,positions-1} of member k is δ_k².
    """
    deltas = np.asarray(deltas, dtype=float)
    if deltas.ndim != 1 or len(deltas) == 0 or len(deltas) != len(dirs):
        raise ValueError(f"deltas and dirs must be non-empty and of equal length, got {deltas.shape} and {len(dirs)}")
    m = validate.positive_int("n", n) * validate.positive_int("positions", positions)
    sigma = validate.real("sigma", sigma, low=0)
    Xf = gen.uniform(size=(m, 1))
    base = evaluate(truth, Xf)
    Y = base + sigma * gen.standard_normal(m)
    res = base - Y                                                                 # residual of the truth
    freqs, which = np.unique(np.array(dirs, dtype=int).reshape(len(dirs), 1), return_inverse=True)
    P = psi_table(Xf[:, 0], freqs)                                                 # (m, distinct r)
    cross, square = res @ P, np.einsum("ij,ij->j", P, P)                          # Σ res ψ_r, Σ ψ_r²
    # Σ (res + δ_k ψ_{r_k})², expanded into the sums shared by the members of one direction
    return res @ res + 2 * deltas * cross[which.ravel()] + deltas**2 * square[which.ravel()]


def erm(losses: np.ndarray, prior: np.random.Generator) -> int:
    """ERM over a finite class: the index of the member with the least empirical loss (``losses``, one per
    member, e.g. from `finite_class_losses`). Under ``TFBOOK_UNTRAINED=1`` (`tfbook.training.untrained`) no loss
    is read: the member is drawn uniformly by ``prior`` (a generator of its own, so that the data's draws do not
    change), the choice of a learner that saw no data."""
    losses = np.asarray(losses, dtype=float)
    if losses.ndim != 1 or len(losses) == 0:
        raise ValueError(f"losses must be a non-empty 1-D array, got shape {losses.shape}")
    if untrained("seq2seq.erm"):
        return int(prior.integers(len(losses)))
    return int(np.argmin(losses))


def window_features(X: np.ndarray, coords: Sequence[tuple[int, int]], frame: Optional[int] = None) -> np.ndarray:
    """(n·N, K) features X[c_k, i + o_k] of every position i of circular sequences X (n, d, N), rows ordered
    (sequence, position); with ``frame=m`` each run of m tokens is read as its own circular sequence (how a
    model that knows only length m sees a longer one); m must divide N."""
    X = np.asarray(X, dtype=float)
    if X.ndim != 3:
        raise ValueError(f"X must have shape (n, d, N), got {X.shape}")
    n, d, N = X.shape
    if frame is not None:
        frame = validate.positive_int("frame", frame)
        if N % frame:
            raise ValueError(f"frame must divide N = {N}, got {frame}")
        X = X.reshape(n, d, N // frame, frame).transpose(0, 2, 1, 3).reshape(n * N // frame, d, frame)
    cols = []
    for c, o in coords:
        if not 0 <= c < d:
            raise ValueError(f"coords channel must be in [0, d = {d}), got {c}")
        cols.append(np.roll(X[:, c, :], -int(o), axis=-1).reshape(-1))
    return np.stack(cols, axis=1)
