"""Gadgets as data, and the planner that places them into core layers.

A `Gadget` is a short program over named slots of the residual stream: a list of *stages*, one per
layer it needs, each either a set of ReLU units (`FFStage`, realised in one residual `FeedForward`) or a
set of attention heads (`AttnStage`, one residual `Attention`). A unit reads a linear form of the stream
(a dict ``{slot key: coefficient}``), adds a bias, applies ReLU and adds scaled copies of the result to the
slots it writes. Gadgets declare (`reads`, `writes`) the outside slots they use and the `scratch` slots
they own.

The `Planner` places each gadget, in the order they are added, at the earliest layer where every slot it
reads has been fully written (as-soon-as-possible scheduling), merging the units of all gadgets that share
a layer into one core layer. No chapter computes layer indices by hand:

>>> from tfbook.layout import Layout
>>> from tfbook import gadgets as gd
>>> plan = gd.Planner(Layout([("x", 1), ("y", 1)]))
>>> a = plan.add(gd.absolute({"x": 1.0}, "ax"))          # layer 0
>>> m = plan.add(gd.maximum({"ax": 1.0}, {"y": 1.0}, "m"))  # reads ax: layer 1
>>> (a.first, m.first, [name for name, _ in plan.layers()])
(0, 1, ['L.0', 'L.1'])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence, Union

import torch
from torch import nn

from tfbook.device import DTYPE
from tfbook.layers import Attention, FeedForward, HeadWeights
from tfbook.layout import Layout

SlotKey = Union[str, tuple]
Form = Mapping[SlotKey, float]  # a linear form of the stream: {slot key: coefficient}


def slot_name(key: SlotKey) -> str:
    """The slot a key refers to: ``"x"`` for ``"x"`` and for ``("x", i)``."""
    return key if isinstance(key, str) else key[0]


def form(x: Union[SlotKey, Form]) -> dict:
    """A linear form from a slot key (coefficient 1) or a dict; coefficients as floats."""
    if isinstance(x, Mapping):
        return {k: float(v) for k, v in x.items()}
    return {x: 1.0}


def combine(*terms: tuple[float, Form]) -> dict:
    """The linear form sum_i c_i * form_i."""
    out: dict = {}
    for c, f in terms:
        for k, v in form(f).items():
            out[k] = out.get(k, 0.0) + float(c) * v
    return {k: v for k, v in out.items() if v != 0.0}


@dataclass(frozen=True)
class Unit:
    """One hidden ReLU unit: ``write += relu(read . h + bias)``."""

    read: Mapping[SlotKey, float]
    write: Mapping[SlotKey, float]
    bias: float = 0.0


@dataclass
class FFStage:
    """One feed-forward layer's share of a gadget: ReLU units and constant writes (the output bias b_2)."""

    units: list[Unit] = field(default_factory=list)
    constant: dict = field(default_factory=dict)

    kind = "mlp"

    def unit(self, read: Form, write: Form, bias: float = 0.0) -> None:
        self.units.append(Unit(form(read), form(write), float(bias)))

    def reads(self) -> set[str]:
        return {slot_name(k) for u in self.units for k in u.read}

    def writes(self) -> set[str]:
        return {slot_name(k) for u in self.units for k in u.write} | {slot_name(k) for k in self.constant}


@dataclass
class Head:
    """One attention head by linear forms: query/key rows (scores <Q h_i, K h_j>), value rows, and the
    form each value row is written to (``outputs[r]`` receives value row r); ``value_bias[r]`` is b_V."""

    queries: list[dict]
    keys: list[dict]
    values: list[dict]
    outputs: list[dict]
    value_bias: Optional[list[float]] = None


@dataclass
class AttnStage:
    """One attention layer's share of a gadget: heads with a common normalisation."""

    heads: list[Head]
    normalization: str = "softmax"

    kind = "attn"

    def reads(self) -> set[str]:
        return {slot_name(k) for h in self.heads for f in (*h.queries, *h.keys, *h.values) for k in f}

    def writes(self) -> set[str]:
        return {slot_name(k) for h in self.heads for f in h.outputs for k in f}


Stage = Union[FFStage, AttnStage]


@dataclass
class Gadget:
    """A named program of consecutive stages; ``scratch`` lists the (slot, size) pairs it owns."""

    name: str
    stages: list[Stage]
    scratch: list[tuple[str, int]] = field(default_factory=list)

    @property
    def depth(self) -> int:
        """Number of layers the gadget occupies."""
        return len(self.stages)

    @property
    def width(self) -> int:
        """Largest number of ReLU units in one of its feed-forward stages."""
        return max((len(s.units) for s in self.stages if isinstance(s, FFStage)), default=0)

    def _own(self) -> set[str]:
        return {name for name, _ in self.scratch}

    @property
    def reads(self) -> list[str]:
        """Outside slots the gadget reads."""
        return sorted(set().union(*(s.reads() for s in self.stages)) - self._own())

    @property
    def writes(self) -> list[str]:
        """Outside slots the gadget writes (adds to)."""
        return sorted(set().union(*(s.writes() for s in self.stages)) - self._own())


@dataclass(frozen=True)
class Placement:
    """Where a gadget went: layers ``first .. last`` (inclusive) of the plan."""

    gadget: str
    first: int
    last: int
    phase: str


@dataclass
class _Step:
    kind: str
    phases: list[str]
    units: list[Unit] = field(default_factory=list)
    constant: dict = field(default_factory=dict)
    heads: list[Head] = field(default_factory=list)
    normalization: Optional[str] = None


class Planner:
    """Places gadgets into an ordered list of core layers over one growing `Layout`.

    ``add(gadget)`` creates the gadget's scratch slots and any slot it writes that does not exist yet
    (size 1), then places stage i at layer t0 + i, where t0 is the earliest layer at which every slot read
    by stage i has received all writes of the gadgets added before it, and at which every layer needed is
    free or of the same kind (feed-forward stages merge with feed-forward stages, attention stages with
    attention stages of the same normalisation). ``after`` forces t0 >= after.
    """

    def __init__(self, layout: Layout):
        self.layout = layout
        self.steps: list[_Step] = []
        self.placements: dict[str, Placement] = {}
        self._ready: dict[str, int] = {}

    def ready(self, slot: str) -> int:
        """First layer at which ``slot`` holds every write made so far (0 for inputs)."""
        return self._ready.get(slot, 0)

    def add(self, gadget: Gadget, phase: str = "L", after: int = 0) -> Placement:
        if gadget.name in self.placements:
            raise ValueError(f"a gadget named {gadget.name!r} was already placed")
        for name, size in gadget.scratch:
            self.layout.add(name, size)
        for slot in gadget.writes:
            if slot not in self.layout:
                self.layout.add(slot, 1)
        own = {name for name, _ in gadget.scratch}
        t0 = after
        for i, stage in enumerate(gadget.stages):
            for slot in stage.reads() - own:
                t0 = max(t0, self.ready(slot) - i)
        while not all(self._fits(t0 + i, stage) for i, stage in enumerate(gadget.stages)):
            t0 += 1
        for i, stage in enumerate(gadget.stages):
            self._put(t0 + i, stage, phase)
            for slot in stage.writes() - own:
                self._ready[slot] = max(self.ready(slot), t0 + i + 1)
        placement = Placement(gadget.name, t0, t0 + gadget.depth - 1, phase)
        self.placements[gadget.name] = placement
        return placement

    def _fits(self, t: int, stage: Stage) -> bool:
        if t >= len(self.steps):
            return True
        step = self.steps[t]
        if step.kind != stage.kind:
            return False
        return stage.kind == "mlp" or step.normalization == stage.normalization

    def _put(self, t: int, stage: Stage, phase: str) -> None:
        while len(self.steps) <= t:
            self.steps.append(_Step(kind="", phases=[]))
        step = self.steps[t]
        if not step.kind:
            step.kind = stage.kind
        if phase not in step.phases:
            step.phases.append(phase)
        if isinstance(stage, FFStage):
            step.units.extend(stage.units)
            for k, v in stage.constant.items():
                step.constant[k] = step.constant.get(k, 0.0) + float(v)
        else:
            step.heads.extend(stage.heads)
            step.normalization = stage.normalization

    @property
    def depth(self) -> int:
        """Number of layers placed so far."""
        return len(self.steps)

    def layers(self) -> list[tuple[str, nn.Module]]:
        """(name, core layer) pairs; a layer is named ``"<phases>.<index>"`` after the phases placed in it.

        An empty layer (left by ``after``) becomes a feed-forward layer with one zero unit."""
        out = []
        for t, step in enumerate(self.steps):
            name = f"{'+'.join(step.phases) or 'L'}.{t}"
            out.append((name, self._attention(step) if step.kind == "attn" else self._feed_forward(step)))
        return out

    def _feed_forward(self, step: _Step) -> FeedForward:
        lay, m = self.layout, max(len(step.units), 1)
        W_1 = torch.zeros(m, lay.dim, dtype=DTYPE)  # (m, D)
        W_2 = torch.zeros(lay.dim, m, dtype=DTYPE)  # (D, m)
        b_1 = torch.zeros(m, dtype=DTYPE)
        for i, u in enumerate(step.units):
            for k, v in u.read.items():
                W_1[i, lay.index(k)] += v
            for k, v in u.write.items():
                W_2[lay.index(k), i] += v
            b_1[i] = u.bias
        return FeedForward(W_1, b_1, W_2, lay.vector(step.constant) if step.constant else None)

    def _attention(self, step: _Step) -> Attention:
        lay, heads = self.layout, []
        for h in step.heads:
            m_qk = max(len(h.queries), 1)
            Q = torch.zeros(m_qk, lay.dim, dtype=DTYPE)
            K = torch.zeros(m_qk, lay.dim, dtype=DTYPE)
            if h.queries:
                Q[: len(h.queries)], K[: len(h.keys)] = lay.matrix(h.queries), lay.matrix(h.keys)
            b_V = None if h.value_bias is None else torch.tensor(h.value_bias, dtype=DTYPE)
            heads.append(HeadWeights(W_Q=Q, W_K=K, W_V=lay.matrix(h.values), W_O=lay.matrix(h.outputs).T, b_V=b_V))
        return Attention(heads, step.normalization)
