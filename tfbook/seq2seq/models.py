"""The transformers of Theorems 4.2 and 4.5 (Apps. E, F), assembled from core layers.

A model maps sequences ``X`` (batch, d, N) with entries in [0, 1] to (batch, out, N); output i is
F_0(Σ_i X). The paper-form weights (E, p, and per layer U, heads (K, Q, V), FFN maps (A_l, b_l))
are written from the recipe; the core layers are then filled from them:

* each sliding-window attention g_m is a core `Attention` (softmax, ``window=U_m``,
  ``boundary="circular"``); the zero boundary pads ΣU_m zero tokens on each side with the
  positional encoding continuing, which no output position can see past;
* each FFN f_m (no skip connection) is `tfbook.gadgets.feed_forward_layers`: core
  `FeedForward(residual=False)` layers computing f_m = A_L η(... η(A_1 z + b_1) ...) + b_L, one per
  ReLU layer; Theorem 4.2's f̂_T comes from the circuit gadgets (`tfbook.seq2seq.ffn`).

The PE angle is φ = 2π/(2U+1) (Apps. E, F); the statement of Thm 4.2 prints 1/(2U+1).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import scipy.sparse as sp
import torch

from tfbook import validate
from tfbook.device import DTYPE
from tfbook.gadgets import circuit, feed_forward_layers
from tfbook.layers import Attention
from tfbook.layout import Layout
from tfbook.model import Construction
from tfbook.seq2seq.ffn import trig_network
from tfbook.seq2seq.smoothness import CODE_KINDS, codes, lemma_c3_dim

BOUNDARIES = ("circular", "zero")


def pe_angle(U: int, variant: str = "proof") -> float:
    """φ = 2π/(2U+1) (the proofs, App. E/F) or 1/(2U+1) (the statement of Theorem 4.2)."""
    U = validate.positive_int("U", U)
    return (2 * math.pi if validate.choice("variant", variant, ("proof", "statement")) == "proof" else 1.0) / (2 * U + 1)


def attention_error_bound(U: int, H: int, chi: float) -> float:
    """Lemma C.1 with the constant corrected: 2H(2U+1) exp(−χ(1 − cos φ)), φ = 2π/(2U+1)."""
    U, H = validate.positive_int("U", U), validate.positive_int("H", H)
    chi = validate.real("chi", chi, low=0, low_open=True)
    return 2 * H * (2 * U + 1) * math.exp(-chi * (1 - math.cos(pe_angle(U))))


def chi_for(U: int, H: int, eps: float) -> float:
    """The χ at which `attention_error_bound(U, H, χ)` equals ``eps`` (needs eps < 2H(2U+1))."""
    U, H = validate.positive_int("U", U), validate.positive_int("H", H)
    eps = validate.real("eps", eps, low=0, low_open=True, high=2 * H * (2 * U + 1), high_open=True)
    return math.log(2 * H * (2 * U + 1) / eps) / (1 - math.cos(pe_angle(U)))


@dataclass(frozen=True)
class PaperSizes:
    """The paper's size symbols of T(M, U, D, H, L, W, S, B) (Section 3)."""

    M: int
    U: tuple
    D: int
    H: int
    L: int
    W: int
    S: int
    B: float

    def __getitem__(self, key: str):
        return getattr(self, key)

    def as_dict(self) -> dict:
        return asdict(self)


class PositionalEncoding:
    """p_i = [0, ..., (1), cos iφ, sin iφ, (u_{i mod l})] written into coordinates of a D-dim token."""

    def __init__(self, D: int, cos_at: int, phi: float, one_at: Optional[int] = None,
                 code_at: Optional[int] = None, code_rows: Optional[torch.Tensor] = None):
        self.D, self.cos_at, self.phi, self.one_at, self.code_at = D, cos_at, phi, one_at, code_at
        self.code_rows = None if code_rows is None else code_rows.clone()

    def __call__(self, positions: torch.Tensor) -> torch.Tensor:
        """(D, n) encodings of a LongTensor of positions (n,)."""
        positions = torch.as_tensor(positions, dtype=torch.long)
        P = torch.zeros(self.D, positions.shape[0], dtype=DTYPE, device=positions.device)
        angle = positions.to(DTYPE) * self.phi
        P[self.cos_at], P[self.cos_at + 1] = torch.cos(angle), torch.sin(angle)
        if self.one_at is not None:
            P[self.one_at] = 1.0
        if self.code_rows is not None:
            l, dp = self.code_rows.shape
            P[self.code_at:self.code_at + dp] = self.code_rows.to(positions.device)[torch.remainder(positions, l)].T
        return P


def _sparse(A: sp.spmatrix) -> torch.Tensor:
    A = sp.coo_matrix(A)
    idx = torch.tensor(np.vstack([A.row, A.col]), dtype=torch.long)
    return torch.sparse_coo_tensor(idx, torch.tensor(A.data, dtype=DTYPE), A.shape,
                                   check_invariants=True).coalesce()


def _attention(U: int, heads: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> Attention:
    """Core windowed softmax attention with z_i + Σ_h V_h Z softmax(Kᵀ Q z_i); V_h split into W_O W_V."""
    rows = [torch.nonzero(V.abs().sum(1)).flatten() for _, _, V in heads]
    m_v = max(1, max(len(r) for r in rows))
    D = heads[0][0].shape[1]
    W_V = torch.zeros(len(heads), m_v, D, dtype=DTYPE)
    W_O = torch.zeros(len(heads), D, m_v, dtype=DTYPE)
    for h, ((_, _, V), r) in enumerate(zip(heads, rows)):
        W_V[h, : len(r)] = V[r]
        W_O[h, r, torch.arange(len(r))] = 1.0
    W_Q = torch.stack([Q for _, Q, _ in heads])
    W_K = torch.stack([K for K, _, _ in heads])
    return Attention.stacked(W_Q, W_K, W_V, W_O, window=U, boundary="circular")


class Seq2SeqTransformer(Construction):
    """f_M ∘ g_M ∘ ... ∘ f_1 ∘ g_1 ∘ Enc_P of the paper, with core attention and feed-forward layers."""

    def __init__(self, d: int, E: torch.Tensor, pe: PositionalEncoding, spec: list[dict], period: int, layout: Layout,
                 boundaries: Sequence[str] = BOUNDARIES, input_guard: Optional[Callable[[torch.Tensor], None]] = None):
        self._d, self._E, self._pe, self._period = d, E.clone(), pe, period
        self._input_guard = input_guard  # raises ValueError on inputs outside the construction's guarantee
        self._boundaries = tuple(boundaries)  # the boundaries the construction's guarantee covers
        self._spec = [{"U": s["U"], "heads": [tuple(t.clone() for t in h) for h in s["heads"]],
                       "ffn": [(A.copy(), b.copy()) for A, b in s["ffn"]]} for s in spec]
        layers = []
        for m, s in enumerate(self._spec, start=1):
            layers.append((f"g{m}", _attention(s["U"], s["heads"])))
            layers += feed_forward_layers(s["ffn"], f"f{m}")
        super().__init__(layout, layers)
        self.out = self._spec[-1]["ffn"][-1][0].shape[0]

    # --- the paper's symbols --------------------------------------------------------------------
    @property
    def period(self) -> int:
        return self._period

    @property
    def d(self) -> int:
        return self._d

    def paper_weights(self) -> dict:
        """{"E": (D, d), "pe": positions (n,) -> (D, n), "layers": [{"U", "heads": [(K, Q, V)], "ffn": [(A, b)]}]}."""
        return {"E": self._E.clone(), "pe": self._pe,
                "layers": [{"U": s["U"], "heads": [tuple(t.clone() for t in h) for h in s["heads"]],
                            "ffn": [(_sparse(A), torch.tensor(b, dtype=DTYPE)) for A, b in s["ffn"]]}
                           for s in self._spec]}

    def sizes(self) -> PaperSizes:
        """M, U, D, H, L, W, S, B counted from the paper-form weights."""
        entries = [self._E.abs().max()] + [t.abs().max() for s in self._spec for h in s["heads"] for t in h]
        B = max([float(e) for e in entries] + [circuit.sizes_of(s["ffn"])["B"] for s in self._spec])
        ffn = [circuit.sizes_of(s["ffn"]) for s in self._spec]
        return PaperSizes(M=len(self._spec), U=tuple(s["U"] for s in self._spec), D=self._E.shape[0],
                          H=max(len(s["heads"]) for s in self._spec), L=max(f["L"] for f in ffn),
                          W=max(f["W"] for f in ffn), S=int(max(f["S"] for f in ffn)), B=B)

    @property
    def width(self) -> int:
        return self.sizes().W

    @property
    def depth(self) -> int:
        return self.sizes().L

    @property
    def num_layers(self) -> int:
        return len(self._spec)

    def num_parameters(self) -> int:
        """Non-zero entries of E and of every K, Q, V, A and b (the paper's N)."""
        n = int(torch.count_nonzero(self._E))
        for s in self._spec:
            n += sum(int(torch.count_nonzero(t)) for h in s["heads"] for t in h)
            n += sum(A.count_nonzero() + int(np.count_nonzero(b)) for A, b in s["ffn"])
        return n

    # --- running --------------------------------------------------------------------------------
    def check_input(self, X, boundary: str) -> torch.Tensor:
        """X as a float64 (batch, d, N) tensor in [0, 1]; N a multiple of the period for the circular boundary."""
        X = validate.tensor("X", X, shape=(None, self._d, None), low=0.0, high=1.0)
        validate.choice("boundary", boundary, self._boundaries)
        if X.shape[-1] == 0:
            raise ValueError("X must hold at least one token")
        if boundary == "circular" and X.shape[-1] % self._period:
            raise ValueError(f"X must have a length N that is a multiple of period = {self._period} for "
                             f"boundary='circular', got N = {X.shape[-1]}")
        if self._input_guard is not None:
            self._input_guard(X)
        return X

    def embed_sequence(self, X: torch.Tensor, boundary: str = "circular") -> tuple[torch.Tensor, int]:
        """Enc_P(X) as a (batch, n, D) token matrix and the padding P on each side (0 for circular)."""
        X = self.check_input(X, boundary)
        B, d, N = X.shape
        P = sum(s["U"] for s in self._spec) if boundary == "zero" else 0
        if P:
            X = torch.cat([X.new_zeros(B, d, P), X, X.new_zeros(B, d, P)], dim=-1)
        Z = self._E.to(X.device) @ X + self._pe(torch.arange(-P, N + P, device=X.device))  # (B, D, n)
        return Z.transpose(1, 2), P

    def forward(self, X, boundary: str = "circular") -> torch.Tensor:
        """(batch, out, N): output i is the model's F_i on the circular or zero-padded sequence."""
        H, P = self.embed_sequence(X, boundary)
        out = super().forward(H)  # (B, n, out)
        N = H.shape[1] - 2 * P
        return out[:, P:P + N].transpose(1, 2)

    def to_device(self, device) -> "Seq2SeqTransformer":
        """Move the core layers and the paper-form tensors (E, heads, position codes) to ``device``;
        returns self. The SciPy FFN maps stay on the host: `paper_weights` hands them out as tensors
        that `paper_forward` moves to its input's device."""
        self.to(device)
        self._E = self._E.to(device)
        self._spec = [{**s, "heads": [tuple(t.to(device) for t in h) for h in s["heads"]]} for s in self._spec]
        if self._pe.code_rows is not None:
            self._pe.code_rows = self._pe.code_rows.to(device)
        return self

    def run_trace(self, X, boundary: str = "circular"):
        """`tfbook.model.Trace` of the token matrices (padded for the zero boundary) and attention weights."""
        H, _ = self.embed_sequence(X, boundary)
        return super().trace(H)


# --- Theorem 4.2: relative-offset extraction -------------------------------------------------------
def _check_offsets(offsets, d: int, U: int, name: str) -> list[tuple[int, int]]:
    try:
        pairs = [(c, o) for c, o in offsets]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a list of (channel, offset) pairs, got {offsets!r}") from exc
    if not pairs:
        raise ValueError(f"{name} must contain at least one (channel, offset) pair")
    out = []
    for c, o in pairs:
        c = validate.positive_int(f"{name} channel", c, 0)
        if c >= d:
            raise ValueError(f"{name} channel must be < d = {d}, got {c}")
        if isinstance(o, bool) or not isinstance(o, (int, np.integer)) or abs(int(o)) > U:
            raise ValueError(f"{name} offset must be an int with |offset| <= U = {U}, got {o!r}")
        out.append((c, int(o)))
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not contain duplicate (channel, offset) pairs, got {out}")
    return out


def _rotation_heads(pairs, D: int, cos_at: int, phi: float, chi: float, slot_at: int):
    """App. E heads: K = [0 | I_2], Q = χ[0 | R(j_h φ)], V = e_{slot+h} e_{c_h}ᵀ; score χ cos((i + j_h − l)φ)."""
    heads = []
    for h, (c, o) in enumerate(pairs):
        K = torch.zeros(2, D, dtype=DTYPE)
        K[0, cos_at], K[1, cos_at + 1] = 1.0, 1.0
        a = o * phi
        Q = torch.zeros(2, D, dtype=DTYPE)
        Q[:, cos_at:cos_at + 2] = chi * torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                                                     dtype=DTYPE)
        V = torch.zeros(D, D, dtype=DTYPE)
        V[slot_at + h, c] = 1.0
        heads.append((K, Q, V))
    return heads


def _extraction_model(pairs, d: int, U: int, chi: float, ffn_maps, phi: float) -> Seq2SeqTransformer:
    H = len(pairs)
    layout = Layout([("x", d), ("feat", H), ("pe", 2)])
    D = layout.dim
    E = torch.zeros(D, d, dtype=DTYPE)
    E[:d] = torch.eye(d, dtype=DTYPE)
    pe = PositionalEncoding(D, d + H, phi)
    spec = [{"U": U, "heads": _rotation_heads(pairs, D, d + H, phi, chi, d), "ffn": ffn_maps}]
    model = Seq2SeqTransformer(d, E, pe, spec, 2 * U + 1, layout)
    model.chi = chi  # the attention scale the builder chose (a record; the weights carry it)
    return model


def _readout(H: int, D: int, start: int) -> sp.csr_matrix:
    return sp.csr_matrix((np.ones(H), (np.arange(H), start + np.arange(H))), shape=(H, D))


def build_extractor(offsets, d: int, U: int, chi: Optional[float] = None, *,
                    variant: str = "proof") -> Seq2SeqTransformer:
    """Theorem 4.2's attention layer: output h at position i ≈ X[c_h, i + j_h]; D = d + H + 2, one layer.

    ``variant="statement"`` uses the angle φ = 1/(2U+1) printed in the theorem instead of the proof's
    2π/(2U+1) (its PE has no integer period, so only the zero boundary applies; period is then 2U+1
    by convention).
    """
    d, U = validate.positive_int("d", d), validate.positive_int("U", U)
    pairs = _check_offsets(offsets, d, U, "offsets")
    H = len(pairs)
    chi = chi_for(U, H, 1e-9) if chi is None else validate.real("chi", chi, low=0, low_open=True)
    maps = [(_readout(H, d + H + 2, d), np.zeros(H))]
    return _extraction_model(pairs, d, U, chi, maps, pe_angle(U, variant))


def build_approximator(coords, coeffs: dict, d: int, U: int, tol: float) -> Seq2SeqTransformer:
    """Theorem 4.2: F_0(X) = Σ_r coeffs[r] Π_k ψ_{r_k}(X[c_k, o_k]) to within ``tol`` everywhere (both boundaries).

    The extractor's heads for ``coords`` feed an explicit ReLU FNN f_1 = f̂ ∘ C (no skip connection)
    with sizes of Eq. (7) scaling; the FNN gets tol/2 and the attention χ is set so that
    Lip(f_1) · 2H(2U+1)e^{−χ(1−cos φ)} <= tol/2, Lip(f_1) <= Π_l ||A_l||_∞.
    """
    d, U = validate.positive_int("d", d), validate.positive_int("U", U)
    pairs = _check_offsets(coords, d, U, "coords")
    tol = validate.real("tol", tol, low=0, low_open=True)
    H = len(pairs)
    clean = {}
    for key, c in dict(coeffs).items():
        key = tuple(key) if isinstance(key, (tuple, list)) else (key,)
        if len(key) != H or not all(isinstance(r, (int, np.integer)) and not isinstance(r, bool) for r in key):
            raise ValueError(f"coeffs keys must be tuples of len(coords) = {H} ints, got {key!r}")
        clean[tuple(int(r) for r in key)] = validate.real("coeffs value", c)
    if not clean:
        raise ValueError("coeffs must contain at least one frequency tuple")
    maps, _ = trig_network(clean, H, tol / 2, pre=_readout(H, d + H + 2, d))
    log_lip = sum(math.log(max(float(abs(A).sum(1).max()), 1e-300)) for A, _ in maps)
    return _extraction_model(pairs, d, U, _approximator_chi(U, H, tol, log_lip), maps, pe_angle(U))


def _approximator_chi(U: int, H: int, tol: float, log_lip: float) -> float:
    """χ with Lip(f_1) · 2H(2U+1) e^{−χ(1−cos φ)} <= tol/2, given log_lip = log of the bound on Lip(f_1)."""
    return (math.log(4 * H * (2 * U + 1) / tol) + max(log_lip, 0.0)) / (1 - math.cos(pe_angle(U)))


# --- Theorem 4.5: dynamic token selection ----------------------------------------------------------
def _gap_guard(terms: list, w0: float, V: int, gap: float) -> Callable[[torch.Tensor], None]:
    """A check of Theorem 4.5's assumption on X (batch, d, N): within every window [i−V, i+V] (circular)
    the importance values μ = w_() + Σ w_{c,o} X[c, i+o] are pairwise at least ``gap`` apart."""
    def guard(X: torch.Tensor) -> None:
        if not validate.has_values(X):  # meta tensors: nothing to read
            return
        N = X.shape[-1]
        pos = torch.arange(N, device=X.device)
        mu = X.new_full((X.shape[0], N), w0)  # (B, N)
        for (c, o), w in terms:
            mu = mu + w * X[:, c, torch.remainder(pos + o, N)]
        window = torch.remainder(pos[:, None] + torch.arange(-V, V + 1, device=X.device)[None, :], N)
        spacing = mu[:, window].sort(-1).values.diff(dim=-1)  # (B, N, 2V)
        if spacing.numel() and float(spacing.min()) < gap * (1 - 1e-9):
            raise ValueError(f"X must have importance values at least gap = {gap:.6g} apart within every window "
                             f"of 2V+1 = {2 * V + 1} tokens (Theorem 4.5's assumption), got a spacing of "
                             f"{float(spacing.min()):.6g}")
    return guard


def build_selector(importance: dict, channels, d: int, V: int, gap: float, code: str = "onehot",
                   code_dim: Optional[int] = None, seed: int = 0, eps: float = 1e-9,
                   chi: Optional[float] = None) -> Seq2SeqTransformer:
    """Theorem 4.5: features of the 1st, 2nd, ... most important tokens of each window [i−V, i+V].

    Layer 1 computes μ_i = w_() + Σ w_{c,o} X[c, i+o] with App.-E heads (window U_1 = max(1, max|o|))
    to within eps·gap; layers 2..M (M = r_max + 1, window V, one head) score key l for query i by
    χ(μ_l − κ<u_l, w_i>), κ = Σ|w| + gap, and copy the channels of rank m and the code u_l into w_i.
    """
    d, V = validate.positive_int("d", d), validate.positive_int("V", V)
    gap = validate.real("gap", gap, low=0, low_open=True)
    eps = validate.real("eps", eps, low=0, low_open=True, high=1, high_open=True)
    validate.choice("code", code, CODE_KINDS)
    seed = validate.positive_int("seed", seed, 0)
    terms, w0 = [], 0.0
    for key, w in dict(importance).items():
        key = tuple(key) if isinstance(key, (tuple, list)) else key
        if key == ():
            w0 = validate.real("importance constant", w)
            continue
        if not isinstance(key, tuple) or len(key) != 2:
            raise ValueError(f"importance keys must be () or (channel, offset) pairs, got {key!r}")
        terms.append((key, validate.real("importance weight", w)))
    if not terms:
        raise ValueError("importance must contain at least one (channel, offset) term")
    most = sum(abs(w) for _, w in terms) / (2 * V)  # 2V+1 values in an interval of width Σ|w| (X in [0, 1])
    if gap > most:
        raise ValueError(f"gap must be <= Σ|w| / (2V) = {most:.6g}: 2V+1 importance values pairwise gap apart "
                         f"do not fit in the range of μ for inputs in [0, 1], got {gap}")
    U1 = max(1, max(abs(int(o)) for (_, o), _ in terms))
    pairs = _check_offsets([k for k, _ in terms], d, U1, "importance")
    weights = [w for _, w in terms]
    if not isinstance(channels, (list, tuple)) or not all(isinstance(ch, (list, tuple)) for ch in channels):
        raise ValueError(f"channels must be a list of ranks, each a list of channel indices (e.g. [[0], [0, 1]]), "
                         f"got {channels!r}")
    chans = [list(ch) for ch in channels]
    if not 1 <= len(chans) <= 2 * V + 1:
        raise ValueError(f"channels must list between 1 and 2V+1 = {2 * V + 1} ranks, got {len(chans)}")
    for ch in chans:
        for c in ch:
            if validate.positive_int("channels entry", c, 0) >= d:
                raise ValueError(f"channels entries must be < d = {d}, got {c}")
    l = 2 * V + 1
    if code == "onehot":
        dp = l if code_dim is None else validate.positive_int("code_dim", code_dim, l)
    else:
        dp = lemma_c3_dim(l, 0.5) if code_dim is None else validate.positive_int("code_dim", code_dim)
    u = codes(l, dp, code, seed)
    out, H1, r_max = sum(len(ch) for ch in chans), len(pairs), len(chans)
    layout = Layout([("x", d)] + ([("F", out)] if out else []) + [("scr", H1), ("mu", 1), ("one", 1), ("cs", 2),
                                                                  ("u", dp), ("w", dp)])
    D = layout.dim
    at = {name: layout[name].start for name in layout.names()}
    E = torch.zeros(D, d, dtype=DTYPE)
    E[:d] = torch.eye(d, dtype=DTYPE)
    phi1 = pe_angle(U1)
    pe = PositionalEncoding(D, at["cs"], phi1, one_at=at["one"], code_at=at["u"], code_rows=u)
    # layer 1: μ to within eps·gap
    wsum = sum(abs(w) for w in weights)
    chi1 = math.log(2 * (2 * U1 + 1) * max(wsum, 1.0) / (eps * gap)) / (1 - math.cos(phi1))
    heads1 = _rotation_heads(pairs, D, at["cs"], phi1, chi1, at["scr"])
    keep = list(range(d)) + [at["one"]] + list(range(at["u"], at["u"] + dp))
    n_keep = len(keep)
    rows_in = sp.lil_matrix((2 * n_keep + 2, D))
    for i, j in enumerate(keep):
        rows_in[i, j], rows_in[n_keep + i, j] = 1.0, -1.0
    for h, w in enumerate(weights):
        rows_in[2 * n_keep, at["scr"] + h], rows_in[2 * n_keep + 1, at["scr"] + h] = w, -w
    rows_in[2 * n_keep, at["one"]], rows_in[2 * n_keep + 1, at["one"]] = w0, -w0
    rows_out = sp.lil_matrix((D, 2 * n_keep + 2))
    for i, j in enumerate(keep):
        rows_out[j, i], rows_out[j, n_keep + i] = 1.0, -1.0
    rows_out[at["mu"], 2 * n_keep], rows_out[at["mu"], 2 * n_keep + 1] = 1.0, -1.0
    spec = [{"U": U1, "heads": heads1, "ffn": [(rows_in.tocsr(), np.zeros(2 * n_keep + 2)),
                                                (rows_out.tocsr(), np.zeros(D))]}]
    # selection layers
    kappa = wsum + gap
    chi_sel = chi if chi is not None else math.log(2 * l * 2 * 3.0**r_max / eps) / (gap / 2)
    chi_sel = validate.real("chi", chi_sel, low=0, low_open=True)
    ident = sp.vstack([sp.identity(D), -sp.identity(D)]).tocsr()
    filled = 0
    for m, ch in enumerate(chans, start=1):
        K = torch.zeros(1 + dp, D, dtype=DTYPE)
        K[0, at["mu"]] = 1.0
        K[1:, at["u"]:at["u"] + dp] = torch.eye(dp, dtype=DTYPE)
        Q = torch.zeros(1 + dp, D, dtype=DTYPE)
        Q[0, at["one"]] = chi_sel
        Q[1:, at["w"]:at["w"] + dp] = -chi_sel * kappa * torch.eye(dp, dtype=DTYPE)
        Vm = torch.zeros(D, D, dtype=DTYPE)
        for k, c in enumerate(ch):
            Vm[at["F"] + filled + k, c] = 1.0
        Vm[at["w"]:at["w"] + dp, at["u"]:at["u"] + dp] = torch.eye(dp, dtype=DTYPE)
        filled += len(ch)
        if m < r_max:
            ffn = [(ident, np.zeros(2 * D)), (ident.T.tocsr(), np.zeros(D))]
        else:
            ffn = [(_readout(out, D, at.get("F", 0)), np.zeros(out))]
        spec.append({"U": V, "heads": [(K, Q, Vm)], "ffn": ffn})
    period = math.lcm(2 * U1 + 1, l)
    model = Seq2SeqTransformer(d, E, pe, spec, period, layout, boundaries=("circular",),  # windows wrap around
                               input_guard=_gap_guard(terms, w0, V, gap))
    model.kappa, model.chi_selection, model.chi_importance = kappa, chi_sel, chi1
    return model
