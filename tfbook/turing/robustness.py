"""Upper and lower bounds on the all-layer margin of the chapter's constructions (Wei, Chen & Ma, eq. 2.1).

* `readout_attack` (Turing-machine transformer) and `circuit_readout_attack` (circuit network): the
  targeted perturbation of the read-out parameters that moves F to 0 with the smallest l2 norm
  among read-out perturbations. Applied to the built model, it flips the prediction, so its norm is an
  **upper bound** on the margin rho.
* `certified_radius` (circuit network): the largest r (by bisection) such that **every** parameter
  perturbation of l2 norm <= r keeps the sign of F on the given inputs, proved by interval bound
  propagation through the built layers: a **lower bound** on rho. Each row of a perturbed layer
  changes its pre-activation by at most r sqrt(|h|^2 + 1); a correction layer is bounded per
  coordinate by the case analysis of round(z) = 3 relu(z - 1/3) - 3 relu(z - 2/3), under which an
  input error below 1/3 disappears (Definition D.1) and only the correction's own perturbation remains.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from tfbook import validate
from tfbook.device import DTYPE
from tfbook.turing.circuits import CircuitNetwork
from tfbook.turing.transformer import TMTransformer


def readout_attack(model: TMTransformer, xs: Sequence[str], **run) -> tuple[torch.Tensor, torch.Tensor]:
    """Per input: the radius 1 / ||o_T|| of delta theta_cls = -F o_T / ||o_T||^2, and whether applying it to the
    built model (then restoring theta_cls exactly) makes F <= 0 for an accepted input or >= 0 for a rejected one."""
    trace = model.forward_trace(list(xs), **run)
    o_T, F = trace.outputs[:, -1], trace.F  # (B, w), (B,)
    radius = F.abs() / o_T.norm(dim=1)
    flipped = torch.zeros(len(xs), dtype=torch.bool)
    original = model.theta_cls.detach().clone()
    try:
        for b, x in enumerate(xs):
            with torch.no_grad():
                model.theta_cls.copy_(original - (F[b] * o_T[b] / (o_T[b] @ o_T[b])).to(original.device))
            F_new = float(model.forward_trace([x], **run).F[0])
            flipped[b] = F_new * float(F[b]) <= 1e-9 * abs(float(F[b]))
    finally:
        with torch.no_grad():
            model.theta_cls.copy_(original)
    return radius, flipped


def circuit_readout_attack(net: CircuitNetwork, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per input: the radius |F| / sqrt(g^2 + 1) of (delta W_d, delta b_d) = -F (g, 1) / (g^2 + 1), g the output gate,
    and whether applying it to the built network flips F (to 0, counted as a flip). F is determined by g, so
    inputs with equal g share one perturbation."""
    last = net.layer(net.layer_names[-1])
    H = torch.as_tensor(X, dtype=DTYPE).unsqueeze(1)
    for name, layer in net.named_layers()[:-1]:
        H = layer(H)
    g = torch.relu(H[:, 0] @ last.W_1.T + last.b_1)[:, 0]  # (batch,) output gate before the read-out
    F = net(X)
    radius = F.abs() / torch.sqrt(g**2 + 1)
    W, b = last.W_2.detach().clone(), last.b_2.detach().clone()
    flipped = torch.zeros(len(F), dtype=torch.bool)
    try:
        for value in torch.unique(g):  # inputs with the same output gate get the same perturbation
            rows = g == value
            scale = float(F[rows][0]) / (float(value) ** 2 + 1)
            with torch.no_grad():
                last.W_2.copy_(W - scale * value)
                last.b_2.copy_(b - scale)
            flipped[rows] = net(X[rows]) * F[rows] <= 1e-9
    finally:
        with torch.no_grad():
            last.W_2.copy_(W)
            last.b_2.copy_(b)
    return radius, flipped


def _affine(lo: torch.Tensor, hi: torch.Tensor, W: torch.Tensor, b, r: float, perturbed: bool):
    """Bounds on W' h + b' over h in [lo, hi] and, when ``perturbed``, every (W', b') within r of (W, b) in l2."""
    c, d = (lo + hi) / 2, (hi - lo) / 2  # (batch, n)
    mid = c @ W.T + (0 if b is None else b)
    rad = d @ W.abs().T
    if perturbed:
        norm = torch.sqrt((torch.maximum(lo.abs(), hi.abs()) ** 2).sum(1, keepdim=True) + 1)  # max sqrt(|h|^2 + 1)
        rad = rad + r * norm
    return mid - rad, mid + rad


def _round_bounds(lo: torch.Tensor, hi: torch.Tensor, r: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds on relu(C2' relu(C1' z + c1')) for z in [lo, hi] (n coordinates), every C1', c1', C2' within r of
    C1 = [I; I], c1 = [-1/3; -2/3], C2 = [3I, -3I]."""
    e = r * torch.sqrt((torch.maximum(lo.abs(), hi.abs()) ** 2).sum(1, keepdim=True) + 1)  # row error of C1', c1'
    a_lo, a_hi = torch.relu(lo - 1 / 3 - e), torch.relu(hi - 1 / 3 + e)
    b_lo, b_hi = torch.relu(lo - 2 / 3 - e), torch.relu(hi - 2 / 3 + e)
    out_lo, out_hi = 3 * a_lo - 3 * b_hi, 3 * a_hi - 3 * b_lo  # plain interval arithmetic
    off = hi + e < 1 / 3  # both units inactive: exactly 0
    on = lo - e > 2 / 3  # both active: 3 (z - 1/3 + e1) - 3 (z - 2/3 + e2) = 1 + 3 (e1 - e2)
    out_lo = torch.where(off, torch.zeros_like(lo), torch.where(on, 1 - 6 * e, out_lo))
    out_hi = torch.where(off, torch.zeros_like(hi), torch.where(on, 1 + 6 * e, out_hi))
    vnorm = torch.sqrt((a_hi**2 + b_hi**2).sum(1, keepdim=True))  # max |v| for the C2' row error
    return torch.relu(out_lo - r * vnorm), torch.relu(out_hi + r * vnorm)


def output_bounds(net: CircuitNetwork, X: torch.Tensor, r: float, correct: bool = True):
    """Sound bounds (lo, hi) on F(x, theta + delta) over every ||delta||_2 <= r (theta = `CircuitNetwork.theta`)."""
    lo = hi = torch.as_tensor(X, dtype=DTYPE)
    last = net.layer_names[-1]
    names = net.layer_names
    i = 0
    while i < len(names):
        name, layer = names[i], net.layer(names[i])
        if name.endswith(".round1"):
            if correct:
                lo, hi = _round_bounds(lo, hi, r)
            i += 2
            continue
        lo, hi = _affine(lo, hi, layer.W_1, layer.b_1, r, True)
        lo, hi = torch.relu(lo), torch.relu(hi)
        lo, hi = _affine(lo, hi, layer.W_2, layer.b_2, r, name == last)  # W_2 = I (wiring) except the read-out
        i += 1
    return lo[:, 0], hi[:, 0]


def certified_radius(net: CircuitNetwork, X: torch.Tensor, correct: bool = True, hi: float = 1.0,
                     iters: int = 30) -> float:
    """The largest r (bisection on [0, hi]) for which `output_bounds` proves the sign of F on every input of X:
    a lower bound on min_x rho(theta, x, G(x))."""
    validate.real("hi", hi, low=0, low_open=True)
    F = net(X, correct=correct)
    sign = torch.sign(F)
    if bool((sign == 0).any()):
        return 0.0

    def certified(r: float) -> bool:
        lo_, hi_ = output_bounds(net, X, r, correct)
        return bool(torch.where(sign > 0, lo_ > 0, hi_ < 0).all())

    a, b = 0.0, hi
    if certified(b):
        return b
    for _ in range(iters):
        mid = (a + b) / 2
        a, b = (mid, b) if certified(mid) else (a, mid)
    return a


def identity_chain(num_inputs: int, depth: int):
    """A layered circuit of ``depth`` ID gates on input bit 0 (the deep chain of Lemma 3.3's comparison)."""
    from tfbook.turing.circuits import Circuit
    return Circuit(num_inputs, [[("ID", (0,))] for _ in range(depth)])


def chain_attack_radius(depth_relu: int) -> float:
    """Smallest l2 norm of a uniform rescaling of the depth_relu unit weights of an uncorrected ID chain that turns
    F = 2 prod(w) - 1 from 1 to 0: sqrt(k) (1 - 2^(-1/k)) with k = depth_relu (the toy product of Section 3.1)."""
    k = validate.positive_int("depth_relu", depth_relu)
    return math.sqrt(k) * (1 - 2 ** (-1 / k))
