"""The N-layer network of Definition 1, its loss and the gradient decomposition of Lemma 1.

``w`` (D_N,) concatenates V_1 (K x dx), V_2 ... V_{N-1} (K x K) and V_N (dy x K), each flattened
row-major; ``f(w, x) = r(V_N r(... r(V_1 x)))`` with r applied at the output too and no biases.
``L_n(w) = 1/(2n) sum_i l(f(w, x_i), y_i)`` with ``l = ||t - y||^2`` ("squared") or
``sum_k log cosh(t_k - y_k)`` ("logcosh").

These are the *references* the transformer is checked against: `explicit_gradient` is Lemma 1
written out (p, r', u, s, A_i(j)); `autograd_gradient` and `projected_gd` use torch.autograd.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from tfbook import validate
from tfbook.device import DTYPE

ACTIVATIONS = ("relu", "softplus", "sigmoid", "tanh")
LOSSES = ("squared", "logcosh")


def _softplus(t):
    return torch.nn.functional.softplus(t)


def _dsigmoid(t):
    s = torch.sigmoid(t)
    return s * (1 - s)


def _ddsigmoid(t):
    s = torch.sigmoid(t)
    return s * (1 - s) * (1 - 2 * s)


def _dtanh(t):
    return 1 - torch.tanh(t) ** 2


def _ddtanh(t):
    th = torch.tanh(t)
    return -2 * th * (1 - th ** 2)


def _drelu(t):
    return (t > 0).to(t.dtype)  # torch's convention relu'(0) = 0


@dataclass(frozen=True)
class Activation:
    """r, r', r'' in closed form, with the constants the error lemmas use."""

    name: str
    r: Callable[[torch.Tensor], torch.Tensor]
    dr: Callable[[torch.Tensor], torch.Tensor]
    ddr: Callable[[torch.Tensor], torch.Tensor]
    lip_r: float  # L_r = sup |r'|
    lip_dr: float  # L_r' = sup |r''| (inf for relu)
    max_ddr: float  # sup |r''| (for the interpolation error of r)
    max_dddr: float  # sup |r'''| (for the interpolation error of r')


ACT = {
    "relu": Activation("relu", torch.relu, _drelu, lambda t: torch.zeros_like(t), 1.0, float("inf"), 0.0, 0.0),
    "softplus": Activation("softplus", _softplus, torch.sigmoid, _dsigmoid, 1.0, 0.25, 0.25, 0.0962250448649376),
    "sigmoid": Activation("sigmoid", torch.sigmoid, _dsigmoid, _ddsigmoid, 0.25, 0.0962250448649376,
                          0.0962250448649376, 0.125),
    "tanh": Activation("tanh", torch.tanh, _dtanh, _ddtanh, 1.0, 0.769800358919501, 0.769800358919501, 2.0),
}


def activation(name: str) -> Activation:
    return ACT[validate.choice("activation", name, ACTIVATIONS)]


def loss_value(loss: str, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``l(t, y)`` summed over the last axis: (..., dy) -> (...)."""
    validate.choice("loss", loss, LOSSES)
    z = t - y
    if loss == "squared":
        return (z ** 2).sum(-1)
    return (torch.logaddexp(z, -z) - torch.log(torch.tensor(2.0, dtype=z.dtype, device=z.device))).sum(-1)


def loss_derivative(loss: str, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``u(t, y) = dl/dt``: 2(t - y) or tanh(t - y)."""
    validate.choice("loss", loss, LOSSES)
    return 2 * (t - y) if loss == "squared" else torch.tanh(t - y)


@dataclass(frozen=True)
class NetSpec:
    """Sizes of the network: input dx, width K, output dy, depth N >= 2."""

    dx: int
    dy: int
    K: int
    N: int

    def __post_init__(self) -> None:
        for name in ("dx", "dy", "K"):
            validate.positive_int(name, getattr(self, name))
        validate.positive_int("N", self.N, minimum=2)

    def shape(self, j: int) -> tuple[int, int]:
        """(out_j, in_j) of V_j, j = 1..N."""
        out = self.dy if j == self.N else self.K
        inp = self.dx if j == 1 else self.K
        return out, inp

    def out(self, j: int) -> int:
        return self.shape(j)[0]

    def offset(self, j: int) -> int:
        """Position of V_j in w (the D_{j-1} of the paper)."""
        return sum(o * i for o, i in (self.shape(l) for l in range(1, j)))

    @property
    def D_N(self) -> int:
        return (self.dx + self.dy) * self.K + (self.N - 2) * self.K ** 2

    def row(self, j: int, k: int) -> slice:
        """Coordinates of v_{j_k} (row k of V_j) inside w."""
        _, inp = self.shape(j)
        start = self.offset(j) + k * inp
        return slice(start, start + inp)

    def matrices(self, w: torch.Tensor) -> list[torch.Tensor]:
        """[V_1, ..., V_N] as views of w (..., D_N) -> (..., out_j, in_j)."""
        return [w[..., self.offset(j): self.offset(j) + o * i].reshape(*w.shape[:-1], o, i)
                for j in range(1, self.N + 1) for o, i in [self.shape(j)]]

    def random_w(self, scale: float, generator: torch.Generator) -> torch.Tensor:
        """Uniform[-scale, scale] weights (D_N,)."""
        return (2 * torch.rand(self.D_N, generator=generator, dtype=DTYPE) - 1) * scale


def forward(spec: NetSpec, w: torch.Tensor, X: torch.Tensor, act: str) -> list[torch.Tensor]:
    """[p(0) = x, p(1), ..., p(N)] for w (B, D_N) and X (B, n, dx); p(j) (B, n, out_j)."""
    r = activation(act).r
    ps = [X]
    for V in spec.matrices(w):
        ps.append(r(ps[-1] @ V.transpose(-1, -2)))
    return ps


def loss(spec: NetSpec, w: torch.Tensor, X: torch.Tensor, Y: torch.Tensor, act: str, loss_name: str) -> torch.Tensor:
    """L_n(w) = 1/(2n) sum_i l(f(w, x_i), y_i), (B,)."""
    p = forward(spec, w, X, act)[-1]
    return loss_value(loss_name, p, Y).sum(-1) / (2 * X.shape[-2])


@dataclass
class GradientParts:
    """Lemma 1's pieces for a batch: lists indexed by j (p[0..N], dr[0..N-1], s[1..N] at s[j-1]), A_i(j)."""

    p: list[torch.Tensor]
    dr: list[torch.Tensor]
    u: torch.Tensor
    s: list[torch.Tensor]
    A: list[torch.Tensor]
    grad: torch.Tensor


def explicit_gradient(spec: NetSpec, w: torch.Tensor, X: torch.Tensor, Y: torch.Tensor, act: str,
                      loss_name: str) -> GradientParts:
    """Lemma 1 by hand: s(N) = r'(N-1) . u, s(j) = r'(j-1) . (V_{j+1}^T s(j+1)), A_i(j) = vec(s_i(j) p_i(j-1)^T).

    w (B, D_N), X (B, n, dx), Y (B, n, dy); grad = 1/(2n) sum_i [A_i(1); ...; A_i(N)] (B, D_N).
    """
    a = activation(act)
    Vs = spec.matrices(w)
    p, dr = [X], []
    for V in Vs:
        pre = p[-1] @ V.transpose(-1, -2)  # (B, n, out_j)
        dr.append(a.dr(pre))  # r'_i(j-1)
        p.append(a.r(pre))
    u = loss_derivative(loss_name, p[-1], Y)  # (B, n, dy)
    s = [None] * spec.N
    s[-1] = dr[-1] * u
    for j in range(spec.N - 1, 0, -1):  # s(j), j = N-1 .. 1, stored at s[j-1]
        s[j - 1] = dr[j - 1] * (s[j] @ Vs[j])
    A = [(s[j - 1].unsqueeze(-1) * p[j - 1].unsqueeze(-2)).flatten(-2) for j in range(1, spec.N + 1)]
    n = X.shape[-2]
    grad = torch.cat(A, dim=-1).sum(-2) / (2 * n)
    return GradientParts(p, dr, u, s, A, grad)


def autograd_gradient(spec: NetSpec, w: torch.Tensor, X: torch.Tensor, Y: torch.Tensor, act: str,
                      loss_name: str) -> torch.Tensor:
    """grad L_n(w) by torch.autograd (the reference), (B, D_N)."""
    w = w.detach().clone().requires_grad_(True)
    value = loss(spec, w, X, Y, act, loss_name).sum()
    (g,) = torch.autograd.grad(value, w)
    return g.detach()


def projected_gd(spec: NetSpec, w0: torch.Tensor, X: torch.Tensor, Y: torch.Tensor, act: str, loss_name: str,
                 eta: float, steps: int, box: float | None) -> torch.Tensor:
    """Autograd projected GD w <- clip(w - eta grad L_n(w), -box, box); (B, steps + 1, D_N), w0 first.

    ``box=None`` gives unprojected GD.
    """
    ws = [w0]
    for _ in range(steps):
        w = ws[-1] - eta * autograd_gradient(spec, ws[-1], X, Y, act, loss_name)
        ws.append(w if box is None else w.clamp(-box, box))
    return torch.stack(ws, dim=1)
