"""`direct_sum`: one core layer that runs G layers side by side on the direct sum of their residual streams.

The state of the sum is (batch, n, D_1 + ... + D_G): block g holds summand g's state, and summand g
reads and writes only block g. A feed-forward layer becomes block-diagonal; an attention layer keeps
every head of every summand, each head's query, key and value maps reading its own block and its
output map writing there. Scores, normalisers and null keys act per head, so the sum computes exactly
what the G layers compute apart, in one call. What the heads share is what one layer shares: the
positions, the causal or window mask and the key mask. Constructions with the same layer sequence
(G machines, G perturbed copies) then run in lockstep, one launch per layer for all G, as tracr
assembles named subspaces into one residual stream.

Weights are written entry by entry (`weight_from_entries`): a large sum is stored sparse without
materialising its dense matrices, a small one dense, by the usual rules.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from tfbook.device import DTYPE
from tfbook.layers.attention import Attention
from tfbook.layers.feedforward import FeedForward
from tfbook.layers.sparse import weight_from_entries

_OPTIONS = ("normalization", "temperature", "relu_divisor", "causal", "window", "boundary", "cross")


def _entries(W: torch.Tensor, offsets: Sequence[int]) -> tuple:
    """Index arrays (shifted by ``offsets``, one per axis) and values of the non-zeros of W."""
    W = W.detach()
    index = W.nonzero(as_tuple=True)
    return (*(i.cpu() + o for i, o in zip(index, offsets)), W[index].cpu())


def _concat(vectors: Sequence[Optional[torch.Tensor]], sizes: Sequence[int]) -> Optional[torch.Tensor]:
    """Concatenate per-summand vectors (None counts as zeros of its size); None when all are None."""
    if all(v is None for v in vectors):
        return None
    return torch.cat([torch.zeros(s, dtype=DTYPE) if v is None else v.detach().cpu() for v, s in zip(vectors, sizes)])


def _offsets(sizes: Sequence[int]) -> list[int]:
    out, total = [], 0
    for s in sizes:
        out.append(total)
        total += s
    return out


def _feed_forward_sum(layers: Sequence[FeedForward], name: str) -> FeedForward:
    if len({layer.residual for layer in layers}) != 1:
        raise ValueError("layers must all be residual or all non-residual feed-forward layers")
    hidden = [layer.hidden_width for layer in layers]
    D_in = [layer.D for layer in layers]
    D_out = [layer._shape("W_2")[0] for layer in layers]
    h0, d0, o0 = _offsets(hidden), _offsets(D_in), _offsets(D_out)
    W_1 = weight_from_entries((sum(hidden), sum(D_in)),
                              [_entries(layer.W_1, (h, d)) for layer, h, d in zip(layers, h0, d0)])
    W_2 = weight_from_entries((sum(D_out), sum(hidden)),
                              [_entries(layer.W_2, (o, h)) for layer, o, h in zip(layers, o0, h0)])
    return FeedForward(W_1, _concat([layer.b_1 for layer in layers], hidden), W_2,
                       _concat([layer.b_2 for layer in layers], D_out), residual=layers[0].residual, name=name)


def _stacked_bias(layer: Attention, name: str, rows: int) -> torch.Tensor:
    """A head-stacked bias or null tensor (h, r) zero-padded to (h, rows); zeros when absent."""
    value = getattr(layer, name)
    h = layer.num_heads
    out = torch.zeros(h, rows, dtype=DTYPE)
    if value is not None:
        out[:, : value.shape[1]] = value.detach().cpu()
    return out


def _attention_sum(layers: Sequence[Attention], name: str) -> Attention:
    first = layers[0]
    for option in _OPTIONS:
        values = {getattr(layer, option) for layer in layers}
        if len(values) != 1:
            raise ValueError(f"layers must share {option}, got {sorted(map(str, values))}")
    if len({layer.null_key is None for layer in layers}) != 1:
        raise ValueError("layers must all have a null key or all have none")
    heads = [layer.num_heads for layer in layers]
    D, D_kv = [layer.D for layer in layers], [layer.D_kv for layer in layers]
    m_qk = max(layer._shape("W_Q")[1] for layer in layers)
    m_v = max(layer._shape("W_V")[1] for layer in layers)
    h0, d0, k0 = _offsets(heads), _offsets(D), _offsets(D_kv)
    H = sum(heads)

    def stacked(weight: str, rows: int, cols: int, col_offsets: Sequence[int]) -> torch.Tensor:
        # (H, rows, cols): head k of summand g reads the columns of block g
        return weight_from_entries((H, rows, cols), [_entries(getattr(layer, weight), (h, 0, c))
                                                     for layer, h, c in zip(layers, h0, col_offsets)])

    W_Q = stacked("W_Q", m_qk, sum(D), d0)
    W_K = stacked("W_K", m_qk, sum(D_kv), k0)
    W_V = stacked("W_V", m_v, sum(D_kv), k0)
    W_O = weight_from_entries((H, sum(D), m_v), [_entries(layer.W_O, (h, d, 0)) for layer, h, d in zip(layers, h0, d0)])
    biases = {}
    for bias, rows in (("b_Q", m_qk), ("b_K", m_qk), ("b_V", m_v)):
        if any(getattr(layer, bias) is not None for layer in layers):
            biases[bias] = torch.cat([_stacked_bias(layer, bias, rows) for layer in layers])
    null = {}
    if first.null_key is not None:
        null = {"null_key": torch.cat([_stacked_bias(layer, "null_key", m_qk) for layer in layers]),
                "null_value": torch.cat([_stacked_bias(layer, "null_value", m_v) for layer in layers])}
    return Attention.stacked(W_Q, W_K, W_V, W_O, normalization=first.normalization, temperature=first.temperature,
                             relu_divisor=first.relu_divisor, causal=first.causal, window=first.window,
                             boundary=first.boundary, cross=first.cross, name=name, **biases, **null)


def direct_sum(layers: Sequence[Union[Attention, FeedForward]], name: Optional[str] = None,
               device=None) -> Union[Attention, FeedForward]:
    """The layer acting on the direct sum of the residual streams of ``layers`` (see the module docstring).

    ``layers``: at least one `Attention` (all with the same options and null-key presence) or
    `FeedForward` (all residual, or all not) layer. ``name``: the sum's name (default: the layers'
    common name, else ""). The sum is built on the CPU and moved to ``device`` (default: the first
    layer's device); it keeps no reference to ``layers``.
    """
    layers = list(layers)
    if not layers:
        raise ValueError("layers must hold at least one layer")
    kinds = {type(layer) for layer in layers}
    if len(kinds) != 1 or not kinds <= {Attention, FeedForward}:
        raise ValueError(f"layers must all be Attention or all be FeedForward layers, got "
                         f"{sorted(k.__name__ for k in kinds)}")
    if name is None:
        names = {layer.name for layer in layers}
        name = names.pop() if len(names) == 1 else ""
    if device is None:
        device = next(iter(layers[0].parameters())).device
    build = _attention_sum if isinstance(layers[0], Attention) else _feed_forward_sum
    return build(layers, name).to(device)
