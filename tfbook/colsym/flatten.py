"""Section 9.1 built: the same computation as a ReLU network on the flattened input, without attention.

`flattened_network(model)` rewrites a `ColsymTransformer` as residual feed-forward layers acting on one
token that holds all n columns' streams side by side (dimension n D):

* every TF_0 layer becomes n copies of itself, one per column (block-diagonal: separate parameters per
  column, as the paper says a network on the dn-vector needs);
* the attention layer becomes a feed-forward layer whose units read the sum over columns of each value
  row (relu(s) - relu(-s) = s) and write W_O / n of it into every column: n copies of each read and write;
* the rank induction runs once, on column 0's coordinates (after the sum every column holds the same P_T).

It computes the same output (to rounding) and its number of non-zero weights grows linearly in n, while
the transformer's does not depend on n.
"""
from __future__ import annotations

import torch

from tfbook.colsym.construction import ColsymTransformer
from tfbook.device import DTYPE
from tfbook.layers import FeedForward
from tfbook.layout import Layout
from tfbook.model import Construction


def flattened_network(model: ColsymTransformer) -> Construction:
    """The Section 9.1 network on the flattened input (one token, slot ``X`` of size n D, column i in
    coordinates i D .. (i+1) D - 1); read ``out`` at coordinate ``model.layout.index("out")``."""
    n, D, A = model.n, model.layout.dim, model.attention_block
    device = next(model.parameters()).device  # built on the model's device
    eye = torch.eye(n, dtype=DTYPE, device=device)
    first = torch.zeros(n, 1, dtype=DTYPE, device=device)
    first[0] = 1.0  # column 0 only
    layers = []
    for i, (name, layer) in enumerate(model.named_layers()):
        if i < A:  # TF_0: one copy per column
            W_1, W_2 = torch.kron(eye, layer.W_1), torch.kron(eye, layer.W_2)
            b_1 = layer.b_1.repeat(n) if layer.b_1 is not None else None
            b_2 = layer.b_2.repeat(n) if layer.b_2 is not None else None
        elif i == A:  # the column sum: units relu(+-sum_j V h_j), written to every column as W_O / n
            head = layer.heads[0]
            V, W_O = head.W_V, head.W_O  # (m_v, D), (D, m_v)
            read = torch.kron(torch.ones(1, n, dtype=DTYPE, device=device), V)  # (m_v, n D)
            W_1 = torch.cat([read, -read])
            write = torch.kron(torch.ones(n, 1, dtype=DTYPE, device=device), W_O / n)  # (n D, m_v)
            W_2 = torch.cat([write, -write], dim=1)
            b_1 = torch.cat([head.b_V, -head.b_V]) * n  # the value bias is the same in every column
            b_2 = None
        else:  # the rank induction, once, on column 0
            W_1, W_2 = torch.kron(first.T, layer.W_1), torch.kron(first, layer.W_2)
            b_1 = layer.b_1
            b_2 = torch.kron(first[:, 0], layer.b_2) if layer.b_2 is not None else None
        layers.append((f"flat.{name}", FeedForward(W_1, b_1, W_2, b_2)))
    return Construction(Layout([("X", n * D)]), layers)


def run_flattened(net: Construction, model: ColsymTransformer, X: torch.Tensor) -> torch.Tensor:
    """f~(X) from the flattened network: X (batch, d, n) -> (batch,)."""
    H = model.embed(X).reshape(X.shape[0], 1, -1)  # (batch, 1, n D): the columns side by side
    return net(H)[:, 0, model.layout.index("out")]
