"""The error bounds of Lemmas 2-6, the per-step gradient error (D.7) and Corollary 1.1, with measured constants.

`constants(...)` measures B_v, B_r, B_r', B_l on a prompt and a trajectory (the paper leaves them as
symbols); the functions below evaluate the paper's formulas from them. P = max(sqrt K, sqrt dy). A bound
that a claim checks a built model against takes its constants from references computed without the core:
the tables' errors in closed form (`table_errors`) and the exact GD trajectory (`verify.reference_gd`),
never the transformer's own iterates, so that a broken transformer cannot enlarge its own bound.

The sizes of Theorem 1 are registered paper formulas (`tfbook.claims.paper_formula`) in the paper's
parameters only: `num_layers`, `attention_layers`, `ewml_layers`, `mlp_layers` (Theorem 1's
(2N+4)L layers, split as in Lemmas 2-5 and D.16), `max_heads` (the heads of the proofs of Lemmas 2-5
and D.16, with M_1, M_2 the numbers of terms of the tables r_hat, r_hat'), `embed_dim` (the slots of
the proof of Theorem 1, the derivative slot's printed (N-2)K+d read as (N-1)K+d_y) and
`relu_term_l1_bound` (Definition 4: ||a_h||_1 <= 1), and `theta_norm_bound` (the largest parameter norm
B_theta of (C.1) the proofs of Lemmas 2-5 and D.16 allow). `paper_sizes` fills a `Sizes` record from them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from tfbook.claims import paper_formula
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
    """eps_r, eps_r', eps_l: sup errors of the tables on their ranges (0 for exact tables), each table evaluated
    in closed form from its coefficients, never through the core, so that a sabotaged core cannot move a bound."""
    a = activation(act)
    fine = 200001
    eps_l = 0.0 if u_hat is None else sup_error(torch.tanh, u_hat, R_u, points=fine, closed_form=True)
    if act == "relu":
        return 0.0, 0.0, eps_l
    return (sup_error(a.r, r_hat, R, points=fine, closed_form=True),
            sup_error(a.dr, dr_hat, R, points=fine, closed_form=True), eps_l)


def constants(model, ws: torch.Tensor, X: torch.Tensor, Y: torch.Tensor,
              eps: Optional[tuple[float, float, float]] = None) -> Constants:
    """Measured constants over the iterates ws (B, L + 1, D_N) for the prompt X, Y.

    ``eps``: the tables' errors (eps_r, eps_r', eps_l) of an earlier call on the same model (they depend
    on the tables only; measuring them takes most of the time).
    """
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
    if eps is None:
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


@paper_formula
def D_N(dx: int, dy: int, K: int, N: int) -> int:
    """Definition 1: the number of weights of the N-layer network, (d_x + d_y) K + (N - 2) K^2."""
    return (dx + dy) * K + (N - 2) * K ** 2


@paper_formula
def num_layers(N: int, L: int) -> int:
    """Theorem 1: (2N + 4) L layers (each attention, EWML and MLP layer counts as one, Definition 9)."""
    return (2 * N + 4) * L


@paper_formula
def attention_layers(N: int, L: int) -> int:
    """Per block N forward layers (Lemma 2), one derivative layer (Lemma 3) and one update layer (D.16)."""
    return (N + 2) * L


@paper_formula
def ewml_layers(N: int, L: int) -> int:
    """Per block N element-wise multiplication layers (Lemma 5; Theorem 1's EWML^N)."""
    return N * L


@paper_formula
def mlp_layers(L: int) -> int:
    """Per block the loss-derivative MLP (Lemma 4) and the projection MLP."""
    return 2 * L


@paper_formula
def max_heads(dy: int, K: int, N: int, M1: int, M2: int) -> int:
    """The most heads of one layer in the proofs: K M_1 (forward, j < N), d_y M_1 (forward, j = N),
    ((N-1)K + d_y) M_2 (derivatives), 2((N-1)K + d_y) (update), K and d_y (EWML)."""
    width = (N - 1) * K + dy
    return max(K * M1, dy * M1, width * M2, 2 * width, K, dy)


@paper_formula
def embed_dim(dx: int, dy: int, K: int, N: int) -> int:
    """The proof of Theorem 1: x (d_x), y (d_y), w (D_N), p, r' and s ((N-1)K + d_y each), g (d_y), 1 and t.

    The proof prints r' in R^{(N-2)K+d}; one derivative per unit of every layer needs (N-1)K + d_y.
    """
    return dx + 2 * dy + D_N(dx, dy, K, N) + 3 * ((N - 1) * K + dy) + 2


THETA_LAYERS = ("fwd", "deriv", "loss", "ewml", "update", "proj")  # the layer types of one block


def _theta_bounds(dy, K, N, eta, C1, C2, R3, C3, C_w) -> dict[str, float]:
    return {"fwd": 1 + K * C1, "deriv": 1 + ((N - 1) * K + dy) * C2, "loss": R3 + 1 + C3, "ewml": 1 + K,
            "update": 1 + 2 * eta * N * K, "proj": C_w}


@paper_formula
def theta_norm_bound(dy: int, K: int, N: int, eta: float, C1: float, C2: float, R3: float, C3: float,
                     C_w: float) -> float:
    """The largest B_theta of (C.1) the proofs allow in one layer, with C_1, C_2, C_3 the sums sum_m |c_m|
    of the tables r_hat, r_hat', u_hat (Definition 4), R_3 the gate and C_w the projection's norm:

    Lemma 2: 1 + K C_1; Lemma 3: 1 + ((N-1)K + d_y) C_2 (printed 1 + K(N-1) C_2, which leaves out the d_y
    units of the last layer); Lemma 4: (R_3 + 1) + C_3 ((C.1) adds ||W_1|| and ||W_2||; printed
    max{R_3 + 1, C_3}); Lemma 5: 1 + K ((C.1) sums the K values; printed 1, which is right for the EWML norm
    of (3.18), a maximum over heads); D.16: 1 + 2 eta N K; C_w. `THETA_NORM_BOUNDS` gives each one alone.
    """
    return max(_theta_bounds(dy, K, N, eta, C1, C2, R3, C3, C_w).values())


def _layer_bound(layer: str):
    def bound(dy: int, K: int, N: int, eta: float, C1: float, C2: float, R3: float, C3: float,
              C_w: float) -> float:
        return _theta_bounds(dy, K, N, eta, C1, C2, R3, C3, C_w)[layer]

    bound.__name__ = bound.__qualname__ = f"theta_norm_bound_{layer}"
    bound.__doc__ = f"The proofs' bound on B_theta of (C.1) for the {layer} layers (see `theta_norm_bound`)."
    return paper_formula(bound)


THETA_NORM_BOUNDS = {layer: _layer_bound(layer) for layer in THETA_LAYERS}  # one registered formula per type


def theta_norm_bounds_printed(dy: int, K: int, N: int, eta: float, C1: float, C2: float, R3: float, C3: float,
                              C_w: float) -> dict[str, float]:
    """The bounds of Lemmas 2-5, D.16 and the projection as printed, by layer (for comparison only)."""
    return {"fwd": 1 + K * C1, "deriv": 1 + K * (N - 1) * C2, "loss": max(R3 + 1, C3), "ewml": 1.0,
            "update": 1 + 2 * eta * N * K, "proj": C_w}


@paper_formula
def relu_term_l1_bound() -> float:
    """Definition 4: every term of a sum of ReLUs has ||a_h||_1 <= 1."""
    return 1.0


def paper_sizes(dx: int, dy: int, K: int, N: int, L: int, terms_r: int, terms_dr: int):
    """Theorem 1's sizes from its formulas (heads per layer from the recipe of Lemmas 2-5 and D.16).

    ``ff_width`` is the width of our projection MLP (two units per coordinate of w and of the scratch):
    the paper leaves the projection MLP, and its width D_w, open.
    """
    from tfbook.model import Sizes

    D = embed_dim(dx, dy, K, N)
    return Sizes(layers=num_layers(N, L), attention_layers=attention_layers(N, L), ewml_layers=ewml_layers(N, L),
                 ff_layers=mlp_layers(L), max_heads=max_heads(dy, K, N, terms_r, terms_dr), embed_dim=D,
                 ff_width=2 * (D - dx - dy - 2))


def running_gradient_error(model, w: torch.Tensor, X: torch.Tensor, Y: torch.Tensor,
                           eps: Optional[tuple[float, float, float]] = None) -> torch.Tensor:
    """||grad_hat - grad L_n(w)||_2 bound at the iterate w (B, D_N), (B,): Lemmas 2-6 run entry by entry.

    The lemmas' chain with every constant replaced by the entries of this prompt: with e(j) >= |p_hat(j) - p(j)|,
    e(j) = eps_r + L_r |V_j| e(j-1) (Lemma 2), |r_hat'(j-1) - r'(j-1)| <= eps_r' + L_r' |V_j| e(j-1) (Lemma 3),
    |g - u| <= eps_l + L_l e(N) (Lemma 4), and the products of Lemmas 5-6 and (D.7) bounded by
    |ab - a'b'| <= |a - a'| |b| + (|a| + |a - a'|) |b - b'|, |.| entrywise. Only the tables' sup errors
    (``eps``, default `table_errors` in closed form), the Lipschitz constants of r, r', u and the exact
    network at w enter: nothing is measured through the core, and the bound is sound for every prompt on
    which the tables' arguments stay in their ranges (which every run checks). Smooth activations only:
    the ReLU ramp has no Lipschitz derivative (its runs are exact once delta is below the smallest
    positive pre-activation).
    """
    if model.activation == "relu":
        raise ValueError("running_gradient_error: the ReLU ramp has no Lipschitz derivative; "
                         "activation 'relu' is exact for delta below the smallest positive pre-activation")
    spec: NetSpec = model.spec
    a = activation(model.activation)
    if eps is None:
        eps = table_errors(model.activation, model.loss, model.R, model.r_hat, model.dr_hat, model.u_hat,
                           model.R_g - 1.0)
    eps_r, eps_dr, eps_l = eps
    L_l = 2.0 if model.loss == "squared" else 1.0
    parts = explicit_gradient(spec, w, X, Y, model.activation, model.loss)
    Vs = [V.abs() for V in spec.matrices(w)]  # (B, out_j, in_j)
    e_p = [torch.zeros_like(X)]  # e(0) = 0: x is exact
    e_dr = []
    for j, V in enumerate(Vs, start=1):
        e_pre = e_p[-1] @ V.transpose(-1, -2)
        e_dr.append(eps_dr + a.lip_dr * e_pre)
        e_p.append(eps_r + a.lip_r * e_pre)
    e_u = eps_l + L_l * e_p[-1]
    N = spec.N
    e_s = [None] * N

    def prod(da, a_, db, b_):  # |a_hat b_hat - a b| with |a_hat - a| <= da, |b_hat - b| <= db
        return da * b_.abs() + (a_.abs() + da) * db

    e_s[-1] = prod(e_dr[-1], parts.dr[-1], e_u, parts.u)
    for j in range(N - 1, 0, -1):  # s(j) = r'(j-1) . (V_{j+1}^T s(j+1)), stored at s[j-1]
        back = parts.s[j] @ spec.matrices(w)[j]
        e_back = e_s[j] @ Vs[j]
        e_s[j - 1] = prod(e_dr[j - 1], parts.dr[j - 1], e_back, back)
    e_A = [(e_s[j - 1].unsqueeze(-1) * parts.p[j - 1].abs().unsqueeze(-2)
            + (parts.s[j - 1].abs() + e_s[j - 1]).unsqueeze(-1) * e_p[j - 1].unsqueeze(-2)).flatten(-2)
           for j in range(1, N + 1)]
    return (torch.cat(e_A, dim=-1).sum(-2) / (2 * X.shape[-2])).norm(dim=-1)
