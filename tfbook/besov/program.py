"""Vectorised slot programs: residual feed-forward layers written unit by unit for many atoms at once.

A `Stream` allocates named slot groups of the residual stream (index arrays of any shape, one
`tfbook.layout.Layout` slot each). An `FFLayer` collects ReLU units, each reading a linear form of
the stream plus a bias and adding scaled copies of its output to stream coordinates; all arguments
broadcast, so one call writes the same unit for every atom. ``build`` returns one residual core
`FeedForward`.

Emitters (each returns the list of (name, FFLayer) it adds):

* `emit_product`: Lemma 4's product 2R^2 [f((x+y)/2R) - f(x/2R) - f(y/2R)], f = Yarotsky's f_{m_q}: the
  units of `tfbook.gadgets.polarisation_product` replayed on slot arrays, in m_q layers of 3 sawtooth
  slots each (width independent of m_q); the result replaces x.
* `emit_clip`: x := min(max(x, 0), 1) with relu(x - 1) and relu(-x) (a signed slot is cleared by
  relu(a) - relu(-a): the residual form needs no fresh slots).
* `emit_spline`: the B-spline recipe of Lemma 5 on slots u (reals <= 2^53) -> the clipped product over
  the last axis of N_m(u).
"""
from __future__ import annotations

from math import comb, factorial
from typing import Optional, Sequence

import numpy as np
import torch

from tfbook.device import DTYPE
from tfbook.gadgets import polarisation_product
from tfbook.layers import FeedForward, weight_from_entries
from tfbook.layout import Layout


class Stream:
    """Named slot groups of the residual stream; ``alloc`` returns an index array of the given shape."""

    def __init__(self, layout: Optional[Layout] = None):
        self.layout = layout if layout is not None else Layout()

    def alloc(self, name: str, shape: Sequence[int]) -> np.ndarray:
        size = int(np.prod(shape))
        if size == 0:
            return np.zeros(tuple(shape), dtype=np.int64)
        sl = self.layout.add(name, size)
        return np.arange(sl.start, sl.stop).reshape(tuple(shape))

    @property
    def dim(self) -> int:
        return self.layout.dim


def _broadcast(units: np.ndarray, cols, coefs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cols, coefs = np.asarray(cols), np.asarray(coefs, dtype=float)
    extra = max(cols.ndim, coefs.ndim) - units.ndim
    u = units.reshape(units.shape + (1,) * max(extra, 0))
    u, c, v = np.broadcast_arrays(u, cols, coefs)
    return np.array(u).ravel(), np.array(c).ravel(), np.array(v).ravel()


class FFLayer:
    """ReLU units ``write += coef * relu(sum read + bias)`` collected into one residual `FeedForward`."""

    def __init__(self, D: int):
        self.D, self.count = D, 0
        self._reads: list[tuple] = []
        self._writes: list[tuple] = []
        self._bias: list[tuple] = []

    def units(self, reads: Sequence[tuple], writes: Sequence[tuple], bias=0.0,
              shape: Optional[Sequence[int]] = None) -> np.ndarray:
        """Add units of ``shape`` (default: the broadcast shape of the first read's columns).

        ``reads``/``writes``: (cols, coefs) pairs broadcastable to ``shape`` (writes may add trailing axes).
        """
        if shape is None:
            shape = np.broadcast_shapes(*(np.shape(c) for c, _ in reads))
        n = int(np.prod(shape))
        idx = np.arange(self.count, self.count + n).reshape(tuple(shape))
        self.count += n
        for cols, coefs in reads:
            self._reads.append(_broadcast(idx, cols, coefs))
        for cols, coefs in writes:
            self._writes.append(_broadcast(idx, cols, coefs))
        b = np.broadcast_to(np.asarray(bias, dtype=float), idx.shape)
        self._bias.append((idx.ravel(), np.array(b).ravel()))
        return idx

    def clear(self, cols, signed: bool = True) -> None:
        """Add units that subtract the current value of ``cols`` (relu(a) - relu(-a); only relu(a) if a >= 0)."""
        self.units([(cols, 1.0)], [(cols, -1.0)])
        if signed:
            self.units([(cols, -1.0)], [(cols, 1.0)])

    def build(self, name: str) -> FeedForward:
        """The units as one residual `FeedForward`; a large, sparse W_1 or W_2 goes to the layer as a sparse
        tensor built from the units' entries (`tfbook.layers.weight_from_entries`), never as a dense matrix."""
        m = max(self.count, 1)
        W_1 = weight_from_entries((m, self.D), self._reads)
        W_2 = weight_from_entries((self.D, m), [(c, u, v) for u, c, v in self._writes])
        b_1 = torch.zeros(m, dtype=DTYPE)
        for u, v in self._bias:
            b_1.index_put_((torch.as_tensor(u),), torch.as_tensor(v, dtype=DTYPE), accumulate=True)
        return FeedForward(W_1, b_1 if bool(b_1.any()) else None, W_2, None, name=name)


Program = list  # of (name, FFLayer or a built core layer)


def emit_product(prog: Program, D: int, x: np.ndarray, y: np.ndarray, saw: np.ndarray, R: float, m_q: int,
                 name: str, clear_y: bool = False, x_scale: float = 1.0, y_scale: float = 1.0) -> None:
    """x := prod_{m_q, R}(x_scale x, y_scale y) for x, y >= 0 (Lemma 4), using ``saw`` (x.shape + (3,)) as
    scratch.

    The units are those of the shared gadget `tfbook.gadgets.polarisation_product` (k = 1, L = m_q,
    prod = 2R^2 [f((x+y)/2R) - f(x/2R) - f(y/2R)]), replayed on the slot arrays: its output form is x
    itself and its scratch channel c is saw[..., c]; the scales enter its first layer's reads. The first
    layer also clears saw (the gadget expects fresh scratch) and x (the product replaces it), and y when
    ``clear_y``. As in the gadget, the last layer does not update the scratch (for m_q = 1 the only layer:
    6 non-zeros fewer than writing it).
    """
    gadget = polarisation_product({"x": x_scale}, {"y": y_scale}, {"x": 1.0}, 1, m_q, R=R, tag="prod")
    slots = {"x": x, "y": y, **{("prod.y", c): saw[..., c] for c in range(3)}}
    for s, stage in enumerate(gadget.stages, start=1):
        layer = FFLayer(D)
        if s == 1:
            for c in range(3):
                layer.clear(saw[..., c], signed=False)
        for unit in stage.units:
            layer.units([(slots[key], coef) for key, coef in unit.read.items()],
                        [(slots[key], coef) for key, coef in unit.write.items()], bias=unit.bias, shape=x.shape)
        if s == 1:
            layer.clear(x, signed=False)
            if clear_y:
                layer.clear(y, signed=False)
        prog.append((f"{name}.{s}", layer))


def add_clip(layer: FFLayer, x: np.ndarray) -> None:
    """Units making x := min(max(x, 0), 1): the update is relu(-x) - relu(x - 1)."""
    layer.units([(x, -1.0)], [(x, 1.0)])
    layer.units([(x, 1.0)], [(x, -1.0)], bias=-1.0)


def emit_clip(prog: Program, D: int, x: np.ndarray, name: str) -> None:
    layer = FFLayer(D)
    add_clip(layer, x)
    prog.append((name, layer))


def spline_weights(m: int) -> np.ndarray:
    """w_j = (-1)^j binom(m+1, j) (m+1)^m / m!, j = 0..m: N_m(v) = sum_j w_j (relu(v - j)/(m+1))^m on [0, m+1]."""
    return np.array([(-1) ** j * comb(m + 1, j) * (m + 1) ** m / factorial(m) for j in range(m + 1)])


def spline_scratch(shape: tuple, m: int, d: int) -> dict[str, tuple]:
    """Slot shapes the spline recipe needs for atoms of ``shape`` with d coordinates each."""
    s = {"F": shape + (d,), "G": shape + (d,), "S": shape + (d, m + 1)}
    if m >= 2:
        s["P"] = shape + (d, m + 1)
    return s


def num_saw(m: int, d: int) -> int:
    """Products run at once per atom: (m+1) d powers, or floor(d/2) tree products, or the round product."""
    return max((m + 1) * d if m >= 2 else 0, d // 2, 1)


def spline_depth(m: int, d: int, m_q: int) -> int:
    """Feed-forward layers of `emit_spline`: 1 + (m-1)(m_q+1) + 3 + ceil(log2 d)(m_q+1)."""
    return 1 + (m - 1) * (m_q + 1) + 3 + int(np.ceil(np.log2(d))) * (m_q + 1)


def emit_spline(prog: Program, D: int, U: np.ndarray, slots: dict[str, np.ndarray], saw: np.ndarray, m: int,
                m_q: int, name: str = "spline") -> np.ndarray:
    """Lemma 5's recipe on slots U (..., d) holding u; returns the slots (...,) holding prod_c N_m(u_c).

    1. S_j = relu(u - j) - relu(u - m - 1) = relu(clip(u, 0, m+1) - j), j = 0..m, and s_j = S_j/(m+1);
       ramps F = relu(u), G = relu(m + 1 - u) (exactly 0 outside [0, m+1]). S_j is exact for u <= 2^53:
       u - j and the difference of the two ramps round to themselves, and the inexact 1/(m+1) enters
       only the next layer's reads of S_j in [0, m+1] (written 1/(m+1) relu(u - j) - ..., it rounded the
       two ramps at u ~ 2^50 and s_j left [0, 1] by 0.03, and the products' scratch with it);
    2. powers P_j = s_j^m by m - 1 products on [0, 1] (each followed by a clip);
    3. phi = sum_j w_j P_j; F := min(phi, F, G) (N_m <= both ramps, so this never adds error), clip to [0, 1];
    4. multiply the d factors with a binary tree of products on [0, 1].
    ``saw``: (..., num_saw(m, d), 3) scratch.
    """
    d = U.shape[-1]
    F, G, S = slots["F"], slots["G"], slots["S"]
    P = slots["P"] if m >= 2 else S
    layer = FFLayer(D)
    js = np.arange(m + 1)
    top = layer.units([(U, 1.0)], [], bias=-(m + 1.0))
    layer.units([(U[..., None], 1.0)], [(S, 1.0)] + ([(P, 1.0)] if m >= 2 else []),
                bias=-js.astype(float), shape=S.shape)
    # subtract relu(u - m - 1) from every S_j (and P_j): one shared unit, written to m+1 slots
    layer._writes.append(_broadcast(top, S, -1.0))
    if m >= 2:
        layer._writes.append(_broadcast(top, P, -1.0))
    layer.units([(U, 1.0)], [(F, 1.0)])
    layer.units([(U, -1.0)], [(G, 1.0)], bias=m + 1.0)
    prog.append((f"{name}.s", layer))
    flat_saw = saw.reshape(saw.shape[:-2] + (-1, 3))
    inv = 1.0 / (m + 1)  # s_j = inv S_j; P_j too until the first power replaces it
    for power in range(2, m + 1):
        sw = flat_saw[..., : d * (m + 1), :].reshape(P.shape + (3,))
        emit_product(prog, D, P, S, sw, 1.0, m_q, f"{name}.pow{power}",
                     x_scale=inv if power == 2 else 1.0, y_scale=inv)
        emit_clip(prog, D, P, f"{name}.pow{power}.clip")
    w, p_scale = spline_weights(m), (inv if m == 1 else 1.0)  # for m = 1, P = S
    layer = FFLayer(D)  # F := phi - relu(phi - F), with phi = sum_j w_j relu(P_j) (P_j >= 0) and F = relu(u)
    layer.units([(P, p_scale)], [(F[..., None], w)], shape=P.shape)
    gap = layer.units([(F, -1.0)], [(F, -1.0)])
    layer._reads.append(_broadcast(gap, P, p_scale * w))
    layer.clear(F, signed=False)
    prog.append((f"{name}.min1", layer))
    layer = FFLayer(D)  # F := F - relu(F - G)
    layer.units([(F, 1.0), (G, -1.0)], [(F, -1.0)])
    prog.append((f"{name}.min2", layer))
    emit_clip(prog, D, F, f"{name}.clip")
    # binary tree over the last axis
    cols = [F[..., c] for c in range(d)]
    level = 0
    while len(cols) > 1:
        level += 1
        pairs = len(cols) // 2
        xs = np.stack([cols[2 * i] for i in range(pairs)], axis=-1)
        ys = np.stack([cols[2 * i + 1] for i in range(pairs)], axis=-1)
        sw = flat_saw[..., :pairs, :]
        emit_product(prog, D, xs, ys, sw, 1.0, m_q, f"{name}.tree{level}")
        emit_clip(prog, D, xs, f"{name}.tree{level}.clip")
        cols = [xs[..., i] for i in range(pairs)] + ([cols[-1]] if len(cols) % 2 else [])
    return cols[0]
