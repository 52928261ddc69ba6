"""Shared pieces of the core layers: the layer kinds and normalisers, and input conversion."""
from __future__ import annotations

import torch

from tfbook.device import DTYPE

NORMALIZATIONS = ("softmax", "relu", "hard", "linear")
BOUNDARIES = ("masked", "circular")
KINDS = ("attn", "xattn", "ewml", "mlp")



def _as_tensor(x, name: str, ndim: int) -> torch.Tensor:
    t = torch.as_tensor(x, dtype=DTYPE) if not isinstance(x, torch.Tensor) else x.to(DTYPE)
    if t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    return t
