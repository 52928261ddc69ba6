"""The error bounds of Lemmas 2-6, the per-step gradient error (D.7) and Corollary 1.1, with measured constants.

`constants(...)` measures B_v, B_r, B_r', B_l on a prompt and its trajectory (the paper leaves them as
symbols); the functions below evaluate the paper's formulas from them. P = max(sqrt K, sqrt dy).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tfbook.icgd.nets import NetSpec, activation, explicit_gradient, loss_derivative
from tfbook.icgd.relu_sums import ReluSum, sup_error


@dataclass(frozen=True)
class Constants:
    """The symbols of Lemmas 2-6: Lipschitz constants and bounds, and the table errors eps_r, eps_r', eps_l."""

    K: int
    dy: int
    N: int
    L_r: float
    L_dr: float
    L_l: float
    B_v: float
    B_r: float
    B_dr: float
    B_l: float
    eps_r: float
    eps_dr: float
    eps_l: float

    @property
    def P(self) -> float:
        return max(math.sqrt(self.K), math.sqrt(self.dy))


def table_errors(act: str, loss: str, R: float, r_hat: ReluSum, dr_hat: ReluSum, u_hat, R_u: float):
    """eps_r, eps_r', eps_l: sup errors of the tables on their ranges (0 for exact tables)."""
    a = activation(act)
    fine = 200001
    eps_l = 0.0 if u_hat is None else sup_error(torch.tanh, u_hat, R_u, points=fine)
    if act == "relu":
        return 0.0, 0.0, eps_l
    return sup_error(a.r, r_hat, R, points=fine), sup_error(a.dr, dr_hat, R, points=fine), eps_l


def constants(model, ws: torch.Tensor, X: torch.Tensor, Y: torch.Tensor) -> Constants:
    """Measured constants over the iterates ws (B, L + 1, D_N) for the prompt X, Y."""
    spec: NetSpec = model.spec
    a = activation(model.activation)
    B_v = max(float(V.norm(dim=-1).max()) for V in spec.matrices(ws))
    B_r = B_dr = B_l = 0.0
    for l in range(ws.shape[1]):
        parts = explicit_gradient(spec, ws[:, l], X, Y, model.activation, model.loss)
        B_r = max(B_r, max(float(p.abs().max()) for p in parts.p[1:]))
        B_dr = max(B_dr, max(float(d.abs().max()) for d in parts.dr))
        B_l = max(B_l, float(loss_derivative(model.loss, parts.p[-1], Y).abs().max()))
    R_u = model.R_g - 1.0
    eps = table_errors(model.activation, model.loss, model.R, model.r_hat, model.dr_hat, model.u_hat, R_u)
    L_l = 2.0 if model.loss == "squared" else 1.0
    return Constants(spec.K, spec.dy, spec.N, a.lip_r, a.lip_dr, L_l, B_v, B_r, B_dr, B_l, *eps)


def E_r(c: Constants, j: int, out_j: int) -> float:
    """Lemma 2's factor: ||p_hat(j) - p(j)||_2 <= E_r(j) eps_r."""
    return sum((math.sqrt(c.K) * c.L_r * c.B_v) ** l for l in range(j)) * math.sqrt(out_j)


def lemma2(c: Constants, j: int, out_j: int) -> float:
    return E_r(c, j, out_j) * c.eps_r


def lemma3(c: Constants, j: int, out_prev: int) -> float:
    """|r_hat'(j-1)[k] - r'(j-1)[k]| <= eps_r' + L_r' B_v E_r(j-1) eps_r."""
    prop = 0.0 if c.eps_r == 0 else c.L_dr * c.B_v * E_r(c, j - 1, out_prev) * c.eps_r
    return c.eps_dr + prop


def lemma4(c: Constants) -> float:
    """|g[k] - u(p(N), y)[k]| <= eps_l + L_l E_r eps_r."""
    return c.eps_l + c.L_l * E_r(c, c.N, c.dy) * c.eps_r


def _Er_max(c: Constants) -> float:
    return max(E_r(c, j, c.dy if j == c.N else c.K) for j in range(1, c.N + 1))


def lemma6_constants(c: Constants) -> tuple[float, float, float, float]:
    """(B_s, E_s^r, E_s^r', E_s^l) as printed in Lemma 6."""
    q = c.B_dr * c.B_v * c.P
    js = range(1, c.N + 1)
    B_s = max(q ** (c.N - j) * c.B_dr * c.B_l for j in js)
    E_l = max(q ** (c.N - j) * c.B_dr for j in js)
    geo = [sum(q ** l for l in range(c.N - j)) for j in js]
    E_dr = max(c.P * B_s * c.B_v * g + q ** (c.N - j) * c.B_l for j, g in zip(js, geo))
    Er = _Er_max(c)
    L_dr = 0.0 if c.eps_r == 0 else c.L_dr
    E_rr = max(L_dr * Er * c.P * B_s * c.B_v ** 2 * g
               + q ** (c.N - j) * (c.B_l * L_dr * c.B_v * Er + c.B_dr * c.L_l * Er)
               for j, g in zip(js, geo))
    return B_s, E_rr, E_dr, E_l


def lemma6(c: Constants) -> float:
    """|s_hat(j)[k] - s(j)[k]| <= E_s^r eps_r + E_s^r' eps_r' + E_s^l eps_l."""
    _, E_rr, E_dr, E_l = lemma6_constants(c)
    return E_rr * c.eps_r + E_dr * c.eps_dr + E_l * c.eps_l


def gradient_error(c: Constants) -> float:
    """D.7: ||grad_hat - grad||_2 <= N/2 P [(E_s^r eps_r + E_s^r' eps_r' + E_s^l eps_l) sqrt(P) B_r + B_s E_r eps_r]."""
    B_s = lemma6_constants(c)[0]
    return c.N / 2 * c.P * (lemma6(c) * math.sqrt(c.P) * c.B_r + B_s * _Er_max(c) * c.eps_r)


def corollary(eps: float, L_f: float, eta: float, l: int) -> float:
    """Corollary 1.1 derived with the step: e_l <= eps ((1 + eta L_f)^l - 1) / L_f."""
    return eps * ((1 + eta * L_f) ** l - 1) / L_f


def corollary_printed(eps: float, L_f: float, n: int, l: int) -> float:
    """Corollary 1.1 as printed: e_l <= L_f^{-1} (1 + n L_f)^l eps."""
    return (1 + n * L_f) ** l * eps / L_f


def paper_sizes(dx: int, dy: int, K: int, N: int, L: int, terms_r: int, terms_dr: int):
    """Theorem 1's sizes from its formulas (heads per layer from the recipe of Lemmas 2-5 and D.16)."""
    from tfbook.model import Sizes

    D_N = (dx + dy) * K + (N - 2) * K ** 2
    width_all = (N - 1) * K + dy
    D = dx + 2 * dy + D_N + 3 * width_all + 2
    heads = [K * terms_r, dy * terms_r, width_all * terms_dr, 2 * width_all, K, dy]
    return Sizes(layers=(2 * N + 4) * L, attention_layers=(N + 2) * L, ewml_layers=N * L, ff_layers=2 * L,
                 max_heads=max(heads), embed_dim=D, ff_width=2 * (D - dx - dy - 2))
