"""Theorem 6 / Lemma 16 (softmax ICGD): the only explicit part, the quantisation feed-forward of (F.5)-(F.11).

Tokens are ``[z (d); q (d); one]``. One core `FeedForward` writes, for every coordinate z_c,
``q_c = sum_t [relu(z/delta - t B/(delta D)) - relu(z/delta - B - t B/(delta D))]/D - B step(z - B)``
(the multiple-step function of (F.7) with the top step removed as in (F.10)) plus the penalty (F.11)
``-B [step(z - B) + step(-z)]`` summed over the token's coordinates, where ``step`` ramps from 0 to 1
over a width delta. Lemma 16 also needs the penalty summed over *all tokens*, which no feed-forward
layer can do; and its contextual-mapping attention and look-up-table feed-forward are only shown to exist.
"""
from __future__ import annotations

import torch

from tfbook import validate
from tfbook.device import DTYPE
from tfbook.layers import FeedForward
from tfbook.layout import FFBuilder, Layout


def quantizer_layout(d: int) -> Layout:
    return Layout([("z", validate.positive_int("d", d)), ("q", d), ("one", 1)])


def quantization_ff(d: int, D: int, B: float, delta: float) -> FeedForward:
    """(F.7)-(F.11) as one feed-forward layer on tokens [z; q; one] (residual: q starts at 0)."""
    D = validate.positive_int("D", D)
    B = validate.real("B", B, low=0.0, low_open=True)
    delta = validate.real("delta", delta, low=0.0, low_open=True)
    lay = quantizer_layout(d)
    ff = FFBuilder(lay)
    for c in range(d):
        z, q = ("z", c), ("q", c)
        for t in range(D):  # (F.6): a ramp of height B/D starting at t B / D, width delta B
            ff.unit({z: 1 / delta, "one": -t * B / (delta * D)}, {q: 1 / D})
            ff.unit({z: 1 / delta, "one": -B - t * B / (delta * D)}, {q: -1 / D})
        ff.unit({z: 1 / delta, "one": -B / delta}, {q: -B})  # (F.10), top step of height B removed
        ff.unit({z: 1 / delta, "one": -1 - B / delta}, {q: B})
        penalty = {("q", k): -B for k in range(d)}  # (F.11): -B for z > B + delta or z < -delta
        ff.unit({z: 1 / delta, "one": -B / delta}, penalty)
        ff.unit({z: 1 / delta, "one": -1 - B / delta}, {k: -v for k, v in penalty.items()})
        ff.unit({z: -1 / delta}, penalty)
        ff.unit({z: -1 / delta, "one": -1.0}, {k: -v for k, v in penalty.items()})
    return ff.build()


def quant(z: torch.Tensor, D: int, B: float) -> torch.Tensor:
    """The multiple-step function of (F.8) on [0, B): B/D (floor(z D / B) + 1); 0 outside [0, B]."""
    k = torch.clamp(torch.floor(z * D / B) + 1, max=D)
    return torch.where((z >= 0) & (z <= B), k * B / D, torch.zeros_like(z))


def lemma16_bound(L: float, d: int, n: int, B: float, D: int) -> float:
    """Lemma 16: ||f_S(Z) - f(Z)||_2 <= L (8 sqrt(dn) + sqrt(n)) B / (2D)."""
    return L * (8 * (d * n) ** 0.5 + n ** 0.5) * B / (2 * D)


def embed(z: torch.Tensor) -> torch.Tensor:
    """Tokens [z; 0; 1] for z (batch, n, d) -> (batch, n, 2d + 1), on z's device."""
    B, n, d = z.shape
    H = torch.zeros(B, n, 2 * d + 1, dtype=DTYPE, device=z.device)
    H[..., :d] = z
    H[..., -1] = 1.0
    return H
