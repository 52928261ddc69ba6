"""Section 6 of paper 003: greedy token masking, its baselines, and a tiny ViT for the offline reproduction.

`greedy_mask` follows the paper: at each step mask the remaining token whose masking maximises the
predicted probability of the correct class (ties to the smallest index). `global_greedy_mask`
chooses one mask shared by a set of inputs (a "fixed smoothness" baseline); `jaccard` compares
kept-token sets. `make_motif_dataset` builds controlled synthetic images (a class motif at a random
location among distractors, brighter than the background); `make_coloured_motif_dataset` is its version
whose brightness carries no information (every token lit in one colour channel, all with the same
intensity law), the one the chapter uses. `TinyViT` is a small vision transformer with the 2-D
sinusoidal positional encoding of Remark 4.3, trained in float32 (torch's own encoder layers: this model
is trained, not constructed; the last layer is evaluated for the CLS token only, the one row the head
reads). `train_classifiers` trains the models of several seeds at once, as one batched model.
"""
from __future__ import annotations

import copy
import math
from typing import Callable, Optional, Sequence

import torch
from torch import nn

from tfbook import validate
from tfbook.training import untrained

Predict = Callable[[torch.Tensor], torch.Tensor]


def _steps(steps: Optional[int], N: int) -> int:
    if steps is None:
        return N - 1
    steps = validate.positive_int("steps", steps, 0)
    if steps > N:
        raise ValueError(f"steps must be <= N = {N} (the number of tokens), got {steps}")
    return steps


def greedy_mask(predict: Predict, x: torch.Tensor, label: int, steps: Optional[int] = None,
                mask_value: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(order (steps,), probs (steps+1,)): the paper's greedy masking of one input x (d, N)."""
    x = torch.as_tensor(x)
    if x.is_complex():
        raise ValueError(f"x must be a real (d, N) tensor, got dtype {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"x must be a (d, N) tensor, got shape {tuple(x.shape)}")
    label = validate.positive_int("label", label, 0)
    steps = _steps(steps, x.shape[1])
    mask_value = validate.real("mask_value", mask_value)
    current = x.clone()
    masked = torch.zeros(x.shape[1], dtype=torch.bool)
    first = predict(current[None])  # (1, classes)
    if label >= first.shape[-1]:
        raise ValueError(f"label must be one of the {first.shape[-1]} classes of predict (0..{first.shape[-1] - 1}), "
                         f"got {label}")
    probs = [float(first[0, label])]
    order = []
    with torch.no_grad():
        for _ in range(steps):
            cand = torch.nonzero(~masked).flatten()  # ascending
            batch = current[None].repeat(len(cand), 1, 1)
            batch[torch.arange(len(cand)), :, cand] = mask_value
            p = predict(batch)[:, label]
            best = int(torch.argmax(p))  # first maximum = smallest index
            tok = int(cand[best])
            current[:, tok] = mask_value
            masked[tok] = True
            order.append(tok)
            probs.append(float(p[best]))
    return torch.tensor(order, dtype=torch.long), torch.tensor(probs, dtype=torch.float64)


def global_greedy_mask(predict: Predict, X: torch.Tensor, labels, steps: Optional[int] = None,
                       mask_value: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """One mask for all inputs X (b, d, N), greedily maximising the mean of p(label_b); (order, mean probs)."""
    X = torch.as_tensor(X)
    if X.is_complex():
        raise ValueError(f"X must be a real (b, d, N) tensor, got dtype {X.dtype}")
    if X.ndim != 3:
        raise ValueError(f"X must be a (b, d, N) tensor, got shape {tuple(X.shape)}")
    labels = torch.as_tensor(labels, dtype=torch.long)
    if labels.shape != (X.shape[0],):
        raise ValueError(f"labels must have shape ({X.shape[0]},), got {tuple(labels.shape)}")
    steps = _steps(steps, X.shape[2])
    mask_value = validate.real("mask_value", mask_value)
    rows = torch.arange(X.shape[0])
    current = X.clone()
    masked = torch.zeros(X.shape[2], dtype=torch.bool)
    with torch.no_grad():
        first = predict(current)  # (b, classes)
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= first.shape[-1]):
            raise ValueError(f"labels must lie in 0..{first.shape[-1] - 1} (the classes of predict), "
                             f"got {labels.min().item()}..{labels.max().item()}")
        probs = [float(first[rows, labels].mean())]
        order = []
        b, d, N = X.shape
        for _ in range(steps):
            cand = torch.nonzero(~masked).flatten()  # (C,) ascending
            trial = current[None].repeat(len(cand), 1, 1, 1)  # (C, b, d, N): candidate c masked in row c
            trial[torch.arange(len(cand)), :, :, cand] = mask_value
            p = predict(trial.reshape(-1, d, N)).reshape(len(cand), b, -1)  # (C, b, classes)
            scores = p[:, rows, labels].mean(1)  # (C,) mean p(label_b) with candidate c masked
            best = int(torch.argmax(scores))  # first maximum = smallest index
            tok = int(cand[best])
            current[:, :, tok] = mask_value
            masked[tok] = True
            order.append(tok)
            probs.append(float(scores[best]))
    return torch.tensor(order, dtype=torch.long), torch.tensor(probs, dtype=torch.float64)


def _index_set(name: str, values) -> set[int]:
    out = set()
    for v in values:
        if isinstance(v, bool) or not float(v).is_integer():
            raise ValueError(f"{name} must hold integer token indices, got {v!r}")
        out.add(int(v))
    return out


def jaccard(a, b) -> float:
    """|a ∩ b| / |a ∪ b| of two index sets (1 for two empty sets)."""
    a, b = _index_set("a", a), _index_set("b", b)
    return 1.0 if not a and not b else len(a & b) / len(a | b)


def make_motif_dataset(n: int, grid: int = 8, seed: int = 0, distractors: int = 2,
                       noise: float = 0.3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Synthetic motif images: (X (n, 4, grid²) in [0, 1], labels (n,) in 0..3, motif token indices (n, 4)).

    d = 4 channels, 4 classes. Every entry is background noise, uniform in [0, noise], except:

    * the class-c motif, a 2×2 block at a uniformly random location whose 4 tokens have channel c equal to 1;
    * `distractors` half-motifs: 2 adjacent tokens (a horizontal or vertical pair) with channel c' = 1 for
      another class c' ≠ c, placed at random without touching the motif or each other.

    Tokens are numbered row-major
    (token = row·grid + col); the motif indices are sorted ascending. Deterministic in `seed`. Each
    placement draws until it finds a free pair; it always finds one when distractors <= (grid (grid - 1)
    - 5) / 4 (each of the at most 2 distractors + 2 tokens already placed blocks at most 2 of the
    grid (grid - 1) pairs of the drawn orientation), and more raise ValueError.
    """
    n = validate.positive_int("n", n)
    grid = validate.positive_int("grid", grid, 3)
    distractors = validate.positive_int("distractors", distractors, 0)
    most = (grid * (grid - 1) - 5) // 4
    if distractors > most:
        raise ValueError(f"distractors must be <= {most} on a {grid}x{grid} grid (so that every placement "
                         f"finds a free pair), got {distractors}")
    seed = validate.positive_int("seed", seed, 0)
    noise = validate.real("noise", noise, 0.0, 1.0, high_open=True)
    gen = torch.Generator().manual_seed(int(seed))

    def draw(high: int) -> int:
        return int(torch.randint(high, (1,), generator=gen))

    N = grid * grid
    X = torch.rand(n, 4, N, generator=gen) * noise  # (n, d, N)
    labels = torch.randint(4, (n,), generator=gen)
    motifs = torch.empty(n, 4, dtype=torch.long)
    for b in range(n):
        c = int(labels[b])
        r, q = draw(grid - 1), draw(grid - 1)
        motif = [r * grid + q, r * grid + q + 1, (r + 1) * grid + q, (r + 1) * grid + q + 1]
        X[b, c, motif] = 1.0
        motifs[b] = torch.tensor(motif)
        used = set(motif)
        for _ in range(distractors):
            other, vertical = (c + 1 + draw(3)) % 4, bool(draw(2))
            while True:
                r, q = draw(grid - int(vertical)), draw(grid - 1 + int(vertical))
                half = [r * grid + q, (r + 1) * grid + q] if vertical else [r * grid + q, r * grid + q + 1]
                if not used & set(half):
                    break
            X[b, other, half] = 1.0
            used |= set(half)
    return X, labels, motifs


def _adjacent_pairs(grid: int) -> torch.Tensor:
    """(P, 2) every horizontal and vertical pair of adjacent tokens of a grid x grid image (row-major)."""
    t = torch.arange(grid * grid).view(grid, grid)
    horizontal = torch.stack([t[:, :-1].flatten(), t[:, 1:].flatten()], 1)
    vertical = torch.stack([t[:-1].flatten(), t[1:].flatten()], 1)
    return torch.cat([horizontal, vertical])


def make_coloured_motif_dataset(n: int, grid: int = 8, seed: int = 0, distractors: int = 2,
                                specks: int = 2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Motif images whose brightness says nothing: (X (n, 8, grid²), labels (n,) in 0..3, motif (n, 4)).

    d = 8 channels, read as colours; colours 0..3 are the class colours, 4..7 the background colours.
    Every token is lit in exactly one channel, with an intensity uniform in [0.5, 1] drawn independently
    of everything else, so the intensity of a token (any norm over channels) has the same law whatever
    role it plays; only its colour and its neighbours tell. The roles:

    * the class-c motif, a 2×2 block at a uniformly random location, in colour c;
    * `distractors` half-motifs, 2 adjacent tokens (a horizontal or vertical pair, uniform among the free
      ones) in a class colour c' ≠ c;
    * `specks` single tokens, each in a uniformly random class colour (c included), on free tokens;
    * every other token in a uniformly random background colour 4..7.

    Tokens are numbered row-major (token = row·grid + col); the motif indices are sorted ascending.
    Deterministic in `seed`. Raises ValueError when the pieces do not fit on the grid.
    """
    n = validate.positive_int("n", n)
    grid = validate.positive_int("grid", grid, 3)
    distractors = validate.positive_int("distractors", distractors, 0)
    specks = validate.positive_int("specks", specks, 0)
    seed = validate.positive_int("seed", seed, 0)
    N = grid * grid
    if 4 + 2 * distractors + specks > N // 2:
        raise ValueError(f"distractors and specks must leave half of the {N} tokens to the background "
                         f"(4 + 2 distractors + specks <= {N // 2}), got distractors={distractors}, "
                         f"specks={specks}")
    gen = torch.Generator().manual_seed(int(seed))
    pairs = _adjacent_pairs(grid)  # (P, 2)
    labels = torch.randint(4, (n,), generator=gen)
    colour = 4 + torch.randint(4, (n, N), generator=gen)  # (n, N) background colours
    intensity = 0.5 + 0.5 * torch.rand(n, N, generator=gen)  # (n, N), role-blind
    corner = torch.randint(grid - 1, (n, 2), generator=gen)  # (n, 2) motif's top-left (row, col)
    motifs = torch.empty(n, 4, dtype=torch.long)
    for b in range(n):
        c = int(labels[b])
        r, q = int(corner[b, 0]), int(corner[b, 1])
        motif = torch.tensor([r * grid + q, r * grid + q + 1, (r + 1) * grid + q, (r + 1) * grid + q + 1])
        motifs[b] = motif
        colour[b, motif] = c
        free = torch.ones(N, dtype=torch.bool)
        free[motif] = False
        for _ in range(distractors):
            options = pairs[free[pairs].all(1)]  # (P', 2) pairs still free
            if not len(options):  # only on a fragmented small grid
                raise ValueError(f"distractors={distractors} half-motifs do not fit on a {grid}x{grid} grid")
            half = options[int(torch.randint(len(options), (1,), generator=gen))]
            colour[b, half] = (c + 1 + int(torch.randint(3, (1,), generator=gen))) % 4
            free[half] = False
        spots = torch.nonzero(free).flatten()
        spots = spots[torch.randperm(len(spots), generator=gen)[:specks]]
        colour[b, spots] = torch.randint(4, (specks,), generator=gen)
    X = torch.zeros(n, 8, N)
    X.scatter_(1, colour[:, None, :], intensity[:, None, :])  # (n, 8, N): one lit channel per token
    return X, labels, motifs


def sinusoidal_2d(rows: int, cols: int, dim: int) -> torch.Tensor:
    """(rows·cols, dim) 2-D encoding of Remark 4.3: [cos iφ_k, sin iφ_k, cos jφ_k, sin jφ_k] at several scales."""
    if dim % 4:
        raise ValueError(f"dim must be a multiple of 4, got {dim}")
    k = torch.arange(dim // 4, dtype=torch.float32)
    freq = 2 * math.pi / (2 * max(rows, cols) + 1) * (2.0 ** k)
    i, j = torch.meshgrid(torch.arange(rows, dtype=torch.float32), torch.arange(cols, dtype=torch.float32),
                          indexing="ij")
    i, j = i.flatten()[:, None] * freq, j.flatten()[:, None] * freq
    return torch.cat([torch.cos(i), torch.sin(i), torch.cos(j), torch.sin(j)], dim=1)


def _cls_layer(layer: nn.TransformerEncoderLayer, T: torch.Tensor) -> torch.Tensor:
    """(b, dim): the CLS row (token 0) of a pre-norm ReLU ``layer`` without dropout applied to T (b, n, dim).

    The head reads only the CLS row of the last layer, and a layer mixes tokens only through the queries'
    attention, so the other n - 1 query rows and their feed-forward passes are skipped. With one query the
    key and value maps fold into it: the score of token j in head h is h_j . (W_k,h^T q_h) plus a constant
    (b_k,h . q_h, which the softmax drops), and the head's output is W_v,h (sum_j w_hj h_j) + b_v,h since the
    weights w_hj sum to 1. The same function as the layer's CLS row, at a fraction of the cost."""
    attn = layer.self_attn
    b, n, dim = T.shape
    heads = attn.num_heads
    dh = dim // heads
    h = layer.norm1(T)  # (b, n, dim)
    W, bias = attn.in_proj_weight, attn.in_proj_bias  # (3 dim, dim), (3 dim,)
    q = nn.functional.linear(h[:, 0], W[:dim], bias[:dim]).view(b, heads, dh)  # (b, heads, dh)
    u = torch.einsum("bhe,hec->bch", q, W[dim:2 * dim].view(heads, dh, dim)) / math.sqrt(dh)  # (b, dim, heads)
    w = torch.softmax(torch.bmm(h, u), dim=1)  # (b, n, heads): attention of the CLS query
    z = torch.bmm(w.transpose(1, 2), h)  # (b, heads, dim)
    Wv = W[2 * dim:].view(heads, dh, dim)
    a = torch.einsum("bhc,hec->bhe", z, Wv).reshape(b, dim) + bias[2 * dim:]  # (b, dim): heads concatenated
    x = T[:, 0] + attn.out_proj(a)  # (b, dim)
    return x + layer.linear2(layer.activation(layer.linear1(layer.norm2(x))))


class TinyViT(nn.Module):
    """Tokens (b, d, N) on a rows x cols grid -> class probabilities; linear embedding, fixed 2-D PE, CLS token."""

    def __init__(self, d: int, rows: int, cols: int, classes: int, dim: int = 64, depth: int = 2, heads: int = 4,
                 mlp: int = 128):
        super().__init__()
        self.embed = nn.Linear(d, dim)
        self.register_buffer("pe", sinusoidal_2d(rows, cols, dim))
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, mlp, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, classes))

    def logits(self, X: torch.Tensor) -> torch.Tensor:
        """(b, classes) logits; the last layer is evaluated for the CLS token only (`_cls_layer`)."""
        T = self.embed(X.transpose(1, 2).float()) + self.pe  # (b, N, dim)
        T = torch.cat([self.cls.expand(T.shape[0], -1, -1), T], dim=1)  # (b, 1 + N, dim)
        for layer in self.encoder.layers[:-1]:
            T = layer(T)
        return self.head(_cls_layer(self.encoder.layers[-1], T))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(X), dim=-1)


def train_classifier(model: nn.Module, X: torch.Tensor, y: torch.Tensor, epochs: int, lr: float = 3e-3,
                     batch: int = 64, seed: int = 0) -> list[float]:
    """Adam on the cross-entropy of ``model.logits``; returns the mean loss of each epoch (under
    ``TFBOOK_UNTRAINED=1``, `tfbook.training.untrained`: one epoch's losses at the initial weights, no step)."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    frozen = untrained("seq2seq.train_classifier")
    losses = []
    for _ in range(1 if frozen else epochs):
        perm = torch.randperm(X.shape[0], generator=gen)
        total = 0.0
        for s in range(0, X.shape[0], batch):
            idx = perm[s:s + batch]
            loss = nn.functional.cross_entropy(model.logits(X[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            if not frozen:
                opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / X.shape[0])
    return losses


class _Logits(nn.Module):
    """``model.logits`` as a module's forward (for `torch.func.functional_call`)."""

    def __init__(self, model: TinyViT):
        super().__init__()
        self.model = model

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.model.logits(X)


def train_classifiers(models: Sequence[TinyViT], X: torch.Tensor, y: torch.Tensor, epochs: int, seeds: Sequence[int],
                      lr: float = 3e-3, batch: int = 64) -> list[list[float]]:
    """`train_classifier` for several models at once, model s with ``seeds[s]``; returns each one's losses.

    The models (same architecture, their own initial weights) are stacked along a leading axis and trained
    as one `torch.vmap`-ed model, so the per-step overhead of this small model is paid once for all of them.
    They stay independent: model s sees the batches of `train_classifier` with ``seed = seeds[s]``, its
    loss is its own mean cross-entropy and Adam acts entry by entry, so the gradient and the update of
    model s depend on model s only. The trained weights are written back into ``models`` (under
    ``TFBOOK_UNTRAINED=1``: one epoch's losses at the initial weights, no step)."""
    if len(models) != len(seeds) or not models:
        raise ValueError(f"seeds must give one seed per model ({len(models)}), got {len(seeds)}")
    gens = [torch.Generator().manual_seed(validate.positive_int("seed", s, 0)) for s in seeds]
    wrapped = [_Logits(m) for m in models]
    params, buffers = torch.func.stack_module_state(wrapped)  # each (S, ...)
    base = copy.deepcopy(wrapped[0]).to("meta")

    def logits(param: dict, buffer: dict, x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(base, (param, buffer), (x,))

    batched = torch.vmap(logits)
    opt = torch.optim.Adam(list(params.values()), lr=lr)
    n, S = X.shape[0], len(models)
    frozen = untrained("seq2seq.train_classifiers")
    losses = []
    for _ in range(1 if frozen else epochs):
        perms = torch.stack([torch.randperm(n, generator=g) for g in gens]).to(X.device)  # (S, n)
        total = torch.zeros(S, dtype=torch.float64, device=X.device)
        for start in range(0, n, batch):
            idx = perms[:, start:start + batch]  # (S, B)
            out = batched(params, buffers, X[idx])  # (S, B, classes)
            each = nn.functional.cross_entropy(out.flatten(0, 1), y[idx].flatten(), reduction="none")
            each = each.view(S, -1).mean(1)  # (S,) the mean loss of each model
            opt.zero_grad()
            each.sum().backward()
            if not frozen:
                opt.step()
            total += each.detach().double() * idx.shape[1]
        losses.append((total / n).tolist())
    with torch.no_grad():
        for s, m in enumerate(wrapped):
            for name, value in m.named_parameters():
                value.copy_(params[name][s])
    return [list(v) for v in zip(*losses)]

