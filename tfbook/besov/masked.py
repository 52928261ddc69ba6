"""Theorem 5 compiled: the masked approximant TN o Q_{t,u} of a two-region target as a transformer.

Partition of [0, 1]^{l x d}: region 0 = {x_{0,0} < 1/2}, region 1 = {x_{0,0} >= 1/2}; region r ranks the tokens
by ``rankings[r]`` (a permutation of 1..l) and keeps S_r = {j : rankings[r, j] <= t}; the other tokens are
rounded up, x -> ceil(u x)/u (Definition 10). The mask Q is applied before the network, as in the paper (an
oracle that knows the region). The network TN then acts on Q(X) and computes the region *itself*:

* atoms (`masked_atoms`): per region, the combination-technique sparse grid of level K on the kept tokens
  tensored with the level-0 hats N_1(x + 1) = 1 - x, N_1(x) = x on each rounded token (the proof's R~_K:
  every atom has k = 0 on the rounded tokens), coefficients from f at the nodes;
* layers: those of `transformer.build_transformer` with m = 1 (pos, feat, spline, ceil(log2 l) attention
  rounds), plus two gate slots computed token-wise from the stream coordinate x_{.,0}:
  ``pos`` writes c_0 = relu((x - 1/2 + h)/h) - relu((x - 1/2)/h) (0 below 1/2 - h, 1 from 1/2 on), ``feat``
  writes c_1 = relu(1 - c_0); the ``head`` adds sum_n c_n relu(A_n - c_{r(n)}), which is A_n for the atoms of
  the region (gate 0) and 0 for the others (gate 1, A_n <= 1). For h a power of two in [2^-53, 1/4] every
  gate value is exact in float64 outside the band (1/2 - h, 1/2), where the network cannot decide the
  region: inputs whose token 0 lies there raise ValueError. Q keeps token 0 of region 0 (validated), and
  rounding up keeps x_{0,0} >= 1/2 in region 1, so the gate of Q(X) is the region of X.

Error: outside the band the gate is exact, so |TN(Q X) - g_r(Q X)| <= sum_{n in r} |c_n| (2^T0 - 1)
(1 - delta + 4^-m_q) (`masked_error_bound`, Theorem 1's per-atom bound with the exact m = 1 spline).
"""
from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np
import torch

from tfbook import validate
from tfbook.besov.gadgets import BesovConstruction
from tfbook.besov.grids import ATOM_BYTES, quantize, sparse_count, sparse_interpolant
from tfbook.besov.program import (FFLayer, Stream, add_clip, emit_clip, emit_product, emit_spline, num_saw,
                                  spline_scratch)
from tfbook.besov.rates import D as D_Kd
from tfbook.besov.references import check_atoms, check_memory, expansion, order
from tfbook.besov.transformer import BesovTransformer, build_memory, leak, partner, rounds, transformer_sizes
from tfbook.claims import paper_formula
from tfbook.device import DTYPE
from tfbook.layers import Block, Transformer

THETA = 0.5  # the region threshold on x_{0,0}
MIN_BAND = 2.0**-53  # the narrowest band whose gate is exact (see `build_masked_transformer`)


def regions(X) -> torch.Tensor:
    """(batch,) region index: 0 where X[:, 0, 0] < 1/2, 1 elsewhere."""
    X = validate.tensor("X", X, shape=(None, None, None))
    return (X[:, 0, 0] >= THETA).long()


def check_rankings(rankings, t: int) -> tuple[torch.Tensor, int]:
    """Two rankings (2, l), each a permutation of 1..l, with token 0 kept in region 0 (rank <= t)."""
    R = torch.as_tensor(np.asarray(rankings))
    if R.ndim != 2 or R.shape[0] != 2 or R.is_floating_point() or R.dtype == torch.bool:
        raise ValueError(f"rankings must be an integer array of shape (2, l), got {tuple(R.shape)} {R.dtype}")
    if not bool((R.sort(dim=1).values == torch.arange(1, R.shape[1] + 1)).all()):
        raise ValueError("rankings must have every row a permutation of 1..l")
    t = order("t", t)
    if int(R[0, 0]) > t:
        raise ValueError(f"rankings[0, 0] must be <= t = {t}: region 0's gate reads token 0, which must be kept")
    return R.long(), t


def keep_mask(X, rankings, t: int) -> torch.Tensor:
    """(batch, l) boolean: token j kept iff rankings[region(X), j] <= t."""
    R, t = check_rankings(rankings, t)
    return R.to(X.device)[regions(X)] <= t  # indexed on X's device: no copy to the host


def masked_count(K: int, ranking, t: int) -> int:
    """Atoms of `masked_atoms`: 2^(rounded tokens) sparse grids of level K on the kept tokens."""
    R = np.asarray(ranking)
    if R.ndim != 1 or sorted(R.tolist()) != list(range(1, len(R) + 1)):
        raise ValueError(f"ranking must be a permutation of 1..l, got {ranking!r}")
    K, t = order("K", K), order("t", t)
    kept = int((R <= t).sum())
    return 2 ** (len(R) - kept) * sparse_count(kept, K)  # t >= 1 keeps the token of rank 1


def masked_atoms(f: Callable, K: int, ranking, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One region's atoms (k, j, coeffs), shapes (N, l, 1): the level-K sparse grid on the kept tokens
    (rank <= t) tensored with the level-0 hats (k = 0, j in {-1, 0}) on the rounded tokens. ValueError when
    `masked_count` atoms are estimated above `tfbook.besov.references.MEMORY_LIMIT`."""
    count = masked_count(K, ranking, t)
    R = np.asarray(ranking)
    l = len(R)
    check_memory("K", K, count, ATOM_BYTES * count * l)
    kept = [i for i in range(l) if R[i] <= t]
    dropped = [i for i in range(l) if R[i] > t]
    ks, js, cs = [], [], []
    for z in itertools.product((0.0, 1.0), repeat=len(dropped)):  # the level-0 node of each rounded token

        def g(Y, z=z):  # f on the kept tokens, rounded tokens at their nodes
            X = torch.empty(len(Y), l, 1, dtype=DTYPE)
            X[:, kept, 0] = Y[..., 0]
            X[:, dropped, 0] = torch.tensor(z, dtype=DTYPE)
            return f(X)

        k_s, j_s, c_s = sparse_interpolant(g, len(kept), K)
        k = torch.zeros(len(c_s), l, 1, dtype=torch.int64)
        j = torch.zeros(len(c_s), l, 1, dtype=torch.int64)
        k[:, kept], j[:, kept] = k_s, j_s
        j[:, dropped, 0] = torch.tensor(z, dtype=torch.int64) - 1  # node 0: N_1(x + 1); node 1: N_1(x)
        ks.append(k), js.append(j), cs.append(c_s)
    return torch.cat(ks), torch.cat(js), torch.cat(cs)


def masked_reference(X, atoms: list, rankings, t: int, u: float) -> torch.Tensor:
    """g_{r(X)}(Q(X)) from the exact expansions (`references.expansion`) and the oracle region."""
    X = validate.tensor("X", X, shape=(None, None, 1), low=0.0, high=1.0)
    Y = quantize(X, keep_mask(X, rankings, t), u)
    r = regions(X)
    out = torch.zeros(len(X), dtype=DTYPE, device=X.device)
    for reg, (k, j, c) in enumerate(atoms):
        sel = r == reg
        if bool(sel.any()):
            out[sel] = expansion(Y[sel], k, j, c, 1)
    return out


class MaskedTransformer(BesovConstruction):
    """TN of Theorem 5 with its region gate; ``model(X)`` = TN(Q(X)) for X (batch, l, 1) in [0, 1]."""

    def __init__(self, k, j, region, coeffs, rankings, t: int, u: float, m_q: int, gamma: float, band: float):
        N, l, d = k.shape
        self.N, self.l, self.d, self.m, self.m_q, self.gamma = N, l, d, 1, m_q, gamma
        self.rankings, self.t, self.u, self.band = rankings, t, u, band
        self.region_of_atom = region
        st = Stream()
        x, pe, out = st.alloc("x", (d,)), st.alloc("pe", (l,)), st.alloc("out", (1,))
        gate = st.alloc("gate", (2,))  # c_0 kills region-0 atoms, c_1 region-1 atoms (0: keep, 1: kill)
        U = st.alloc("u", (N, d))
        slots = {name: st.alloc(name, shape) for name, shape in spline_scratch((N,), 1, d).items()}
        saw = st.alloc("saw", (N, num_saw(1, d), 3))
        Z = st.alloc("partner", (N,))
        free = np.concatenate([a.ravel() for a in slots.values()] + [saw.ravel(), Z.ravel()])
        comp = np.concatenate([free, st.alloc("complement", (max(0, l - len(free)),)).ravel()])[:l]
        D = st.dim
        prog: list = []
        pos = FFLayer(D)  # complement code comp_i = e_i - 1, and the region gate c_0 from x_0
        pos.units([(pe, -1.0)], [(comp, -1.0)], bias=1.0)
        pos.units([(x[:1], 1.0 / band)], [(gate[:1], 1.0)], bias=1.0 - THETA / band)
        pos.units([(x[:1], 1.0 / band)], [(gate[:1], -1.0)], bias=-THETA / band)
        prog.append(("pos", pos))
        feat = FFLayer(D)  # u = 2^k x - j (as in build_transformer); c_1 = relu(1 - c_0)
        two_k = (2.0 ** k.numpy()).transpose(2, 1, 0)  # (d, l, N)
        feat.units([(x[:, None], 1.0), (comp[None, :], 1.0)], [(U.T[:, None, :], two_k)])
        jj = j.numpy().astype(float).transpose(1, 0, 2).reshape(l, N * d)  # (l, N d)
        feat.units([(pe, 1.0)], [(U.reshape(1, N * d), -jj)])
        feat.units([(comp, -1.0)], [(comp, 1.0)])
        feat.units([(gate[:1], -1.0)], [(gate[1:], 1.0)], bias=1.0)
        prog.append(("feat", feat))
        A = emit_spline(prog, D, U, slots, saw, 1, m_q)  # (N,)
        attention = {}
        for r in range(1, rounds(l) + 1):
            name = f"round{r}"
            attention[len(prog)] = BesovTransformer._round_attention(r, l, D, pe, A, Z, gamma, f"{name}.attn")
            gl = FFLayer(D)  # Z := 1 at tokens without a partner, then clip (as in build_transformer)
            g = np.array([0.0 if partner(i, r, l) is not None else 1.0 for i in range(l)])
            gl.units([(Z, 1.0)] + [(pe[i], g[i]) for i in range(l)], [(Z, 1.0)], shape=Z.shape)
            gl.units([(Z, 1.0)] + [(pe[i], g[i]) for i in range(l)], [(Z, -1.0)], bias=-1.0, shape=Z.shape)
            gl.units([(Z, 1.0)], [(Z, -1.0)])
            add_clip(gl, A)
            prog.append((f"{name}.gate", gl))
            emit_product(prog, D, A, Z, saw[:, 0, :], 1.0, m_q, f"{name}.prod", clear_y=True)
            emit_clip(prog, D, A, f"{name}.clip")
        head = FFLayer(D)  # out = sum_n c_n relu(A_n - gate[region n])
        head.units([(A, 1.0), (gate[region.numpy()], -1.0)], [(np.full(N, out[0]), coeffs.numpy())])
        prog.append(("head", head))
        blocks = [Block(attention=attention[i], feed_forward=layer.build(name)) if i in attention
                  else Block(feed_forward=layer.build(name)) for i, (name, layer) in enumerate(prog)]
        transformer = Transformer(blocks)
        super().__init__(st.layout, transformer.named_sublayers())
        self.transformer = transformer
        self.out_index = int(out[0])

    def undecided(self, X) -> torch.Tensor:
        """(batch,) boolean: token 0 of X in the band (1/2 - h, 1/2) where the gate is not 0 or 1."""
        X = validate.tensor("X", X, shape=(None, self.l, self.d))
        return (X[:, 0, 0] > THETA - self.band) & (X[:, 0, 0] < THETA)

    def network(self, Y) -> torch.Tensor:
        """TN alone on already masked sentences Y (batch, l, 1); the gate reads Y[:, 0, 0]."""
        Y = validate.tensor("Y", Y, shape=(None, self.l, self.d), low=0.0, high=1.0)
        pe = torch.eye(self.l, dtype=DTYPE, device=Y.device).expand(Y.shape[0], -1, -1)
        return super().forward(super().embed(x=Y, pe=pe))[:, 0, self.out_index]

    def forward(self, X) -> torch.Tensor:
        """TN(Q(X)); ValueError if some X has token 0 inside the undecided band."""
        X = validate.tensor("X", X, shape=(None, self.l, self.d), low=0.0, high=1.0)
        bad = int(self.undecided(X).sum())
        if bad:
            raise ValueError(f"X has {bad} sentence(s) with x_(0,0) in the band ({THETA - self.band:.8g}, "
                             f"{THETA}); the gate cannot tell the region there")
        return self.network(quantize(X, keep_mask(X, self.rankings, self.t), self.u))

    def sizes(self) -> dict:
        """TN(L, T, E, W, H, S, B) counted from the built layers (S adds l for the encoding)."""
        c = self.counted_sizes()
        return {"L": c.ff_layers, "T": c.attention_layers, "E": self.l, "W": self.layout.dim,
                "H": c.max_heads if c.attention_layers else 0, "S": c.nonzero + self.l,
                "B": max(1.0, c.max_abs_weight)}


def build_masked_transformer(fs, K: int, rankings, t: int, m_q: int, gamma: float,
                             band: float = 2.0**-20) -> MaskedTransformer:
    """TN o Q_{t, 2^K} for the target equal to fs[r] on region r (`regions`; each fs[r] a callable on all of
    [0, 1]^l, the region's smooth piece): atoms `masked_atoms(fs[r], K, rankings[r], t)`.

    ``band`` = h must be a power of two in [2^-53, 1/4]: the gate's pre-activations x/h + 1 - 1/(2h) and
    x/h - 1/(2h) are then exact at every x in [0, 1] outside the band; at h = 2^-54 and x = 1, x/h + 1 -
    1/(2h) = 2^53 + 1 rounds to 2^53, the gate reads 0 and region 1 got region 0's answer. ValueError when
    the atoms and the network are estimated above `tfbook.besov.references.MEMORY_LIMIT` (checked before
    any atom is listed)."""
    R, t = check_rankings(rankings, t)
    K, m_q = order("K", K), order("m_q", m_q)
    gamma = validate.real("gamma", gamma, low=0, low_open=True)
    band = validate.real("band", band, low=MIN_BAND, high=0.25)
    if math.frexp(band)[0] != 0.5:
        raise ValueError(f"band must be a power of two in [2^-53, 1/4] (exact gate), got {band!r}")
    if not (isinstance(fs, (list, tuple)) and len(fs) == 2 and all(callable(f) for f in fs)):
        raise ValueError(f"fs must be two callables (one per region) on (batch, l, 1) sentences, got {fs!r}")
    l = R.shape[1]
    N = sum(masked_count(K, R[r].numpy(), t) for r in range(2))
    check_memory("K", K, N, ATOM_BYTES * N * l + build_memory(N, l, 1, 1, m_q))
    atoms = [masked_atoms(fs[r], K, R[r], t) for r in range(2)]
    k = torch.cat([a[0] for a in atoms])
    j = torch.cat([a[1] for a in atoms])
    c = torch.cat([a[2] for a in atoms])
    region = torch.cat([torch.full((len(a[2]),), r, dtype=torch.int64) for r, a in enumerate(atoms)])
    k, j, c = check_atoms(k, j, c, 1)
    model = MaskedTransformer(k, j, region, c.cpu(), R, t, 2.0**K, m_q, gamma, band)
    model.atoms = atoms
    return model


def masked_error_bound(model: MaskedTransformer) -> float:
    """max_r sum_{n in r} |c_n| (2^T0 - 1)(1 - delta + 4^-m_q): the bound on |TN(Q X) - g_r(Q X)| off the band."""
    T = 2 ** rounds(model.l)
    per_atom = (T - 1) * (leak(model.l, model.gamma) + 4.0**-model.m_q)
    return max(float(a[2].abs().sum()) for a in model.atoms) * per_atom


def masked_sizes(N: int, l: int, m_q: int) -> dict:
    """Closed-form L, T, E, W, H of `build_masked_transformer` (d = 1, m = 1): build_transformer's plus 2 gate slots."""
    s = transformer_sizes(N, l, 1, 1, m_q)
    return {**s, "W": s["W"] + 2}


@paper_formula
def thm5_atoms(K: int, l: int, d: int, num_regions: int) -> float:
    """The proof's atom count per region, #E(K) <= (2 + (1 - 2^-nu)^-1) 2^K D_{K*, dl} at nu = inf
    (delta = 0), summed over the regions: num_regions 3 2^K D_{K, dl}."""
    K, l, d = order("K", K), order("l", l), order("d", d)
    return order("num_regions", num_regions) * 3 * 2**K * D_Kd(K, d * l)


__all__ = ["THETA", "MaskedTransformer", "build_masked_transformer", "check_rankings", "keep_mask", "masked_atoms",
           "masked_count",
           "masked_error_bound", "masked_reference", "masked_sizes", "regions", "thm5_atoms"]
