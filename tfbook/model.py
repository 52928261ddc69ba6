"""The one base of every chapter model: a `Layout`, an ordered list of named core layers, one `Trace`, one `Sizes`.

A chapter builds its model as a `Construction` (or a subclass that adds the paper's own run and
read-out methods, e.g. an encoder-decoder loop); the arithmetic always runs in the core layers of
`tfbook.layers`, so a `tfbook.layers.perturb` reaches every chapter.

* `Construction.forward(H)` runs the layers in order; ``return_all=True`` returns every state.
* `Construction.trace(H)` returns a `Trace`: the state after each named layer and the attention
  weights of each attention layer.
* `Construction.counted_sizes()` returns a `Sizes` record counted from the built layers. Chapters
  offer ``paper_sizes(...)`` returning the same record filled from the paper's formulas, and
  `Sizes.compare` lines them up field by field.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Sequence, Union

import torch
from torch import nn

from tfbook.device import DTYPE
from tfbook.layers import Block, FeedForward, Transformer, compact, shared_index_entries
from tfbook.layout import Layout

Number = Union[int, float]


@dataclass(frozen=True)
class Sizes:
    """Sizes of a model; a field left None is not stated (for a paper) or does not apply.

    ``layers``: core layers; ``attention_layers`` (self and cross), ``ewml_layers``, ``ff_layers``;
    ``max_heads``: most heads in one attention/EWML layer; ``embed_dim``: D; ``ff_width``: largest
    feed-forward hidden width; ``attention_width``: largest total value width (heads x m_v) of an
    attention layer; ``stored``: stored scalars (every entry of a dense tensor; the values and the index
    entries of a weight stored sparse, see `tfbook.layers`); ``nonzero``: non-zero scalars; ``max_abs_weight``.
    """

    layers: Optional[int] = None
    attention_layers: Optional[int] = None
    ewml_layers: Optional[int] = None
    ff_layers: Optional[int] = None
    max_heads: Optional[int] = None
    embed_dim: Optional[int] = None
    ff_width: Optional[int] = None
    attention_width: Optional[int] = None
    stored: Optional[int] = None
    nonzero: Optional[int] = None
    max_abs_weight: Optional[float] = None

    def as_dict(self) -> dict[str, Optional[Number]]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def compare(self, paper: "Sizes") -> list[tuple[str, Optional[Number], Number]]:
        """(field, counted, paper) for every field the paper states."""
        return [(name, getattr(self, name), value) for name, value in paper.as_dict().items() if value is not None]


@dataclass
class Trace:
    """States after each named layer (``states[0]`` is the input) and attention weights by layer name."""

    names: list[str]
    states: list[torch.Tensor]
    attention: dict[str, torch.Tensor]

    def state(self, name: str) -> torch.Tensor:
        """The state right after layer ``name``."""
        if name not in self.names:
            raise ValueError(f"unknown layer {name!r}; layers are {self.names}")
        return self.states[1 + self.names.index(name)]


def counted_sizes(layout_dim: int, layers: Sequence[nn.Module], parameters: Sequence[torch.Tensor]) -> Sizes:
    """A `Sizes` record counted from core layers and the given parameter tensors (a sparse weight's
    values are among the parameters; its index entries are counted from its layer, each index tensor
    once)."""
    kinds = [layer.kind for layer in layers]
    attn = [layer for layer in layers if layer.kind in ("attn", "xattn")]
    headed = [layer for layer in layers if layer.kind in ("attn", "xattn", "ewml")]
    ffs = [layer for layer in layers if layer.kind == "mlp"]
    unique = list({id(p): p for p in parameters}.values())
    return Sizes(
        layers=len(layers),
        attention_layers=sum(k in ("attn", "xattn") for k in kinds),
        ewml_layers=kinds.count("ewml"),
        ff_layers=kinds.count("mlp"),
        max_heads=max((layer.num_heads for layer in headed), default=0),
        embed_dim=layout_dim,
        ff_width=max((layer.hidden_width for layer in ffs), default=0),
        attention_width=max((layer.value_width for layer in attn), default=0),
        stored=sum(p.numel() for p in unique) + shared_index_entries(layers),
        nonzero=sum(int(torch.count_nonzero(p)) for p in unique),
        max_abs_weight=max((float(p.abs().max()) for p in unique if p.numel()), default=0.0),
    )


class Construction(nn.Module):
    """A model built from a `Layout` and an ordered list of (name, core layer) pairs."""

    def __init__(self, layout: Layout, layers: Sequence[tuple[str, nn.Module]]):
        super().__init__()
        if len(layers) == 0:
            raise ValueError("layers must contain at least one (name, layer) pair")
        names = [name for name, _ in layers]
        if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"layer names must be distinct non-empty strings, got {names}")
        self.layout = layout
        self.layer_names = names
        self.layers = nn.ModuleList()
        for name, layer in layers:
            if getattr(layer, "kind", None) not in ("attn", "xattn", "ewml", "mlp"):
                raise ValueError(f"layer {name!r} is not a core layer of tfbook.layers")
            layer.name = name
            self.layers.append(layer)
        compact(list(self.layers))  # a large model stores its sparse weights sparse, whatever their size

    @classmethod
    def from_blocks(cls, layout: Layout, blocks: Sequence[Block], **kwargs) -> "Construction":
        """A construction from transformer blocks; layers are named ``block{i}.attn`` / ``block{i}.ff``."""
        transformer = Transformer(blocks)
        model = cls(layout, transformer.named_sublayers(), **kwargs)
        model.blocks = transformer.blocks
        return model

    # --- inspection ---------------------------------------------------------------------------------
    def layer(self, name: str) -> nn.Module:
        if name not in self.layer_names:
            raise ValueError(f"unknown layer {name!r}; layers are {self.layer_names}")
        return self.layers[self.layer_names.index(name)]

    def named_layers(self) -> list[tuple[str, nn.Module]]:
        return list(zip(self.layer_names, self.layers))

    def counted_sizes(self) -> Sizes:
        """Sizes counted from the built layers (and any other stored parameters of the model)."""
        return counted_sizes(self.layout.dim, list(self.layers), list(self.parameters()))

    # --- embedding and read-out ---------------------------------------------------------------------
    def embed(self, **slots: torch.Tensor) -> torch.Tensor:
        """(batch, n, D) stream with each named slot filled by a (batch, n, size) or (batch, n) tensor."""
        if not slots:
            raise ValueError("embed needs at least one slot")
        first = next(iter(slots.values()))
        batch, n = first.shape[:2]
        H = torch.zeros(batch, n, self.layout.dim, dtype=DTYPE, device=first.device)
        for name, value in slots.items():
            value = torch.as_tensor(value, dtype=DTYPE, device=first.device)
            value = value if value.ndim == 3 else value.unsqueeze(-1)
            if value.shape[:2] != (batch, n) or value.shape[2] != self.layout.size(name):
                raise ValueError(f"slot {name!r} needs shape ({batch}, {n}, {self.layout.size(name)}), "
                                 f"got {tuple(value.shape)}")
            H[..., self.layout[name]] = value
        return H

    def read(self, H: torch.Tensor, slot: str) -> torch.Tensor:
        """The coordinates of ``slot`` of a (..., D) state."""
        return self.layout.read(H, slot)

    # --- running ------------------------------------------------------------------------------------
    def _check(self, H: torch.Tensor) -> None:
        if H.ndim != 3 or H.shape[-1] != self.layout.dim:
            raise ValueError(f"H must have shape (batch, n, {self.layout.dim}), got {tuple(H.shape)}")

    def _run_layer(self, layer: nn.Module, H: torch.Tensor, memory, key_mask) -> torch.Tensor:
        if layer.kind == "xattn":
            return layer(H, memory=memory)
        if layer.kind == "attn":
            return layer(H, key_mask=key_mask)
        return layer(H)

    def forward(self, H: torch.Tensor, return_all: bool = False, memory: Optional[torch.Tensor] = None,
                key_mask: Optional[torch.Tensor] = None):
        """Run every layer in order; ``return_all=True`` returns the len(layers) + 1 states, input first.

        Without it only the current state is kept (memory of one state, not of the whole stack), and runs
        of feed-forward layers with sparse weights update one transposed copy of it in place
        (`tfbook.layers.FeedForward.add_update_to_columns_`); ``H`` itself is never changed."""
        self._check(H)
        if return_all:
            states = [H]
            for layer in self.layers:
                states.append(self._run_layer(layer, states[-1], memory, key_mask))
            return states
        columns = None  # the state as (D, tokens) while sparse feed-forward layers update it in place
        for layer in self.layers:
            if isinstance(layer, FeedForward) and layer.runs_on_columns(H):
                if columns is None:
                    shape, columns = H.shape, H.reshape(-1, H.shape[-1]).T.contiguous()  # a copy: H stays
                layer.add_update_to_columns_(columns)
                continue
            if columns is not None:
                H, columns = columns.T.reshape(shape).contiguous(), None
            H = self._run_layer(layer, H, memory, key_mask)
        return H if columns is None else columns.T.reshape(shape).contiguous()

    def trace(self, H: torch.Tensor, memory: Optional[torch.Tensor] = None,
              key_mask: Optional[torch.Tensor] = None) -> Trace:
        """Every state (input first) and the attention weights of each attention layer."""
        self._check(H)
        states, attention = [H], {}
        for name, layer in self.named_layers():
            if layer.kind in ("attn", "xattn"):
                kw = {"memory": memory} if layer.kind == "xattn" else {"key_mask": key_mask}
                attention[name] = layer.attention_weights(states[-1], **kw)
            states.append(self._run_layer(layer, states[-1], memory, key_mask))
        return Trace(list(self.layer_names), states, attention)
