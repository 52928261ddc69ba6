"""Section 6 of paper 003: greedy token masking, its baselines, and a tiny ViT for the offline reproduction.

`greedy_mask` follows the paper: at each step mask the remaining token whose masking maximises the
predicted probability of the correct class (ties to the smallest index). `global_greedy_mask`
chooses one mask shared by a set of inputs (a "fixed smoothness" baseline); `jaccard` compares
kept-token sets. `make_motif_dataset` builds the controlled synthetic images of the chapter (a class
motif at a random location among distractors). `TinyViT` is a small vision transformer with the 2-D sinusoidal positional
encoding of Remark 4.3, trained in float32 (torch's own encoder layers: this model is trained,
not constructed).
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn

from tfbook import validate

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
        for _ in range(steps):
            cand = torch.nonzero(~masked).flatten()
            scores = []
            for c in cand.tolist():
                trial = current.clone()
                trial[:, :, c] = mask_value
                scores.append(float(predict(trial)[rows, labels].mean()))
            best = int(torch.argmax(torch.tensor(scores)))
            tok = int(cand[best])
            current[:, :, tok] = mask_value
            masked[tok] = True
            order.append(tok)
            probs.append(scores[best])
    return torch.tensor(order, dtype=torch.long), torch.tensor(probs, dtype=torch.float64)


def jaccard(a, b) -> float:
    """|a ∩ b| / |a ∪ b| of two index sets (1 for two empty sets)."""
    a, b = {int(i) for i in a}, {int(i) for i in b}
    return 1.0 if not a and not b else len(a & b) / len(a | b)


def make_motif_dataset(n: int, grid: int = 8, seed: int = 0, distractors: int = 2,
                       noise: float = 0.3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Synthetic motif images: (X (n, 4, grid²) in [0, 1], labels (n,) in 0..3, motif token indices (n, 4)).

    d = 4 channels, 4 classes. Every entry is background noise, uniform in [0, noise], except:

    * the class-c motif, a 2×2 block at a uniformly random location whose 4 tokens have channel c equal to 1;
    * `distractors` half-motifs: 2 adjacent tokens (a horizontal or vertical pair) with channel c' = 1 for
      another class c' ≠ c, placed at random without touching the motif or each other.

    Tokens are numbered row-major
    (token = row·grid + col); the motif indices are sorted ascending. Deterministic in `seed`.
    """
    n = validate.positive_int("n", n)
    grid = validate.positive_int("grid", grid, 3)
    distractors = validate.positive_int("distractors", distractors, 0)
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
        T = self.embed(X.transpose(1, 2).float()) + self.pe  # (b, N, dim)
        T = torch.cat([self.cls.expand(T.shape[0], -1, -1), T], dim=1)
        return self.head(self.encoder(T)[:, 0])

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(X), dim=-1)


def train_classifier(model: nn.Module, X: torch.Tensor, y: torch.Tensor, epochs: int, lr: float = 3e-3,
                     batch: int = 64, seed: int = 0) -> list[float]:
    """Adam on the cross-entropy of ``model.logits``; returns the mean loss of each epoch."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        perm = torch.randperm(X.shape[0], generator=gen)
        total = 0.0
        for s in range(0, X.shape[0], batch):
            idx = perm[s:s + batch]
            loss = nn.functional.cross_entropy(model.logits(X[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / X.shape[0])
    return losses
