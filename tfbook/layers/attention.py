"""Attention and element-wise multiplication layers: heads stored stacked, (heads, ...), computed
batched, with key masks, causal masks, a null key, windows and four normalisers."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch
from torch import nn

from tfbook import validate
from tfbook.device import DTYPE
from tfbook.layers import hooks
from tfbook.layers.common import BOUNDARIES, NORMALIZATIONS, _as_tensor
from tfbook.layers.hooks import _frozen, _head_scale, _perturb_update
from tfbook.layers.sparse import _SparseWeights

# score entries (batch x heads x queries x keys) computed at once
CHUNK_ELEMENTS = 2**20


@dataclass
class HeadWeights:
    """One attention head: ``W_Q`` (m_qk, D), ``W_K`` (m_qk, D_kv), ``W_V`` (m_v, D_kv), ``W_O`` (D, m_v), optional biases."""

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
        m_qk, m_v, D_kv = self.W_Q.shape[0], self.W_V.shape[0], self.W_K.shape[1]
        if self.W_K.shape[0] != m_qk:
            raise ValueError(f"W_K must have {m_qk} rows like W_Q, got {tuple(self.W_K.shape)}")
        if self.W_V.shape[1] != D_kv or self.W_O.shape[1] != m_v:
            raise ValueError(f"W_V must be (m_v, {D_kv}) and W_O (D, m_v); got {tuple(self.W_V.shape)}, "
                             f"{tuple(self.W_O.shape)}")
        if self.W_O.shape[0] != self.W_Q.shape[1]:
            raise ValueError(f"W_O must have {self.W_Q.shape[1]} rows (D of W_Q), got {self.W_O.shape[0]}")
        for name, size in (("b_Q", m_qk), ("b_K", m_qk), ("b_V", m_v)):
            value = getattr(self, name)
            if value is not None:
                value = _as_tensor(value, name, 1)
                if value.shape != (size,):
                    raise ValueError(f"{name} must have shape ({size},), got {tuple(value.shape)}")
                setattr(self, name, value)

    @classmethod
    def zeros(cls, D: int, m: int = 1) -> "HeadWeights":
        """A head with all-zero weights (contributes nothing under any normalisation)."""
        return cls(*(torch.zeros(m, D, dtype=DTYPE) for _ in range(3)), torch.zeros(D, m, dtype=DTYPE))


def _stack(tensors: Sequence[Optional[torch.Tensor]], rows: int, cols: Optional[int] = None) -> Optional[torch.Tensor]:
    """Stack per-head matrices (or vectors) zero-padded to ``rows`` (x ``cols``); None if all are None."""
    if all(t is None for t in tensors):
        return None
    out = []
    for t in tensors:
        shape = (rows,) if cols is None else (rows, cols)
        z = torch.zeros(shape, dtype=DTYPE)
        if t is not None:
            z[: t.shape[0], ...] = t if cols is None else torch.nn.functional.pad(t, (0, cols - t.shape[1]))
        out.append(z)
    return torch.stack(out)


class HeadView:
    """Read-only per-head view into a layer's stacked tensors (registers nothing)."""

    def __init__(self, layer: nn.Module, index: int):
        self._layer, self._index = layer, index

    def __getattr__(self, name: str) -> torch.Tensor:
        if name not in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V"):
            raise AttributeError(name)
        stacked = getattr(self._layer, name)
        if stacked is None:  # absent bias: zeros of the right size
            ref = {"b_Q": "W_Q", "b_K": "W_K", "b_V": "W_V"}[name]
            return torch.zeros(self._layer._shape(ref)[1], dtype=DTYPE, device=self._layer._device(ref))
        return stacked[self._index]


def _project(X: torch.Tensor, W: torch.Tensor, b: Optional[torch.Tensor]) -> torch.Tensor:
    """X (B, n, Din), W (h, m, Din), b (h, m) -> (B, h, m, n), as one matrix product over all tokens."""
    h, m, d_in = W.shape
    B, n = X.shape[0], X.shape[1]
    Y = (W.reshape(h * m, d_in) @ X.reshape(B * n, d_in).T).reshape(h, m, B, n)  # (h, m, B, n)
    Y = Y if b is None else Y + b[:, :, None, None]
    return Y.permute(2, 0, 1, 3)  # (B, h, m, n), a view


def _write_out(W_O: torch.Tensor, O: torch.Tensor) -> torch.Tensor:
    """W_O (h, D, m_v) applied to head outputs O (B, h, m_v, n) and summed over heads -> (B, n, D)."""
    h, D, m_v = W_O.shape
    B, n = O.shape[0], O.shape[-1]
    O = O.permute(1, 2, 0, 3).reshape(h * m_v, B * n)  # (h * m_v, B * n)
    return (W_O.permute(1, 0, 2).reshape(D, h * m_v) @ O).reshape(D, B, n).permute(1, 2, 0)  # (B, n, D)


class _StackedLayer(_SparseWeights):
    """Shared storage of stacked head tensors W_Q, W_K (h, m_qk, D_kv), W_V (h, m_v, D_kv), W_O (h, D, m_v)."""

    kind = ""

    def _store(self, W_Q, W_K, W_V, W_O, b_Q, b_K, b_V) -> None:
        W_Q, W_K = _as_tensor(W_Q, "W_Q", 3), _as_tensor(W_K, "W_K", 3)
        W_V, W_O = _as_tensor(W_V, "W_V", 3), _as_tensor(W_O, "W_O", 3)
        h, m_qk, D = W_Q.shape
        D_kv, m_v = W_K.shape[2], W_V.shape[1]
        if h == 0:
            raise ValueError("heads must contain at least one head")
        if W_K.shape[:2] != (h, m_qk):
            raise ValueError(f"W_K must have shape ({h}, {m_qk}, D_kv), got {tuple(W_K.shape)}")
        if W_V.shape != (h, m_v, D_kv):
            raise ValueError(f"W_V must have shape ({h}, m_v, {D_kv}), got {tuple(W_V.shape)}")
        if W_O.shape != (h, D, m_v):
            raise ValueError(f"W_O must have shape ({h}, {D}, {m_v}), got {tuple(W_O.shape)}")
        for name, value, size in (("b_Q", b_Q, m_qk), ("b_K", b_K, m_qk), ("b_V", b_V, m_v)):
            if value is not None and tuple(_as_tensor(value, name, 2).shape) != (h, size):
                raise ValueError(f"{name} must have shape ({h}, {size}), got {tuple(torch.as_tensor(value).shape)}")
        for name, t in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V), ("W_O", W_O)):
            self._store_weight(name, t, cols=name == "W_O")
        self.b_Q, self.b_K, self.b_V = (_frozen(None if b is None else _as_tensor(b, "b", 2)) for b in (b_Q, b_K, b_V))
        self.D, self.D_kv, self.name = D, D_kv, ""

    @property
    def num_heads(self) -> int:
        return self._shape("W_Q")[0]

    @property
    def heads(self) -> list[HeadView]:
        """Per-head views exposing ``W_Q, b_Q, W_K, b_K, W_V, b_V, W_O``."""
        return [HeadView(self, i) for i in range(self.num_heads)]

    @property
    def value_width(self) -> int:
        """Total value width, heads x m_v (the width of the concatenated head outputs)."""
        h, m_v, _ = self._shape("W_V")
        return h * m_v

    def _project(self, X: torch.Tensor, name: str, b: Optional[torch.Tensor]) -> torch.Tensor:
        """`_project` of X (B, n, Din) by the stacked weight ``name`` (h, m, Din) -> (B, h, m, n)."""
        if name not in self._sparse:
            return _project(X, getattr(self, name), b)
        h, m, d_in = self._shape(name)
        B, n = X.shape[0], X.shape[1]
        Y = self._times(name, X.reshape(B * n, d_in).T).reshape(h, m, B, n)  # (h, m, B, n)
        Y = Y if b is None else Y + b[:, :, None, None]
        return Y.permute(2, 0, 1, 3)  # (B, h, m, n)

    def _write_out(self, O: torch.Tensor) -> torch.Tensor:
        """`_write_out` of head outputs O (B, h, m_v, n) through W_O -> (B, n, D)."""
        if "W_O" not in self._sparse:
            return _write_out(self.W_O, O)
        h, D, m_v = self._shape("W_O")
        B, n = O.shape[0], O.shape[-1]
        O = O.permute(1, 2, 0, 3).reshape(h * m_v, B * n)  # (h * m_v, B * n)
        return self._times("W_O", O).reshape(D, B, n).permute(1, 2, 0)  # (B, n, D)

    def _residual(self, H: torch.Tensor, O: torch.Tensor) -> torch.Tensor:
        """H plus the heads' outputs O (B, h, m_v, n) written through W_O, with any active perturbation."""
        if hooks._ACTIVE:
            factors = _head_scale(self, self.num_heads, H.device)
            if factors is not None:
                O = O * factors[:, None, None]
        update = self._write_out(O)  # (B, n, D)
        if hooks._ACTIVE:
            update = _perturb_update(self, update)
        return H + update

    def _dense_qk(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(h, D, D) Q and K with <Q h, K h'> = (W_Q h) . (W_K h') and no biases."""
        if any(b is not None and bool(b.any()) for b in (self.b_Q, self.b_K, self.b_V)):
            raise ValueError("dense() gives the bias-free paper form; this layer has non-zero biases")
        h, m, D = self.W_Q.shape
        if m <= D:
            Q = torch.zeros(h, D, D, dtype=DTYPE, device=self.W_Q.device)
            K = torch.zeros(h, D, self.D_kv, dtype=DTYPE, device=self.W_Q.device)
            Q[:, :m], K[:, :m] = self.W_Q, self.W_K
            return Q, K
        K = torch.eye(D, self.D_kv, dtype=DTYPE, device=self.W_Q.device).expand(h, -1, -1).clone()
        if D != self.D_kv:
            raise ValueError("dense() of a cross-attention layer needs m_qk <= D")
        return self.W_K.transpose(1, 2) @ self.W_Q, K  # <(W_K^T W_Q) h, h'> = (W_Q h) . (W_K h')

    def dense(self) -> dict[str, torch.Tensor]:
        """Paper-form matrices Q, K (h, D, D) and V (h, D, D_kv) with score <Q h_i, K h_j> and value V h_j."""
        Q, K = self._dense_qk()
        return {"Q": Q, "K": K, "V": self.W_O @ self.W_V}


class Attention(_StackedLayer):
    """Residual multi-head attention with stacked heads; see the module docstring.

    ``heads``: a sequence of `HeadWeights` (zero-padded to common sizes), or use `Attention.stacked`.
    ``normalization``: one of `NORMALIZATIONS`. ``temperature`` (softmax): scores are divided by it.
    ``relu_divisor`` (relu): ``"keys"`` divides by the number of keys each query sees (masked keys
    excluded, the null key included), an int T by T. ``causal``: query i sees keys j <= i.
    ``window=U``: query i sees keys j with |i - j| <= U; ``boundary="masked"`` drops keys outside the
    sequence, ``"circular"`` uses keys (i + o) mod m for o in -U..U, counted with multiplicity.
    ``null_key`` (h, m_qk) and ``null_value`` (h, m_v): one extra key, always present, placed first.
    ``cross=True``: kind ``"xattn"``, keys and values come from ``memory`` (B, m, D_kv).
    ``kv=project_memory(memory)`` reuses projected keys and values (a key/value cache).
    """

    def __init__(self, heads: Sequence[HeadWeights], normalization: str = "softmax", *, causal: bool = False,
                 temperature: float = 1.0, relu_divisor: Union[str, int] = "keys", window: Optional[int] = None,
                 boundary: str = "masked", null_key=None, null_value=None, cross: bool = False, name: str = "",
                 _stacked: Optional[tuple] = None):
        super().__init__()
        if _stacked is None:
            heads = list(heads)
            if len(heads) == 0:
                raise ValueError("heads must contain at least one HeadWeights")
            if not all(isinstance(h, HeadWeights) for h in heads):
                raise ValueError("heads must be HeadWeights (or use Attention.stacked for stacked tensors)")
            D, D_kv = heads[0].W_Q.shape[1], heads[0].W_K.shape[1]
            if any(h.W_Q.shape[1] != D or h.W_K.shape[1] != D_kv for h in heads):
                raise ValueError("all heads must act on the same embedding dimensions")
            m_qk = max(h.W_Q.shape[0] for h in heads)
            m_v = max(h.W_V.shape[0] for h in heads)
            _stacked = (_stack([h.W_Q for h in heads], m_qk, D), _stack([h.W_K for h in heads], m_qk, D_kv),
                        _stack([h.W_V for h in heads], m_v, D_kv),
                        torch.stack([nn.functional.pad(h.W_O, (0, m_v - h.W_O.shape[1])) for h in heads]),
                        _stack([h.b_Q for h in heads], m_qk), _stack([h.b_K for h in heads], m_qk),
                        _stack([h.b_V for h in heads], m_v))
        self._store(*_stacked)
        self.normalization = validate.choice("normalization", normalization, NORMALIZATIONS)
        self.temperature = validate.real("temperature", temperature, low=0, low_open=True)
        if relu_divisor != "keys":
            relu_divisor = validate.positive_int("relu_divisor", relu_divisor)
        self.relu_divisor = relu_divisor
        self.causal, self.cross = bool(causal), bool(cross)
        self.window = None if window is None else validate.positive_int("window", window, 0)
        self.boundary = validate.choice("boundary", boundary, BOUNDARIES)
        if self.cross and self.causal:
            raise ValueError("causal must be False for cross-attention (cross=True)")
        if self.cross and self.window is not None:
            raise ValueError("window must be None for cross-attention (cross=True)")
        if (null_key is None) != (null_value is None):
            raise ValueError("null_key and null_value must be given together")
        h, m_qk, m_v = self.num_heads, self._shape("W_Q")[1], self._shape("W_V")[1]
        if null_key is not None:
            null_key, null_value = _as_tensor(null_key, "null_key", 2), _as_tensor(null_value, "null_value", 2)
            if null_key.shape != (h, m_qk) or null_value.shape != (h, m_v):
                raise ValueError(f"null_key must be ({h}, {m_qk}) and null_value ({h}, {m_v}); got "
                                 f"{tuple(null_key.shape)}, {tuple(null_value.shape)}")
        self.null_key, self.null_value = _frozen(null_key), _frozen(null_value)
        self.kind, self.name = ("xattn" if self.cross else "attn"), name
        if not self.cross and self.D_kv != self.D:
            raise ValueError(f"self-attention needs W_K with D = {self.D} columns, got {self.D_kv}")

    @classmethod
    def stacked(cls, W_Q, W_K, W_V, W_O, b_Q=None, b_K=None, b_V=None, normalization: str = "softmax",
                **options) -> "Attention":
        """Attention from stacked tensors W_Q, W_K (h, m_qk, D), W_V (h, m_v, D), W_O (h, D, m_v)."""
        return cls((), normalization, _stacked=(W_Q, W_K, W_V, W_O, b_Q, b_K, b_V), **options)

    # -- masks -------------------------------------------------------------------------------------
    def _counts(self, B: int, n: int, m: int, key_mask: Optional[torch.Tensor], device) -> Optional[torch.Tensor]:
        """(B or 1, 1, n, m) multiplicity of each key for each query (0 = absent), or None if all are 1."""
        counts = None
        offset = 0 if self.cross else m - n  # query i sits at position offset + i
        if not self.cross and offset < 0:
            raise ValueError(f"memory must hold at least the {n} query positions, got {m}")
        if self.causal or self.window is not None:
            i = torch.arange(n, device=device)[:, None] + offset
            j = torch.arange(m, device=device)[None, :]
        if self.causal:
            counts = (j <= i).to(DTYPE)
        if self.window is not None:
            U = self.window
            if self.boundary == "masked":
                w = ((j - i).abs() <= U).to(DTYPE)
            else:
                d = torch.remainder(j - i, m)
                w = (torch.div(U - d, m, rounding_mode="floor") + torch.div(U + d, m, rounding_mode="floor") + 1)
                w = w.clamp(min=0).to(DTYPE)
            counts = w if counts is None else counts * w
        if counts is not None:
            counts = counts[None, None]  # (1, 1, n, m)
        if key_mask is not None:
            if key_mask.shape != (B, m):
                raise ValueError(f"key_mask must have shape ({B}, {m}), got {tuple(key_mask.shape)}")
            km = key_mask.to(device=device, dtype=DTYPE)[:, None, None, :]  # (B, 1, 1, m)
            counts = km if counts is None else counts * km
        if counts is not None and self.null_key is not None:
            ones = torch.ones(*counts.shape[:-1], 1, dtype=DTYPE, device=device)
            counts = torch.cat([ones, counts], dim=-1)
        return counts

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``memory`` (B, m, D_kv) projected once: (Kt (B, h, m_qk, m), Vt (B, h, m_v, m)).

        Pass them back as ``kv=`` to reuse them (an encoder's outputs, or a decoder's growing cache,
        extended one position at a time with ``torch.cat`` or by writing into a buffer).
        """
        if memory.ndim != 3 or memory.shape[-1] != self.D_kv:
            raise ValueError(f"memory must have shape (batch, m, {self.D_kv}), got {tuple(memory.shape)}")
        return self._project(memory, "W_K", self.b_K), self._project(memory, "W_V", self.b_V)

    def _keys_values(self, H: torch.Tensor, memory: Optional[torch.Tensor],
                     kv: Optional[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected keys Kt (B, h, m_qk, m) and values Vt (B, h, m_v, m) from H, memory or a given cache."""
        if H.ndim != 3 or H.shape[-1] != self.D:
            raise ValueError(f"H must have shape (batch, n, {self.D}), got {tuple(H.shape)}")
        if memory is not None and kv is not None:
            raise ValueError("give memory or kv, not both")
        if kv is not None:
            Kt, Vt = kv
            h, m_qk, m_v = self.num_heads, self._shape("W_Q")[1], self._shape("W_V")[1]
            if (Kt.ndim != 4 or Kt.shape[:3] != (H.shape[0], h, m_qk) or Vt.shape[:3] != (H.shape[0], h, m_v)
                    or Vt.shape[3] != Kt.shape[3]):
                raise ValueError(f"kv must be (Kt ({H.shape[0]}, {h}, {m_qk}, m), Vt ({H.shape[0]}, {h}, {m_v}, m)) "
                                 "as returned by project_memory")
            return Kt, Vt
        if self.cross and memory is None:
            raise ValueError("memory (or kv) is required for cross-attention")
        if memory is not None and (memory.ndim != 3 or memory.shape[0] != H.shape[0]):
            raise ValueError(f"memory must have shape ({H.shape[0]}, m, {self.D_kv}), got {tuple(memory.shape)}")
        return self.project_memory(H if memory is None else memory)

    def _scores(self, Qt: torch.Tensor, Kt: torch.Tensor, sl: slice) -> torch.Tensor:
        """Qt (B, hc, m_qk, n), Kt (B, hc, m_qk, m) -> scores (B, hc, n, m[+1]), null key first."""
        Q = Qt.transpose(-1, -2)  # (B, hc, n, m_qk)
        # one-dimensional heads: an outer product, much faster than a batched matmul with inner size 1
        S = Q * Kt if Qt.shape[-2] == 1 else Q @ Kt  # (B, hc, n, m)
        if self.null_key is not None:
            s0 = (Qt * self.null_key[sl, :, None]).sum(-2)[..., None]  # (B, hc, n, 1)
            S = torch.cat([s0, S], dim=-1)
        return S

    def _normalize(self, S: torch.Tensor, C: Optional[torch.Tensor]) -> torch.Tensor:
        if self.normalization == "softmax":
            S = S / self.temperature if self.temperature != 1.0 else S
            if C is None:
                return torch.softmax(S, dim=-1)
            present = C > 0
            top = S.masked_fill(~present, float("-inf")).amax(-1, keepdim=True)
            top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
            E = torch.exp((S - top).masked_fill(~present, float("-inf"))) * C
            total = E.sum(-1, keepdim=True)
            return E / torch.where(total > 0, total, torch.ones_like(total))
        if self.normalization == "relu":
            A = S.relu_() if C is None else S.relu_().mul_(C)  # S is a fresh tensor: in place
            if self.relu_divisor != "keys":
                return A.div_(self.relu_divisor)
            if C is None:
                return A.div_(S.shape[-1])
            count = C.sum(-1, keepdim=True)
            return A / torch.where(count > 0, count, torch.ones_like(count))
        if self.normalization == "linear":
            return S if C is None else S * C
        if C is None:  # every key present: the tied top scores share the weight (a count >= 1, or 0 for NaN scores)
            A = (S == S.amax(-1, keepdim=True)).to(DTYPE)
            return A / A.sum(-1, keepdim=True).clamp_(min=1)
        present = (C > 0).expand_as(S)
        top = S.masked_fill(~present, float("-inf")).amax(-1, keepdim=True)
        A = ((S == top) & present).to(DTYPE) * C
        total = A.sum(-1, keepdim=True)
        return A / torch.where(total > 0, total, torch.ones_like(total))

    def _chunks(self, B: int, n: int, m: int) -> list[slice]:
        per = max(1, CHUNK_ELEMENTS // max(1, B * n * m))
        return [slice(s, min(s + per, self.num_heads)) for s in range(0, self.num_heads, per)]

    def _prepare(self, H, memory, key_mask, kv):
        Kt, Vt = self._keys_values(H, memory, kv)
        C = self._counts(H.shape[0], H.shape[1], Kt.shape[-1], key_mask, H.device)
        return self._project(H, "W_Q", self.b_Q), Kt, Vt, C

    def scores(self, H: torch.Tensor, memory: Optional[torch.Tensor] = None,
               key_mask: Optional[torch.Tensor] = None, kv=None) -> torch.Tensor:
        """Raw scores (B, h, n, m), with the null key's column first when there is one."""
        Qt, Kt, _, _ = self._prepare(H, memory, key_mask, kv)
        return self._scores(Qt, Kt, slice(None))

    def attention_weights(self, H: torch.Tensor, memory: Optional[torch.Tensor] = None,
                          key_mask: Optional[torch.Tensor] = None, kv=None) -> torch.Tensor:
        """Normalised attention weights (B, h, n, m), with the null key's column first when there is one."""
        Qt, Kt, _, C = self._prepare(H, memory, key_mask, kv)
        return self._normalize(self._scores(Qt, Kt, slice(None)), C)

    def attention_matrices(self, H: torch.Tensor, memory: Optional[torch.Tensor] = None,
                           key_mask: Optional[torch.Tensor] = None) -> list[torch.Tensor]:
        """Per head, the (B, n, m) attention weights (`attention_weights` split by head)."""
        return list(self.attention_weights(H, memory, key_mask).unbind(1))

    def forward(self, H: torch.Tensor, memory: Optional[torch.Tensor] = None,
                key_mask: Optional[torch.Tensor] = None,
                kv: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """H + the attention update; keys/values from H, ``memory``, or a projected cache ``kv``."""
        Qt, Kt, Vt, C = self._prepare(H, memory, key_mask, kv)  # (B, h, m_qk, n), (B, h, m_qk, m), (B, h, m_v, m)
        B, n, m = H.shape[0], H.shape[1], Kt.shape[-1]
        if self.null_key is not None:
            Vt = torch.cat([self.null_value[None, :, :, None].expand(B, -1, -1, 1), Vt], dim=-1)  # (B, h, m_v, 1+m)
        chunks = []
        for sl in self._chunks(B, n, m + (self.null_key is not None)):
            # contiguous (small) chunk inputs keep the large score tensor in the standard layout
            S = self._scores(Qt[:, sl].contiguous(), Kt[:, sl].contiguous(), sl)  # (B, hc, n, m[+1])
            chunks.append(Vt[:, sl].contiguous() @ self._normalize(S, C).transpose(-1, -2))  # (B, hc, m_v, n)
        return self._residual(H, chunks[0] if len(chunks) == 1 else torch.cat(chunks, dim=1))  # (B, h, m_v, n)

    def extra_repr(self) -> str:
        return (f"name={self.name!r}, kind={self.kind}, heads={self.num_heads}, normalization={self.normalization}, "
                f"causal={self.causal}, window={self.window}")


class ElementwiseMultiplication(_StackedLayer):
    """``h_i + sum_m <W_Q^m h_i + b_Q^m, W_K^m h_i + b_K^m> W_O^m (W_V^m h_i + b_V^m)``: tokens do not mix.

    Stacked tensors W_Q, W_K (h, m_qk, D), W_V (h, m_v, D), W_O (h, D, m_v); kind ``"ewml"``.
    """

    def __init__(self, W_Q, W_K, W_V, W_O, b_Q=None, b_K=None, b_V=None, name: str = ""):
        super().__init__()
        self._store(W_Q, W_K, W_V, W_O, b_Q, b_K, b_V)
        if self.D_kv != self.D:
            raise ValueError(f"W_K must have D = {self.D} columns, got {self.D_kv}")
        self.kind, self.name = "ewml", name

    def gates(self, H: torch.Tensor) -> torch.Tensor:
        """(B, h, n) bilinear gates <Q_m h_i, K_m h_i>."""
        return (self._project(H, "W_Q", self.b_Q) * self._project(H, "W_K", self.b_K)).sum(-2)

    def forward(self, H: torch.Tensor) -> torch.Tensor:
        if H.ndim != 3 or H.shape[-1] != self.D:
            raise ValueError(f"H must have shape (batch, n, {self.D}), got {tuple(H.shape)}")
        return self._residual(H, self.gates(H)[:, :, None, :] * self._project(H, "W_V", self.b_V))  # (B, h, m_v, n)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, kind=ewml, heads={self.num_heads}"
