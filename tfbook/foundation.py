"""Chapter 1, "Reading a transformer as a construction": three constructions on the core only.

1. `build_token_sum`: one attention head with zero queries and keys; softmax of a zero score
   matrix is exactly 1/n, so with the value/output maps scaled by n every token receives the
   sum of all tokens.
2. `build_abs_max`: one ReLU feed-forward layer computing |x| = relu(x) + relu(-x) and
   max(x, y) = y + relu(x - y) exactly.
3. `build_squaring`: Yarotsky's (2017) squaring network f_m(x) = x - sum_{s<=m} g_s(x) / 4^s,
   one residual feed-forward block per sawtooth g_s, sup error exactly 4^-(m+1) on [0, 1].

References to check against (`hat`, `sawtooth_closed_form`, `square_interp_closed_form`) are
separate functions that the constructions never call.
"""
from __future__ import annotations

import torch
from torch import nn

from tfbook import bench
from tfbook.device import DTYPE
from tfbook.layers import Attention, Block, HeadWeights, Transformer
from tfbook.layout import FFBuilder, Layout


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


class SlotModel(nn.Module):
    """A `Transformer` with a `Layout`: embeds named inputs into slots, reads named outputs."""

    def __init__(self, layout: Layout, transformer: Transformer):
        super().__init__()
        self.layout, self.transformer = layout, transformer

    def embed(self, **slots: torch.Tensor) -> torch.Tensor:
        """(batch, n, D) stream with each named slot filled by a (batch, n, size) or (batch, n) tensor."""
        first = next(iter(slots.values()))
        batch, n = first.shape[:2]
        H = torch.zeros(batch, n, self.layout.dim, dtype=DTYPE, device=first.device)
        for name, value in slots.items():
            value = value.to(DTYPE)
            H[..., self.layout[name]] = value if value.ndim == 3 else value.unsqueeze(-1)
        return H

    def forward(self, H: torch.Tensor, return_all: bool = False):
        return self.transformer(H, return_all=return_all)

    @property
    def depth(self) -> int:
        return self.transformer.depth

    @property
    def width(self) -> int:
        return self.transformer.width

    def num_parameters(self) -> int:
        return self.transformer.num_parameters()


def build_token_sum(d: int, n: int) -> SlotModel:
    """One head, W_Q = W_K = 0, that writes the sum of the n tokens' ``x`` slot into every token's ``sum`` slot."""
    d, n = _check_int("d", d, 1), _check_int("n", n, 1)
    layout = Layout([("x", d), ("sum", d)])
    W_V = layout.matrix([{("x", i): 1.0} for i in range(d)])  # (d, D): read x
    W_O = layout.matrix([{("sum", i): float(n)} for i in range(d)]).T  # (D, d): write n * mean
    zeros = torch.zeros(1, layout.dim, dtype=DTYPE)
    head = HeadWeights(W_Q=zeros, W_K=zeros, W_V=W_V, W_O=W_O)
    return SlotModel(layout, Transformer([Block(attention=Attention([head], "softmax"))]))


def build_abs_max() -> SlotModel:
    """One feed-forward layer: ``abs`` <- |x| and ``max`` <- max(x, y), exactly (4 ReLUs)."""
    layout = Layout([("x", 1), ("y", 1), ("abs", 1), ("max", 1)])
    ff = FFBuilder(layout)
    ff.unit(read={"x": 1.0}, write={"abs": 1.0})  # relu(x)
    ff.unit(read={"x": -1.0}, write={"abs": 1.0})  # relu(-x)
    ff.unit(read={"x": 1.0, "y": -1.0}, write={"max": 1.0})  # relu(x - y)
    ff.unit(read={"y": 1.0}, write={"max": 1.0})  # y = relu(y) - relu(-y)
    ff.unit(read={"y": -1.0}, write={"max": -1.0})
    return SlotModel(layout, Transformer([Block(feed_forward=ff.build())]))


def build_squaring(m: int) -> SlotModel:
    """Yarotsky's squaring network as m residual feed-forward blocks of two ReLUs each.

    Slots: ``x`` (input), ``y`` (current sawtooth, starts at x), ``S`` (accumulator, starts at x).
    Block s maps y = g_{s-1}(x) to g_s(x) = 2 relu(y) - 4 relu(y - 1/2) and subtracts g_s(x) / 4^s
    from S, so that S = f_m(x) after m blocks. For y in [0, 1], relu(y) = y, which is what lets
    the residual update ``y += relu(y) - 4 relu(y - 1/2)`` replace y by g(y).
    """
    m = _check_int("m", m, 1)
    layout = Layout([("x", 1), ("y", 1), ("S", 1)])
    blocks = []
    for s in range(1, m + 1):
        ff = FFBuilder(layout)
        scale = 4.0 ** (-s)
        ff.unit(read={"y": 1.0}, write={"y": 1.0, "S": -2.0 * scale})
        ff.unit(read={"y": 1.0}, bias=-0.5, write={"y": -4.0, "S": 4.0 * scale})
        blocks.append(Block(feed_forward=ff.build()))
    return SlotModel(layout, Transformer(blocks))


def run_squaring(model: SlotModel, x: torch.Tensor) -> torch.Tensor:
    """Evaluate a squaring network on x in [0, 1] of any shape; returns f_m(x) of the same shape."""
    x = torch.as_tensor(x, dtype=DTYPE)
    if torch.any((x < 0) | (x > 1)):
        raise ValueError("x must lie in [0, 1]")
    flat = x.reshape(1, -1)  # one batch, each value a token
    H = model.transformer(model.embed(x=flat, y=flat, S=flat))
    return model.layout.read(H, "S")[0, :, 0].reshape(x.shape)


# --- references (never called by the constructions) -------------------------------------------

def hat(x: torch.Tensor) -> torch.Tensor:
    """g(x) = 2x on [0, 1/2], 2(1 - x) on [1/2, 1]."""
    return torch.where(x <= 0.5, 2 * x, 2 * (1 - x))


def sawtooth_closed_form(x: torch.Tensor, m: int) -> torch.Tensor:
    """Lemma 7 of Takeshita-Imaizumi / Yarotsky: g_m(x) = g(2^(m-1) x - j) on its tooth."""
    m = _check_int("m", m, 1)
    scaled = x * 2.0 ** (m - 1)
    j = torch.clamp(torch.floor(scaled), max=2 ** (m - 1) - 1)
    return hat(scaled - j)


def square_interp_closed_form(x: torch.Tensor, m: int) -> torch.Tensor:
    """The piecewise-linear interpolant of x^2 on the grid j / 2^m: ((2j+1) x - j(j+1) / 2^m) / 2^m."""
    m = _check_int("m", m, 0)
    j = torch.clamp(torch.floor(x * 2.0**m), max=2**m - 1)
    return ((2 * j + 1) * x - j * (j + 1) / 2.0**m) / 2.0**m


def squaring_error_bound(m: int) -> float:
    """Yarotsky's sup error 4^-(m+1) of f_m on [0, 1]."""
    return 4.0 ** -(_check_int("m", m, 0) + 1)


def _bench_build(device: torch.device) -> tuple[SlotModel, torch.Tensor]:
    model = build_squaring(20).to(device)
    x = torch.rand(1, 2**20, dtype=DTYPE, device=device)
    return model, model.embed(x=x, y=x, S=x)


bench.register("foundation: Yarotsky squaring m=20, 2^20 points", _bench_build,
               lambda state: state[0](state[1]), units="points", count=2**20)
