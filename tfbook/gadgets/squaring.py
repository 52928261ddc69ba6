"""Yarotsky's squaring, the sawtooth, and the two product gadgets built on them.

With K = 2^k, one layer applies g_k (k compositions of the hat g(x) = 2 relu(x) - 4 relu(x - 1/2)) through
the K ReLUs relu(y - t/K), t = 0..K-1, using the exact expansions

    g_k(y) = sum_t a_t relu(y - t/K),   a = (K, -2K, 2K, ..., -2K)
    F_k(y) = y - f_k(y) = sum_t b_t relu(y - t/K),   b = (1 - 1/K, -2/K, ..., -2/K)

on [0, 1]. L such layers give S_L = f_{Lk}(x) = x - sum_{i<=Lk} g_i(x) / 4^i, the piecewise-linear
interpolant of x^2 on the grid j / 2^(Lk), with 0 <= f_{Lk}(x) - x^2 <= 4^-(Lk+1) (equality at the
midpoints). Every weight is dyadic.

Products (e = f_{Lk} - x^2 in [0, delta], delta = 4^-(Lk+1)):

* `product` (Takeshita and Imaizumi, 2025): psi(u, v) = relu(2 f((u+v)/2) - f(u)/2 - f(v)/2) for u, v in
  [0, 1]; psi - uv lies in [-delta, 2 delta] (phi - uv = 2 e((u+v)/2) - e(u)/2 - e(v)/2, and relu only
  moves a negative phi towards uv >= 0), both
  ends attained, and psi in [0, 1].
* `polarisation_product` (Anonymous, 2023, Lemma 4): 2R^2 [f((u+v)/2R) - f(u/2R) - f(v/2R)] for u, v in [0, R];
  the error lies in [-R^2 4^-m, R^2 4^-m / 2] (m = Lk) and is exactly 0 when u = 0 or v = 0.
"""
from __future__ import annotations

import torch

from tfbook import validate
from tfbook.device import DTYPE
from tfbook.gadgets.plan import FFStage, Form, Gadget, combine, form


def sawtooth_coefficients(k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(a_t), (b_t), t = 0..2^k - 1: g_k = sum a_t relu(y - t/2^k) and y - f_k(y) = sum b_t relu(y - t/2^k)."""
    K = 2 ** validate.positive_int("k", k)
    a = torch.tensor([K] + [2 * K * (-1) ** t for t in range(1, K)], dtype=DTYPE)
    b = torch.tensor([1 - 1 / K] + [-2 / K] * (K - 1), dtype=DTYPE)
    return a, b


def squaring_error(k: int, L: int) -> float:
    """delta = 4^-(Lk+1): sup |f_{Lk}(x) - x^2| on [0, 1], attained at the midpoints of the grid 2^-(Lk)."""
    return 4.0 ** -(validate.positive_int("L", L) * validate.positive_int("k", k) + 1)


def product_error_range(k: int, L: int) -> tuple[float, float]:
    """(-delta, 2 delta): the exact range of psi(u, v) - uv for `product` (both ends attained)."""
    delta = squaring_error(k, L)
    return -delta, 2 * delta


def polarisation_error_range(k: int, L: int, R: float = 1.0) -> tuple[float, float]:
    """(-R^2 4^-m, R^2 4^-m / 2), m = Lk: the stated range (Anonymous, 2023) for `polarisation_product`."""
    R = validate.real("R", R, low=0, low_open=True)
    delta = squaring_error(k, L)
    return -4 * R * R * delta, 2 * R * R * delta


def _squaring_stages(forms: list[dict], weights: list[float], acc: Form, k: int, L: int, y: str) -> list[FFStage]:
    """L stages adding sum_c weights[c] * f_{Lk}(forms[c]) to the form ``acc``; channel c's sawtooth in (y, c)."""
    K = 2**k
    a, b = sawtooth_coefficients(k)
    acc = form(acc)
    stages = []
    for ell in range(1, L + 1):
        stage, scale = FFStage(), 4.0 ** (-(ell - 1) * k)
        for c, (f, w) in enumerate(zip(forms, weights)):
            read = f if ell == 1 else {(y, c): 1.0}
            for t in range(K):
                # S <- S - scale F_k(y); the first layer's t = 0 unit also starts S at x = relu(x).
                coef = -w * scale * float(b[t]) + (w if (ell == 1 and t == 0) else 0.0)
                write = {key: coef * v for key, v in acc.items()}
                if ell < L:  # y <- g_k(y): the residual adds g_k(y) - y, with y = relu(y) from the t = 0 unit
                    write[(y, c)] = float(a[t]) - (1.0 if (ell > 1 and t == 0) else 0.0)
                stage.unit(read, write, bias=-t / K)
        stages.append(stage)
    return stages


def square(x: Form, out: Form, k: int, L: int, tag: str = "sq") -> Gadget:
    """``out += f_{Lk}(x)`` for a linear form x with values in [0, 1]: L layers of 2^k ReLUs (Yarotsky)."""
    k, L = validate.positive_int("k", k), validate.positive_int("L", L)
    y = f"{tag}.y"
    return Gadget(tag, _squaring_stages([form(x)], [1.0], out, k, L, y), scratch=[(y, 1)] if L > 1 else [])


def sawtooth(x: Form, out: Form, k: int, L: int, tag: str = "saw") -> Gadget:
    """``out += g_{Lk}(x)`` for x in [0, 1]: L layers of 2^k ReLUs, 2^(Lk-1) teeth."""
    k, L = validate.positive_int("k", k), validate.positive_int("L", L)
    K, (a, _) = 2**k, sawtooth_coefficients(k)
    y, stages = f"{tag}.y", []
    for ell in range(1, L + 1):
        stage = FFStage()
        read = form(x) if ell == 1 else {y: 1.0}
        for t in range(K):
            if ell == L:
                write = {key: float(a[t]) * v for key, v in form(out).items()}
            else:
                write = {y: float(a[t]) - (1.0 if (ell > 1 and t == 0) else 0.0)}
            stage.unit(read, write, bias=-t / K)
        stages.append(stage)
    return Gadget(tag, stages, scratch=[(y, 1)] if L > 1 else [])


def product(u: Form, v: Form, out: Form, k: int, L: int, tag: str = "prod") -> Gadget:
    """Paper 000's product: ``out += relu(2 f((u+v)/2) - f(u)/2 - f(v)/2)``, f = f_{Lk}, for u, v in [0, 1].

    L sawtooth layers of 3 * 2^k ReLUs (three channels into the accumulator ``tag.acc``), then one ReLU.
    Scratch: ``tag.y`` (3), ``tag.acc`` (1). Error in [-delta, 2 delta] (`product_error_range`).
    """
    k, L = validate.positive_int("k", k), validate.positive_int("L", L)
    y, acc = f"{tag}.y", f"{tag}.acc"
    u, v = form(u), form(v)
    forms = [combine((0.5, u), (0.5, v)), u, v]
    stages = _squaring_stages(forms, [2.0, -0.5, -0.5], acc, k, L, y)
    last = FFStage()
    last.unit({acc: 1.0}, out)
    return Gadget(tag, stages + [last], scratch=[(y, 3), (acc, 1)])


def polarisation_product(u: Form, v: Form, out: Form, k: int, L: int, R: float = 1.0, tag: str = "pprod") -> Gadget:
    """Paper 001's product: ``out += 2R^2 [f((u+v)/2R) - f(u/2R) - f(v/2R)]``, f = f_{Lk}, for u, v in [0, R].

    L layers of 3 * 2^k ReLUs, written straight into ``out``; scratch ``tag.y`` (3). Exactly 0 when u = 0
    or v = 0; error range `polarisation_error_range`.
    """
    k, L = validate.positive_int("k", k), validate.positive_int("L", L)
    R = validate.real("R", R, low=0, low_open=True)
    u, v, y = form(u), form(v), f"{tag}.y"
    s = 1 / (2 * R)
    forms = [combine((s, u), (s, v)), combine((s, u)), combine((s, v))]
    w = 2 * R * R
    return Gadget(tag, _squaring_stages(forms, [w, -w, -w], out, k, L, y), scratch=[(y, 3)])


def square_fnn_layers(k: int, L: int, inputs: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Definition 1 form of `square` on the linear form ``inputs`` (1, d_in): L hidden layers of 2^k + 1 units
    (the sawtooth ReLUs and a carry of S >= 0), then the affine output. Returns [(A_l, b_l)], l = 1..L+1."""
    k, L = validate.positive_int("k", k), validate.positive_int("L", L)
    K = 2**k
    a, b = sawtooth_coefficients(k)
    zero = torch.zeros(1, dtype=DTYPE)
    shifts = torch.cat([-torch.arange(K, dtype=DTYPE) / K, zero])
    layers = [(torch.cat([inputs.to(DTYPE).expand(K, -1), inputs.to(DTYPE)]), shifts)]
    for ell in range(2, L + 1):
        scale = 4.0 ** (-(ell - 2) * k)
        y_next = torch.cat([a, zero])  # g_k of the previous units
        s_next = torch.cat([-scale * b, torch.ones(1, dtype=DTYPE)])  # S - scale * F_k(y)
        layers.append((torch.stack([y_next] * K + [s_next]), shifts))
    scale = 4.0 ** (-(L - 1) * k)
    layers.append((torch.cat([-scale * b, torch.ones(1, dtype=DTYPE)]).unsqueeze(0), zero))
    return layers


def product_fnn_layers(k: int, L: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Definition 1 form of `product` on (x, y): three `square_fnn_layers` side by side, then relu(phi)."""
    forms = [torch.tensor([[0.5, 0.5]]), torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])]
    weights = [2.0, -0.5, -0.5]
    nets = [square_fnn_layers(k, L, f) for f in forms]
    layers = [(torch.cat([net[0][0] for net in nets]), torch.cat([net[0][1] for net in nets]))]
    for ell in range(1, L):
        layers.append((torch.block_diag(*[net[ell][0] for net in nets]), torch.cat([net[ell][1] for net in nets])))
    combine_row = torch.cat([w * net[L][0] for w, net in zip(weights, nets)], dim=1)  # (1, 3(K+1))
    layers.append((combine_row, torch.zeros(1, dtype=DTYPE)))  # hidden layer L+1: relu(phi)
    layers.append((torch.ones(1, 1, dtype=DTYPE), torch.zeros(1, dtype=DTYPE)))
    return layers

