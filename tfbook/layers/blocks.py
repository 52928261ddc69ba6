"""`Block` (attention then feed-forward) and `Transformer` (a stack of blocks)."""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from tfbook.layers.attention import Attention
from tfbook.layers.feedforward import FeedForward
from tfbook.layers.sparse import shared_index_entries


class Block(nn.Module):
    """A transformer block: optional attention, then optional feed-forward."""

    def __init__(self, attention: Optional[Attention] = None, feed_forward: Optional[FeedForward] = None):
        super().__init__()
        if attention is None and feed_forward is None:
            raise ValueError("a Block needs an attention layer, a feed-forward layer, or both")
        self.attention, self.feed_forward = attention, feed_forward

    def sublayers(self) -> list[nn.Module]:
        return [m for m in (self.attention, self.feed_forward) if m is not None]

    def forward(self, H: torch.Tensor) -> torch.Tensor:
        for layer in self.sublayers():
            H = layer(H)
        return H


class Transformer(nn.Module):
    """A stack of blocks acting on (batch, n, D); ``forward(H, return_all=True)`` returns every state.

    Unnamed sublayers are named ``block{i}.attn`` and ``block{i}.ff``.
    """

    def __init__(self, blocks: Sequence[Block]):
        super().__init__()
        if len(blocks) == 0:
            raise ValueError("blocks must contain at least one Block")
        self.blocks = nn.ModuleList(blocks)
        for i, block in enumerate(self.blocks):
            for layer, suffix in ((block.attention, "attn"), (block.feed_forward, "ff")):
                if layer is not None and not layer.name:
                    layer.name = f"block{i}.{suffix}"

    def named_sublayers(self) -> list[tuple[str, nn.Module]]:
        """(name, layer) for every attention and feed-forward layer, in order."""
        return [(layer.name, layer) for block in self.blocks for layer in block.sublayers()]

    @property
    def depth(self) -> int:
        """Number of blocks."""
        return len(self.blocks)

    @property
    def width(self) -> int:
        """Largest feed-forward hidden width over the blocks."""
        return max((b.feed_forward.hidden_width for b in self.blocks if b.feed_forward is not None), default=0)

    def forward(self, H: torch.Tensor, return_all: bool = False):
        if H.ndim != 3:
            raise ValueError(f"H must have shape (batch, n, D), got {tuple(H.shape)}")
        states = [H]
        for _, layer in self.named_sublayers():
            states.append(layer(states[-1]))
        return states if return_all else states[-1]

    def num_parameters(self) -> int:
        """Number of stored scalars: every dense entry (zeros included), and a sparse weight's values and
        index entries (`stored_entries`)."""
        return sum(p.numel() for p in self.parameters()) + shared_index_entries([l for _, l in self.named_sublayers()])

    def num_nonzero(self) -> int:
        """Number of non-zero scalar weights."""
        return sum(int(torch.count_nonzero(p)) for p in self.parameters())
