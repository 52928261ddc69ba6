"""Chapter 1, "Reading a transformer as a construction": three constructions on the core only.

1. `build_token_sum`: one attention head with zero queries and keys; softmax of a zero score
   matrix is exactly 1/n, so with the value/output maps scaled by n every token receives the
   sum of all tokens.
2. `build_abs_max`: one ReLU feed-forward layer computing |x| = relu(x) + relu(-x) and
   max(x, y) = y + relu(x - y) exactly.
3. `build_squaring`: Yarotsky's (2017) squaring network f_m(x) = x - sum_{s<=m} g_s(x) / 4^s,
   one residual feed-forward block per sawtooth g_s, sup error exactly 4^-(m+1) on [0, 1].

References to check against (`hat`, `sawtooth_closed_form`, `square_interp_closed_form`) are
separate functions that the constructions never call. The sizes and the error that the chapter's
statements give are `tfbook.claims.paper_formula` functions of their parameters (numbers only):
`token_sum_nonzero`, `token_sum_max_weight`, `abs_max_width`, `squaring_depth`, `squaring_width`
and `squaring_error_bound`.
"""
from __future__ import annotations

import torch

from tfbook import validate
from tfbook.claims import paper_formula
from tfbook import gadgets as gd
from tfbook.device import DTYPE
from tfbook.layout import Layout
from tfbook.model import Construction


class SlotModel(Construction):
    """A `Construction` with the chapter's size accessors: ``depth`` = `Sizes.layers`, ``width`` =
    `Sizes.ff_width` (largest feed-forward hidden width; 0 without feed-forward layers),
    ``num_parameters()`` = `Sizes.stored`."""

    @property
    def depth(self) -> int:
        """Number of core layers, `Sizes.layers`."""
        return len(self.layers)

    @property
    def width(self) -> int:
        """Largest feed-forward hidden width, `Sizes.ff_width`."""
        return self.counted_sizes().ff_width

    def num_parameters(self) -> int:
        """Stored scalar weights, `Sizes.stored`."""
        return self.counted_sizes().stored


def _model(layout: Layout, phase: str, *gadgets: gd.Gadget) -> SlotModel:
    plan = gd.Planner(layout)
    for g in gadgets:
        plan.add(g, phase=phase)
    return SlotModel(plan.layout, plan.layers())


def build_token_sum(d: int, n: int) -> SlotModel:
    """One head, W_Q = W_K = 0, that writes the sum of the n tokens' ``x`` slot into every token's ``sum`` slot."""
    d, n = validate.positive_int("d", d), validate.positive_int("n", n)
    layout = Layout([("x", d), ("sum", d)])
    return _model(layout, "sum", gd.uniform_sum([("x", i) for i in range(d)], [("sum", i) for i in range(d)], n))


def build_abs_max() -> SlotModel:
    """One feed-forward layer: ``abs`` <- |x| and ``max`` <- max(x, y), exactly (5 ReLUs)."""
    layout = Layout([("x", 1), ("y", 1), ("abs", 1), ("max", 1)])
    return _model(layout, "absmax", gd.absolute("x", "abs"), gd.maximum("x", "y", "max"))


def build_squaring(m: int) -> SlotModel:
    """Yarotsky's squaring network as m residual feed-forward layers of two ReLUs each (`tfbook.gadgets.square`
    with one hat composition per layer, k = 1).

    Slots: ``x`` (input), ``sq.y`` (current sawtooth) and ``S`` (accumulator). Layer s maps y = g_{s-1}(x) to
    g_s(x) = 2 relu(y) - 4 relu(y - 1/2) and subtracts g_s(x) / 4^s from S, so that S = f_m(x) after m layers.
    For y in [0, 1], relu(y) = y, which is what lets the residual update ``y += relu(y) - 4 relu(y - 1/2)``
    replace y by g(y).
    """
    m = validate.positive_int("m", m)
    return _model(Layout([("x", 1), ("S", 1)]), "square", gd.square("x", "S", k=1, L=m, tag="sq"))


def run_squaring(model: SlotModel, x: torch.Tensor) -> torch.Tensor:
    """Evaluate a squaring network on x in [0, 1] of any shape; returns f_m(x) of the same shape."""
    x = validate.tensor("x", x, low=0.0, high=1.0)
    flat = x.reshape(1, -1)  # one batch, each value a token
    H = model(model.embed(x=flat))
    return model.read(H, "S")[0, :, 0].reshape(x.shape)


# --- references (never called by the constructions) -------------------------------------------

def hat(x: torch.Tensor) -> torch.Tensor:
    """g(x) = 2x on [0, 1/2], 2(1 - x) on [1/2, 1]."""
    return torch.where(x <= 0.5, 2 * x, 2 * (1 - x))


def sawtooth_closed_form(x: torch.Tensor, m: int) -> torch.Tensor:
    """Lemma 7 of Takeshita-Imaizumi / Yarotsky: g_m(x) = g(2^(m-1) x - j) on its tooth."""
    m = validate.positive_int("m", m)
    scaled = x * 2.0 ** (m - 1)
    j = torch.clamp(torch.floor(scaled), max=2 ** (m - 1) - 1)
    return hat(scaled - j)


def square_interp_closed_form(x: torch.Tensor, m: int) -> torch.Tensor:
    """The piecewise-linear interpolant of x^2 on the grid j / 2^m: ((2j+1) x - j(j+1) / 2^m) / 2^m."""
    m = validate.positive_int("m", m, 0)
    j = torch.clamp(torch.floor(x * 2.0**m), max=2**m - 1)
    return ((2 * j + 1) * x - j * (j + 1) / 2.0**m) / 2.0**m


# --- the statements' formulas (numbers in, numbers out; never read from a built model) ----------

@paper_formula
def squaring_error_bound(m: int) -> float:
    """Yarotsky's sup error 4^-(m+1) of f_m on [0, 1]."""
    return 4.0 ** -(validate.positive_int("m", m, 0) + 1)


@paper_formula
def token_sum_nonzero(d: int) -> int:
    """Lemma (uniform attention): W_Q = W_K = 0, W_V reads the d coordinates of ``x`` and W_O writes d
    coordinates of ``sum``: 2d non-zero weights."""
    return 2 * validate.positive_int("d", d)


@paper_formula
def token_sum_max_weight(n: int) -> int:
    """Lemma (uniform attention): W_O writes n times the average, so the largest weight is n (n >= 1)."""
    return validate.positive_int("n", n)


@paper_formula
def abs_max_width() -> int:
    """Lemma (piecewise-linear identities): |x| = relu(x) + relu(-x) (two ReLUs) and
    max(x, y) = relu(x - y) + relu(y) - relu(-y) (three ReLUs): five hidden units."""
    return 2 + 3


@paper_formula
def squaring_depth(m: int) -> int:
    """Yarotsky's f_m as a transformer: one residual feed-forward layer per sawtooth g_s, s = 1..m."""
    return validate.positive_int("m", m)


@paper_formula
def squaring_width() -> int:
    """Yarotsky's f_m as a transformer: the hat g(y) = 2 relu(y) - 4 relu(y - 1/2) takes two ReLUs per layer."""
    return 2


def _bench_build(device: torch.device) -> tuple[SlotModel, torch.Tensor]:
    model = build_squaring(20).to(device)
    x = torch.rand(1, 2**20, dtype=DTYPE, device=device)
    return model, model.embed(x=x)


def bench_cases() -> dict[str, dict]:
    """The chapter's benchmarked construction (read by `tfbook.build.bench`)."""
    return {"foundation: Yarotsky squaring m=20, 2^20 points":
            {"build": _bench_build, "forward": lambda state: state[0](state[1]), "units": "points", "count": 2**20}}
