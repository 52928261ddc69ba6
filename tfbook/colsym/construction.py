"""The Theorem 1 transformer, assembled from gadgets on named slots (Takeshita & Imaizumi, Sections 5-8).

The recipe, in the order the planner receives it (it places each gadget as early as its inputs allow,
so the layer indices below are a consequence, not an input):

1. TF_0 (Prop 1, phase ``mono``): every column monomial of degree t = 2..s as psi(monomial of degree t-1,
   x_i) with the product gadget; all degree-t products run in parallel in L+1 feed-forward layers, so
   TF_0 has (s-1)(L+1) layers. There is no attention, so columns are processed independently.
2. One attention layer (Prop 2, phase ``sum``): W_Q = W_K = 0, softmax weights exactly 1/n; W_V reads the
   monomial slots and W_O writes n times their mean, P_alpha = sum_i m_alpha(x_i), into every column.
3. TF_2 (Lemma 3, eq. (3), Prop 3, phases ``rank2`` .. ``rank<s>``): every rank-r P_T as
   clip_[0, M_r](n^r psi(P_{T^-} / n^{r-1}, P_{alpha_r} / n) - sum_j P_{T_j}): L+1 product layers and one clip
   layer per rank.
4. Read-out (Lemma 6, Section 8): the layers that create each P_T also write c_T P_T into the ``out`` slot;
   the constant c_0 enters through the attention's value bias b_V. Output: ``out`` of column 0.

Layers are named ``<phase>.<index>``, e.g. ``mono.0``, ``sum.8``, ``rank2.9``.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import torch

from tfbook import gadgets as gd
from tfbook import validate
from tfbook.colsym.algebra import Key, canonical, degree, enumerate_msp, enumerate_multi_indices, lemma3_terms
from tfbook.colsym.algebra import term_coefficient
from tfbook.colsym.bounds import (falling_factorial, paper_attention_layers, paper_depth, paper_heads,
                                  paper_width)
from tfbook.colsym.squaring import choose_k
from tfbook.device import DTYPE
from tfbook.layers import Attention
from tfbook.layout import Layout
from tfbook.model import Construction, Sizes

CLIP_LEVELS = ("falling", "paper")


def validate_coeffs(coeffs: Mapping, d: int, signed: bool = False) -> dict[Key, float]:
    """Canonical {T: c_T} (keys with equal multisets are summed); any real number type (int, float, Fraction,
    NumPy scalars) is accepted. Raises ValueError on bad input."""
    if not isinstance(coeffs, Mapping) or len(coeffs) == 0:
        raise ValueError("coeffs must be a non-empty dict {T: coefficient}")
    out: dict[Key, float] = {}
    for T, c in coeffs.items():
        if not isinstance(T, tuple):
            raise ValueError(f"each key of coeffs must be a tuple of multi-indices, got {T!r}")
        key = canonical(T, d) if T else ()
        c = validate.real(f"coefficient of {T!r}", c)
        if c < 0 and not signed:
            raise ValueError(
                f"coefficient of {T!r} is negative ({c}); Theorem 1 needs non-negative coefficients "
                "(pass signed=True for the signed variant and its own bound)"
            )
        out[key] = out.get(key, 0.0) + c
    return out


class ColsymTransformer(Construction):
    """The constructed transformer; ``model(X)`` maps (batch, d, n) inputs in [0, 1] to (batch,) values.

    Size accessors (each one `Sizes` field of `counted_sizes()` or one formula of the paper):
    ``depth`` = Sizes.layers (every block of Definition 2 here holds one layer); ``width`` = the width m of
    Definition 2, max(Sizes.ff_width, Sizes.attention_width); ``embed_dim`` = Sizes.embed_dim;
    ``num_parameters()`` = Definition 2's dense count depth * (6 m D + m + D); ``num_stored_parameters()``
    = Sizes.stored; ``num_nonzero()`` = Sizes.nonzero.
    """

    def __init__(self, layout: Layout, layers, d: int, n: int, s: int, N: int, L: int, k: int,
                 keys: dict[int, list[Key]], placements: Mapping[str, gd.Placement]):
        super().__init__(layout, layers)
        self.d, self.n, self.s, self.N, self.L, self.k = d, n, s, N, L, k
        self.keys, self.placements, self.normalized = keys, dict(placements), False
        self.clip = "falling"  # the clip levels (`CLIP_LEVELS`), set by `build_transformer`
        self.attention_block = self.placements["sum"].first  # index of the attention layer

    def gadget_layers(self, tag: str) -> list[str]:
        """Names of the layers holding gadget ``tag`` (e.g. ``"m(1, 1).psi"``'s product ``"m(1, 1)"``, ``"sum"``,
        ``"q((1,), (1,))"``, ``"clip((1,), (1,))"``)."""
        p = self.placements[tag]
        return self.layer_names[p.first: p.last + 1]

    @property
    def width(self) -> int:
        """Definition 2's width m: the largest hidden width of any layer, max(ff_width, attention_width) of
        `counted_sizes`, read from the layers' shapes only (so it needs no weight values)."""
        ff = [layer.hidden_width for layer in self.layers if layer.kind == "mlp"]
        attn = [layer.value_width for layer in self.layers if layer.kind in ("attn", "xattn")]
        return max(ff + attn + [0])

    @property
    def depth(self) -> int:
        """Number of layers, `Sizes.layers` (each block of Definition 2 holds one layer here)."""
        return len(self.layers)

    @property
    def embed_dim(self) -> int:
        """The embedding dimension D, `Sizes.embed_dim` (the paper does not bound it)."""
        return self.layout.dim

    def num_parameters(self) -> int:
        """Parameters in the paper's sense (Definition 2, dense): depth * (4 m D attention + 2 m D + m + D feed-forward)."""
        m, D = self.width, self.embed_dim
        return self.depth * (6 * m * D + m + D)

    def num_stored_parameters(self) -> int:
        """Scalars actually stored, `Sizes.stored` (layers at their own widths, absent biases not stored)."""
        return self.counted_sizes().stored

    def num_nonzero(self) -> int:
        """Non-zero stored scalars, `Sizes.nonzero`."""
        return self.counted_sizes().nonzero

    def embed(self, X: torch.Tensor) -> torch.Tensor:
        """(batch, d, n) -> (batch, n, D): the columns of X become tokens, [X; 0], in the weights' dtype."""
        X = torch.as_tensor(X)
        if X.ndim != 3 or X.shape[1] != self.d or X.shape[2] != self.n:
            raise ValueError(f"X must have shape (batch, d={self.d}, n={self.n}), got {tuple(X.shape)}")
        if not torch.is_floating_point(X) or (validate.has_values(X) and (torch.isnan(X).any() or (X < 0).any()
                                                                          or (X > 1).any())):
            raise ValueError("X must be a float tensor with entries in [0, 1]")
        H = super().embed(x=X.transpose(1, 2).to(DTYPE))
        return H.to(next(self.parameters()).dtype)  # float64, or float32 after model.to(torch.float32)

    def stream(self, X: torch.Tensor, return_all: bool = False, upto: Optional[int] = None):
        """The (batch, n, D) stream after all layers (every state with ``return_all``), or after the first ``upto``."""
        H = self.embed(X)
        if upto is None:
            return super().forward(H, return_all=return_all)
        for layer in self.layers[:upto]:
            H = layer(H)
        return H

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.stream(X)[:, 0, self.layout.index("out")]

    def read_msp(self, X: torch.Tensor, T: Key) -> torch.Tensor:
        """The approximation of P_T held in column 0, for any T of degree <= s."""
        return self.msp_values(X)[tuple(T)]

    def msp_values(self, X: torch.Tensor) -> dict[Key, torch.Tensor]:
        """Every approximated P_T (column 0) from one forward pass: {T: (batch,)} (rescaled by n^r when normalized)."""
        H = self.stream(X)[:, 0]  # (batch, D)
        return {T: H[:, self.layout.index(f"P{T}")] * (self.n ** len(T) if self.normalized else 1)
                for Ts in self.keys.values() for T in Ts}

    def attention(self) -> Attention:
        """The single attention layer (Prop 2)."""
        return self.layers[self.attention_block]


def build_transformer(coeffs: Mapping, d: int, n: int, N: int, L: int, clip: str = "falling",
                      rule: str = "lu2021", signed: bool = False, normalized: bool = False) -> ColsymTransformer:
    """Theorem 1: a one-head transformer approximating f = coeffs[()] + sum_T coeffs[T] P_T on [0,1]^{d x n}.

    ``clip``: ``"falling"`` clips rank-r values to [0, n!/(n-r)!] (exact zeros for r > n; our default),
    ``"paper"`` to [0, n^r]; with ``"paper"`` a non-zero coefficient on a rank r > n term is rejected (P_T = 0
    there, but the construction's value is not, and the theorem's bound does not account for it). ``rule``
    picks k from N (see `choose_k`). ``signed=True`` allows negative coefficients (the bound then uses
    sum |c_T| P_T(1)). ``normalized=True`` stores q_T = P_T / n^r instead of P_T and runs
    q_T = clip_[0, M_r / n^r](psi(q_{T^-}, q_{alpha_r}) - sum_j q_{T_j} / n): no weight grows like n^r, which
    avoids losing digits when n^s is large; the read-out multiplies by c_T n^r.
    """
    d, n = validate.positive_int("d", d), validate.positive_int("n", n)
    N, L = validate.positive_int("N", N), validate.positive_int("L", L)
    validate.choice("clip", clip, CLIP_LEVELS)
    c = validate_coeffs(coeffs, d, signed)
    if clip == "paper" and any(len(T) > n and v != 0 for T, v in c.items()):
        raise ValueError(f"clip='paper' with a non-zero coefficient on a term of rank > n = {n}: P_T = 0 there, "
                         "but the n^r clip leaves a non-zero value outside the bound; use clip='falling' "
                         "or drop those terms")
    s = max([degree(T) for T in c] + [1])
    k = choose_k(N, rule)
    keys = enumerate_msp(d, s)
    plan = gd.Planner(Layout([("x", d), ("out", 1)]))

    # TF_0: column monomials of degree 2..s (Prop 1).
    mono: dict[tuple, gd.Form] = {a: {("x", a.index(1)): 1.0} for a in enumerate_multi_indices(d, 1)}
    for alpha in (a for a in enumerate_multi_indices(d, s) if sum(a) >= 2):
        i = max(j for j in range(d) if alpha[j] > 0)
        beta = tuple(a - (j == i) for j, a in enumerate(alpha))
        plan.add(gd.product(mono[beta], {("x", i): 1.0}, f"m{alpha}.psi", k, L, tag=f"m{alpha}"), phase="mono")
        mono[alpha] = {f"m{alpha}.psi": 1.0}

    # The attention layer (Prop 2): P_alpha = n * mean_i m_alpha(x_i); the constant term through b_V.
    alphas = [T[0] for T in keys[1]]
    for Ts in keys.values():
        for T in Ts:
            plan.layout.add(f"P{T}")
    scale = 1.0 / n if normalized else 1.0  # q_alpha = P_alpha / n
    writes = [{f"P{((a,))}": scale, "out": c.get((a,), 0.0)} for a in alphas]
    plan.add(gd.uniform_sum([mono[a] for a in alphas], writes, n, constant={"out": c.get((), 0.0)}, tag="sum"),
             phase="sum")

    # TF_2: rank induction (Lemma 3, eq. (3)).
    for r in range(2, s + 1):
        M_r = falling_factorial(n, r) if clip == "falling" else n**r
        for T in keys[r]:
            T_minus, last, T_js = lemma3_terms(T)
            psi = f"q{T}.psi"
            if normalized:  # q_T = clip(psi(q_{T^-}, q_alpha) - sum_j q_{T_j} / n), out += c_T n^r q_T
                u, w, n_r, M, out = {f"P{T_minus}": 1.0}, {f"P{((last,))}": 1.0}, 1.0, M_r / n**r, n**r * c.get(T, 0.0)
                v = gd.combine((1.0, psi), *[(-1.0 / n, f"P{Tj}") for Tj in T_js])
            else:  # P_T = clip(n^r psi(P_{T^-} / n^{r-1}, P_alpha / n) - sum_j P_{T_j}), out += c_T P_T
                u, w, M, out = {f"P{T_minus}": 1.0 / n ** (r - 1)}, {f"P{((last,))}": 1.0 / n}, M_r, c.get(T, 0.0)
                v = gd.combine((float(n**r), psi), *[(-1.0, f"P{Tj}") for Tj in T_js])
            plan.add(gd.product(u, w, psi, k, L, tag=f"q{T}"), phase=f"rank{r}")
            plan.add(gd.clip(v, {f"P{T}": 1.0, "out": out}, 0.0, float(M), tag=f"clip{T}"), phase=f"rank{r}")
    model = ColsymTransformer(plan.layout, plan.layers(), d, n, s, N, L, k, keys, plan.placements)
    model.normalized = bool(normalized)
    model.clip = clip
    return model


def paper_size_formulas(d: int, s: int, N: int, L: int) -> dict[str, tuple[Callable[..., Any], dict[str, int]]]:
    """Theorem 1's sizes as registered paper formulas with their parameters, by `Sizes` field: the bound of a size
    claim is ``formula(**params)``. Width 12 (2d)^s N (feed-forward and attention), depth 2sL + 3s, one attention
    layer with one head."""
    width = (paper_width, {"d": d, "s": s, "N": N})
    return {"layers": (paper_depth, {"s": s, "L": L}), "attention_layers": (paper_attention_layers, {}),
            "max_heads": (paper_heads, {}), "ff_width": width, "attention_width": width}


def paper_sizes(d: int, s: int, N: int, L: int) -> Sizes:
    """Theorem 1's sizes as a `Sizes` record: width 12 (2d)^s N (feed-forward and attention), depth 2sL + 3s,
    one attention layer with one head (`paper_size_formulas` evaluated)."""
    return Sizes(**{field: formula(**params) for field, (formula, params) in paper_size_formulas(d, s, N, L).items()})


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


