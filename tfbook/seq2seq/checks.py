"""Measured checks of the chapter's constructions, recorded as `tfbook.claims` claims.

Each function measures on the built model (never restates a formula) and records one claim, so
the notebooks and the mutation tests share them. Error claims print their trivial scale: the sup norm
of the extracted features, at most 1 for inputs in [0, 1] (the error of the model that outputs zero).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from tfbook import validate
from tfbook.claims import Claims
from tfbook.seq2seq.models import Seq2SeqTransformer, attention_error_bound, pe_angle
from tfbook.seq2seq.reference import extract_reference, paper_forward, selection_reference
from tfbook.seq2seq.smoothness import shift, trig_eval


def attention_rows(model: Seq2SeqTransformer, d: int, N: int, boundary: str = "circular") -> torch.Tensor:
    """A_h[i, k] for every head h, query i and key k of a length-N sequence, (h, N, N), read from the
    model's output (so a perturbed core shows in them): input k carries e_k in every one of its d
    coordinates, so output h at position i is sum_l A_h[i, l] X[c_h, l] = A_h[i, k]."""
    device = next(model.parameters()).device
    E = torch.eye(N, dtype=torch.float64, device=device)[:, None, :].expand(N, d, N)  # (k, d, N)
    return model(E, boundary=boundary).permute(1, 2, 0)  # (h, i, k)


def extraction_error(model: Seq2SeqTransformer, offsets, X: torch.Tensor, boundary: str = "circular") -> float:
    """max |model(X) − Γ∘Σ_i X| over every output, position and input."""
    return float((model(X, boundary=boundary) - extract_reference(X, offsets, boundary)).abs().max())


def stress_inputs(n: int, d: int, N: int, seed: int = 0, device=None) -> torch.Tensor:
    """(2n, d, N) float64 inputs that stress the attention: n sequences of random 0/1 tokens (a token next
    to its opposite, where softmax leakage moves a feature by the most) and n uniform ones. Drawn on the
    CPU from ``seed`` (the same inputs on every device), then moved to ``device`` (default: the CPU)."""
    gen = torch.Generator().manual_seed(validate.positive_int("seed", seed, 0))
    n, d, N = (validate.positive_int(k, v) for k, v in (("n", n), ("d", d), ("N", N)))
    binary = (torch.rand(n, d, N, generator=gen, dtype=torch.float64) > 0.5).to(torch.float64)
    return torch.cat([binary, torch.rand(n, d, N, generator=gen, dtype=torch.float64)]).to(device)


def approximation_error(model: Seq2SeqTransformer, coords, coeffs: dict, X: torch.Tensor) -> float:
    """max over both boundary rules, inputs and positions of |F̂(X) − F(X)|, F = Σ_r coeffs[r] Π ψ (Thm 4.2)."""
    return max(float((model(X, boundary=b)[:, 0]
                      - trig_eval(coeffs, extract_reference(X, coords, b).transpose(1, 2))).abs().max())
               for b in ("circular", "zero"))


def check_extraction(claims: Claims, model: Seq2SeqTransformer, offsets, X: torch.Tensor, chi: float,
                     boundary: str = "circular") -> float:
    """Thm 4.2 (App. E): each extracted feature is within the Lemma C.1 bound of one head."""
    U = model.sizes().U[0]
    err = extraction_error(model, offsets, X, boundary)
    claims.check("Thm 4.2 / Lemma C.1", f"max |feature − X[c, i+j]|, U = {U}, χ = {chi:.4g}, {boundary}",
                 err, attention_error_bound(U, 1, chi), trivial=1.0)
    return err


def check_equivariance(claims: Claims, model: Seq2SeqTransformer, X: torch.Tensor, shifts: Sequence[int]) -> float:
    """F(Σ_j X) = Σ_j F(X) for every shift j (circular boundary), to rounding; returns the absolute deviation.

    The claim divides the deviation by the spread of F(X) over positions, max |F(X)_i − mean_i F(X)_i|:
    a map that is the same at every position (a model that does nothing) is trivially equivariant, so it
    gets an infinite relative deviation and fails.
    """
    base = model(X)
    dev = max(float((model(shift(X, j)) - shift(base, j)).abs().max()) for j in shifts)
    claims.check("Thm 4.2 (shift-equivariance)",
                 f"max |F(Σ_j X) − Σ_j F(X)| over {len(shifts)} shifts / spread of F(X) over positions",
                 relative_to_spread(dev, base), 1e-12, roundoff=True)
    return dev


def relative_to_spread(dev: float, out: torch.Tensor) -> float:
    """dev / max |out_i − mean_i out_i| over the positions i (last axis); inf when out is the same everywhere."""
    spread = float((out - out.mean(-1, keepdim=True)).abs().max())
    return dev / spread if spread > 0 else math.inf


def check_matches_paper(claims: Claims, model: Seq2SeqTransformer, X: torch.Tensor, boundary: str = "circular",
                        setting: str = "") -> float:
    """The core-layer model equals the paper's definition run on its paper-form weights; ``setting``
    names the model in the statement when a page checks several."""
    dev = float((model(X, boundary=boundary) - paper_forward(model.paper_weights(), X, boundary)).abs().max())
    where = f"{boundary}, {setting}" if setting else boundary
    claims.check("Section 3 (model class T)", f"max |model − paper's definition|, {where}", dev, 1e-9,
                 roundoff=True)
    return dev


def selection_accuracy(model: Seq2SeqTransformer, importance: dict, channels, V: int, X: torch.Tensor):
    """(fraction of (input, position, rank) whose top attention is the rank-m token, max feature error)."""
    feats, chosen = selection_reference(importance, channels, V, X)
    trace = model.run_trace(X)
    N = X.shape[-1]
    hits = []
    for m in range(len(channels)):
        A = trace.attention[f"g{m + 2}"][:, 0]  # (B, N, N)
        want = torch.remainder(torch.arange(N, device=X.device)[None, :] + chosen[:, m], N)  # (B, N)
        hits.append(A.argmax(-1) == want)
    correct = float(torch.stack(hits).double().mean())
    err = float((model(X) - feats).abs().max()) if feats.numel() else 0.0
    return correct, err


def check_selection(claims: Claims, model: Seq2SeqTransformer, importance: dict, channels, V: int,
                    X: torch.Tensor, eps: float, setting: str = "") -> tuple[float, float]:
    """Thm 4.5 (App. F): every selection layer attends to the token of its rank; features within eps.
    ``setting`` names the inputs in the statements when a page checks several."""
    correct, err = selection_accuracy(model, importance, channels, V, X)
    n = X.shape[0] * X.shape[-1] * len(channels)
    suffix = f", {setting}" if setting else ""
    claims.check("Thm 4.5 (App. F)", f"fraction of {n} (input, position, rank) selected correctly{suffix}",
                 correct, 1.0, ">=")
    claims.check("Thm 4.5 (App. F)", f"max |features − Γ∘Π∘Σ_i X|{suffix}", err, eps, roundoff=err < 1e-12,
                 trivial=1.0)
    return correct, err


def score_gap_ratio(U: int, variant: str) -> float:
    """U² (1 − cos φ): the score gap of a rotation head in units of χ/U²."""
    return U * U * (1 - math.cos(pe_angle(U, variant)))
