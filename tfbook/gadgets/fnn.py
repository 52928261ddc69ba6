"""ReLU feed-forward networks (Definition 1 of Takeshita and Imaizumi, 2025) on the core, and Lemma 2's conversion into
residual transformer feed-forward layers."""
from __future__ import annotations

from typing import Sequence

import scipy.sparse as sp
import torch
from torch import nn

from tfbook.device import DTYPE
from tfbook.gadgets.plan import FFStage, Gadget
from tfbook.layers import FeedForward

Affine = tuple[torch.Tensor, torch.Tensor]  # (A (out, in), b (out,))


def _dense(affine: Sequence) -> list[Affine]:
    """(A, b) pairs as dense float64 tensors; A may be a tensor (dense or sparse), an array or a SciPy matrix."""
    out = []
    for A, b in affine:
        if sp.issparse(A):
            A = A.toarray()
        elif isinstance(A, torch.Tensor) and A.layout != torch.strided:
            A = A.to_dense()
        out.append((torch.as_tensor(A, dtype=DTYPE), torch.as_tensor(b, dtype=DTYPE)))
    return out


def _check_chain(affine: Sequence[Affine]) -> None:
    for (A, b), (A_next, _) in zip(affine, list(affine[1:]) + [(None, None)]):
        if A.dim() != 2 or b.shape != (A.shape[0],) or (A_next is not None and A_next.shape[1] != A.shape[0]):
            shape = None if A_next is None else tuple(A_next.shape)
            raise ValueError(f"affine maps must chain: A {tuple(A.shape)}, b {tuple(b.shape)}, next A {shape}")


def feed_forward_layers(affine: Sequence, prefix: str = "f") -> list[tuple[str, FeedForward]]:
    """A_L relu(... relu(A_1 z + b_1) ...) + b_L as core FeedForward(residual=False) layers, one per ReLU layer.

    Layer l < L-1 is relu(A_l z + b_l) (W_2 = I); the last one merges the output map, A_L relu(A_{L-1} z +
    b_{L-1}) + b_L. A single affine map is written exactly as relu(Az + b) - relu(-Az - b). Named
    ``prefix.1``, ``prefix.2``, ... for a `tfbook.model.Construction`.
    """
    affine = _dense(affine)
    if not affine:
        raise ValueError("affine must hold at least one (A, b) map")
    _check_chain(affine)
    if len(affine) == 1:
        A, b = affine[0]
        eye = torch.eye(A.shape[0], dtype=DTYPE)
        return [(f"{prefix}.1", FeedForward(torch.cat([A, -A]), torch.cat([b, -b]), torch.cat([eye, -eye], 1), None,
                                            residual=False))]
    layers = []
    for k, (A, b) in enumerate(affine[:-1]):
        last = k == len(affine) - 2
        W_2, b_2 = affine[-1] if last else (torch.eye(A.shape[0], dtype=DTYPE), None)
        layers.append((f"{prefix}.{k + 1}", FeedForward(A, b, W_2, b_2, residual=False)))
    return layers


class FNN(nn.Module):
    """Definition 1: h_l = relu(A_l h_{l-1} + b_l), l = 1..L, output y = A_{L+1} h_L + b_{L+1}.

    Runs on core `FeedForward` layers without residual: layer l (< L+1) is relu(A_l h + b_l) (W_2 = I), and
    the output layer is A_{L+1} relu(h) + b_{L+1} (W_1 = I, exact because h_L >= 0). ``depth`` = L,
    ``width`` = max_l dim h_l, ``affine`` = the (A_l, b_l), l = 1..L+1. The A_l may be tensors, arrays or
    SciPy sparse matrices (a `tfbook.gadgets.circuit.Circuit`'s maps).
    """

    def __init__(self, affine: Sequence):
        super().__init__()
        if len(affine) < 2:
            raise ValueError("affine must hold at least one hidden layer and the output layer")
        affine = _dense(affine)
        _check_chain(affine)
        layers = []
        for A, b in affine[:-1]:
            m = A.shape[0]
            layers.append(FeedForward(A, b, torch.eye(m, dtype=DTYPE), torch.zeros(m, dtype=DTYPE), residual=False))
        A, b = affine[-1]
        m = A.shape[1]
        layers.append(FeedForward(torch.eye(m, dtype=DTYPE), torch.zeros(m, dtype=DTYPE), A, b, residual=False))
        self.layers = nn.ModuleList(layers)

    @property
    def depth(self) -> int:
        """L, the number of hidden layers."""
        return len(self.layers) - 1

    @property
    def width(self) -> int:
        """max_l dim h_l."""
        return max(layer.W_1.shape[0] for layer in self.layers[:-1])

    @property
    def affine(self) -> list[Affine]:
        """(A_l, b_l) for l = 1..L+1, read back from the layers."""
        out = [(layer.W_1, layer.b_1) for layer in self.layers[:-1]]
        return out + [(self.layers[-1].W_2, self.layers[-1].b_2)]

    def hidden(self, x: torch.Tensor) -> list[torch.Tensor]:
        """h_1..h_L for inputs x (batch, d_in)."""
        h, hs = x.to(DTYPE).unsqueeze(1), []  # (batch, 1, d_in): one token per input
        for layer in self.layers[:-1]:
            h = layer(h)
            hs.append(h[:, 0])
        return hs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, d_in) -> (batch, d_out)."""
        h = x.to(DTYPE).unsqueeze(1)  # (batch, 1, d_in)
        for layer in self.layers:
            h = layer(h)
        return h[:, 0]


def from_fnn(affine: Sequence[Affine], slot: str, tag: str = "fnn") -> Gadget:
    """Lemma 2 of Takeshita and Imaizumi, 2025: the FNN as L+1 residual feed-forward layers on a slot of
    width W (the largest layer size; the input in its first coordinates, the output appears in its first coordinates).

    Layer l adds [I, -I] relu([A_l; I] h + [b_l; 0]) to h, which replaces h by relu(A_l h + b_l) when h >= 0
    (then relu(h) = h). So it equals the FNN only if every input, hidden and output value is >= 0.
    Hidden width 2W per layer (A_l padded with zero rows and columns to W x W, as in the lemma).
    """
    affine = [(torch.as_tensor(A, dtype=DTYPE), torch.as_tensor(b, dtype=DTYPE)) for A, b in affine]
    W = max(max(A.shape) for A, _ in affine)
    stages = []
    for A, b in affine:
        stage = FFStage()
        for i in range(W):
            row = {(slot, j): float(A[i, j]) for j in range(A.shape[1]) if A[i, j] != 0} if i < A.shape[0] else {}
            stage.unit(row, {(slot, i): 1.0}, bias=float(b[i]) if i < A.shape[0] else 0.0)
        for j in range(W):
            stage.unit({(slot, j): 1.0}, {(slot, j): -1.0})
        stages.append(stage)
    return Gadget(tag, stages)


def fnn_width(affine: Sequence[Affine]) -> int:
    """W: the slot width `from_fnn` needs (largest input, hidden or output size)."""
    return max(max(torch.as_tensor(A).shape) for A, _ in affine)
