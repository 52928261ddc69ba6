"""The Theorem 1 transformer, assembled from named slots (Takeshita & Imaizumi, Sections 5-8).

Blocks, in order (each block = optional attention, then a residual ReLU feed-forward layer):

1. TF_0 (Prop 1): (s-1) stages of L+1 feed-forward blocks; stage t builds every column monomial of
   degree t+1 as psi(monomial of degree t, x_i) with the product gadget. Attention is absent (zero), so
   columns are processed independently.
2. One attention block (Prop 2): W_Q = W_K = 0, so softmax weights are exactly 1/n; W_V reads the
   monomial slots and W_O writes n times their mean, i.e. P_alpha = sum_i x_i^alpha, into every column.
3. TF_2 (Lemma 3, eq. (3), Prop 3): (s-1) stages of L+2 blocks; stage r builds every rank-r P_T as
   clip_[0, M_r](n^r psi(P_{T^-} / n^{r-1}, P_{alpha_r} / n) - sum_j P_{T_j}).
4. Read-out (Lemma 6, Section 8): the layers that create each P_T also write c_T P_T into the ``out``
   slot; the constant c_0 enters as a value bias of the attention. Output: ``out`` of column 0.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional

import torch
from torch import nn

from tfbook.colsym.algebra import (Key, canonical, degree, enumerate_msp, enumerate_multi_indices, lemma3_terms,
                                   term_coefficient)
from tfbook.colsym.bounds import falling_factorial, impl_depth
from tfbook.colsym.squaring import check_positive_int, choose_k, sawtooth_coefficients
from tfbook.device import DTYPE
from tfbook.layers import Attention, Block, HeadWeights, Transformer
from tfbook.layout import FFBuilder, Layout, SlotKey

CLIP_LEVELS = ("falling", "paper")


def validate_coeffs(coeffs: Mapping, d: int, signed: bool = False) -> dict[Key, float]:
    """Canonical {T: c_T} (keys with equal multisets are summed); raises ValueError on bad input."""
    if not isinstance(coeffs, Mapping) or len(coeffs) == 0:
        raise ValueError("coeffs must be a non-empty dict {T: coefficient}")
    out: dict[Key, float] = {}
    for T, c in coeffs.items():
        if not isinstance(T, tuple):
            raise ValueError(f"each key of coeffs must be a tuple of multi-indices, got {T!r}")
        key = canonical(T, d) if T else ()
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c):
            raise ValueError(f"coefficient of {T!r} must be a finite number, got {c!r}")
        if c < 0 and not signed:
            raise ValueError(
                f"coefficient of {T!r} is negative ({c}); Theorem 1 needs non-negative coefficients "
                "(pass signed=True for the signed variant and its own bound)"
            )
        out[key] = out.get(key, 0.0) + float(c)
    return out


class _Plan:
    """Per-block feed-forward builders and the single attention head, over one growing `Layout`."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.ffs: dict[int, FFBuilder] = {}

    def ff(self, block: int) -> FFBuilder:
        return self.ffs.setdefault(block, FFBuilder(self.layout))


def add_product(plan: _Plan, block0: int, u: Mapping[SlotKey, float], v: Mapping[SlotKey, float],
                tag: str, k: int, L: int) -> str:
    """The product gadget psi(u, v) = relu(2 f((u+v)/2) - f(u)/2 - f(v)/2), f = f_{Lk}, in blocks block0..block0+L.

    ``u`` and ``v`` are linear forms of the stream with values in [0, 1]. Slots: ``tag.y`` (three
    sawtooth channels), ``tag.acc`` (the accumulator phi) and ``tag.psi`` (the output, returned).
    """
    for name, size in (("y", 3), ("acc", 1), ("psi", 1)):
        plan.layout.add(f"{tag}.{name}", size)
    K = 2**k
    a, b = sawtooth_coefficients(k)
    mid = {key: 0.5 * u.get(key, 0.0) + 0.5 * v.get(key, 0.0) for key in set(u) | set(v)}
    forms, weights = [mid, dict(u), dict(v)], [2.0, -0.5, -0.5]
    for ell in range(1, L + 1):
        ff, scale, last = plan.ff(block0 + ell - 1), 4.0 ** (-(ell - 1) * k), ell == L
        for ch, (form, c) in enumerate(zip(forms, weights)):
            read = form if ell == 1 else {(f"{tag}.y", ch): 1.0}
            for t in range(K):
                write = {f"{tag}.acc": -c * scale * float(b[t]) + (c if (ell == 1 and t == 0) else 0.0)}
                if not last:  # y <- g_k(y): the residual adds g_k(y) - y (y = relu(y) read by the t = 0 unit)
                    write[(f"{tag}.y", ch)] = float(a[t]) - (1.0 if (ell > 1 and t == 0) else 0.0)
                ff.unit(read=read, bias=-t / K, write=write)
    plan.ff(block0 + L).unit(read={f"{tag}.acc": 1.0}, write={f"{tag}.psi": 1.0})
    return f"{tag}.psi"


class ColsymTransformer(nn.Module):
    """The constructed transformer; ``model(X)`` maps (batch, d, n) inputs in [0, 1] to (batch,) values."""

    def __init__(self, layout: Layout, transformer: Transformer, d: int, n: int, s: int, N: int, L: int, k: int,
                 keys: dict[int, list[Key]], attention_block: int):
        super().__init__()
        self.layout, self.transformer = layout, transformer
        self.d, self.n, self.s, self.N, self.L, self.k = d, n, s, N, L, k
        self.keys, self.attention_block = keys, attention_block

    @property
    def width(self) -> int:
        """Largest hidden width of a layer (feed-forward units; the attention's value width counts too)."""
        att = self.transformer.blocks[self.attention_block].attention
        return max(self.transformer.width, att.heads[0].W_V.shape[0])

    @property
    def depth(self) -> int:
        """Number of blocks (attention + feed-forward), as in the paper's Definition 2."""
        return self.transformer.depth

    @property
    def embed_dim(self) -> int:
        return self.layout.dim

    def num_parameters(self) -> int:
        """Parameters in the paper's sense: depth blocks of one head (4 m D) and an FF layer (2 m D + m + D)."""
        m, D = self.width, self.embed_dim
        return self.depth * (6 * m * D + m + D)

    def num_stored_parameters(self) -> int:
        """Scalars actually stored (absent zero attentions not counted, layers at their own widths)."""
        return self.transformer.num_parameters()

    def num_nonzero(self) -> int:
        return self.transformer.num_nonzero()

    def embed(self, X: torch.Tensor) -> torch.Tensor:
        """(batch, d, n) -> (batch, n, D): the columns of X become tokens, [X; 0]."""
        X = torch.as_tensor(X)
        if X.ndim != 3 or X.shape[1] != self.d or X.shape[2] != self.n:
            raise ValueError(f"X must have shape (batch, d={self.d}, n={self.n}), got {tuple(X.shape)}")
        if not torch.is_floating_point(X) or torch.isnan(X).any() or (X < 0).any() or (X > 1).any():
            raise ValueError("X must be a float tensor with entries in [0, 1]")
        H = torch.zeros(X.shape[0], self.n, self.layout.dim, dtype=DTYPE, device=X.device)
        H[..., self.layout["x"]] = X.transpose(1, 2).to(DTYPE)
        return H

    def stream(self, X: torch.Tensor, return_all: bool = False, upto: Optional[int] = None):
        """The (batch, n, D) stream after all blocks (every state with ``return_all``), or after the first ``upto``."""
        H = self.embed(X)
        if upto is None:
            return self.transformer(H, return_all=return_all)
        for block in self.transformer.blocks[:upto]:
            H = block(H)
        return H

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.stream(X)[:, 0, self.layout.index("out")]

    def read(self, X: torch.Tensor, T: Key) -> torch.Tensor:
        """The approximation of P_T held in column 0, for any T of degree <= s."""
        return self.stream(X)[:, 0, self.layout.index(f"P{tuple(T)}")]

    def msp_values(self, X: torch.Tensor) -> dict[Key, torch.Tensor]:
        """Every approximated P_T (column 0) from one forward pass: {T: (batch,)}."""
        H = self.stream(X)[:, 0]  # (batch, D)
        return {T: H[:, self.layout.index(f"P{T}")] for Ts in self.keys.values() for T in Ts}

    def attention(self) -> Attention:
        return self.transformer.blocks[self.attention_block].attention


def build_transformer(coeffs: Mapping, d: int, n: int, N: int, L: int, clip: str = "falling",
                      rule: str = "lu2021", signed: bool = False) -> ColsymTransformer:
    """Theorem 1: a one-head transformer approximating f = coeffs[()] + sum_T coeffs[T] P_T on [0,1]^{d x n}.

    ``clip``: ``"falling"`` clips rank-r values to [0, n!/(n-r)!] (exact zeros for r > n; our default),
    ``"paper"`` to [0, n^r]. ``rule`` picks k from N (see `choose_k`). ``signed=True`` allows negative
    coefficients (the bound then uses sum |c_T| P_T(1)).
    """
    d, n = check_positive_int("d", d), check_positive_int("n", n)
    N, L = check_positive_int("N", N), check_positive_int("L", L)
    if clip not in CLIP_LEVELS:
        raise ValueError(f"clip must be one of {CLIP_LEVELS}, got {clip!r}")
    c = validate_coeffs(coeffs, d, signed)
    s = max([degree(T) for T in c] + [1])
    k = choose_k(N, rule)
    keys = enumerate_msp(d, s)
    layout = Layout([("x", d), ("out", 1)])
    plan = _Plan(layout)

    # TF_0: column monomials of degree 2..s (Prop 1).
    mono: dict[tuple, SlotKey] = {a: ("x", a.index(1)) for a in enumerate_multi_indices(d, 1)}
    for t in range(2, s + 1):
        block0 = (t - 2) * (L + 1)
        for alpha in (a for a in enumerate_multi_indices(d, s) if sum(a) == t):
            i = max(j for j in range(d) if alpha[j] > 0)
            beta = tuple(a - (j == i) for j, a in enumerate(alpha))
            mono[alpha] = add_product(plan, block0, {mono[beta]: 1.0}, {("x", i): 1.0}, f"m{alpha}", k, L)

    # The attention layer (Prop 2): P_alpha = n * mean_i m_alpha(x_i); constant term as a value bias.
    A = (s - 1) * (L + 1)
    alphas = [T[0] for T in keys[1]]
    for alpha in alphas:
        layout.add(f"P{((alpha,))}")
    for r in range(2, s + 1):
        for T in keys[r]:
            layout.add(f"P{T}")

    # TF_2: rank induction (Lemma 3, eq. (3)).
    for r in range(2, s + 1):
        base = A + 1 + (r - 2) * (L + 2)
        M_r = falling_factorial(n, r) if clip == "falling" else n**r
        for T in keys[r]:
            T_minus, last, T_js = lemma3_terms(T)
            psi = add_product(plan, base, {f"P{T_minus}": 1.0 / n ** (r - 1)}, {f"P{((last,))}": 1.0 / n}, f"q{T}", k, L)
            v = {psi: float(n**r)}
            for Tj in T_js:
                v[f"P{Tj}"] = v.get(f"P{Tj}", 0.0) - 1.0
            cT = c.get(T, 0.0)
            plan.ff(base + L + 1).unit(read=v, write={f"P{T}": 1.0, "out": cT})
            plan.ff(base + L + 1).unit(read=v, bias=-float(M_r), write={f"P{T}": -1.0, "out": -cT})

    W_V = layout.matrix([{mono[a]: 1.0} for a in alphas] + [{}])  # (m_a + 1, D); last row: constant
    b_V = torch.zeros(len(alphas) + 1, dtype=DTYPE)
    b_V[-1] = 1.0
    W_O = layout.matrix([{f"P{((a,))}": float(n), "out": float(n) * c.get((a,), 0.0)} for a in alphas]
                        + [{"out": c.get((), 0.0)}]).T  # (D, m_a + 1)
    zeros = torch.zeros(1, layout.dim, dtype=DTYPE)
    head = HeadWeights(W_Q=zeros, W_K=zeros, W_V=W_V, W_O=W_O, b_V=b_V)

    depth = impl_depth(s, L)
    blocks = []
    for i in range(depth):
        if i == A:
            blocks.append(Block(attention=Attention([head], "softmax")))
        else:
            blocks.append(Block(feed_forward=plan.ffs[i].build()))
    return ColsymTransformer(layout, Transformer(blocks), d, n, s, N, L, k, keys, A)


def example1_coeffs(d: int, s: int) -> dict[Key, float]:
    """Example 1: the sum of all monomials of degree <= s of X, in the P_T basis (c_T = 1 / prod m!)."""
    out: dict[Key, float] = {(): 1.0}
    for Ts in enumerate_msp(d, s).values():
        for T in Ts:
            out[T] = 1.0 / term_coefficient(T)
    return out


def random_coeffs(d: int, s: int, seed: int, density: float = 0.5) -> dict[Key, float]:
    """Random non-negative coefficients on a random subset of the P_T of degree <= s (at least one of degree s)."""
    gen = torch.Generator().manual_seed(seed)
    keys = [T for Ts in enumerate_msp(d, s).values() for T in Ts]
    out = {T: float(torch.rand(1, generator=gen)) for T in keys if float(torch.rand(1, generator=gen)) < density}
    top = [T for T in keys if degree(T) == s]
    out[top[int(torch.randint(len(top), (1,), generator=gen))]] = 1.0
    return out


def parameter_count_flattened(model: ColsymTransformer) -> int:
    """Section 9.1: an FNN on the flattened dn-vector needs the column-wise part (TF_0) and the sum once per
    column, n times the parameters of those layers, while the rank induction runs once."""
    A = model.attention_block
    per_column = sum(b.feed_forward.W_1.numel() + b.feed_forward.b_1.numel() + b.feed_forward.W_2.numel()
                     + b.feed_forward.b_2.numel() for b in model.transformer.blocks[:A])
    sum_layer = model.attention().heads[0].W_V.shape[0]
    rest = sum(p.numel() for b in model.transformer.blocks[A + 1:] for p in b.parameters())
    return model.n * (per_column + sum_layer) + rest
