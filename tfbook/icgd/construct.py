"""Theorem 1's (2N+4)L-layer transformer that runs L steps of projected GD in its forward pass.

Every weight is written from the recipe (closed form) before any data exists, and the arithmetic
runs in the core layers of `tfbook.layers`: ReLU attention divided by the number of tokens T,
the element-wise multiplication layer (EWML) and the feed-forward layer. One block:

1. N forward attention layers ``fwd{j}`` write p_i(j) = r_hat(v_{j_k} . p_i(j-1)) (Lemma 2);
2. the derivative attention layer ``deriv`` writes r'_i(j-1) = dr_hat(v_{j_k} . p_i(j-1)) (Lemma 3);
3. the loss MLP ``loss`` writes g_i = u(p_i(N), y_i) t_i: the query gate zeroes the query (Lemma 4);
4. N EWML layers ``ewml{N}`` ... ``ewml1`` back-propagate s_i(j) (Lemma 5);
5. the update attention ``update``, the only layer that mixes tokens: w -= eta/(2n) sum_t s_t p_t^T;
6. the MLP ``proj`` clips w to the box and erases every scratch coordinate.

Tokens are rows ``[x; y; w; p1..pN; r0..r(N-1); g; s1..sN; one; t]``.
"""
from __future__ import annotations

import copy
import math
from typing import Callable, Optional

import numpy as np
import torch

from tfbook import validate
from tfbook.device import DTYPE
from tfbook.icgd.nets import ACTIVATIONS, LOSSES, NetSpec, activation
from tfbook.icgd.relu_sums import ReluSum, identity_relu, interpolant, ramp, tailed_interpolant
from tfbook.layers import Attention, ElementwiseMultiplication, FeedForward, weight_from_entries
from tfbook.layout import Layout
from tfbook.model import Construction


# --- the three layer types in the paper's dense convention ------------------------------------------

class ReluAttention(Attention):
    """Core ReLU attention (divisor T = number of tokens); ``dense()`` -> (Q, K, V), each (heads, D, D)."""

    def dense(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        d = super().dense()
        return d["Q"], d["K"], d["V"]


class EWML(ElementwiseMultiplication):
    """Core EWML; ``dense()`` -> (Q, K, V), each (heads, D, D): h_i + sum_m <Q_m h_i, K_m h_i> V_m h_i."""

    def dense(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        d = super().dense()
        return d["Q"], d["K"], d["V"]


class MLP(FeedForward):
    """Core feed-forward layer without biases; ``dense()`` -> (W1 (m, D), W2 (D, m)): h + W2 relu(W1 h)."""

    def dense(self) -> tuple[torch.Tensor, torch.Tensor]:
        d = super().dense()
        return d["W1"], d["W2"]


def _relu_attention(W_Q, W_K, W_V, W_O) -> ReluAttention:
    return ReluAttention.stacked(W_Q, W_K, W_V, W_O, normalization="relu", relu_divisor="keys")


# --- layout -----------------------------------------------------------------------------------------

def icgd_layout(spec: NetSpec) -> Layout:
    """x, y, w, p1..pN, r0..r(N-1), g, s1..sN, one, t."""
    lay = Layout([("x", spec.dx), ("y", spec.dy), ("w", spec.D_N)])
    for j in range(1, spec.N + 1):
        lay.add(f"p{j}", spec.out(j))
    for j in range(1, spec.N + 1):
        lay.add(f"r{j - 1}", spec.out(j))
    lay.add("g", spec.dy)
    for j in range(1, spec.N + 1):
        lay.add(f"s{j}", spec.out(j))
    lay.add("one", 1)
    lay.add("t", 1)
    return lay


def scratch_slots(spec: NetSpec) -> list[str]:
    return ([f"p{j}" for j in range(1, spec.N + 1)] + [f"r{j - 1}" for j in range(1, spec.N + 1)] + ["g"]
            + [f"s{j}" for j in range(1, spec.N + 1)])


def _source(j: int) -> str:
    """The slot holding p(j-1): x for j = 1."""
    return "x" if j == 1 else f"p{j - 1}"


# --- the ranges -------------------------------------------------------------------------------------

def _sup_abs(rs: ReluSum, a: float) -> float:
    """sup |rs| on [-a, a] for a piecewise-linear rs: the max over -a, a and the kinks inside."""
    slope, shift = rs.a[:, 0], rs.a[:, 1]
    nz = slope != 0
    kinks = -shift[nz] / slope[nz]
    pts = torch.cat([torch.tensor([-a, a], dtype=DTYPE), kinks[(kinks >= -a) & (kinks <= a)]])
    return float(rs.closed_form(pts).abs().max())  # a design quantity: never through the core


# The smooth tables. For each function: sup|g''| (the interpolation error on [-c, c] is at most
# (2c/(M-1))^2/8 sup|g''|), the tail (A, b, s): every |t| >= c has |g(t) - tail(t)| <= A exp(-b c), where
# tail is constant g(-c) left of -c and g(c) + s (t - c) right of c. The bounds:
#   softplus: softplus(-c) <= e^-c left; softplus(t) - t = log(1 + e^-t) in (0, e^-c] right (s = 1);
#   sigmoid (softplus' too): sigmoid(-c) = 1 - sigmoid(c) <= e^-c on both sides;
#   sigmoid' = sigmoid (1 - sigmoid) <= e^-|t|; tanh: 1 - tanh(c) <= 2 e^-2c; tanh' = sech^2 <= 4 e^-2|t|.
TABLES = {
    ("softplus", "r"): (0.25, 1.0, 1.0, 1.0),
    ("softplus", "dr"): (0.0962250448649376, 1.0, 1.0, 0.0),
    ("sigmoid", "r"): (0.0962250448649376, 1.0, 1.0, 0.0),
    ("sigmoid", "dr"): (0.125, 1.0, 1.0, 0.0),
    ("tanh", "r"): (0.769800358919501, 2.0, 2.0, 0.0),
    ("tanh", "dr"): (2.0, 4.0, 2.0, 0.0),
}
_FUNCTIONS = {(name, part): getattr(activation(name), part) for name, part in TABLES}
LOSS_TABLE = ("tanh", "r")  # u = tanh(residual): log-cosh's derivative


def table_cut(key: tuple[str, str], M: int) -> tuple[float, float]:
    """(c, bound): the half-width c at which the core's interpolation bound (2c/(M-1))^2/8 sup|g''| meets
    the tails' bound A e^(-b c), and that common bound, the table's sup error on the whole real line.

    It depends on M only, not on any range: a table built with `table` on a range R > c has this
    accuracy for every argument, however large R is.
    """
    curv, A, b, _ = TABLES[key]
    if M < 2:
        return math.inf, math.inf
    lo, hi = 0.0, 1.0
    while (2 * hi / (M - 1)) ** 2 / 8 * curv < A * math.exp(-b * hi):
        hi *= 2
    for _ in range(100):  # bisection: the core's bound rises with c, the tails' falls
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (2 * mid / (M - 1)) ** 2 / 8 * curv < A * math.exp(-b * mid) else (lo, mid)
    return hi, max((2 * hi / (M - 1)) ** 2 / 8 * curv, A * math.exp(-b * lo))  # both bounds at c = hi


def table(key: tuple[str, str], R: float, M: int) -> ReluSum:
    """The table of a smooth function (``TABLES``) for arguments in [-R, R], M + 1 terms.

    R <= c (`table_cut`): the interpolant on M equal pieces of [-R, R], error <= (2R/M)^2/8 sup|g''|.
    R > c: M - 1 pieces on [-c, c] and the function's own tails (`tailed_interpolant`), error <= the
    bound of `table_cut` everywhere: the accuracy no longer falls as the range R grows.
    """
    g = _FUNCTIONS[key]
    c, _ = table_cut(key, M)
    if R <= c:
        return interpolant(g, R, M)
    return tailed_interpolant(g, c, M, TABLES[key][3])


def table_bound(key: tuple[str, str], R: float, M: int) -> float:
    """The a-priori sup error of ``table(key, R, M)`` on [-R, R] (on the real line when R > c)."""
    c, bound = table_cut(key, M)
    return (2 * R / M) ** 2 / 8 * TABLES[key][0] if R <= c else bound


def a_priori_R(spec: NetSpec, act: str, box: float, x_bound: float, M: int) -> float:
    """The smallest R found with every pre-activation of every admissible prompt in [-R, R].

    |v_{1_k} . x| <= dx box x_bound and |v_{j_k} . p_hat(j-1)| <= K box sup_{|t|<=R_{j-1}} |r_hat(t)|,
    where r_hat itself is the table built for [-R, R] (`table`): R is found as a fixed point. All weights
    at +box and x at +x_bound attain it (up to the table's error), so no smaller a-priori R exists; for
    softplus it grows like (K box)^(N-1) dx box x_bound, which is why the tables' accuracy must not
    depend on R.
    """
    a = activation(act)

    def ranges(bound) -> float:
        Rj = spec.dx * box * x_bound
        R = Rj
        for _ in range(2, spec.N + 1):
            Rj = spec.K * box * bound(Rj)
            R = max(R, Rj)
        return R

    if act == "relu":
        return ranges(lambda t: t)
    R = ranges(lambda t: float(a.r(torch.tensor([-t, t], dtype=DTYPE)).abs().max()))
    for _ in range(100):
        rs = table((act, "r"), R, M)
        R_new = ranges(lambda t: _sup_abs(rs, t))
        if R_new <= R:
            return R
        R = R_new * (1 + 1e-6)
    raise ValueError(f"R: no a-priori range exists for these sizes with M = {M}; pass R explicitly")


# --- the layers of one block ------------------------------------------------------------------------
# Every weight is written as its non-zero entries (`_Entries`) and built once on the target device by
# `tfbook.layers.weight_from_entries`: dense while small (quick sizes), a sparse tensor otherwise, which
# the core then stores as CSR arrays. The dense stacked tensors are never materialised.

class _Entries:
    """The non-zero entries of one weight of ``shape``, gathered as flat index and value arrays."""

    def __init__(self, *shape: int):
        self.shape = shape
        self.parts: list[list[np.ndarray]] = []

    def add(self, *index_and_values) -> None:
        """Entries ``W[index...] = values``, the index arrays and values broadcast together."""
        self.parts.append([a.ravel() for a in np.broadcast_arrays(*(np.asarray(a) for a in index_and_values))])

    def weight(self, device) -> torch.Tensor:
        """The weight on ``device`` (`weight_from_entries`): no index is written twice."""
        if not self.parts:
            return weight_from_entries(self.shape, [], device)
        columns = tuple(np.concatenate([p[i] for p in self.parts]) for i in range(len(self.shape) + 1))
        return weight_from_entries(self.shape, [columns], device)


def _scalar_heads(lay: Layout, spec: NetSpec, units: list[tuple[int, int]], rs: ReluSum, write: Callable,
                  device) -> tuple[torch.Tensor, ...]:
    """Heads (j, k, term) computing rs(v_{j_k} . p(j-1)), each writing into the coordinate write(j, k).

    ``units`` lists (j, k) pairs; returns stacked W_Q, W_K (h, m, D), W_V (h, 1, D), W_O (h, D, 1).
    """
    H, D = rs.num_terms, lay.dim
    m = max(spec.shape(j)[1] for j, _ in units) + 1
    h = len(units) * H
    W_Q, W_K, W_V, W_O = _Entries(h, m, D), _Entries(h, m, D), _Entries(h, 1, D), _Entries(h, D, 1)
    one, w0 = lay.index("one"), lay["w"].start
    slope, shift, coef = rs.a[:, 0].numpy(), rs.a[:, 1].numpy(), rs.c.numpy()  # (H,) each
    for u, (j, k) in enumerate(units):
        src, idx = lay[_source(j)].start, np.arange(spec.shape(j)[1])  # idx (in_j,)
        heads = np.arange(u * H, (u + 1) * H)  # (H,)
        W_Q.add(heads[:, None], idx, src + idx, slope[:, None])  # a_h[0] p(j-1)
        W_Q.add(heads, m - 1, one, shift)  # a_h[1]
        W_K.add(heads[:, None], idx, w0 + spec.row(j, k).start + idx, 1.0)  # v_{j_k}
        W_K.add(heads, m - 1, one, 1.0)
        W_V.add(heads, 0, one, coef)
        W_O.add(heads, write(j, k), 0, 1.0)
    return tuple(W.weight(device) for W in (W_Q, W_K, W_V, W_O))


def forward_layer(lay: Layout, spec: NetSpec, j: int, r_hat: ReluSum, device=None) -> ReluAttention:
    """Lemma 2: writes p(j)[k] = r_hat(v_{j_k} . p(j-1)), out_j * num_terms heads."""
    units = [(j, k) for k in range(spec.out(j))]
    write = lambda jj, k: lay.index((f"p{jj}", k))  # noqa: E731
    return _relu_attention(*_scalar_heads(lay, spec, units, r_hat, write, device))


def derivative_layer(lay: Layout, spec: NetSpec, dr_hat: ReluSum, device=None) -> ReluAttention:
    """Lemma 3: writes r'(j-1)[k] = dr_hat(v_{j_k} . p(j-1)) for every j, k."""
    units = [(j, k) for j in range(1, spec.N + 1) for k in range(spec.out(j))]
    write = lambda j, k: lay.index((f"r{j - 1}", k))  # noqa: E731
    return _relu_attention(*_scalar_heads(lay, spec, units, dr_hat, write, device))


def loss_layer(lay: Layout, spec: NetSpec, u_hat: Optional[ReluSum], R_g: float, device=None) -> MLP:
    """Lemma 4: g[k] = u(p(N)[k], y[k]) t, with the gate -R_g (1 - t) in every unit (u_hat None: 2(t - y))."""
    if u_hat is None:  # squared loss: 2 relu(z) - 2 relu(-z) = 2z exactly
        a = np.array([[1.0, 0.0], [-1.0, 0.0]])
        c = np.array([2.0, -2.0])
    else:
        a, c = u_hat.a.numpy(), u_hat.c.numpy()
    H, D = a.shape[0], lay.dim
    W1, W2 = _Entries(spec.dy * H, D), _Entries(D, spec.dy * H)
    for k in range(spec.dy):
        rows = np.arange(k * H, (k + 1) * H)  # (H,)
        W1.add(rows, lay.index((f"p{spec.N}", k)), a[:, 0])
        W1.add(rows, lay.index(("y", k)), -a[:, 0])
        W1.add(rows, lay.index("one"), a[:, 1] - R_g)
        W1.add(rows, lay.index("t"), R_g)  # the query gate
        W2.add(lay.index(("g", k)), rows, c)
    return MLP(W1.weight(device), None, W2.weight(device), None)


def ewml_layer(lay: Layout, spec: NetSpec, j: int, device=None) -> EWML:
    """Lemma 5: s(N) = r'(N-1) . g; s(j) = r'(j-1) . (V_{j+1}^T s(j+1)) for j < N. Exact."""
    D, out = lay.dim, spec.out(j)
    nxt = 1 if j == spec.N else spec.out(j + 1)
    W_Q, W_K, W_V, W_O = _Entries(out, nxt, D), _Entries(out, nxt, D), _Entries(out, 1, D), _Entries(out, D, 1)
    ks = np.arange(out)  # (out,)
    if j == spec.N:
        W_Q.add(ks, 0, [lay.index(("g", k)) for k in range(out)], 1.0)
        W_K.add(ks, 0, lay.index("one"), 1.0)
    else:
        kks = np.arange(nxt)  # (nxt,)
        rows = np.array([spec.row(j + 1, kk).start for kk in range(nxt)])  # (nxt,)
        W_Q.add(ks[:, None], kks, lay["w"].start + rows + ks[:, None], 1.0)  # V_{j+1}[kk, k]
        W_K.add(ks[:, None], kks, [lay.index((f"s{j + 1}", kk)) for kk in range(nxt)], 1.0)
    W_V.add(ks, 0, [lay.index((f"r{j - 1}", k)) for k in range(out)], 1.0)
    W_O.add(ks, [lay.index((f"s{j}", k)) for k in range(out)], 0, 1.0)
    return EWML(*(W.weight(device) for W in (W_Q, W_K, W_V, W_O)))


def update_layer(lay: Layout, spec: NetSpec, eta: float, n: int, device=None) -> ReluAttention:
    """D.16: two heads per (j, k), relu(s) - relu(-s) = s, so w_{j_k} -= eta/(2n) sum_t s_t(j)[k] p_t(j-1)."""
    D = lay.dim
    m_v = max(spec.dx, spec.K)
    pairs = [(j, k) for j in range(1, spec.N + 1) for k in range(spec.out(j))]
    h = 2 * len(pairs)
    W_Q, W_K, W_V, W_O = _Entries(h, 1, D), _Entries(h, 1, D), _Entries(h, m_v, D), _Entries(h, D, m_v)
    coef = eta * (n + 1) / (2 * n)  # the divisor T = n + 1 is undone here
    sign = np.array([1.0, -1.0])  # heads 2u (relu(s)) and 2u + 1 (relu(-s))
    one, w0 = lay.index("one"), lay["w"].start
    for u, (j, k) in enumerate(pairs):
        src, idx = lay[_source(j)].start, np.arange(spec.shape(j)[1])  # idx (in_j,)
        heads = np.array([2 * u, 2 * u + 1])  # (2,)
        W_Q.add(heads, 0, one, sign)
        W_K.add(heads, 0, lay.index((f"s{j}", k)), 1.0)
        W_V.add(heads[:, None], idx, src + idx, 1.0)
        W_O.add(heads[:, None], w0 + spec.row(j, k).start + idx, idx, -sign[:, None] * coef)
    return _relu_attention(*(W.weight(device) for W in (W_Q, W_K, W_V, W_O)))


def projection_layer(lay: Layout, spec: NetSpec, box: float, device=None) -> MLP:
    """w <- clip(w, -box, box) = w - relu(w - box) + relu(-w - box); every scratch z <- z - relu(z) + relu(-z) = 0."""
    coords = np.arange(lay["w"].start, lay["w"].stop)
    scratch = [c for name in scratch_slots(spec) for c in range(lay[name].start, lay[name].stop)]
    cs = np.concatenate([coords, np.asarray(scratch, dtype=np.int64)])  # (units,)
    u = np.arange(cs.size)
    bias = np.where(u < coords.size, -box, 0.0)  # (units,)
    W1, W2 = _Entries(2 * cs.size, lay.dim), _Entries(lay.dim, 2 * cs.size)
    one = lay.index("one")
    for parity, sign in ((0, 1.0), (1, -1.0)):  # units 2u: relu(c - box), 2u + 1: relu(-c - box)
        W1.add(2 * u + parity, cs, sign)
        W1.add(2 * u + parity, one, bias)
        W2.add(cs, 2 * u + parity, -sign)
    return MLP(W1.weight(device), None, W2.weight(device), None)


# --- the model --------------------------------------------------------------------------------------

class ICGDTransformer(Construction):
    """Theorem 1's transformer; build it with `build_transformer`."""

    def __init__(self, spec: NetSpec, layout: Layout, layers, *, n: int, L: int, eta: float, box: float,
                 x_bound: float, y_bound: float, R: float, r_hat: ReluSum, dr_hat: ReluSum,
                 u_hat: Optional[ReluSum], R_g: float, activation_name: str, loss_name: str, delta):
        super().__init__(layout, layers)
        self.spec, self.n, self.L, self.eta, self.box = spec, n, L, eta, box
        self.x_bound, self.y_bound, self.R, self.R_g = x_bound, y_bound, R, R_g
        self.R_u = R_g - 1.0  # the loss table's range
        self.r_hat, self.dr_hat, self.u_hat = r_hat, dr_hat, u_hat
        self.activation, self.loss, self.delta = activation_name, loss_name, delta

    # sizes
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def block_size(self) -> int:
        return 2 * self.spec.N + 4

    @property
    def layer_types(self) -> list[str]:
        return [layer.kind for layer in self.layers]

    def heads_per_layer(self) -> list[int]:
        return [0 if layer.kind == "mlp" else layer.num_heads for layer in self.layers]

    @property
    def embed_dim(self) -> int:
        return self.layout.dim

    @property
    def width(self) -> int:
        return max(layer.hidden_width for layer in self.layers if layer.kind == "mlp")

    def num_parameters(self) -> int:
        """The paper's dense count: 3 heads D^2 per attention/EWML layer, 2 m D per MLP."""
        D = self.layout.dim
        return sum(2 * layer.hidden_width * D if layer.kind == "mlp" else 3 * layer.num_heads * D * D
                   for layer in self.layers)

    @property
    def device(self) -> torch.device:
        """The device the weights live on."""
        return next(self.parameters()).device

    def to_device(self, device) -> "ICGDTransformer":
        """Move every layer and the tables r_hat, dr_hat, u_hat to ``device`` (shared block tensors move
        once); returns self."""
        for layer in self.layers:
            layer.to(device)
        for rs in (self.r_hat, self.dr_hat, self.u_hat):
            if rs is not None:
                rs.to(device)
        return self

    # prompts
    def embed(self, X, Y, x_query, w0) -> torch.Tensor:
        """Tokens [x_i; y_i; w0; 0; 1; 1] for the n' examples, then the query [x_query; 0; w0; 0; 1; 0]."""
        s = self.spec
        X = validate.tensor("X", X, shape=(None, None, s.dx))
        B, n_prime = X.shape[:2]
        if n_prime < 1:
            raise ValueError(f"X must hold n' >= 1 examples, got {n_prime}")
        Y = validate.tensor("Y", Y, shape=(B, n_prime, s.dy))
        x_query = validate.tensor("x_query", x_query, shape=(B, s.dx))
        w0 = validate.tensor("w0", w0, shape=(B, s.D_N))
        for name, value, bound in (("X", X, self.x_bound), ("x_query", x_query, self.x_bound),
                                   ("Y", Y, self.y_bound), ("w0", w0, self.box)):
            if value.numel() and validate.has_values(value) and float(value.abs().max()) > bound:
                raise ValueError(f"{name} must have every |entry| <= {bound}, got {float(value.abs().max()):.6g}")
        lay = self.layout
        H = torch.zeros(B, n_prime + 1, lay.dim, dtype=DTYPE, device=X.device)
        H[:, :n_prime, lay["x"]] = X
        H[:, n_prime, lay["x"]] = x_query
        H[:, :n_prime, lay["y"]] = Y
        H[..., lay["w"]] = w0[:, None, :]
        H[..., lay.index("one")] = 1.0
        H[:, :n_prime, lay.index("t")] = 1.0
        return H

    def _run(self, H: torch.Tensor, keep: Callable[[int], bool]) -> list[torch.Tensor]:
        """The input and every state after layer i with ``keep(i)``; the range guards are accumulated
        on the device while the layers run and read once at the end (`check_ranges`)."""
        H = validate.tensor("H", H, shape=(None, None, self.layout.dim))
        size, states = self.block_size, [H]
        seen = [("input", f"{slot} entry", bound, self.read(H, slot).abs().amax())
                for slot, bound in (("x", self.x_bound), ("y", self.y_bound), ("w", self.box))]
        for i, layer in enumerate(self.layers):
            step = i % size
            if step < self.spec.N and self.activation != "relu":  # fwd{step + 1} reads p(step)
                seen.append((f"block {i // size}, layer fwd{step + 1}", "pre-activation", self.R,
                             self.preactivations(H, step + 1).abs().amax()))
            elif step == self.spec.N + 1:  # the loss layer reads p(N) - y; its gate needs it on the query too
                gap = self.read(H, f"p{self.spec.N}") - self.read(H, "y")  # (B, T, dy), every token
                seen.append((f"block {i // size}, layer loss", "residual p(N) - y (query included)", self.R_u,
                             gap.abs().amax()))
            H = layer(H)
            if keep(i):
                states.append(H)
        self.check_ranges(seen)
        return states

    def forward(self, H: torch.Tensor, return_all: bool = False, memory=None, key_mask=None):
        """Every layer in order, with the range guards; ``return_all`` returns every state, input first."""
        if memory is not None or key_mask is not None:
            raise ValueError("memory and key_mask must be None: Theorem 1's transformer is self-attention only")
        last = len(self.layers) - 1
        states = self._run(H, (lambda i: True) if return_all else (lambda i: i == last))
        return states if return_all else states[-1]

    def block_states(self, H: torch.Tensor) -> list[torch.Tensor]:
        """The L + 1 states at block boundaries, input first, with the range guards."""
        return self._run(H, lambda i: (i + 1) % self.block_size == 0)

    def preactivations(self, H: torch.Tensor, j: int) -> torch.Tensor:
        """v_{j_k} . p(j-1) for every token and k, (B, T, out_j): what the tables of layers j are fed."""
        w, src = self.read(H, "w"), self.read(H, _source(j))  # (B, T, D_N), (B, T, in_j)
        rows = torch.stack([w[..., self.spec.row(j, k)] for k in range(self.spec.out(j))], dim=-2)
        return (rows * src[..., None, :]).sum(-1)

    def residuals(self, H: torch.Tensor) -> torch.Tensor:
        """p(N) - y on the example tokens (0 on the query, which the loss layer's gate switches off), (B, T, dy)."""
        return (self.read(H, f"p{self.spec.N}") - self.read(H, "y")) * (self.read(H, "t") > 0.5)

    @staticmethod
    def check_ranges(seen: list[tuple[str, str, float, torch.Tensor]]) -> None:
        """ValueError at the first (layer, what, range, largest |value|) whose value leaves [-range, range]:
        the input's x, y and w within x_bound, y_bound and box; the tables interpolate r, r' on [-R, R]
        (ReLU's r and r' are exact everywhere); |p(N) - y| <= R_u on every token, for the loss table
        (log-cosh) and for the gate -R_g (1 - t) that keeps the query out of the gradient (every
        activation: with ReLU a user's R below the a-priori one sets R_g too small). One device-to-host
        copy for the whole run; nothing to read on ``meta``."""
        if not seen or not validate.has_values(seen[0][3]):
            return
        worst = torch.stack([value for *_, value in seen]).cpu().tolist()
        for (where, what, bound, _), value in zip(seen, worst):
            if value > bound * (1 + 1e-9):
                if where == "input":
                    raise ValueError(f"H must have every |{what}| <= {bound:.6g} (the admissible prompts), "
                                     f"got {value:.6g}")
                raise ValueError(f"{where}: a {what} of size {value:.6g} leaves its table's range [-{bound:.6g}, "
                                 f"{bound:.6g}]; build with a larger R (R=None gives the a-priori range of every "
                                 "admissible prompt)")

    def run(self, X, Y, x_query, w0) -> torch.Tensor:
        """The query token's w slot after each block, (B, L + 1, D_N); [:, 0] is w0."""
        states = self.block_states(self.embed(X, Y, x_query, w0))
        return torch.stack([self.read(S[:, -1], "w") for S in states], dim=1)

    def read_w(self, H: torch.Tensor) -> torch.Tensor:
        """The query token's w, (B, D_N)."""
        return self.read(H[:, -1], "w")


def _share(layer):
    """Another layer object holding the same (frozen) weight tensors: the L blocks are identical."""
    twin = copy.copy(layer)
    twin._parameters = dict(layer._parameters)
    return twin


def _tables(act: str, R: float, M: int, delta) -> tuple[ReluSum, ReluSum]:
    if act == "relu":
        return identity_relu(), ramp(delta)
    return table((act, "r"), R, M), table((act, "dr"), R, M)


def build_transformer(dx: int, dy: int, K: int, N: int, n: int, L: int, eta: float, activation: str = "softplus",
                      loss: str = "squared", box: float = 1.0, M: int = 256, delta: Optional[float] = None,
                      x_bound: float = 1.0, y_bound: float = 1.0, R: Optional[float] = None,
                      device=None) -> ICGDTransformer:
    """Theorem 1's (2N+4)L-layer transformer running L steps of projected GD with step ``eta`` on n examples.

    ``R=None`` takes the a-priori range of every admissible prompt (`a_priori_R`); every run checks that
    each table's arguments stay in its range and raises ValueError otherwise. Each smooth table (r, r' and,
    for log-cosh, u = tanh on the residual range R_u) has M + 1 ReLU terms (`table`): M equal pieces of
    [-R, R] up to the cut c of `table_cut`, beyond it M - 1 pieces of [-c, c] and the function's own tails,
    so its sup error, at most `table_bound` (1.4e-4 for softplus, 3.4e-4 for tanh' at the default M = 256),
    does not grow with R or R_u.

    The weights are written as their non-zero entries straight onto ``device`` (a torch device or its
    name, e.g. ``tfbook.device.default_device()``; default the CPU, where the chapter's references and
    plots run); a large, sparse weight is never materialised dense and is stored by the core as CSR
    arrays (every accessor still returns it dense).
    """
    for name, value in (("dx", dx), ("dy", dy), ("K", K), ("n", n), ("L", L), ("M", M)):
        validate.positive_int(name, value)
    validate.positive_int("N", N, minimum=2)
    eta = validate.real("eta", eta, low=0.0, low_open=True)
    box = validate.real("box", box, low=0.0, low_open=True)
    x_bound = validate.real("x_bound", x_bound, low=0.0, low_open=True)
    y_bound = validate.real("y_bound", y_bound, low=0.0, low_open=True)
    act = validate.choice("activation", activation, ACTIVATIONS)
    loss_name = validate.choice("loss", loss, LOSSES)
    if act == "relu":
        if delta is None:
            raise ValueError("delta must be a finite real > 0 for activation 'relu', got None")
        delta = validate.real("delta", delta, low=0.0, low_open=True)
    elif delta is not None:
        raise ValueError(f"delta (the ramp's width) applies only to activation 'relu', got delta = {delta!r} with "
                         f"activation {act!r}")
    spec = NetSpec(int(dx), int(dy), int(K), int(N))
    R = a_priori_R(spec, act, box, x_bound, int(M)) if R is None else validate.real("R", R, low=0.0, low_open=True)
    r_hat, dr_hat = _tables(act, R, int(M), delta)
    B_out = _sup_abs(r_hat, R)  # |p_hat(N)| on admissible prompts
    R_u = B_out + y_bound  # residual range |p(N) - y|
    u_hat = table(LOSS_TABLE, R_u, int(M)) if loss_name == "logcosh" else None  # accurate beyond R_u too
    R_g = R_u + 1.0  # >= max(|z|, 1) >= |a . [z; 1]| for every unit on the query
    lay, dev = icgd_layout(spec), torch.device("cpu" if device is None else device)
    block = [(f"fwd{j}", forward_layer(lay, spec, j, r_hat, dev)) for j in range(1, N + 1)]
    block.append(("deriv", derivative_layer(lay, spec, dr_hat, dev)))
    block.append(("loss", loss_layer(lay, spec, u_hat, R_g, dev)))
    block += [(f"ewml{j}", ewml_layer(lay, spec, j, dev)) for j in range(N, 0, -1)]
    block.append(("update", update_layer(lay, spec, eta, int(n), dev)))
    block.append(("proj", projection_layer(lay, spec, box, dev)))
    layers = [(f"b{l}.{name}", layer if l == 0 else _share(layer)) for l in range(int(L)) for name, layer in block]
    for rs in (r_hat, dr_hat, u_hat):  # the tables follow the weights (the references evaluate them)
        if rs is not None:
            rs.to(dev)
    return ICGDTransformer(spec, lay, layers, n=int(n), L=int(L), eta=eta, box=box, x_bound=x_bound,
                           y_bound=y_bound, R=float(R), r_hat=r_hat, dr_hat=dr_hat, u_hat=u_hat, R_g=R_g,
                           activation_name=act, loss_name=loss_name, delta=delta)
