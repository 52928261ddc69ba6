"""The encoder-decoder hard-attention transformer that simulates a Turing machine (Wei, Chen & Ma, App. C).

Hidden states are 0/1 vectors split into named groups (`tm_layout`). The decoder runs positions
t = 0..T; position 0 is a "pre-step" (a state ``pre`` that writes a blank into cell 0 and moves to
cell 1), so that o_t holds (z_t, a_t, Bin(l_t)) for t = 0..T. Each of the P + 9 shared layers is

    h <- h + SelfAttn(h, cache)      (hard attention over positions 0..t and a null slot)
    h <- h + EncAttn(h, encoder)     (hard attention over the input cells and a null slot)
    h <- round(relu(W_1 h + b_1))    with round(z) = 3 relu(z - 1/3) - 3 relu(z - 2/3) (two ReLU layers)

and the next position's input is o_t + beta(t+1). The transition table lives only in the weights of
layer A2; the model keeps no reference to the machine it was built from.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import nn

from tfbook.device import DTYPE, default_device
from tfbook.layout import Layout
from tfbook.turing.machine import RunResult, TuringMachine

PRE = "<pre>"
ATTENTIONS = ("hard", "softmax")


def position_bits(T: int) -> int:
    """P = bit_length(2T + 1): distinct codes for timesteps 0..T and head cells 1-T..T+1 (mod 2^P)."""
    return (2 * T + 1).bit_length()


def binary(i: int, P: int) -> list[int]:
    """Bin(i mod 2^P), most significant bit first."""
    i %= 2**P
    return [(i >> (P - 1 - k)) & 1 for k in range(P)]


def tm_layout(num_states: int, num_symbols: int, P: int) -> Layout:
    """Groups: st, sym1, sym2, pos1-3, scr1-4, dir, cy, bw, pair; w = |Z| + 4|A| + 6P + 5 + |Z||A|."""
    Z, A = num_states, num_symbols
    return Layout([("st", Z), ("sym1", A), ("sym2", A), ("pos1", P), ("pos2", P), ("pos3", P), ("scr1", A),
                   ("scr2", A), ("scr3", P), ("scr4", 3), ("dir", 2), ("cy", P), ("bw", P), ("pair", Z * A)])


class AttentionWeights(nn.Module):
    """Q, K, V affine maps plus the null key K0 and value V0; ``active=False`` marks an all-zero (identity) layer."""

    def __init__(self, w: int, d_k: int):
        super().__init__()
        z = lambda *shape: nn.Parameter(torch.zeros(*shape, dtype=DTYPE), requires_grad=False)  # noqa: E731
        self.W_Q, self.b_Q, self.W_K, self.b_K = z(d_k, w), z(d_k), z(d_k, w), z(d_k)
        self.W_V, self.b_V, self.K0, self.V0 = z(w, w), z(w), z(d_k), z(w)

    @property
    def active(self) -> bool:
        return any(bool(p.any()) for p in self.parameters())


class TMLayer(nn.Module):
    """One shared layer: decoder self-attention, encoder attention, FF with the two correction ReLU layers."""

    def __init__(self, w: int, d_k: int):
        super().__init__()
        self.dec, self.enc = AttentionWeights(w, d_k), AttentionWeights(w, d_k)
        z = lambda *shape: nn.Parameter(torch.zeros(*shape, dtype=DTYPE), requires_grad=False)  # noqa: E731
        self.W_1, self.b_1 = z(w, w), z(w)
        eye = torch.eye(w, dtype=DTYPE)
        self.W_2 = nn.Parameter(torch.cat([eye, eye]), requires_grad=False)  # (2w, w)
        self.b_2 = nn.Parameter(torch.cat([torch.full((w,), -1 / 3, dtype=DTYPE), torch.full((w,), -2 / 3, dtype=DTYPE)]),
                                requires_grad=False)
        self.W_3 = nn.Parameter(torch.cat([3 * eye, -3 * eye], dim=1), requires_grad=False)  # (w, 2w)
        self.b_3 = z(w)

    def feed_forward(self, h: torch.Tensor, correct: bool = True, noise: Optional[torch.Tensor] = None) -> torch.Tensor:
        """round(relu(W_1 h + b_1) + noise); ``noise`` (B, w) models an error of the layer before its correction."""
        z = torch.relu(h @ self.W_1.T + self.b_1)  # (B, w)
        if noise is not None:
            z = z + noise
        if not correct:
            return z
        return torch.relu(torch.relu(z @ self.W_2.T + self.b_2) @ self.W_3.T + self.b_3)


@dataclass
class Trace:
    """Decoded run plus what the visualisations need (all tensors on the CPU)."""

    outputs: torch.Tensor  # (B, T+1, w): o_t
    writes: torch.Tensor  # (B, T+1, w): the state entering layer C0 (holds u_t and Bin(l_{t-1}))
    scores: dict  # (layer name, "dec"|"enc") -> list over t of (B, 1 + keys) score tensors (when recorded)
    F: torch.Tensor  # (B,) theta_cls . o_T
    layer_states: Optional[torch.Tensor] = None  # (B, T+1, num_layers, w): each layer's output (when recorded)


def score_gaps(trace: Trace) -> torch.Tensor:
    """For every recorded attention call (and batch row): top score minus the best strictly lower score.

    Scores are integers (to rounding), so "strictly lower" means lower by more than 1/2; calls where every
    slot ties (nothing lower) are skipped. The proof of Theorem 4.1 needs every gap to be at least 1.
    """
    gaps = []
    for calls in trace.scores.values():
        for s in calls:  # (B, 1 + keys)
            top = s.amax(1, keepdim=True)
            below = torch.where(s < top - 0.5, s, torch.full_like(s, -float("inf"))).amax(1)
            gaps.append((top[:, 0] - below)[torch.isfinite(below)])
    return torch.cat(gaps) if gaps else torch.zeros(0, dtype=DTYPE)


class TMTransformer(nn.Module):
    """Built by `build_transformer`; ``run(x)`` / ``run_batch(xs)`` return `RunResult` objects."""

    def __init__(self, states: Sequence[str], alphabet: Sequence[str], accept: Sequence[str], T: int, P: int):
        super().__init__()
        self.state_names, self.alphabet = list(states), list(alphabet)
        self.accept_names = set(accept)
        self.blank, self.T, self.P = alphabet[0], T, P
        self.layout = tm_layout(len(states), len(alphabet), P)
        self.w, self.d_k = self.layout.dim, 2 * P + 2
        self.layer_names = ["A1", "A2", "B1", "B2", "B3", "C0"] + [f"C{j}" for j in range(1, P + 1)] + ["CD", "E1", "E2"]
        self.layers = nn.ModuleList(TMLayer(self.w, self.d_k) for _ in self.layer_names)
        z = lambda *shape: nn.Parameter(torch.zeros(*shape, dtype=DTYPE), requires_grad=False)  # noqa: E731
        self.E, self.h0, self.theta_cls = z(self.w, len(alphabet)), z(self.w), z(self.w)

    # --- sizes -----------------------------------------------------------------------------------
    @property
    def width(self) -> int:
        return self.w

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def l1_norm(self, correction: bool = True) -> float:
        """Sum of |theta| over all parameters (``correction=False`` leaves out W_2, b_2, W_3, b_3)."""
        skip = set() if correction else {"W_2", "b_2", "W_3", "b_3"}
        return float(sum(p.abs().sum() for n, p in self.named_parameters() if n.split(".")[-1] not in skip))

    def paper_parameter_count(self) -> int:
        """L (7w^2 + 4 d_k w + 8w + 6 d_k) + w|A| + 2w."""
        w, dk = self.w, self.d_k
        return self.num_layers * (7 * w * w + 4 * dk * w + 8 * w + 6 * dk) + w * len(self.alphabet) + 2 * w

    # --- running -----------------------------------------------------------------------------------
    def _beta(self, t: int, device) -> torch.Tensor:
        v = torch.zeros(self.w, dtype=DTYPE, device=device)
        v[self.layout["pos1"]] = torch.tensor(binary(t, self.P), dtype=DTYPE, device=device)
        return v

    def encode(self, xs: Sequence[str], device, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder outputs (B, M, w) for the first T+1 cells (all the head can reach) and a (B, M) validity mask."""
        index = {a: i for i, a in enumerate(self.alphabet)}
        for x in xs:
            if not isinstance(x, str):
                raise ValueError(f"inputs must be strings, got {x!r}")
            bad = sorted(set(x) - set(index))
            if bad:
                raise ValueError(f"input symbols {bad} are outside the alphabet {self.alphabet}")
        M = max([min(len(x), T + 1) for x in xs] + [1])
        e = torch.zeros(len(xs), M, self.w, dtype=DTYPE, device=device)
        mask = torch.zeros(len(xs), M, dtype=torch.bool, device=device)
        for b, x in enumerate(xs):
            for j, sym in enumerate(x[:M], start=1):
                e[b, j - 1] = self.E[:, index[sym]] + self._beta(j, device)
                mask[b, j - 1] = True
        return e, mask

    @staticmethod
    def _attend(att: AttentionWeights, h: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: Optional[torch.Tensor], attention: str, beta: float, record: Optional[list]) -> torch.Tensor:
        """h (B, w); keys (B, n, d_k), values (B, n, w) already projected; null slot first."""
        q = h @ att.W_Q.T + att.b_Q  # (B, d_k)
        scores = torch.cat([(q @ att.K0).unsqueeze(1), torch.einsum("bk,bnk->bn", q, keys)], dim=1)  # (B, 1+n)
        if mask is not None:
            scores[:, 1:] = scores[:, 1:].masked_fill(~mask, float("-inf"))
        if record is not None:
            record.append(scores.detach().cpu())
        vals = torch.cat([att.V0.expand(h.shape[0], 1, -1), values], dim=1)  # (B, 1+n, w)
        if attention == "hard":
            weights = (scores == scores.amax(dim=1, keepdim=True)).to(DTYPE)
            weights = weights / weights.sum(1, keepdim=True)
        else:
            weights = torch.softmax(beta * scores, dim=1)
        return h + torch.einsum("bn,bnw->bw", weights, vals)

    @property
    def max_horizon(self) -> int:
        """The longest horizon these weights simulate: 2T + 1 < 2^P."""
        return (2**self.P - 2) // 2

    def forward_trace(self, xs: Sequence[str], attention: str = "hard", beta: float = 1.0, correct: bool = True,
                      noise: float = 0.0, noise_seed: int = 0, record: bool = False, device=None,
                      horizon: Optional[int] = None) -> Trace:
        """Run the decoder for t = 0..T on a batch of inputs; returns every o_t (and optional attention scores).

        ``horizon`` runs the same weights for another number of steps (up to `max_horizon`).

        ``noise`` adds uniform noise in [-noise, noise] to every layer's output before its correction (the
        correction-radius test of Def. D.1); ``attention="softmax"`` replaces hard attention by softmax(beta * scores).
        """
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
        T = self.T if horizon is None else horizon
        if isinstance(T, bool) or not isinstance(T, int) or not 1 <= T <= self.max_horizon:
            raise ValueError(f"horizon must be an int in [1, {self.max_horizon}], got {horizon!r}")
        device = device or self.E.device
        gen = torch.Generator(device="cpu").manual_seed(noise_seed)
        enc, enc_mask = self.encode(xs, device, T)
        enc_keys = [enc @ lay.enc.W_K.T + lay.enc.b_K for lay in self.layers]
        enc_vals = [enc @ lay.enc.W_V.T + lay.enc.b_V for lay in self.layers]
        active = [(lay.dec.active, lay.enc.active) for lay in self.layers]
        B, L = len(xs), len(self.layers)
        dec_keys = [torch.zeros(B, 0, self.d_k, dtype=DTYPE, device=device) for _ in range(L)]
        dec_vals = [torch.zeros(B, 0, self.w, dtype=DTYPE, device=device) for _ in range(L)]
        scores = {(name, kind): [] for name in self.layer_names for kind in ("dec", "enc")} if record else {}
        outputs, writes, per_layer = [], [], []
        h = self.h0.expand(B, -1).clone()
        for t in range(T + 1):
            if t > 0:
                h = outputs[-1] + self._beta(t, device)
            for i, (lay, name) in enumerate(zip(self.layers, self.layer_names)):
                if name == "C0":
                    writes.append(h)
                if active[i][0]:  # inactive attention is exactly the identity (all scores tie, all values 0)
                    dec_keys[i] = torch.cat([dec_keys[i], (h @ lay.dec.W_K.T + lay.dec.b_K).unsqueeze(1)], dim=1)
                    dec_vals[i] = torch.cat([dec_vals[i], (h @ lay.dec.W_V.T + lay.dec.b_V).unsqueeze(1)], dim=1)
                    h = self._attend(lay.dec, h, dec_keys[i], dec_vals[i], None, attention, beta,
                                     scores.get((name, "dec")) if record else None)
                if active[i][1]:
                    h = self._attend(lay.enc, h, enc_keys[i], enc_vals[i], enc_mask, attention, beta,
                                     scores.get((name, "enc")) if record else None)
                eps = (torch.rand(h.shape, generator=gen, dtype=DTYPE) * 2 - 1).to(device) * noise if noise > 0 else None
                h = lay.feed_forward(h, correct, eps)
                if record:
                    per_layer.append(h.cpu())
            outputs.append(h)
        outs = torch.stack(outputs, 1)
        states = torch.stack(per_layer, 1).reshape(B, T + 1, L, self.w) if record else None
        return Trace(outs.cpu(), torch.stack(writes, 1).cpu(), scores, (outs[:, -1] @ self.theta_cls).cpu(), states)

    def _cells(self, bits: torch.Tensor, T: int) -> torch.Tensor:
        """Signed cell indices from Bin(l mod 2^P) (..., P): codes above T+1 are negative cells."""
        weights = torch.tensor([2 ** (self.P - 1 - k) for k in range(self.P)], dtype=DTYPE)
        cells = (bits.round() @ weights).long()
        return torch.where(cells > T + 1, cells - 2**self.P, cells)

    def write_log(self, trace: Trace) -> tuple[torch.Tensor, torch.Tensor]:
        """(cells, symbol indices), each (B, T+1): position t >= 1 wrote symbol u_t into cell l_{t-1}."""
        T = trace.outputs.shape[1] - 1
        return self._cells(trace.writes[..., self.layout["pos2"]], T), trace.writes[..., self.layout["sym2"]].argmax(-1)

    def tape_after(self, x: str, trace: Trace, b: int, t: int) -> dict[int, str]:
        """The tape of input ``x`` (batch row ``b``) after t steps, from the transformer's write log."""
        cells, syms = self.write_log(trace)
        tape = {i + 1: s for i, s in enumerate(x)}
        for s in range(1, t + 1):  # position 0 is the pre-step's blank write into cell 0
            tape[int(cells[b, s])] = self.alphabet[int(syms[b, s])]
        return tape

    def decode(self, xs: Sequence[str], trace: Trace) -> list[RunResult]:
        """Read states, heads, the accept bit and the final tape from the hidden states (never from a machine)."""
        T = trace.outputs.shape[1] - 1
        st = trace.outputs[..., self.layout["st"]].argmax(-1)  # (B, T+1)
        heads = self._cells(trace.outputs[..., self.layout["pos2"]], T)  # (B, T+1)
        results = []
        for b, x in enumerate(xs):
            states = [self.state_names[int(i)] for i in st[b]]
            results.append(RunResult(bool(trace.F[b] > 0), states, [int(c) for c in heads[b]],
                                     self.tape_after(x, trace, b, T), self.blank))
        return results

    def run_batch(self, xs: Sequence[str], **kwargs) -> list[RunResult]:
        xs = list(xs)
        if not xs:
            return []
        return self.decode(xs, self.forward_trace(xs, **kwargs))

    def run(self, x: str, **kwargs) -> RunResult:
        return self.run_batch([x], **kwargs)[0]


def build_transformer(tm: TuringMachine, T: int, device=None) -> TMTransformer:
    """The P + 9 layer transformer of Appendix C (with the gap fillings of the chapter) for T steps."""
    if not isinstance(tm, TuringMachine):
        raise ValueError(f"tm must be a TuringMachine, got {type(tm).__name__}")
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        raise ValueError(f"T must be an int >= 1, got {T!r}")
    P = position_bits(T)
    states = [PRE] + [z for z in tm.states]
    A = list(tm.alphabet)
    model = TMTransformer(states, A, sorted(tm.accept), T, P)
    lay = model.layout
    zi = {z: i for i, z in enumerate(states)}
    ai = {a: i for i, a in enumerate(A)}
    pair = lambda z, a: ("pair", zi[z] * len(A) + ai[a])  # noqa: E731
    layers = dict(zip(model.layer_names, model.layers))
    base = ["st", "sym2", "pos1", "pos2", "pos3", "scr1", "scr2", "scr3", "scr4"]

    def keep(layer: TMLayer, groups: Sequence[str]) -> None:
        for g in groups:
            for k in range(lay.size(g)):
                layer.W_1[lay.index((g, k)), lay.index((g, k))] = 1.0

    def unit(layer: TMLayer, out, reads: dict, bias: float = 0.0) -> None:
        for key, v in reads.items():
            layer.W_1[lay.index(out), lay.index(key)] += v
        layer.b_1[lay.index(out)] += bias

    with torch.no_grad():
        # Embeddings: E writes the symbol's one-hot into sym1; h0 is the pre-step (state pre, blank read).
        for a in A:
            model.E[lay.index(("sym1", ai[a])), ai[a]] = 1.0
        model.h0[lay.index(("st", zi[PRE]))] = 1.0
        model.h0[lay.index(("sym1", ai[tm.blank]))] = 1.0
        for z in tm.accept:
            model.theta_cls[lay.index(("st", zi[z]))] = 1.0
        for z in tm.reject:
            model.theta_cls[lay.index(("st", zi[z]))] = -1.0

        # A1: pair detector; A2: apply the transition table (the only place it is stored).
        table = dict(tm.delta)
        table.update({(PRE, a): (tm.initial, tm.blank, 1) for a in A})
        for z in states:
            for a in A:
                unit(layers["A1"], pair(z, a), {("st", zi[z]): 1.0, ("sym1", ai[a]): 1.0}, bias=-1.0)
        keep(layers["A1"], ["pos1", "pos2"])
        for (z, a), (z2, u, q) in table.items():
            for out in (("st", zi[z2]), ("sym2", ai[u]), ("dir", 0 if q == -1 else 1)):
                unit(layers["A2"], out, {pair(z, a): 1.0})
        keep(layers["A2"], ["pos1", "pos2"])

        # B1-B3: l_t = l_{t-1} +- 1 (mod 2^P) by carry lookahead, then XOR in two ReLU layers.
        for name in ("B1", "B2", "B3"):
            keep(layers[name], ["st", "sym2", "pos1", "pos2"])
        for k in range(P):
            low = {("pos2", j): 1.0 for j in range(k + 1, P)}
            unit(layers["B1"], ("cy", k), {("dir", 1): 1.0, **low}, bias=-float(len(low)))
            unit(layers["B1"], ("bw", k), {("dir", 0): 1.0, **{key: -1.0 for key in low}})
            unit(layers["B2"], ("cy", k), {("pos2", k): 1.0, ("cy", k): -1.0, ("bw", k): -1.0})
            unit(layers["B2"], ("bw", k), {("pos2", k): -1.0, ("cy", k): 1.0, ("bw", k): 1.0})
            unit(layers["B3"], ("pos3", k), {("cy", k): 1.0, ("bw", k): 1.0})

        def pm(att_W, att_b, row: int, key) -> None:  # +-1 encoding of a bit: 2 * bit - 1
            att_W[row, lay.index(key)] = 2.0
            att_b[row] = -1.0

        # C0: was cell l_t ever written (Claim C.4)?
        c0 = layers["C0"].dec
        for k in range(P):
            pm(c0.W_Q, c0.b_Q, k, ("pos3", k))
            pm(c0.W_K, c0.b_K, k, ("pos2", k))
        c0.b_Q[2 * P] = 1.0
        c0.K0[2 * P] = P - 1
        c0.b_V[lay.index(("scr4", 0))] = 1.0
        keep(layers["C0"], base)

        # C1..CP: binary search for i' = max{t' <= t : l_{t'-1} = l_t}, most significant bit first (Claim C.5).
        for j in range(1, P + 1):
            layer = layers[f"C{j}"]
            att = layer.dec
            for k in range(P):
                pm(att.W_Q, att.b_Q, k, ("pos3", k))
                pm(att.W_K, att.b_K, k, ("pos2", k))
            for i in range(j - 1):
                pm(att.W_Q, att.b_Q, P + i, ("scr3", i))
                pm(att.W_K, att.b_K, P + i, ("pos1", i))
            att.b_Q[P + j - 1] = 1.0
            pm(att.W_K, att.b_K, P + j - 1, ("pos1", j - 1))
            att.b_Q[2 * P] = 1.0
            att.K0[2 * P] = P + j - 1
            att.b_V[lay.index(("scr4", 2))] = 1.0
            keep(layer, [g for g in base if g not in ("scr3", "scr4")])
            for k in range(P):
                if k != j - 1:
                    unit(layer, ("scr3", k), {("scr3", k): 1.0})
            unit(layer, ("scr3", j - 1), {("scr4", 2): 1.0})
            unit(layer, ("scr4", 0), {("scr4", 0): 1.0})
            unit(layer, ("scr4", 1), {("scr4", 1): 1.0})

        # CD: read the symbol written at i' (Claim C.6) and the input symbol at l_t (Lemma C.7).
        cd = layers["CD"]
        for k in range(P):
            pm(cd.dec.W_Q, cd.dec.b_Q, k, ("pos3", k))
            pm(cd.dec.W_K, cd.dec.b_K, k, ("pos2", k))
            pm(cd.dec.W_Q, cd.dec.b_Q, P + k, ("scr3", k))
            pm(cd.dec.W_K, cd.dec.b_K, P + k, ("pos1", k))
            pm(cd.enc.W_Q, cd.enc.b_Q, k, ("pos3", k))
            pm(cd.enc.W_K, cd.enc.b_K, k, ("pos1", k))
        cd.dec.b_Q[2 * P] = 1.0
        cd.dec.K0[2 * P] = 2 * P - 1
        cd.enc.b_Q[2 * P] = 1.0
        cd.enc.K0[2 * P] = P - 1
        for a in range(len(A)):
            cd.dec.W_V[lay.index(("scr1", a)), lay.index(("sym2", a))] = 1.0
            cd.enc.W_V[lay.index(("scr2", a)), lay.index(("sym1", a))] = 1.0
        cd.enc.b_V[lay.index(("scr4", 1))] = 1.0
        keep(cd, [g for g in base if g != "scr3"])

        # E1: choose the symbol now under the head (written before, else input, else blank; Lemma C.8).
        e1 = layers["E1"]
        keep(e1, ["st", "pos3"])
        found, inp = ("scr4", 0), ("scr4", 1)
        for a in range(len(A)):
            unit(e1, ("scr1", a), {("scr1", a): 1.0, found: 1.0}, bias=-1.0)
            unit(e1, ("scr2", a), {("scr2", a): 1.0, inp: 1.0, found: -1.0}, bias=-1.0)
        unit(e1, ("scr4", 2), {found: -1.0, inp: -1.0}, bias=1.0)

        # E2: restore the invariant o_t = (z_t, a_t, Bin(l_t)).
        e2 = layers["E2"]
        keep(e2, ["st"])
        for k in range(P):
            unit(e2, ("pos2", k), {("pos3", k): 1.0})
        for a in range(len(A)):
            reads = {("scr1", a): 1.0, ("scr2", a): 1.0}
            if a == ai[tm.blank]:
                reads[("scr4", 2)] = 1.0
            unit(e2, ("sym1", a), reads)
    return model.to(device or default_device())
