"""Section 3's learning illustration: train ReLU MLPs of several widths on a fixed random circuit.

Theorem 3.1 bounds the sample complexity of the *margin ERM* by poly(s) log(w d): nearly independent of
the width. Gradient descent on a cross-entropy loss is not that ERM, so this is an illustration only:
the training here is the paper's own kind of experiment (learning), not a construction.
"""
from __future__ import annotations

import torch
from torch import nn

from tfbook import validate
from tfbook.training import untrained
from tfbook.turing.circuits import Circuit, all_inputs


def train_mlp(X: torch.Tensor, y: torch.Tensor, X_test: torch.Tensor, y_test: torch.Tensor, width: int,
              depth: int = 4, epochs: int = 300, lr: float = 3e-3, seed: int = 0, device=None) -> dict[str, float]:
    """Full-batch Adam on the logistic loss (no step under ``TFBOOK_UNTRAINED=1``, `tfbook.training.untrained`);
    returns train and test 0-1 errors. Trains on ``device``, by default
    X's device (the weights are drawn on the CPU and moved, so every device starts from the same network)."""
    device = X.device if device is None else device
    if width < 1 or depth < 1 or epochs < 1:
        raise ValueError(f"width, depth and epochs must be >= 1, got {width}, {depth}, {epochs}")
    torch.manual_seed(seed)
    layers, d_in = [], X.shape[1]
    for _ in range(depth):
        layers += [nn.Linear(d_in, width), nn.ReLU()]
        d_in = width
    model = nn.Sequential(*layers, nn.Linear(d_in, 1)).to(device)
    X, y = X.float().to(device), y.float().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(0 if untrained("turing.train_mlp") else epochs):
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(model(X)[:, 0], y)
        loss.backward()
        opt.step()
    with torch.no_grad():
        err = lambda A, b: float(((model(A.float().to(device))[:, 0] > 0).float() != b.float().to(device)).float().mean())  # noqa: E731
        return {"train_error": err(X, y), "test_error": err(X_test, y_test)}


def learning_curves(X_all: torch.Tensor, y_all: torch.Tensor, widths, sizes, seeds=(0,), epochs: int = 300,
                    depth: int = 4, device=None, error: str = "test_error") -> dict:
    """Errors, one per seed, for each (width, training-set size): the training set is a random subset of
    size n of (X_all, y_all) (drawn from the seed), the test set all other points. ``error``: "test_error"
    (default) or "train_error" (the same runs' error on their training set)."""
    error = validate.choice("error", error, ("test_error", "train_error"))
    out = {}
    for w in widths:
        for n in sizes:
            errs = []
            for seed in seeds:
                perm = torch.randperm(len(X_all), generator=torch.Generator().manual_seed(1000 + seed))
                tr, te = perm[:n].to(X_all.device), perm[n:].to(X_all.device)
                errs.append(train_mlp(X_all[tr], y_all[tr], X_all[te], y_all[te], w, depth=depth, epochs=epochs,
                                      seed=seed, device=device)[error])
            out[(w, n)] = errs
    return out


def circuit_learning_curves(circuit: Circuit, widths, sizes, seeds=(0,), epochs: int = 300, depth: int = 4,
                            device=None) -> dict:
    """`learning_curves` on all 2^m inputs labelled by ``circuit`` (on ``device``, by default the CPU)."""
    X_all = all_inputs(circuit.num_inputs).to(device)
    return learning_curves(X_all, circuit.evaluate(X_all), widths, sizes, seeds, epochs, depth, device)
