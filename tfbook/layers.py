"""Explicit-weight transformer layers acting on a token matrix ``H`` of shape (batch, n, D).

Tokens are rows (torch convention); papers often write the transposed ``D x n`` form.
Nothing here is trained: every weight is handed in by a construction.

* `Attention`: multi-head attention, ``H + sum_h A_h (H W_V^h.T + b_V^h) W_O^h.T`` with
  scores ``(H W_Q.T + b_Q)(H W_K.T + b_K).T`` normalised by softmax, ReLU divided by the
  number of keys, or hard attention (arg-max, ties averaged).
* `FeedForward`: ``H + relu(H W_1.T + b_1) W_2.T + b_2`` (residual optional).
* `Block` (attention then feed-forward) and `Transformer` (a stack of blocks that can
  return every intermediate state).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import nn

from tfbook.device import DTYPE

NORMALIZATIONS = ("softmax", "relu", "hard")


def _as_tensor(x, name: str, ndim: int) -> torch.Tensor:
    t = torch.as_tensor(x, dtype=DTYPE)
    if t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    return t


@dataclass
class HeadWeights:
    """One attention head: ``W_Q, W_K`` (m_qk, D), ``W_V`` (m_v, D), ``W_O`` (D, m_v), optional biases."""

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor
    b_Q: Optional[torch.Tensor] = None
    b_K: Optional[torch.Tensor] = None
    b_V: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        self.W_Q, self.W_K = _as_tensor(self.W_Q, "W_Q", 2), _as_tensor(self.W_K, "W_K", 2)
        self.W_V, self.W_O = _as_tensor(self.W_V, "W_V", 2), _as_tensor(self.W_O, "W_O", 2)
        m_qk, D = self.W_Q.shape
        m_v = self.W_V.shape[0]
        if self.W_K.shape != (m_qk, D):
            raise ValueError(f"W_K must have the shape of W_Q {(m_qk, D)}, got {tuple(self.W_K.shape)}")
        if self.W_V.shape[1] != D or self.W_O.shape != (D, m_v):
            raise ValueError(f"W_V must be (m_v, {D}) and W_O ({D}, m_v); got {tuple(self.W_V.shape)}, {tuple(self.W_O.shape)}")
        zeros = {"b_Q": m_qk, "b_K": m_qk, "b_V": m_v}
        for name, size in zeros.items():
            value = getattr(self, name)
            value = torch.zeros(size, dtype=DTYPE) if value is None else _as_tensor(value, name, 1)
            if value.shape != (size,):
                raise ValueError(f"{name} must have shape ({size},), got {tuple(value.shape)}")
            setattr(self, name, value)

    @classmethod
    def zeros(cls, D: int, m: int = 1) -> "HeadWeights":
        """A head with all-zero weights (contributes nothing under any normalisation)."""
        return cls(*(torch.zeros(m, D, dtype=DTYPE) for _ in range(3)), torch.zeros(D, m, dtype=DTYPE))


class Attention(nn.Module):
    """Residual multi-head attention with explicit per-head Q, K, V, O weights.

    ``normalization``: ``"softmax"`` (over keys), ``"relu"`` (``relu(scores) / n_keys``) or
    ``"hard"`` (uniform over the arg-max keys, ties averaged). ``causal=True`` lets query
    ``i`` see keys ``0..i`` only.
    """

    def __init__(self, heads: Sequence[HeadWeights], normalization: str = "softmax", causal: bool = False):
        super().__init__()
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
        if len(heads) == 0:
            raise ValueError("heads must contain at least one HeadWeights")
        D = heads[0].W_Q.shape[1]
        if any(h.W_Q.shape[1] != D for h in heads):
            raise ValueError("all heads must act on the same embedding dimension D")
        self.normalization, self.causal, self.D = normalization, causal, D
        self.heads = nn.ModuleList()
        for h in heads:
            head = nn.Module()
            for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V"):
                head.register_parameter(name, nn.Parameter(getattr(h, name).clone(), requires_grad=False))
            self.heads.append(head)

    def attention_matrices(self, H: torch.Tensor) -> list[torch.Tensor]:
        """Per head, the (batch, n_queries, n_keys) attention weights."""
        return [self._normalize(self._scores(head, H)) for head in self.heads]

    def _scores(self, head: nn.Module, H: torch.Tensor) -> torch.Tensor:
        Q = H @ head.W_Q.T + head.b_Q  # (B, n, m)
        K = H @ head.W_K.T + head.b_K  # (B, n, m)
        return Q @ K.transpose(-1, -2)  # (B, n, n)

    def _normalize(self, S: torch.Tensor) -> torch.Tensor:
        n = S.shape[-1]
        mask = None
        if self.causal:
            mask = torch.ones(n, n, dtype=torch.bool, device=S.device).tril()
        if self.normalization == "softmax":
            if mask is not None:
                S = S.masked_fill(~mask, float("-inf"))
            return torch.softmax(S, dim=-1)
        if self.normalization == "relu":
            A = torch.relu(S)
            if mask is None:
                return A / n
            A = A.masked_fill(~mask, 0.0)
            return A / mask.sum(-1, keepdim=True).to(S.dtype)
        if mask is not None:
            S = S.masked_fill(~mask, float("-inf"))
        top = (S == S.amax(dim=-1, keepdim=True)).to(S.dtype)
        return top / top.sum(-1, keepdim=True)

    def forward(self, H: torch.Tensor) -> torch.Tensor:
        out = H
        for head in self.heads:
            A = self._normalize(self._scores(head, H))  # (B, n, n)
            V = H @ head.W_V.T + head.b_V  # (B, n, m_v)
            out = out + (A @ V) @ head.W_O.T  # (B, n, D)
        return out


class FeedForward(nn.Module):
    """``H + relu(H W_1.T + b_1) W_2.T + b_2`` with ``W_1`` (m, D), ``W_2`` (D, m); ``residual=False`` drops ``H``."""

    def __init__(self, W_1, b_1, W_2, b_2, residual: bool = True):
        super().__init__()
        W_1, W_2 = _as_tensor(W_1, "W_1", 2), _as_tensor(W_2, "W_2", 2)
        b_1, b_2 = _as_tensor(b_1, "b_1", 1), _as_tensor(b_2, "b_2", 1)
        m, D = W_1.shape
        if b_1.shape != (m,) or W_2.shape[1] != m or b_2.shape != (W_2.shape[0],):
            raise ValueError(
                f"inconsistent feed-forward shapes: W_1 {tuple(W_1.shape)}, b_1 {tuple(b_1.shape)}, "
                f"W_2 {tuple(W_2.shape)}, b_2 {tuple(b_2.shape)}"
            )
        if residual and W_2.shape[0] != D:
            raise ValueError(f"a residual feed-forward layer needs W_2 with {D} rows, got {W_2.shape[0]}")
        self.residual = residual
        for name, value in (("W_1", W_1), ("b_1", b_1), ("W_2", W_2), ("b_2", b_2)):
            self.register_parameter(name, nn.Parameter(value.clone(), requires_grad=False))

    @property
    def hidden_width(self) -> int:
        return self.W_1.shape[0]

    def forward(self, H: torch.Tensor) -> torch.Tensor:
        out = torch.relu(H @ self.W_1.T + self.b_1) @ self.W_2.T + self.b_2  # (B, n, D_out)
        return H + out if self.residual else out


class Block(nn.Module):
    """A transformer block: optional attention, then optional feed-forward (both residual)."""

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
    """A stack of blocks acting on (batch, n, D); ``forward(H, return_all=True)`` returns every state."""

    def __init__(self, blocks: Sequence[Block]):
        super().__init__()
        if len(blocks) == 0:
            raise ValueError("blocks must contain at least one Block")
        self.blocks = nn.ModuleList(blocks)

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
        for block in self.blocks:
            for layer in block.sublayers():
                states.append(layer(states[-1]))
        return states if return_all else states[-1]

    def num_parameters(self) -> int:
        """Number of scalar weights (dense count, zeros included)."""
        return sum(p.numel() for p in self.parameters())

    def num_nonzero(self) -> int:
        """Number of non-zero scalar weights."""
        return sum(int(torch.count_nonzero(p)) for p in self.parameters())
