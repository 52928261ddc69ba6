"""Small trained baselines for the estimation chapters: a tiny standard transformer against an MLP.

These are *trained* models for the papers' estimation discussion, not constructions: they use standard
``torch.nn`` modules, float32 on the data's device (the CPU in the quick profile), and a deterministic
loop (the seed fixes the initialisation through ``torch.manual_seed`` and the batch order through its
own ``torch.Generator``; no dropout).

>>> X = torch.rand(64, 4, 1); y = X.sum((1, 2))
>>> r = fit(lambda: MLP(4, 1, width=8), X, y, X, y, seed=0, epochs=2, batch_size=16)
>>> r.parameters == 4 * 8 + 8 + 8 * 8 + 8 + 8 + 1
True
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import torch
from torch import nn

from tfbook import validate

F32 = torch.float32
UNTRAINED_ENV = "TFBOOK_UNTRAINED"  # =1: every training routine keeps its initial parameters (the claims audit)
_untrained_hits = 0


def untrained(routine: str) -> bool:
    """Whether the training routine ``routine`` must skip its steps: True under ``TFBOOK_UNTRAINED=1``.

    Every routine in `tfbook` that estimates a model from data (Adam loops, least-squares and ERM fits of
    the estimators an experiment is about) asks this once per call and, when True, returns its initial
    parameters (a least-squares fit: zero coefficients) with the same outputs' shapes, so that the claims
    audit can check that each experiment claim needs its training. Baselines and references that fit
    (a context's least squares, the best fixed mask) do not ask: they are the fixed comparators.
    Each True answer is a hit (`untrained_hits`); ``routine`` names the asker for error messages.

    >>> import os; os.environ.pop(UNTRAINED_ENV, None) and None; untrained("doctest")
    False
    """
    global _untrained_hits
    value = os.environ.get(UNTRAINED_ENV, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"{UNTRAINED_ENV} must be '', '0' or '1', got {value!r} (asked by {routine})")
    if value != "1":
        return False
    _untrained_hits += 1
    return True


def untrained_hits() -> int:
    """How many training routines `untrained` has told to skip their steps in this process."""
    return _untrained_hits


def window_mask(n: int, window: int, circular: bool = False) -> torch.Tensor:
    """(n, n) bool mask for ``nn.MultiheadAttention``: True = key j is hidden from query i, i.e. the
    (circular, if asked) distance |i - j| exceeds ``window``."""
    n, window = validate.positive_int("n", n), validate.positive_int("window", window, 0)
    circular = validate.choice("circular", circular, (False, True))
    i = torch.arange(n)
    dist = (i[:, None] - i[None, :]).abs()  # (n, n)
    if circular:
        dist = torch.minimum(dist, n - dist)
    return dist > window


class TinyTransformer(nn.Module):
    """Token embedding + learned positional encoding, ``blocks`` standard encoder blocks
    (``nn.TransformerEncoderLayer``, post-norm, no dropout), optional sliding-window mask, and a linear head.

    ``forward(X)``: X (batch, n, d_in) → (batch,) for ``pool="mean"`` (mean over tokens, then the head), or
    (batch, n) for ``pool="token"`` (the head on every token).
    """

    def __init__(self, n: int, d_in: int, width: int = 16, heads: int = 2, blocks: int = 1, ff: int = 32,
                 window: Optional[int] = None, circular: bool = False, pool: str = "mean") -> None:
        super().__init__()
        self.n, self.d_in = validate.positive_int("n", n), validate.positive_int("d_in", d_in)
        width, heads = validate.positive_int("width", width), validate.positive_int("heads", heads)
        if width % heads:
            raise ValueError(f"width must be a multiple of heads, got width={width}, heads={heads}")
        self.pool = validate.choice("pool", pool, ("mean", "token"))
        self.embed = nn.Linear(d_in, width)
        self.pe = nn.Parameter(0.1 * torch.randn(n, width))  # (n, width)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(width, heads, validate.positive_int("ff", ff), dropout=0.0, batch_first=True)
            for _ in range(validate.positive_int("blocks", blocks)))
        self.head = nn.Linear(width, 1)
        mask = None if window is None else window_mask(n, window, circular)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        H = self.embed(X) + self.pe  # (batch, n, width)
        for block in self.blocks:
            H = block(H, src_mask=self.mask)  # (batch, n, width)
        if self.pool == "mean":
            return self.head(H.mean(1))[:, 0]  # (batch,)
        return self.head(H)[..., 0]  # (batch, n)


class MLP(nn.Module):
    """ReLU network on the flattened input: ``hidden`` layers of ``width``.

    ``forward(X)``: X (batch, ...) with ``in_features`` entries per sample → (batch,) if ``out_features`` is 1,
    else (batch, out_features).
    """

    def __init__(self, in_features: int, out_features: int = 1, width: int = 64, hidden: int = 2) -> None:
        super().__init__()
        sizes = [validate.positive_int("in_features", in_features)] + [validate.positive_int("width", width)] * \
            validate.positive_int("hidden", hidden)
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.out_features = validate.positive_int("out_features", out_features)
        self.net = nn.Sequential(*layers, nn.Linear(width, self.out_features))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        out = self.net(X.reshape(X.shape[0], -1))  # (batch, out_features)
        return out[:, 0] if self.out_features == 1 else out


def num_parameters(model: nn.Module) -> int:
    """The number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@dataclass(frozen=True)
class FitResult:
    """One training run: test and training MSE, the constant predictor's test MSE (the training mean),
    and the parameter count."""
    test_mse: float
    train_mse: float
    constant_mse: float
    parameters: int


def _data(X, y, Xt, yt) -> tuple[torch.Tensor, ...]:
    X = validate.tensor("X", X, dtype=F32)
    y = validate.tensor("y", y, dtype=F32)
    Xt = validate.tensor("X_test", Xt, dtype=F32)
    yt = validate.tensor("y_test", yt, dtype=F32)
    if X.ndim < 2 or y.shape[0] != X.shape[0] or X.shape[0] < 1:
        raise ValueError(f"X must be (n, ...) and y (n, ...) with the same n >= 1, got {tuple(X.shape)}, {tuple(y.shape)}")
    if Xt.shape[1:] != X.shape[1:] or yt.shape[1:] != y.shape[1:] or yt.shape[0] != Xt.shape[0]:
        raise ValueError(f"X_test, y_test must match X, y beyond the batch, got {tuple(Xt.shape)}, {tuple(yt.shape)}")
    return X, y, Xt, yt


def fit(factory: Callable[[], nn.Module], X, y, X_test, y_test, *, seed: int, epochs: int = 30,
        batch_size: int = 64, lr: float = 3e-3) -> FitResult:
    """Build ``factory()`` after ``torch.manual_seed(seed)`` and train it in float32 on X's device (the CPU
    in the quick profile) with Adam on the squared error: ``epochs`` passes over (X, y) in batches of
    ``batch_size``, shuffled by a CPU generator seeded with ``seed`` (the same batches on every device).
    Returns test MSE on (X_test, y_test); outputs must have y's shape."""
    X, y, X_test, y_test = _data(X, y, X_test, y_test)
    if len({t.device for t in (X, y, X_test, y_test)}) != 1:
        raise ValueError(f"X, y, X_test and y_test must be on one device, got "
                         f"{sorted({str(t.device) for t in (X, y, X_test, y_test)})}")
    seed = validate.positive_int("seed", seed, 0)
    epochs, batch_size = validate.positive_int("epochs", epochs), validate.positive_int("batch_size", batch_size)
    lr = validate.real("lr", lr, low=0, low_open=True)
    torch.manual_seed(seed)
    model = factory().to(device=X.device, dtype=F32)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(0 if untrained("training.fit") else epochs):
        order = torch.randperm(X.shape[0], generator=gen)
        for s in range(0, X.shape[0], batch_size):
            idx = order[s:s + batch_size].to(X.device)
            loss = (model(X[idx]) - y[idx]).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        test = float((model(X_test) - y_test).pow(2).mean())
        train = float((model(X) - y).pow(2).mean())
    constant = float((y_test - y.mean(0)).pow(2).mean())
    return FitResult(test, train, constant, num_parameters(model))


def compare(factories: Mapping[str, Callable[[], nn.Module]], X, y, X_test, y_test, seeds: Sequence[int],
            **options) -> dict[str, list[FitResult]]:
    """`fit` every model of ``factories`` (name → constructor) once per seed on the same data;
    ``options`` go to `fit` (epochs, batch_size, lr). Returns name → one `FitResult` per seed."""
    if not factories:
        raise ValueError("factories must name at least one model, got an empty mapping")
    seeds = [validate.positive_int("seeds", s, 0) for s in seeds]
    if not seeds:
        raise ValueError("seeds must contain at least one int >= 0, got an empty sequence")
    return {name: [fit(make, X, y, X_test, y_test, seed=s, **options) for s in seeds] for name, make in factories.items()}
