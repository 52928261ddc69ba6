"""Squaring and product networks (Lemmas 1 and 7, Lu et al. 2021) and Lemma 2's FNN-to-transformer map.

Width parameter N and depth L choose k with (k-1) 2^(k-1) + 1 <= N <= k 2^k (Lu et al.'s rule; the
paper's is unreadable). With K = 2^k, each layer applies g_k (k hat compositions) through K ReLUs
sigma(y - t/K), t = 0..K-1:

    g_k(y) = K sigma(y) + 2K sum_{t>=1} (-1)^t sigma(y - t/K)
    F_k(y) = y - f_k(y) = (1 - 1/K) sigma(y) - (2/K) sum_{t>=1} sigma(y - t/K)

and S_l = S_{l-1} - 4^{-(l-1)k} F_k(y_{l-1}) gives S_L = f_{Lk}(x), sup error 4^-(Lk+1).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from tfbook.device import DTYPE
from tfbook.layers import Block, FeedForward, Transformer

K_RULES = ("lu2021", "greedy")


def check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


def choose_k(N: int, rule: str = "lu2021") -> int:
    """k for width parameter N: Lu's rule (k-1)2^(k-1)+1 <= N <= k 2^k, or "greedy" (largest k with 2^k <= 4N)."""
    N = check_positive_int("N", N)
    if rule not in K_RULES:
        raise ValueError(f"rule must be one of {K_RULES}, got {rule!r}")
    k = 1
    if rule == "greedy":
        while 2 ** (k + 1) <= 4 * N:
            k += 1
        return k
    while N > k * 2**k:
        k += 1
    return k


def sawtooth_coefficients(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Coefficients (a_t), (b_t), t = 0..K-1, of g_k = sum a_t sigma(y - t/K) and F_k = sum b_t sigma(y - t/K)."""
    K = 2**k
    a = torch.tensor([K] + [2 * K * (-1) ** t for t in range(1, K)], dtype=DTYPE)
    b = torch.tensor([1 - 1 / K] + [-2 / K] * (K - 1), dtype=DTYPE)
    return a, b


def squaring_error(N: int, L: int, rule: str = "lu2021") -> float:
    """delta = 4^-(Lk+1): sup error of the depth-L squaring network (Lemma 1)."""
    return 4.0 ** -(check_positive_int("L", L) * choose_k(N, rule) + 1)


def product_error(N: int, L: int, rule: str = "lu2021") -> float:
    """e_psi = 2 delta: the product gadget's error lies in [-delta, 2 delta]."""
    return 2 * squaring_error(N, L, rule)


class FNN(nn.Module):
    """Definition 1: h_l = relu(A_l h_{l-1} + b_l), l = 1..L, output A_{L+1} h_L + b_{L+1}."""

    def __init__(self, layers: Sequence[tuple[torch.Tensor, torch.Tensor]]):
        super().__init__()
        if len(layers) < 2:
            raise ValueError("an FNN needs at least one hidden layer and an output layer")
        self.linears = nn.ModuleList()
        for A, b in layers:
            lin = nn.Linear(A.shape[1], A.shape[0], dtype=DTYPE)
            lin.weight.data, lin.bias.data = A.to(DTYPE).clone(), b.to(DTYPE).clone()
            lin.requires_grad_(False)
            self.linears.append(lin)

    @property
    def depth(self) -> int:
        return len(self.linears) - 1

    @property
    def width(self) -> int:
        return max(lin.out_features for lin in self.linears[:-1])

    def hidden(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every hidden layer h_1..h_L for inputs x (batch, d_in)."""
        hs = []
        for lin in self.linears[:-1]:
            x = torch.relu(lin(x))
            hs.append(x)
        return hs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linears[-1](self.hidden(x)[-1])


def _square_layers(N: int, L: int, rule: str, inputs: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Layers of the squaring net applied to the linear form `inputs` (1, d_in); hidden = [units, carry]."""
    k = choose_k(N, rule)
    K = 2**k
    a, b = sawtooth_coefficients(k)
    shifts = -torch.arange(K, dtype=DTYPE) / K
    layers = [(torch.cat([inputs.expand(K, -1), inputs]), torch.cat([shifts, torch.zeros(1, dtype=DTYPE)]))]
    for ell in range(2, L + 1):
        scale = 4.0 ** (-(ell - 2) * k)
        y_next = torch.cat([a, torch.zeros(1, dtype=DTYPE)])  # g_k of the previous units
        s_next = torch.cat([-scale * b, torch.ones(1, dtype=DTYPE)])  # S - scale * F_k(y)
        layers.append((torch.stack([y_next] * K + [s_next]), torch.cat([shifts, torch.zeros(1, dtype=DTYPE)])))
    scale = 4.0 ** (-(L - 1) * k)
    layers.append((torch.cat([-scale * b, torch.ones(1, dtype=DTYPE)]).unsqueeze(0), torch.zeros(1, dtype=DTYPE)))
    return layers


def build_square_fnn(N: int, L: int, rule: str = "lu2021") -> FNN:
    """Lemma 1 as an FNN: width 2^k + 1 (K sawtooth units and a carry of S), depth L, output f_{Lk}(x)."""
    check_positive_int("L", L)
    return FNN(_square_layers(N, L, rule, torch.ones(1, 1, dtype=DTYPE)))


def build_product_fnn(N: int, L: int, rule: str = "lu2021") -> FNN:
    """psi(x, y) = relu(2 f((x+y)/2) - f(x)/2 - f(y)/2) as an FNN: three squaring nets side by side, then a ReLU."""
    check_positive_int("L", L)
    forms = [torch.tensor([[0.5, 0.5]]), torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])]
    weights = [2.0, -0.5, -0.5]
    nets = [_square_layers(N, L, rule, f.to(DTYPE)) for f in forms]
    layers = [(torch.cat([net[0][0] for net in nets]), torch.cat([net[0][1] for net in nets]))]
    for ell in range(1, L):
        layers.append((torch.block_diag(*[net[ell][0] for net in nets]), torch.cat([net[ell][1] for net in nets])))
    combine = torch.cat([w * net[L][0] for w, net in zip(weights, nets)], dim=1)  # (1, 3(K+1))
    layers.append((combine, torch.zeros(1, dtype=DTYPE)))  # hidden layer L+1: relu(phi)
    layers.append((torch.ones(1, 1, dtype=DTYPE), torch.zeros(1, dtype=DTYPE)))
    return FNN(layers)


def fnn_to_transformer(fnn: FNN) -> Transformer:
    """Lemma 2: FF_l(H) = H + [I, -I] relu([A_l; I] H + [b_l; 0]) on a stream padded to the FNN's width W.

    Equals the FNN when every input, hidden and output value is non-negative (then relu(H) = H):
    the input sits in the first coordinates of a single token, the output in coordinate 0.
    Depth L + 1 (the output affine map becomes one more block), hidden width 2W.
    """
    W = max(max(lin.in_features, lin.out_features) for lin in fnn.linears)
    eye = torch.eye(W, dtype=DTYPE)
    blocks = []
    for lin in fnn.linears:
        A = torch.zeros(W, W, dtype=DTYPE)
        A[: lin.out_features, : lin.in_features] = lin.weight
        b = torch.zeros(W, dtype=DTYPE)
        b[: lin.out_features] = lin.bias
        W_1 = torch.cat([A, eye])  # (2W, W)
        b_1 = torch.cat([b, torch.zeros(W, dtype=DTYPE)])
        W_2 = torch.cat([eye, -eye], dim=1)  # (W, 2W)
        blocks.append(Block(feed_forward=FeedForward(W_1, b_1, W_2, torch.zeros(W, dtype=DTYPE))))
    return Transformer(blocks)


def run_converted(model: Transformer, x: torch.Tensor) -> torch.Tensor:
    """Feed (batch, d_in) inputs to a Lemma 2 transformer as one token each; return coordinate 0."""
    W = model.blocks[0].feed_forward.W_1.shape[1]
    H = torch.zeros(x.shape[0], 1, W, dtype=DTYPE, device=x.device)
    H[:, 0, : x.shape[1]] = x
    return model(H)[:, 0, 0]
