"""The transformer of Theorems 1 and 2: a finite B-spline expansion g(X) = sum_n c_n prod_{i,c} N_m(2^k x_ic - j).

Stream of every token (width W = w N + d + l + 1): x_i (d), the one-hot position e_i (l), ``out``, and per
atom n the slots of the B-spline recipe (`program.spline_scratch`), 3 num_saw(m, d) sawtooth slots and the
partner slot Z_n. The same (token-wise) feed-forward weights act on every token; only the first two layers
see the position, through gates e_i x_c that are exact in floating point:

0. ``pos``: the complement code e_i - 1 = -relu(1 - e_i), written into l scratch slots that are still free
   (the spline's; only when N (w - d) < l does the stream grow by the missing slots);
1. ``feat``: u_{n,c} = sum_i 2^{k[n,i,c]} relu(x_c + (e_i - 1)) - sum_i j[n,i,c] e_i, so token i holds
   u = 2^{k[n,i,c]} x_ic - j[n,i,c]; the gate's pre-activation has two non-zero terms, x_c + 0 = x_c exactly
   or x_c - 1 <= 0, so the gate is exact (the one-layer gate relu(x_c + e_i - 1) rounds x_c + 1 and loses
   the bits of x_c below 2^-53, an error that 2^k multiplies: 0.27 at k = 52); ``feat`` also clears the
   complement slots;
2. ``spline.*``: A_n = prod_c N_m(u_{n,c}) by Lemma 5's recipe (`program.emit_spline`);
3. rounds t = 1..ceil(log2 l): one softmax head whose logits are gamma B^(t)_ij (query e_i, key gamma B e_j):
   token i = 0 mod 2^t looks at p = i + 2^(t-1) < l, so Z_n ~ A_n(p); a positional gate sets Z_n = 1 at
   every token without a partner; then A_n := clip(prod(A_n, Z_n));
4. ``head``: out = sum_n c_n A_n, read at token 0.

Error (per atom, values kept in [0, 1]): e_t <= 2 e_{t-1} + (1 - delta) + 4^-m_q, e_0 = bspline_net_error,
so |model - g| <= sum_n |c_n| (2^T0 e_0 + (2^T0 - 1)(1 - delta + 4^-m_q)) = `error_bound`.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from tfbook import validate
from tfbook.besov import formulas
from tfbook.besov.gadgets import BesovConstruction, bspline_net_error
from tfbook.besov.program import (FFLayer, Stream, add_clip, emit_clip, emit_product, emit_spline, num_saw,
                                  spline_depth, spline_scratch)
from tfbook.besov.references import check_atoms, check_memory, order
from tfbook.device import DTYPE
from tfbook.layers import Attention, Block, Transformer, weight_from_entries


def rounds(l: int) -> int:
    """T0 = ceil(log2 l) (0 for l = 1)."""
    return (l - 1).bit_length()


def partner(i: int, t: int, l: int):
    """Token i's partner p = i + 2^(t-1) in round t, or None (i not 0 mod 2^t, or p >= l)."""
    if i % 2**t or i + 2 ** (t - 1) >= l:
        return None
    return i + 2 ** (t - 1)


def leak(l: int, gamma: float) -> float:
    """1 - delta = (l-1)/(l-1+e^gamma), computed without overflow."""
    e = math.exp(-gamma)
    return (l - 1) * e / (1 + (l - 1) * e)


def atom_width(m: int, d: int) -> int:
    """Per-atom stream width w: d (u, two ramps, m+1 s_j[, m+1 powers]) + 3 num_saw + 1 (partner slot)."""
    return d * (3 + (m + 1) * (2 if m >= 2 else 1)) + 3 * num_saw(m, d) + 1


class BesovTransformer(BesovConstruction):
    """The built network; ``model(X)`` maps (batch, l, d) in [0, 1] to (batch,)."""

    def __init__(self, k: torch.Tensor, j: torch.Tensor, coeffs: torch.Tensor, m: int, m_q: int, gamma: float):
        N, l, d = k.shape
        self.N, self.l, self.d, self.m, self.m_q, self.gamma = N, l, d, m, m_q, gamma
        st = Stream()
        x, pe, out = st.alloc("x", (d,)), st.alloc("pe", (l,)), st.alloc("out", (1,))
        U = st.alloc("u", (N, d))
        slots = {name: st.alloc(name, shape) for name, shape in spline_scratch((N,), m, d).items()}
        saw = st.alloc("saw", (N, num_saw(m, d), 3))
        Z = st.alloc("partner", (N,))
        free = np.concatenate([a.ravel() for a in slots.values()] + [saw.ravel(), Z.ravel()])
        comp = np.concatenate([free, st.alloc("complement", (max(0, l - len(free)),)).ravel()])[:l]
        D = st.dim
        prog: list = []
        pos = FFLayer(D)  # complement code: comp_i = -relu(1 - e_i) = e_i - 1
        pos.units([(pe, -1.0)], [(comp, -1.0)], bias=1.0)
        prog.append(("pos", pos))
        feat = FFLayer(D)  # u = sum_i 2^k relu(x_c + comp_i) - sum_i j e_i; comp := 0
        two_k = (2.0 ** k.numpy()).transpose(2, 1, 0)  # (d, l, N)
        feat.units([(x[:, None], 1.0), (comp[None, :], 1.0)], [(U.T[:, None, :], two_k)])
        jj = j.numpy().astype(float).transpose(1, 0, 2).reshape(l, N * d)  # (l, N d)
        feat.units([(pe, 1.0)], [(U.reshape(1, N * d), -jj)])
        feat.units([(comp, -1.0)], [(comp, 1.0)])  # comp + relu(-comp) = 0
        prog.append(("feat", feat))
        A = emit_spline(prog, D, U, slots, saw, m, m_q)  # (N,)
        attention = {}
        for t in range(1, rounds(l) + 1):
            name = f"round{t}"
            attention[len(prog)] = self._round_attention(t, l, D, pe, A, Z, gamma, f"{name}.attn")
            gate = FFLayer(D)  # Z := clip(Z + g) with g = 1 at tokens without a partner: Z = 1 there
            g = np.array([0.0 if partner(i, t, l) is not None else 1.0 for i in range(l)])
            gate.units([(Z, 1.0)] + [(pe[i], g[i]) for i in range(l)], [(Z, 1.0)], shape=Z.shape)
            gate.units([(Z, 1.0)] + [(pe[i], g[i]) for i in range(l)], [(Z, -1.0)], bias=-1.0, shape=Z.shape)
            gate.units([(Z, 1.0)], [(Z, -1.0)])
            add_clip(gate, A)
            prog.append((f"{name}.gate", gate))
            emit_product(prog, D, A, Z, saw[:, 0, :], 1.0, m_q, f"{name}.prod", clear_y=True)
            emit_clip(prog, D, A, f"{name}.clip")
        head = FFLayer(D)
        head.units([(A, 1.0)], [(np.full(N, out[0]), coeffs.numpy())])
        prog.append(("head", head))
        blocks, pending = [], None
        for idx, (name, layer) in enumerate(prog):
            ff = layer.build(name)
            if idx in attention:
                blocks.append(Block(attention=attention[idx], feed_forward=ff))
            else:
                blocks.append(Block(feed_forward=ff))
        self_transformer = Transformer(blocks)
        super().__init__(st.layout, self_transformer.named_sublayers())
        self.transformer = self_transformer
        self.out_index = int(out[0])
        self.attention_names = [f"round{t}.attn" for t in range(1, rounds(l) + 1)]

    @staticmethod
    def _round_attention(t: int, l: int, D: int, pe, A, Z, gamma: float, name: str) -> Attention:
        N = len(A)
        W_Q = torch.zeros(1, l, D, dtype=DTYPE)
        W_K = torch.zeros(1, l, D, dtype=DTYPE)
        W_Q[0, torch.arange(l), torch.as_tensor(pe)] = 1.0  # q_i = e_i
        for i in range(l):
            p = partner(i, t, l)
            if p is not None:
                W_K[0, i, int(pe[p])] = gamma  # k_j = gamma B[:, j], B[i, p] = 1
        zero, atoms = np.zeros(N, dtype=np.int64), np.arange(N)  # (N,): head 0, value row n per atom
        W_V = weight_from_entries((1, N, D), [(zero, atoms, np.asarray(A), np.ones(N))])  # reads atom n's slot
        W_O = weight_from_entries((1, D, N), [(zero, np.asarray(Z), atoms, np.ones(N))])  # writes it back
        return Attention.stacked(W_Q, W_K, W_V, W_O, name=name)

    # --- the paper's interface ----------------------------------------------------------------------
    def embed(self, X) -> torch.Tensor:
        """(batch, l, W): x_i in coordinates 0..d-1, e_i in d..d+l-1, zeros elsewhere."""
        X = validate.tensor("X", X, shape=(None, self.l, self.d), low=0.0, high=1.0)
        pe = torch.eye(self.l, dtype=DTYPE, device=X.device).expand(X.shape[0], -1, -1)
        return super().embed(x=X, pe=pe)

    def forward(self, X) -> torch.Tensor:
        H = self.embed(X)
        return super().forward(H)[:, 0, self.out_index]

    def attention_matrices(self, X) -> list[torch.Tensor]:
        """One (batch, l, l) attention matrix per attention layer (round)."""
        trace = self.trace(self.embed(X))
        return [trace.attention[name][:, 0] for name in self.attention_names]

    def sizes(self) -> dict:
        """The paper's TN(L, T, E, W, H, S, B), counted from the built layers (S adds l for the encoding)."""
        c = self.counted_sizes()
        return {"L": c.ff_layers, "T": c.attention_layers, "E": self.l, "W": self.layout.dim,
                "H": c.max_heads if c.attention_layers else 0, "S": c.nonzero + self.l,
                "B": max(1.0, c.max_abs_weight)}


BYTES_PER_ENTRY = 128  # peak build bytes per weight entry (index lists, COO, CSR); measured 58 to 93


def build_memory(N: int, l: int, d: int, m: int, m_q: int) -> float:
    """Estimated peak bytes of `build_transformer`: BYTES_PER_ENTRY N (1.5 w L + 4 l d), w = `atom_width`
    and L from `transformer_sizes` (measured per atom: 21 KB at m = d = 1, l = 2, estimate 23 KB; 102 KB at
    l = 16, estimate 103 KB; 518 KB at m = 4, d = 3, l = 4, estimate 1.2 MB)."""
    L = transformer_sizes(N, l, d, m, m_q)["L"]
    return BYTES_PER_ENTRY * N * (1.5 * atom_width(m, d) * L + 4 * l * d)


def build_transformer(k, j, coeffs, m: int, m_q: int, gamma: float) -> BesovTransformer:
    """The transformer for g(X) = sum_n coeffs[n] prod_{i,c} N_m(2^k X - j) (atoms k, j of shape (N, l, d));
    ValueError when `build_memory` exceeds `tfbook.besov.references.MEMORY_LIMIT`."""
    m, m_q = order("m", m), order("m_q", m_q)
    gamma = validate.real("gamma", gamma, low=0, low_open=True)
    k, j, c = check_atoms(k, j, coeffs, m)
    N, l, d = k.shape
    check_memory("N", N, N, build_memory(N, l, d, m, m_q))
    return BesovTransformer(k, j, c.cpu(), m, m_q, gamma)


def transformer_sizes(N: int, l: int, d: int, m: int, m_q: int) -> dict:
    """Closed-form L, T, E, W, H of `build_transformer` for N atoms of l tokens with d features."""
    N, l, d = order("N", N), order("l", l), order("d", d)
    m, m_q = order("m", m), order("m_q", m_q)
    T0 = rounds(l)
    L = 2 + spline_depth(m, d, m_q) + T0 * (m_q + 2) + 1
    w = atom_width(m, d)
    extra = max(0, l - N * (w - d))  # complement slots the free scratch cannot hold
    return {"L": L, "T": T0, "E": l, "W": w * N + d + l + 1 + extra, "H": 1 if T0 else 0}


def error_bound(coeffs, l: int, d: int, m: int, m_q: int, gamma: float) -> float:
    """sum_n |c_n| (2^T0 e_s + (2^T0 - 1)(1 - delta + 4^-m_q)), e_s = bspline_net_error(m, d, m_q)."""
    c = validate.tensor("coeffs", coeffs, shape=(None,))
    l, d, m, m_q = order("l", l), order("d", d), order("m", m), order("m_q", m_q)
    gamma = validate.real("gamma", gamma, low=0, low_open=True)
    T = 2 ** rounds(l)
    per_atom = T * bspline_net_error(m, d, m_q) + (T - 1) * (leak(l, gamma) + 4.0**-m_q)
    return float(c.abs().sum()) * per_atom


def paper_width(N: int, l: int, d: int, m: int) -> int:
    """Theorem 1's W = W_0 N + E with W_0 = 6 d m (m+2) + 2 d and E = l."""
    N, l, d, m = order("N", N), order("l", l), order("d", d), order("m", m)
    return formulas.thm1_width(N, l, d, m)


def random_atoms(N: int, l: int, d: int, m: int, kmax: int, seed: int = 0):
    """N atoms with k uniform in 0..kmax and j uniform in {-m, ..., 2^k - 1} (atoms that meet [0, 1]); normal coeffs."""
    N, l, d, m = order("N", N), order("l", l), order("d", d), order("m", m)
    kmax = order("kmax", kmax, 0)
    gen = np.random.default_rng(validate.positive_int("seed", seed, 0))
    k = gen.integers(0, kmax + 1, size=(N, l, d))
    j = np.floor(gen.random((N, l, d)) * (2.0**k + m)).astype(np.int64) - m
    return torch.as_tensor(k), torch.as_tensor(j), torch.as_tensor(gen.standard_normal(N))


def support_samples(k, j, m: int, per_atom: int, seed: int = 0) -> torch.Tensor:
    """(N per_atom, l, d) points drawn uniformly inside each atom's support box intersected with [0, 1]."""
    m = order("m", m)
    k, j, _ = check_atoms(k, j, torch.zeros(len(k)), m)
    per_atom = order("per_atom", per_atom)
    gen = torch.Generator().manual_seed(validate.positive_int("seed", seed, 0))
    lo = (j.to(DTYPE) / 2.0**k).clamp(0, 1)
    hi = ((j + m + 1).to(DTYPE) / 2.0**k).clamp(0, 1)
    r = torch.rand((per_atom,) + tuple(k.shape), generator=gen, dtype=DTYPE)
    return (lo + r * (hi - lo)).reshape(-1, k.shape[1], k.shape[2])


def fnn_baseline(k, j, coeffs, m: int, m_q: int):
    """The same expansion by a ReLU network on the flattened input R^{dl} (one token, no sharing):
    every atom needs l d spline factors instead of d, so the width grows linearly in l."""
    from tfbook.besov.gadgets import SlotNet

    m, m_q = order("m", m), order("m_q", m_q)
    k, j, c = check_atoms(k, j, coeffs, m)
    N, l, d = k.shape
    L = 2 + spline_depth(m, l * d, m_q)
    check_memory("N", N, N, BYTES_PER_ENTRY * N * (1.5 * atom_width(m, l * d) * L + 4 * l * d))
    st = Stream()
    x = st.alloc("x", (l * d,))
    U = st.alloc("u", (N, l * d))
    slots = {name: st.alloc(name, shape) for name, shape in spline_scratch((N,), m, l * d).items()}
    saw = st.alloc("saw", (N, num_saw(m, l * d), 3))
    out = st.alloc("out", (1,))
    D = st.dim
    prog: list = []
    feat = FFLayer(D)  # u = 2^k x - j with x >= 0: relu(x) carries x, a constant unit relu(1) carries -j
    feat.units([(x, 1.0)], [(U.T, (2.0 ** k.numpy()).reshape(N, l * d).T)])
    feat.units([], [(U.reshape(1, -1), -j.numpy().astype(float).reshape(1, -1))], bias=1.0, shape=(1,))
    prog.append(("feat", feat))
    A = emit_spline(prog, D, U, slots, saw, m, m_q)
    head = FFLayer(D)
    head.units([(A, 1.0)], [(np.full(N, out[0]), c.numpy())])
    prog.append(("head", head))
    return SlotNet(st.layout, [(name, layer.build(name)) for name, layer in prog], x, int(out[0]))
