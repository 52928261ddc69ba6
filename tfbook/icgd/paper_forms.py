"""The paper's layer formulas (Definitions 6-8), evaluated from a layer's dense matrices.

They are references for the core layers (EWML, ReLU attention, MLP), never used by the construction.

`relu_attention` is Definition 7's ReLU attention on tokens H (..., T, D) with heads Q, K, V (h, D, D):
``h_i + (1/T) sum_m sum_s relu(<Q_m h_i, K_m h_s>) V_m h_s``; ``swap=True`` scores
``<Q_m h_s, K_m h_i>`` instead, the convention of the paper's printed matrix form. `paper_layer` applies
the formula of a layer's kind (ReLU attention, element-wise multiplication, ReLU MLP) to H (B, n, D).
"""
from __future__ import annotations

import torch
from torch import nn


def relu_attention(H: torch.Tensor, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor,
                   swap: bool = False) -> torch.Tensor:
    """Definition 7 on tokens H (..., T, D) as rows; heads Q, K, V (h, D, D). Returns (..., T, D)."""
    q = torch.einsum("hde,...ie->...hid", Q, H)  # (..., h, T, D)
    k = torch.einsum("hde,...se->...hsd", K, H)
    v = torch.einsum("hde,...se->...hsd", V, H)
    scores = torch.relu(q @ k.transpose(-1, -2))  # (..., h, i, s)
    if swap:
        scores = scores.transpose(-1, -2)
    return H + torch.einsum("...his,...hsd->...id", scores, v) / H.shape[-2]


def paper_layer(layer: nn.Module, H: torch.Tensor) -> torch.Tensor:
    """The paper's formula for ``layer`` (kind ``attn``, ``ewml`` or ``mlp``, with a ``dense()`` giving
    its paper-form matrices) on H (B, n, D)."""
    if layer.kind == "mlp":
        W1, W2 = layer.dense()
        return H + torch.relu(H @ W1.T) @ W2.T
    Q, K, V = layer.dense()  # (heads, D, D) each
    if layer.kind == "attn":
        return relu_attention(H, Q, K, V)
    if layer.kind != "ewml":
        raise ValueError(f"layer.kind must be 'attn', 'ewml' or 'mlp', got {layer.kind!r}")
    q = torch.einsum("hde,bie->bhid", Q, H)
    k = torch.einsum("hde,bie->bhid", K, H)
    v = torch.einsum("hde,bie->bhid", V, H)
    return H + torch.einsum("bhi,bhid->bid", (q * k).sum(-1), v)
