"""The encoder-decoder hard-attention transformer that simulates a Turing machine (Wei, Chen & Ma, App. C).

Hidden states are 0/1 vectors split into named slots (`tm_layout`). The decoder runs positions
t = 0..T; position 0 is a "pre-step" (a state ``pre`` that writes a blank into cell 0 and moves to
cell 1), so that o_t holds (z_t, a_t, Bin(l_t)) for t = 0..T. Each of the P + 9 shared transformer
layers X is a sequence of core layers of `tfbook.layers`, named

    X.attn    decoder self-attention, hard with a null key, over the cached states of positions 0..t
    X.xattn   encoder-decoder attention, hard with a null key, over the encoder outputs
    X.ff      relu(W_1 h + b_1), the layer's work (the paper's first feed-forward ReLU layer)
    X.round   round(z) = 3 relu(z - 1/3) - 3 relu(z - 2/3), the correction (its last two ReLU layers)

(an attention sublayer whose weights would all be zero is the identity and is left out). The next
position's input is o_t + beta(t+1): reading the decoder output and feeding it back is done in Python,
as in the paper, but every step's arithmetic runs in the core layers. The transition table lives only
in the weights of A2.ff; the model keeps no reference to the machine it was built from.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import torch
from torch import nn

from tfbook import validate
from tfbook.device import DTYPE, default_device
from tfbook.layers import Attention, FeedForward
from tfbook.layout import Layout, SlotKey
from tfbook.model import Construction, Sizes
from tfbook.turing.formulas import w_tm
from tfbook.turing.machine import PRE, RunResult, TuringMachine

ATTENTIONS = ("hard", "softmax")
BASE = ("st", "sym2", "pos1", "pos2", "pos3", "scr1", "scr2", "scr3", "scr4")


def position_bits(T: int) -> int:
    """P = bit_length(2T + 1): distinct codes for timesteps 0..T and head cells 1-T..T+1 (mod 2^P)."""
    return (2 * T + 1).bit_length()


def binary(i: int, P: int) -> list[int]:
    """Bin(i mod 2^P), most significant bit first."""
    i %= 2**P
    return [(i >> (P - 1 - k)) & 1 for k in range(P)]


def tm_layout(num_states: int, num_symbols: int, P: int) -> Layout:
    """Slots st, sym1, sym2, pos1-3, scr1-4 (the paper's w_TM) and dir, cy, bw, pair (scratch of Lemmas C.1/C.2)."""
    Z, A = num_states, num_symbols
    return Layout([("st", Z), ("sym1", A), ("sym2", A), ("pos1", P), ("pos2", P), ("pos3", P), ("scr1", A),
                   ("scr2", A), ("scr3", P), ("scr4", 3), ("dir", 2), ("cy", P), ("bw", P), ("pair", Z * A)])


def layer_names(P: int) -> list[str]:
    """The P + 9 transformer layers: A1, A2 (Lemma C.1), B1-B3 (C.2), C0 (C.4), C1..CP (C.5), CD (C.6/C.7), E1, E2 (C.8)."""
    return ["A1", "A2", "B1", "B2", "B3", "C0"] + [f"C{j}" for j in range(1, P + 1)] + ["CD", "E1", "E2"]


def _keys(layout: Layout) -> list[tuple[str, int]]:
    return [(name, i) for name, _, size in layout.table() for i in range(size)]


class _Work:
    """The rows of one work layer relu(W_1 h + b_1), written by slot name: ``unit(out, reads, bias)``."""

    def __init__(self, layout: Layout):
        self.layout, self.rows, self.bias = layout, {}, {}

    def unit(self, out: SlotKey, reads: Mapping[SlotKey, float], bias: float = 0.0) -> None:
        key = (out, 0) if isinstance(out, str) else tuple(out)
        row = self.rows.setdefault(key, {})
        for k, v in reads.items():
            row[k] = row.get(k, 0.0) + v
        self.bias[key] = self.bias.get(key, 0.0) + bias

    def keep(self, slots: Sequence[str]) -> None:
        for s in slots:
            for i in range(self.layout.size(s)):
                self.unit((s, i), {(s, i): 1.0})

    def build(self) -> FeedForward:
        lay = self.layout
        W_1 = lay.matrix([self.rows.get(k, {}) for k in _keys(lay)])  # (w, w): row = output coordinate
        eye = torch.eye(lay.dim, dtype=DTYPE)  # the paper's relu(W_1 h + b_1) is the output itself
        return FeedForward(W_1, lay.vector(self.bias), eye, None, residual=False)


def _correction(w: int) -> FeedForward:
    """round(z) = 3 relu(z - 1/3) - 3 relu(z - 2/3) on every coordinate: W_2 = [I; I], b_2, W_3 = [3I, -3I] of the paper."""
    eye = torch.eye(w, dtype=DTYPE)
    b = torch.cat([torch.full((w,), -1 / 3, dtype=DTYPE), torch.full((w,), -2 / 3, dtype=DTYPE)])
    return FeedForward(torch.cat([eye, eye]), b, torch.cat([3 * eye, -3 * eye], dim=1), None, residual=False)


class _Head:
    """One hard-attention head with a null key, written by slot name: key coordinates form their own `Layout`."""

    def __init__(self, layout: Layout, key_slots: Sequence[tuple[str, int]], value_slots: Sequence[tuple[str, int]]):
        self.layout, self.keys, self.values = layout, Layout(key_slots), Layout(value_slots)
        self.q, self.k, self.v = ({} for _ in range(3))
        self.bq, self.bk, self.bv, self.null, self.out = ({} for _ in range(5))

    def pm(self, row: SlotKey, query: Optional[SlotKey], key: Optional[SlotKey]) -> None:
        """+-1 encoding (2 bit - 1) of a query bit and/or a key bit in key coordinate ``row``."""
        row = (row, 0) if isinstance(row, str) else tuple(row)
        for side, bias, slot in ((self.q, self.bq, query), (self.k, self.bk, key)):
            if slot is not None:
                side.setdefault(row, {})[slot] = 2.0
                bias[row] = -1.0

    def build(self, cross: bool = False) -> Attention:
        lay, K, V = self.layout, self.keys, self.values
        rows = lambda spec: lay.matrix([spec.get(k, {}) for k in _keys(K)])  # noqa: E731
        W_V = lay.matrix([self.v.get(k, {}) for k in _keys(V)])  # (m_v, w)
        W_O = torch.zeros(lay.dim, V.dim, dtype=DTYPE)  # writes value coordinate k into its slot
        for c, key in enumerate(_keys(V)):
            W_O[lay.index(self.out[key]), c] = 1.0
        return Attention.stacked(rows(self.q)[None], rows(self.k)[None], W_V[None], W_O[None],
                                 b_Q=K.vector(self.bq)[None], b_K=K.vector(self.bk)[None], b_V=V.vector(self.bv)[None],
                                 normalization="hard", null_key=K.vector(self.null)[None],
                                 null_value=torch.zeros(1, V.dim, dtype=DTYPE), cross=cross)


@dataclass
class Trace:
    """A decoder run (all tensors on the CPU); not to be confused with `tfbook.model.Trace` (one forward pass)."""

    outputs: torch.Tensor  # (B, T+1, w): o_t
    writes: torch.Tensor  # (B, T+1, w): the state entering C0.attn (holds u_t and Bin(l_{t-1}))
    scores: dict  # core attention layer name -> list over t of (B, 1 + keys) raw scores, null first (when recorded)
    F: torch.Tensor  # (B,) theta_cls . o_T
    layer_states: Optional[torch.Tensor] = None  # (B, T+1, len(layer_names), w): each core layer's output (recorded)
    layer_names: Optional[list] = None  # the core layers run, in order (when recorded)

    def state(self, name: str) -> torch.Tensor:
        """(B, T+1, w): the output of core layer ``name`` (e.g. "C3.round") at every position."""
        if self.layer_names is None or name not in self.layer_names:
            raise ValueError(f"layer must be one of the recorded layers {self.layer_names}, got {name!r}")
        return self.layer_states[:, :, self.layer_names.index(name)]


def score_gaps(trace: Trace) -> torch.Tensor:
    """For every recorded attention call (and batch row): top score minus the best strictly lower score.

    Scores are integers (to rounding), so "strictly lower" means lower by more than 1/2; calls where every
    slot ties (nothing lower) are skipped. The proof of Theorem 4.1 needs every gap to be at least 1.
    """
    gaps = []
    for calls in trace.scores.values():
        for s in calls:  # (B, 1 + keys)
            s = s.masked_fill(torch.isnan(s), -float("inf"))
            top = s.amax(1, keepdim=True)
            below = torch.where(s < top - 0.5, s, torch.full_like(s, -float("inf"))).amax(1)
            gaps.append((top[:, 0] - below)[torch.isfinite(below)])
    return torch.cat(gaps) if gaps else torch.zeros(0, dtype=DTYPE)


class TMReader:
    """The fixed conventions of App. C for one machine, without weights: where the positional encoding
    beta(t) goes and how states, head cells, the write log and the accept bit are read back."""

    def __init__(self, layout: Layout, P: int, states: Sequence[str], alphabet: Sequence[str]):
        self.layout, self.P = layout, P
        self.state_names, self.alphabet, self.blank = list(states), list(alphabet), alphabet[0]

    def beta(self, t: int, device) -> torch.Tensor:
        """beta(t): Bin(t) in pos1, zero elsewhere; (w,)."""
        return self.layout.vector({("pos1", k): b for k, b in enumerate(binary(t, self.P))}).to(device)

    def cells(self, bits: torch.Tensor, T: int) -> torch.Tensor:
        """Signed cell indices from Bin(l mod 2^P) (..., P): codes above T+1 are negative cells."""
        weights = torch.tensor([2 ** (self.P - 1 - k) for k in range(self.P)], dtype=DTYPE, device=bits.device)
        cells = (bits.round() @ weights).long()
        return torch.where(cells > T + 1, cells - 2**self.P, cells)

    def write_log(self, trace: Trace) -> tuple[torch.Tensor, torch.Tensor]:
        """(cells, symbol indices), each (B, T+1): position t >= 1 wrote symbol u_t into cell l_{t-1}."""
        T = trace.outputs.shape[1] - 1
        return (self.cells(self.layout.read(trace.writes, "pos2"), T),
                self.layout.read(trace.writes, "sym2").argmax(-1))

    def tape(self, x: str, cells: Sequence[int], syms: Sequence[int], t: int) -> dict[int, str]:
        """The tape of input ``x`` after t steps from one row of the write log."""
        tape = {i + 1: s for i, s in enumerate(x)}
        for s in range(1, t + 1):  # position 0 is the pre-step's blank write into cell 0
            tape[cells[s]] = self.alphabet[syms[s]]
        return tape

    def decode(self, xs: Sequence[str], trace: Trace) -> list[RunResult]:
        """Read states, heads, the accept bit (F > 0) and the final tape of every input."""
        T = trace.outputs.shape[1] - 1
        st = self.layout.read(trace.outputs, "st").argmax(-1).tolist()  # (B, T+1)
        heads = self.cells(self.layout.read(trace.outputs, "pos2"), T).tolist()  # (B, T+1)
        cells, syms = (log.tolist() for log in self.write_log(trace))  # computed once for every input
        accepted = (trace.F > 0).tolist()
        return [RunResult(accepted[b], [self.state_names[i] for i in st[b]], heads[b],
                          self.tape(x, cells[b], syms[b], T), self.blank) for b, x in enumerate(xs)]


class TMDecoder(Construction):
    """What every Turing-machine transformer shares: the encoder inputs, the decoder run for t = 0..T
    (`forward_trace`) and ``run(x)`` / ``run_batch(xs)``; subclasses say how states are read (`decode`).

    It stores the paper's encoder embedding ``E`` (w, |A|), the initial decoder input ``h0`` (w,) and
    the classifier ``theta_cls`` (w,) or (w, machines); ``readers`` hold each machine's `TMReader`.
    """

    def __init__(self, layout: Layout, layers: Sequence[tuple[str, nn.Module]], readers: Sequence[TMReader],
                 T: int, P: int, E: torch.Tensor, h0: torch.Tensor, theta_cls: torch.Tensor):
        super().__init__(layout, layers)
        self.readers = list(readers)
        self.alphabet, self.blank, self.T, self.P = self.readers[0].alphabet, self.readers[0].blank, T, P
        self.w = self.layout.dim
        frozen = lambda t: nn.Parameter(t.to(DTYPE), requires_grad=False)  # noqa: E731
        self.E, self.h0, self.theta_cls = frozen(E), frozen(h0), frozen(theta_cls)

    # --- running -----------------------------------------------------------------------------------
    def beta(self, t: int, device=None) -> torch.Tensor:
        """The positional encoding beta(t): Bin(t) in each machine's pos1, zero elsewhere; (w,)."""
        device = device or self.E.device
        return torch.cat([reader.beta(t, device) for reader in self.readers])

    def encode(self, xs: Sequence[str], device, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder outputs e_j = E[:, x_j] + beta(j) (B, M, w) for the first T+1 cells (all the head can reach)
        and a (B, M) validity mask."""
        onehot, pos, mask = self.encoder_inputs(xs, device, T)
        return (onehot @ self.E.T + pos) * mask[..., None], mask

    def encoder_inputs(self, xs: Sequence[str], device, T: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What `encode` combines with E: symbol one-hots (B, M, |A|), beta(1..M) (M, w) and the mask (B, M)."""
        index = {a: i for i, a in enumerate(self.alphabet)}
        for x in xs:
            if not isinstance(x, str):
                raise ValueError(f"inputs must be strings, got {x!r}")
            bad = sorted(set(x) - set(index))
            if bad:
                raise ValueError(f"input symbols {bad} are outside the alphabet {self.alphabet}")
        M = max([min(len(x), T + 1) for x in xs] + [1])
        codes = [[index[sym] for sym in x[:M]] for x in xs]
        mask = torch.tensor([[j < len(c) for j in range(M)] for c in codes], dtype=torch.bool).reshape(len(xs), M)
        symbols = torch.tensor([c + [0] * (M - len(c)) for c in codes], dtype=torch.long).reshape(len(xs), M)
        onehot = (nn.functional.one_hot(symbols, len(self.alphabet)).to(DTYPE) * mask[..., None]).to(device)
        mask = mask.to(device)
        pos = torch.stack([self.beta(j, device) for j in range(1, M + 1)])  # (M, w)
        return onehot, pos, mask

    def horizon(self, horizon: Optional[int] = None) -> int:
        """The number of steps T to run: the model's own T, or ``horizon`` (checked against `max_horizon`)."""
        T = self.T if horizon is None else horizon
        if isinstance(T, bool) or not isinstance(T, int) or not 1 <= T <= self.max_horizon:
            raise ValueError(f"horizon must be an int in [1, {self.max_horizon}], got {horizon!r}")
        return T

    @property
    def max_horizon(self) -> int:
        """The longest horizon these weights simulate: 2T + 1 < 2^P."""
        return (2**self.P - 2) // 2

    def _attention_layers(self, attention: str, beta: float) -> dict[str, Attention]:
        """The attention layers to run: the model's own (hard) ones, or softmax layers with the same weights and
        temperature 1/beta (named like the originals, so `tfbook.layers.perturb` selects them too)."""
        out = {}
        for name, layer in self.named_layers():
            if layer.kind not in ("attn", "xattn"):
                continue
            if attention == "hard":
                out[name] = layer
                continue
            soft = Attention.stacked(layer.W_Q, layer.W_K, layer.W_V, layer.W_O, b_Q=layer.b_Q, b_K=layer.b_K,
                                     b_V=layer.b_V, normalization="softmax", temperature=1.0 / beta,
                                     null_key=layer.null_key, null_value=layer.null_value, cross=layer.cross)
            soft.name = name
            out[name] = soft.to(layer.W_Q.device)
        return out

    def forward_trace(self, xs: Sequence[str], attention: str = "hard", beta: float = 1.0, correct: bool = True,
                      record: bool = False, device=None, horizon: Optional[int] = None) -> Trace:
        """Run the decoder for t = 0..T on a batch of inputs; returns every o_t (and optional attention scores).

        ``horizon`` runs the same weights for another number of steps (up to `max_horizon`).
        ``attention="softmax"`` runs softmax attention with temperature 1/beta instead of hard attention;
        ``correct=False`` skips the correction layers. Noise is injected with `tfbook.layers.perturb`.
        """
        validate.choice("attention", attention, ATTENTIONS)
        beta = validate.real("beta", beta, low=0, low_open=True)
        T = self.horizon(horizon)
        device = device or self.E.device
        enc, enc_mask = self.encode(xs, device, T)
        attn = self._attention_layers(attention, beta)
        steps = [(name, attn.get(name, layer)) for name, layer in self.named_layers()
                 if correct or not name.endswith(".round")]
        B = len(xs)
        # projected key/value caches: each step projects only its own position (the paper's decoder
        # attends to every earlier position; nothing is re-projected)
        cache = {name: (torch.zeros(B, layer.num_heads, layer.W_K.shape[1], T + 1, dtype=DTYPE, device=device),
                        torch.zeros(B, layer.num_heads, layer.W_V.shape[1], T + 1, dtype=DTYPE, device=device))
                 for name, layer in steps if layer.kind == "attn"}
        enc_kv = {name: layer.project_memory(enc) for name, layer in steps if layer.kind == "xattn"}
        scores = {name: [] for name, layer in steps if layer.kind in ("attn", "xattn")} if record else {}
        outputs, writes, per_layer = [], [], []
        h = self.h0.to(device).expand(B, 1, -1)  # (B, 1, w)
        for t in range(T + 1):
            if t > 0:
                h = outputs[-1] + self.beta(t, device)
            for name, layer in steps:
                if layer.kind == "attn":
                    if name == "C0.attn":
                        writes.append(h[:, 0])
                    K, V = cache[name]
                    K[..., t:t + 1], V[..., t:t + 1] = layer.project_memory(h)
                    kw = {"kv": (K[..., : t + 1], V[..., : t + 1])}
                elif layer.kind == "xattn":
                    kw = {"kv": enc_kv[name], "key_mask": enc_mask}
                else:
                    kw = {}
                if record and kw:
                    scores[name].append(layer.scores(h, **kw)[:, 0, 0].masked_fill(
                        ~torch.cat([torch.ones(B, 1, dtype=torch.bool, device=device), enc_mask], 1)
                        if layer.kind == "xattn" else torch.zeros(B, t + 2, dtype=torch.bool, device=device),
                        -float("inf")).cpu())
                h = layer(h, **kw)
                if record:
                    per_layer.append(h[:, 0].cpu())
            outputs.append(h)
        outs = torch.cat(outputs, 1)  # (B, T+1, w)
        states = torch.stack(per_layer, 1).reshape(B, T + 1, len(steps), self.w) if record else None
        return Trace(outs.cpu(), torch.stack(writes, 1).cpu(), scores, (outs[:, -1] @ self.theta_cls).cpu(), states,
                     [name for name, _ in steps] if record else None)

    def run_batch(self, xs: Sequence[str], **kwargs) -> list[RunResult]:
        xs = list(xs)
        if not xs:
            return []
        return self.decode(xs, self.forward_trace(xs, **kwargs))

    def run(self, x: str, **kwargs) -> RunResult:
        return self.run_batch([x], **kwargs)[0]


class TMTransformer(TMDecoder):
    """Built by `build_transformer`; ``run(x)`` / ``run_batch(xs)`` return `RunResult` objects."""

    def __init__(self, states: Sequence[str], alphabet: Sequence[str], accept: Sequence[str], T: int, P: int,
                 layers: Sequence[tuple[str, nn.Module]], E: torch.Tensor, h0: torch.Tensor, theta_cls: torch.Tensor):
        layout = tm_layout(len(states), len(alphabet), P)
        reader = TMReader(layout, P, tuple(states), tuple(alphabet))
        super().__init__(layout, layers, [reader], T, P, E, h0, theta_cls)
        self.state_names, self.accept_names = list(states), set(accept)
        self.reader = reader
        self.transformer_layers = layer_names(P)

    # --- sizes: each accessor is one Sizes field or one paper formula ----------------------------------
    @property
    def width(self) -> int:
        """The hidden width w: ``counted_sizes().embed_dim``."""
        return self.counted_sizes().embed_dim

    @property
    def num_layers(self) -> int:
        """The paper's number of transformer layers d, counted as the number of correction layers (one per layer)."""
        return sum(name.endswith(".round") for name in self.layer_names)

    def num_parameters(self) -> int:
        """Stored scalars: ``counted_sizes().stored`` (core layers, E, h0 and theta_cls)."""
        return self.counted_sizes().stored

    def theta(self, correction: bool = True) -> list[tuple[str, torch.Tensor]]:
        """The paper's parameters theta, by name: every stored tensor except the fixed wiring
        (the identity W_2 of each work layer and the 0/1 output maps W_O of the attention heads);
        ``correction=False`` also leaves out the correction layers."""
        out = []
        for name, p in self.named_parameters():
            layer = name.split(".")[1] if name.startswith("layers.") else None
            if name.endswith(".W_O") or (name.endswith(".W_2") and self.layer_names[int(layer)].endswith(".ff")):
                continue
            if not correction and layer is not None and self.layer_names[int(layer)].endswith(".round"):
                continue
            out.append((name, p))
        return out

    def l1_norm(self, correction: bool = True) -> float:
        """||theta||_1, the alpha of Lemma 2.4 (``correction=False`` leaves out the correction layers), summed exactly
        rounded (`math.fsum`): the same float on every machine, whatever order a kernel would add in."""
        return math.fsum(v for _, p in self.theta(correction) for v in p.detach().abs().flatten().cpu().tolist())

    def paper_sizes(self) -> Sizes:
        """The paper's w_TM = |Z| + 2|A| + 3 w_pos + w_scr with w_scr = 2|A| + w_pos + 3 (App. C)."""
        return Sizes(embed_dim=w_tm(len(self.state_names), len(self.alphabet), self.P))

    def _cells(self, bits: torch.Tensor, T: int) -> torch.Tensor:
        """Signed cell indices from Bin(l mod 2^P) (..., P): codes above T+1 are negative cells."""
        return self.reader.cells(bits, T)

    def write_log(self, trace: Trace) -> tuple[torch.Tensor, torch.Tensor]:
        """(cells, symbol indices), each (B, T+1): position t >= 1 wrote symbol u_t into cell l_{t-1}."""
        return self.reader.write_log(trace)

    def tape_after(self, x: str, trace: Trace, b: int, t: int) -> dict[int, str]:
        """The tape of input ``x`` (batch row ``b``) after t steps, from the transformer's write log."""
        cells, syms = self.write_log(trace)
        return self.reader.tape(x, cells[b].tolist(), syms[b].tolist(), t)

    def decode(self, xs: Sequence[str], trace: Trace) -> list[RunResult]:
        """Read states, heads, the accept bit and the final tape from the hidden states (never from a machine)."""
        return self.reader.decode(xs, trace)


def build_transformer(tm: TuringMachine, T: int, device=None) -> TMTransformer:
    """The P + 9 layer transformer of Appendix C (with the gap fillings of the chapter) for T steps."""
    if not isinstance(tm, TuringMachine):
        raise ValueError(f"tm must be a TuringMachine, got {type(tm).__name__}")
    T = validate.positive_int("T", T)
    P = position_bits(T)
    states = [PRE] + list(tm.states)
    A = list(tm.alphabet)
    lay = tm_layout(len(states), len(A), P)
    zi = {z: i for i, z in enumerate(states)}
    ai = {a: i for i, a in enumerate(A)}
    pair = lambda z, a: ("pair", zi[z] * len(A) + ai[a])  # noqa: E731
    work = {name: _Work(lay) for name in layer_names(P)}
    heads: dict[str, _Head] = {}

    # A1: pair detector; A2: apply the transition table (the only place it is stored). Lemma C.1.
    table = dict(tm.delta)
    table.update({(PRE, a): (tm.initial, tm.blank, 1) for a in A})
    for z in states:
        for a in A:
            work["A1"].unit(pair(z, a), {("st", zi[z]): 1.0, ("sym1", ai[a]): 1.0}, bias=-1.0)
    for (z, a), (z2, u, q) in table.items():
        for out in (("st", zi[z2]), ("sym2", ai[u]), ("dir", 0 if q == -1 else 1)):
            work["A2"].unit(out, {pair(z, a): 1.0})
    for name in ("A1", "A2"):
        work[name].keep(["pos1", "pos2"])

    # B1-B3: l_t = l_{t-1} +- 1 (mod 2^P) by carry lookahead, then XOR in two ReLU layers. Lemma C.2.
    for name in ("B1", "B2", "B3"):
        work[name].keep(["st", "sym2", "pos1", "pos2"])
    for k in range(P):
        low = {("pos2", j): 1.0 for j in range(k + 1, P)}
        work["B1"].unit(("cy", k), {("dir", 1): 1.0, **low}, bias=-float(len(low)))
        work["B1"].unit(("bw", k), {("dir", 0): 1.0, **{key: -1.0 for key in low}})
        work["B2"].unit(("cy", k), {("pos2", k): 1.0, ("cy", k): -1.0, ("bw", k): -1.0})
        work["B2"].unit(("bw", k), {("pos2", k): -1.0, ("cy", k): 1.0, ("bw", k): 1.0})
        work["B3"].unit(("pos3", k), {("cy", k): 1.0, ("bw", k): 1.0})

    # C0: was cell l_t ever written (Claim C.4)? match scores P, null P - 1, others <= P - 2.
    c0 = heads["C0"] = _Head(lay, [("pos", P), ("null", 1)], [("found", 1)])
    for k in range(P):
        c0.pm(("pos", k), ("pos3", k), ("pos2", k))
    c0.bq["null"], c0.null["null"] = 1.0, P - 1
    c0.bv["found"], c0.out[("found", 0)] = 1.0, ("scr4", 0)
    work["C0"].keep(BASE)

    # C1..CP: binary search for i' = max{t' <= t : l_{t'-1} = l_t}, most significant bit first (Claim C.5).
    for j in range(1, P + 1):
        slots = [("pos", P)] + ([("prefix", j - 1)] if j > 1 else []) + [("bit", 1), ("null", 1)]
        att = heads[f"C{j}"] = _Head(lay, slots, [("hit", 1)])
        for k in range(P):
            att.pm(("pos", k), ("pos3", k), ("pos2", k))
        for i in range(j - 1):
            att.pm(("prefix", i), ("scr3", i), ("pos1", i))
        att.bq["bit"] = 1.0
        att.pm("bit", None, ("pos1", j - 1))
        att.bq["null"], att.null["null"] = 1.0, P + j - 1
        att.bv["hit"], att.out[("hit", 0)] = 1.0, ("scr4", 2)
        ff = work[f"C{j}"]
        ff.keep([g for g in BASE if g not in ("scr3", "scr4")])
        for k in range(P):
            if k != j - 1:
                ff.unit(("scr3", k), {("scr3", k): 1.0})
        ff.unit(("scr3", j - 1), {("scr4", 2): 1.0})
        ff.unit(("scr4", 0), {("scr4", 0): 1.0})
        ff.unit(("scr4", 1), {("scr4", 1): 1.0})

    # CD: read the symbol written at i' (Claim C.6) and the input symbol at l_t (Lemma C.7).
    cd = heads["CD"] = _Head(lay, [("pos", P), ("time", P), ("null", 1)], [("sym", len(A))])
    for k in range(P):
        cd.pm(("pos", k), ("pos3", k), ("pos2", k))
        cd.pm(("time", k), ("scr3", k), ("pos1", k))
    cd.bq["null"], cd.null["null"] = 1.0, 2 * P - 1
    enc = heads["CD.x"] = _Head(lay, [("pos", P), ("null", 1)], [("sym", len(A)), ("inp", 1)])
    for k in range(P):
        enc.pm(("pos", k), ("pos3", k), ("pos1", k))
    enc.bq["null"], enc.null["null"] = 1.0, P - 1
    for a in range(len(A)):
        cd.v[("sym", a)], cd.out[("sym", a)] = {("sym2", a): 1.0}, ("scr1", a)
        enc.v[("sym", a)], enc.out[("sym", a)] = {("sym1", a): 1.0}, ("scr2", a)
    enc.bv["inp"], enc.out[("inp", 0)] = 1.0, ("scr4", 1)
    work["CD"].keep([g for g in BASE if g != "scr3"])

    # E1: choose the symbol now under the head (written before, else input, else blank; Lemma C.8).
    e1 = work["E1"]
    e1.keep(["st", "pos3"])
    found, inp = ("scr4", 0), ("scr4", 1)
    for a in range(len(A)):
        e1.unit(("scr1", a), {("scr1", a): 1.0, found: 1.0}, bias=-1.0)
        e1.unit(("scr2", a), {("scr2", a): 1.0, inp: 1.0, found: -1.0}, bias=-1.0)
    e1.unit(("scr4", 2), {found: -1.0, inp: -1.0}, bias=1.0)

    # E2: restore the invariant o_t = (z_t, a_t, Bin(l_t)).
    e2 = work["E2"]
    e2.keep(["st"])
    for k in range(P):
        e2.unit(("pos2", k), {("pos3", k): 1.0})
    for a in range(len(A)):
        reads = {("scr1", a): 1.0, ("scr2", a): 1.0}
        if a == ai[tm.blank]:
            reads[("scr4", 2)] = 1.0
        e2.unit(("sym1", a), reads)

    layers = []
    for name in layer_names(P):
        if name in heads:
            layers.append((f"{name}.attn", heads[name].build()))
        if f"{name}.x" in heads:
            layers.append((f"{name}.xattn", heads[f"{name}.x"].build(cross=True)))
        layers += [(f"{name}.ff", work[name].build()), (f"{name}.round", _correction(lay.dim))]

    # Embeddings: E writes the symbol's one-hot into sym1; h0 is the pre-step (state pre, blank read).
    E = torch.stack([lay.vector({("sym1", ai[a]): 1.0}) for a in A], dim=1)  # (w, |A|)
    h0 = lay.vector({("st", zi[PRE]): 1.0, ("sym1", ai[tm.blank]): 1.0})
    theta_cls = lay.vector({**{("st", zi[z]): 1.0 for z in tm.accept}, **{("st", zi[z]): -1.0 for z in tm.reject}})
    model = TMTransformer(states, A, sorted(tm.accept), T, P, layers, E, h0, theta_cls)
    device = torch.device(device or default_device())
    return model.to(device)
