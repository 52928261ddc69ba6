"""Boolean circuits and the ReLU networks that compute them (Wei, Chen & Ma, Lemma B.1, Prop 3.4).

Each circuit layer becomes a gate block f(h) = relu(W_2 relu(W_1 h + b_1) + b_2), one row per gate:

    AND  relu(a + b - 1)        OR  1 - relu(1 - a - b)        NOT  relu(1 - a)        ID  relu(a)

and every block but the last is followed by the correction round(z) = 3 relu(z - 1/3) - 3 relu(z - 2/3)
= clip(3z - 1, 0, 1) (the paper's "3x - 1" is a typo for 3z - 1), two more ReLU layers that snap any
value within 1/3 of a bit back to the bit. The read-out is F = 2 h_out - 1 in {-1, +1}.
"""
from __future__ import annotations

import contextlib
import math
import random
from typing import Sequence

import torch

from tfbook import validate
from tfbook.device import DTYPE
from tfbook.layers import FeedForward, perturb
from tfbook.layout import Layout
from tfbook.model import Construction, Sizes
from tfbook.turing.formulas import circuit_l1, relu_layers

OPS = {"AND": 2, "OR": 2, "NOT": 1, "ID": 1}


class Circuit:
    """``layers[i]`` is a list of gates (op, parents); parents index the previous layer (layer 0 = inputs)."""

    def __init__(self, num_inputs: int, layers: Sequence[Sequence[tuple[str, tuple[int, ...]]]]):
        if isinstance(num_inputs, bool) or not isinstance(num_inputs, int) or num_inputs < 1:
            raise ValueError(f"num_inputs must be an int >= 1, got {num_inputs!r}")
        if isinstance(layers, str) or not isinstance(layers, Sequence):
            raise ValueError(f"layers must be a list or tuple of layers, got {type(layers).__name__}")
        if len(layers) == 0:
            raise ValueError("layers must contain at least one layer of gates")
        width = num_inputs
        for i, layer in enumerate(layers, start=1):
            if isinstance(layer, str) or not isinstance(layer, Sequence):
                raise ValueError(f"layers[{i - 1}] must be a list or tuple of gates (op, parents), "
                                 f"got {type(layer).__name__}")
            if len(layer) == 0:
                raise ValueError(f"layer {i} has no gates")
            for gate in layer:
                if not (isinstance(gate, (tuple, list)) and len(gate) == 2):
                    raise ValueError(f"gate {gate!r} in layer {i} must be (op, parents)")
                op, parents = gate
                if op not in OPS:
                    raise ValueError(f"op {op!r} in layer {i} must be one of {sorted(OPS)}")
                parents = tuple(parents)
                if len(parents) != OPS[op]:
                    raise ValueError(f"{op} in layer {i} needs {OPS[op]} parent(s), got {parents!r}")
                if any(isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < width for p in parents):
                    raise ValueError(f"parents {parents!r} in layer {i} must index the previous layer (0..{width - 1})")
            width = len(layer)
        if len(layers[-1]) != 1:
            raise ValueError(f"the last layer must have exactly one gate (the output), got {len(layers[-1])}")
        self.num_inputs = num_inputs
        self.layers = [[(op, tuple(p)) for op, p in layer] for layer in layers]

    @property
    def size(self) -> int:
        return sum(len(layer) for layer in self.layers)

    @property
    def width(self) -> int:
        return max([self.num_inputs] + [len(layer) for layer in self.layers])

    def evaluate(self, X: torch.Tensor) -> torch.Tensor:
        """Reference evaluation with Boolean logic: (batch, num_inputs) 0/1 -> (batch,) 0/1."""
        h = check_bits(X, self.num_inputs).bool()
        for layer in self.layers:
            cols = []
            for op, p in layer:
                if op == "AND":
                    cols.append(h[:, p[0]] & h[:, p[1]])
                elif op == "OR":
                    cols.append(h[:, p[0]] | h[:, p[1]])
                elif op == "NOT":
                    cols.append(~h[:, p[0]])
                else:
                    cols.append(h[:, p[0]])
            h = torch.stack(cols, 1)
        return h[:, 0].long()


def check_bits(X, num_inputs: int) -> torch.Tensor:
    """X as a (batch, num_inputs) tensor, every entry 0 or 1 (on the meta device only the shape is checked)."""
    X = torch.as_tensor(X)
    if X.ndim != 2 or X.shape[1] != num_inputs:
        raise ValueError(f"X must have shape (batch, {num_inputs}), got {tuple(X.shape)}")
    if validate.has_values(X) and not bool(((X == 0) | (X == 1)).all()):
        raise ValueError("X must hold bits: every input in {0, 1}")
    return X


def _random_layers(num_inputs: int, depth: int, width: int, rng: random.Random) -> list:
    layers, prev = [], num_inputs
    for i in range(depth):
        layer = []
        for _ in range(1 if i == depth - 1 else width):
            op = rng.choice(["AND", "OR", "AND", "OR", "NOT"])
            layer.append((op, tuple(rng.sample(range(prev), OPS[op])) if prev >= OPS[op] else (0,) * OPS[op]))
        layers.append(layer)
        prev = len(layer)
    return layers


def relevant_inputs(circuit: Circuit) -> int:
    """Number of inputs whose flip changes the output on some input."""
    X = all_inputs(circuit.num_inputs)
    y = circuit.evaluate(X)
    return sum(bool((circuit.evaluate(X.clone().index_fill_(1, torch.tensor([i]), 0))
                     != circuit.evaluate(X.clone().index_fill_(1, torch.tensor([i]), 1))).any())
               for i in range(circuit.num_inputs)) if len(y) else 0


def random_circuit(num_inputs: int, depth: int, width: int, seed: int = 0, balance: tuple[float, float] = (0.35, 0.65),
                   min_relevant: int = 0, max_tries: int = 10_000) -> Circuit:
    """A random layered circuit (``depth`` gate layers of ``width`` gates, one output gate), rejection-sampled so
    that the fraction of inputs mapped to 1 lies in ``balance`` and at least ``min_relevant`` inputs matter."""
    if depth < 1 or width < 1:
        raise ValueError(f"depth and width must be >= 1, got {depth}, {width}")
    rng = random.Random(seed)
    X = all_inputs(num_inputs)
    for _ in range(max_tries):
        circuit = Circuit(num_inputs, _random_layers(num_inputs, depth, width, rng))
        frac = float(circuit.evaluate(X).float().mean())
        if balance[0] <= frac <= balance[1] and relevant_inputs(circuit) >= min_relevant:
            return circuit
    raise ValueError(f"no circuit with balance {balance} and {min_relevant} relevant inputs in {max_tries} tries")


class CircuitNetwork(Construction):
    """The ReLU network of Lemma B.1 with Prop 3.4's corrections, one core `FeedForward` per ReLU layer of the paper.

    Gate block i (parameters W1, b1, W2, b2) is the pair of layers ``L{i}.gate1`` = relu(W1 h + b1) and
    ``L{i}.gate2`` = relu(W2 u + b2); every block but the last is followed by the correction
    ``L{i}.round1`` = relu(C1 g + c1), ``L{i}.round2`` = relu(C2 v) with C1 = [I; I], c1 = [-1/3; -2/3],
    C2 = [3I, -3I]. The last block's ``gate2`` also applies the read-out W_d = 2, b_d = -1, so ``forward``
    maps 0/1 inputs to F = 2 G - 1. Each layer writes its ReLU output through a fixed identity ``W_2``
    (wiring, not a parameter of the paper); `theta` lists the paper's parameters.
    """

    def __init__(self, num_inputs: int, layers: Sequence[tuple[str, FeedForward]]):
        super().__init__(Layout([("x", num_inputs)]), layers)
        self.num_blocks = sum(name.endswith(".gate1") for name in self.layer_names)

    def block(self, i: int) -> dict[str, FeedForward]:
        """The core layers of gate block i (0-based), by role: gate1, gate2 and, when corrected, round1, round2."""
        roles = ("gate1", "gate2", "round1", "round2")
        return {r: self.layer(f"L{i + 1}.{r}") for r in roles if f"L{i + 1}.{r}" in self.layer_names}

    @property
    def num_relu_layers(self) -> int:
        """Number of ReLU layers: ``counted_sizes().ff_layers`` (one core feed-forward layer per ReLU layer)."""
        return self.counted_sizes().ff_layers

    def paper_sizes(self) -> Sizes:
        """The paper's count of ReLU layers, 4q - 6 with q the depth including the input layer, i.e. 4 (gate layers) - 2."""
        return Sizes(ff_layers=relu_layers(self.num_blocks))

    def theta(self) -> list[tuple[str, torch.Tensor]]:
        """The paper's parameters: W_1 and b_1 of every layer, and W_2, b_2 (the read-out) of the last."""
        last = self.layer_names[-1]
        return [(f"{name}.{attr}", getattr(layer, attr)) for name, layer in self.named_layers()
                for attr in ("W_1", "b_1", "W_2", "b_2")
                if getattr(layer, attr) is not None and (attr in ("W_1", "b_1") or name == last)]

    def l1_norm(self) -> float:
        """||theta||_1 of the paper's parameters (the alpha of Theorem 3.1), summed exactly rounded (`math.fsum`):
        the same float on every machine, whatever order a kernel would add in."""
        return math.fsum(v for _, p in self.theta() for v in p.detach().abs().flatten().cpu().tolist())

    def forward(self, X: torch.Tensor, block_noise: float = 0.0, correct: bool = True, return_hidden: bool = False):
        """F (batch,) for 0/1 inputs X (batch, m). ``block_noise``: push every corrected block's output that far
        towards 1/2 (the adversarial direction) before its correction, through `tfbook.layers.perturb`;
        ``correct=False`` skips the corrections. ``return_hidden`` also returns each corrected block's output."""
        H = torch.as_tensor(check_bits(X, self.layout.dim), dtype=DTYPE).unsqueeze(1)  # (batch, 1, m)
        pushed = [f"L{i}.gate2" for i in range(1, self.num_blocks)]
        push = lambda layer, U: U + float(block_noise) * (1 - 2 * U.round())  # noqa: E731
        hidden = []
        with perturb(fn=push, names=pushed) if block_noise else contextlib.nullcontext():
            for name, layer in self.named_layers():
                if not correct and ".round" in name:
                    continue
                H = layer(H)
                if name.endswith(".round2") or (not correct and name.endswith(".gate2") and name != self.layer_names[-1]):
                    hidden.append(H[:, 0])
        out = H[:, 0, 0]
        return (out, hidden) if return_hidden else out


def build_circuit_network(circuit: Circuit) -> CircuitNetwork:
    """Lemma B.1 gate blocks, corrections after every block but the last, read-out 2 h - 1."""
    if not isinstance(circuit, Circuit):
        raise ValueError(f"circuit must be a Circuit, got {type(circuit).__name__}")
    layers, prev, q = [], circuit.num_inputs, len(circuit.layers)
    for i, layer in enumerate(circuit.layers, start=1):
        n = len(layer)
        W1, b1 = torch.zeros(n, prev, dtype=DTYPE), torch.zeros(n, dtype=DTYPE)
        W2, b2 = torch.zeros(n, n, dtype=DTYPE), torch.zeros(n, dtype=DTYPE)
        for g, (op, p) in enumerate(layer):  # gate g of this layer reads parents p of the previous one
            if op == "AND":
                W1[g, p[0]] += 1
                W1[g, p[1]] += 1
                b1[g], W2[g, g] = -1, 1
            elif op == "OR":
                W1[g, p[0]] -= 1
                W1[g, p[1]] -= 1
                b1[g], W2[g, g], b2[g] = 1, -1, 1
            elif op == "NOT":
                W1[g, p[0]] = -1
                b1[g], W2[g, g] = 1, 1
            else:
                W1[g, p[0]] = 1
                W2[g, g] = 1
        eye = torch.eye(n, dtype=DTYPE)
        layers.append((f"L{i}.gate1", FeedForward(W1, b1, eye, None, residual=False)))
        if i < q:
            c1 = torch.cat([torch.full((n,), -1 / 3, dtype=DTYPE), torch.full((n,), -2 / 3, dtype=DTYPE)])
            layers += [(f"L{i}.gate2", FeedForward(W2, b2, eye, None, residual=False)),
                       (f"L{i}.round1", FeedForward(torch.cat([eye, eye]), c1, torch.eye(2 * n, dtype=DTYPE), None,
                                                    residual=False)),
                       (f"L{i}.round2", FeedForward(torch.cat([3 * eye, -3 * eye], dim=1), None, eye, None,
                                                    residual=False))]
        else:  # read-out F = W_d relu(W2 u + b2) + b_d with W_d = 2, b_d = -1
            layers.append((f"L{i}.gate2", FeedForward(W2, b2, torch.tensor([[2.0]], dtype=DTYPE),
                                                      torch.tensor([-1.0], dtype=DTYPE), residual=False)))
        prev = n
    return CircuitNetwork(circuit.num_inputs, layers)


def l1_formula(circuit: Circuit) -> float:
    """Sum of gate costs (AND 4, OR 5, NOT 3, ID 2) + 9 per corrected gate + 3 for the read-out."""
    return circuit_l1(**gate_counts(circuit))


def gate_counts(circuit: Circuit) -> dict[str, int]:
    """The arguments of `circuit_l1`: gates per op, and the gates of every layer but the last (corrected)."""
    ops = [op for layer in circuit.layers for op, _ in layer]
    counts = {f"{op.lower()}_gates": ops.count(op) for op in OPS}
    return {**counts, "corrected_gates": sum(len(layer) for layer in circuit.layers[:-1])}


def all_inputs(m: int) -> torch.Tensor:
    """All 2^m 0/1 vectors, (2^m, m)."""
    idx = torch.arange(2**m)
    return ((idx.unsqueeze(1) >> torch.arange(m - 1, -1, -1)) & 1).to(DTYPE)
