"""A named-slot layout of the residual stream, so constructions read as recipes (as in tracr).

A `Layout` assigns each named slot a contiguous range of coordinates. Weights are then
written by slot name:

>>> lay = Layout([("x", 1), ("y", 1), ("out", 1)])
>>> ff = FFBuilder(lay)
>>> ff.unit(read={"x": 1.0, "y": -1.0}, write={"out": 1.0})   # out += relu(x - y)
>>> layer = ff.build()

A slot key is either a slot name (its first coordinate) or ``(name, i)``.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence, Union

import torch

from tfbook.device import DTYPE
from tfbook.layers import FeedForward

SlotKey = Union[str, tuple]


class Layout:
    """Named, contiguous slots of the residual stream; ``dim`` is the embedding dimension D."""

    def __init__(self, slots: Iterable[tuple[str, int]] = ()):
        self._slots: dict[str, tuple[int, int]] = {}
        self.dim = 0
        for name, size in slots:
            self.add(name, size)

    def add(self, name: str, size: int = 1) -> slice:
        """Append a slot of ``size`` coordinates and return its slice."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"slot name must be a non-empty string, got {name!r}")
        if name in self._slots:
            raise ValueError(f"slot {name!r} already exists")
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size of slot {name!r} must be a positive int, got {size!r}")
        self._slots[name] = (self.dim, size)
        self.dim += size
        return self[name]

    def __contains__(self, name: str) -> bool:
        return name in self._slots

    def __getitem__(self, name: str) -> slice:
        start, size = self._lookup(name)
        return slice(start, start + size)

    def names(self) -> list[str]:
        return list(self._slots)

    def size(self, name: str) -> int:
        return self._lookup(name)[1]

    def _lookup(self, name: str) -> tuple[int, int]:
        if name not in self._slots:
            raise ValueError(f"unknown slot {name!r}; slots are {self.names()}")
        return self._slots[name]

    def index(self, key: SlotKey) -> int:
        """Coordinate of ``name`` (first coordinate) or of ``(name, i)``."""
        name, i = (key, 0) if isinstance(key, str) else key
        start, size = self._lookup(name)
        if not 0 <= i < size:
            raise ValueError(f"index {i} out of range for slot {name!r} of size {size}")
        return start + i

    def vector(self, entries: Mapping[SlotKey, float]) -> torch.Tensor:
        """A (D,) vector with the given entries, zero elsewhere."""
        v = torch.zeros(self.dim, dtype=DTYPE)
        for key, value in entries.items():
            v[self.index(key)] += float(value)
        return v

    def matrix(self, rows: Sequence[Mapping[SlotKey, float]]) -> torch.Tensor:
        """A (len(rows), D) matrix whose row r reads the slots named in ``rows[r]``."""
        if len(rows) == 0:
            return torch.zeros(0, self.dim, dtype=DTYPE)
        return torch.stack([self.vector(r) for r in rows])

    def read(self, H: torch.Tensor, name: str) -> torch.Tensor:
        """The coordinates of slot ``name`` of a (..., D) state."""
        return H[..., self[name]]

    def table(self) -> list[tuple[str, int, int]]:
        """(name, first coordinate, size) for every slot, in order."""
        return [(name, start, size) for name, (start, size) in self._slots.items()]


class FFBuilder:
    """Collect ReLU units ``write += relu(read . H + bias)`` and assemble one residual `FeedForward`."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self._reads: list[Mapping[SlotKey, float]] = []
        self._biases: list[float] = []
        self._writes: list[Mapping[SlotKey, float]] = []
        self._out_bias: dict[SlotKey, float] = {}

    def unit(self, read: Mapping[SlotKey, float], write: Mapping[SlotKey, float], bias: float = 0.0) -> None:
        """Add one hidden unit: it reads a linear form of the stream and writes scaled copies of its output."""
        self._reads.append(dict(read))
        self._biases.append(float(bias))
        self._writes.append(dict(write))

    def add_bias(self, write: Mapping[SlotKey, float]) -> None:
        """Add a constant to the given slots (the output bias ``b_2``)."""
        for key, value in write.items():
            self._out_bias[key] = self._out_bias.get(key, 0.0) + float(value)

    @property
    def num_units(self) -> int:
        return len(self._reads)

    def build(self, min_width: int = 1, name: str = "") -> FeedForward:
        """The `FeedForward` layer (named ``name``); padded with zero units to at least ``min_width`` hidden units."""
        D, m = self.layout.dim, max(self.num_units, min_width)
        W_1 = torch.zeros(m, D, dtype=DTYPE)
        W_2 = torch.zeros(D, m, dtype=DTYPE)
        b_1 = torch.zeros(m, dtype=DTYPE)
        if self.num_units:
            W_1[: self.num_units] = self.layout.matrix(self._reads)
            W_2[:, : self.num_units] = self.layout.matrix(self._writes).T
            b_1[: self.num_units] = torch.tensor(self._biases, dtype=DTYPE)
        return FeedForward(W_1, b_1, W_2, self.layout.vector(self._out_bias), name=name)
