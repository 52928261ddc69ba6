"""Core benchmarks: a 1,000-head attention layer, batched over heads against a per-head loop.

The ICGD chapter's layers have about 1,000 heads on a (64, 21, 135) token matrix; `tfbook.layers`
computes heads as stacked tensors in head chunks. The loop builds one single-head layer per head
and adds their updates, which is what a per-head implementation does.
"""
from __future__ import annotations

import torch

from tfbook import bench
from tfbook.device import DTYPE
from tfbook.layers import Attention

HEADS, BATCH, TOKENS, DIM = 1000, 64, 21, 135


def _weights(head_dim: int, device: torch.device) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = [(HEADS, head_dim, DIM)] * 3 + [(HEADS, DIM, head_dim)]
    return [(0.1 * torch.randn(*s, generator=g, dtype=DTYPE)).to(device) for s in shapes]


def _build(head_dim: int, batched: bool):
    def build(device: torch.device):
        W = _weights(head_dim, device)
        H = torch.randn(BATCH, TOKENS, DIM, generator=torch.Generator().manual_seed(1), dtype=DTYPE).to(device)
        if batched:
            return [Attention.stacked(*W, normalization="relu").to(device)], H
        return [Attention.stacked(*(w[i:i + 1] for w in W), normalization="relu").to(device) for i in range(HEADS)], H
    return build


def _forward(state) -> torch.Tensor:
    layers, H = state
    if len(layers) == 1:
        return layers[0](H)
    out = H
    for layer in layers:
        out = out + (layer(H) - H)
    return out


for _dim in (1, 8):
    for _batched in (True, False):
        bench.register(f"core: {HEADS} relu heads, head dim {_dim}, {'batched' if _batched else 'per-head loop'}",
                       _build(_dim, _batched), _forward, units="heads", count=HEADS)
