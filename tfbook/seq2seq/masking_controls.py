"""Section 6 of paper 003 with controls: batched greedy masking, its baselines, and one seeded study.

The paper's evidence for input-dependent important tokens is a greedy search: mask, one at a time, the
token whose masking keeps the probability of the correct class highest. A search that strong can keep
almost any class alive, so this module measures it against controls that would pass if the claim were
false:

* `greedy_mask_batch`: the paper's greedy rule (ties to the smallest index) for many inputs at once, one
  ``predict`` call per step; the same search aimed at another class (the runner-up) is the
  **wrong-label control**, and the same search on the model's **untrained twin** (a copy of its initial
  weights) is the control for what the search finds without training;
* `order_curves`: p_t along fixed orders, for the **random-order** curve, the **intensity** baseline
  (`intensity_order`: mask the faintest tokens first, i.e. keep the brightest, a saliency that needs no
  model) and the **best fixed mask** (`global_greedy_mask` fitted on the scored images themselves);
* `ink_removed`: the fraction of the input's total intensity the first t masked tokens carry (masking a
  blank pixel with the blank value removes nothing);
* `mean_jaccard` and `random_jaccard`: overlap of kept sets, within a class or across classes, against two
  random sets of the same size;
* `masking_study`: one seed of the whole experiment (train, mask, controls) on a fixed set of scored
  images, as a dict of numbers; `masking_studies`: several seeds, their models trained together as one
  batched model.
"""
from __future__ import annotations

import copy
import itertools
import math
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from tfbook import device, validate
from tfbook.seq2seq.masking import TinyViT, global_greedy_mask, train_classifiers
from tfbook.seq2seq.reference import _refuse_complex

Predict = Callable[[torch.Tensor], torch.Tensor]


def _inputs(X, labels) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.as_tensor(_refuse_complex("X", X))
    if X.ndim != 3:
        raise ValueError(f"X must be a real (b, d, N) tensor, got shape {tuple(X.shape)}")
    if X.is_floating_point() and not bool(torch.isfinite(X).all()):
        raise ValueError("X must have finite entries (no NaN or inf)")
    labels = torch.as_tensor(labels)
    if labels.dtype.is_floating_point or labels.dtype == torch.bool or labels.shape != (X.shape[0],):
        raise ValueError(f"labels must be integer class indices of shape ({X.shape[0]},), got {labels.dtype} "
                         f"{tuple(labels.shape)}")
    return X, labels.long()


def _label_probs(predict: Predict, X: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        p = predict(X)  # (b, classes)
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= p.shape[-1]):
        raise ValueError(f"labels must lie in 0..{p.shape[-1] - 1} (the classes of predict)")
    return p[torch.arange(len(labels), device=p.device), labels.to(p.device)].double().cpu()


def greedy_mask_batch(predict: Predict, X, labels, steps: Optional[int] = None,
                      mask_value: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(orders (b, steps), probs (b, steps+1)): `greedy_mask` for every input of X (b, d, N) at once.

    At step t every input masks the remaining token whose masking maximises p(labels[b]) (ties to the
    smallest index); probs[:, t] is that probability after t masked tokens."""
    X, labels = _inputs(X, labels)
    b, d, N = X.shape
    steps = N - 1 if steps is None else validate.positive_int("steps", steps, 0)
    if steps > N:
        raise ValueError(f"steps must be <= N = {N} (the number of tokens), got {steps}")
    mask_value = validate.real("mask_value", mask_value)
    current = X.clone()
    masked = torch.zeros(b, N, dtype=torch.bool)
    probs = [_label_probs(predict, current, labels)]
    orders = []
    rows = torch.arange(b)
    for t in range(steps):
        cand = torch.nonzero(~masked)[:, 1].view(b, N - t)  # (b, N - t), ascending per row
        trial = current[:, None].repeat(1, N - t, 1, 1)  # (b, N - t, d, N)
        hit = torch.zeros(b, N - t, N, dtype=torch.bool)
        hit.scatter_(2, cand[:, :, None], True)
        trial = torch.where(hit[:, :, None, :], torch.as_tensor(mask_value, dtype=X.dtype), trial)
        p = _label_probs(predict, trial.reshape(b * (N - t), d, N), labels.repeat_interleave(N - t)).view(b, N - t)
        best = torch.argmax(p, dim=1)  # first maximum = smallest index
        tok = cand[rows, best]
        current[rows, :, tok] = mask_value
        masked[rows, tok] = True
        orders.append(tok)
        probs.append(p[rows, best])
    order = torch.stack(orders, 1) if orders else torch.zeros(b, 0, dtype=torch.long)
    return order, torch.stack(probs, 1)


def _orders(orders, b: int, N: int) -> torch.Tensor:
    """(b, steps) masking orders: integer token indices in 0..N-1, no token twice in a row."""
    orders = torch.as_tensor(orders)
    if orders.dtype.is_floating_point or orders.dtype == torch.bool or orders.is_complex():
        raise ValueError(f"orders must hold integer token indices, got dtype {orders.dtype}")
    if orders.ndim != 2 or orders.shape[0] != b or orders.shape[1] > N:
        raise ValueError(f"orders must have shape ({b}, steps) with steps <= {N}, got {tuple(orders.shape)}")
    orders = orders.long()
    if orders.numel() and (int(orders.min()) < 0 or int(orders.max()) >= N):
        raise ValueError(f"orders must hold token indices in 0..{N - 1}")
    if orders.shape[1] > 1 and bool((orders.sort(1).values.diff(dim=1) == 0).any()):
        raise ValueError("orders must not repeat a token within a row (each token is masked once)")
    return orders


def order_curves(predict: Predict, X, labels, orders, mask_value: float = 0.0) -> torch.Tensor:
    """probs (b, steps+1): p(labels[b]) after masking the first t tokens of orders[b] (b, steps), t = 0..steps."""
    X, labels = _inputs(X, labels)
    b, d, N = X.shape
    orders = _orders(orders, b, N)
    mask_value = validate.real("mask_value", mask_value)
    steps = orders.shape[1]
    rank = torch.full((b, N), steps, dtype=torch.long)  # the step at which each token is masked
    rank.scatter_(1, orders, torch.arange(steps).expand(b, -1))
    t = torch.arange(steps + 1)
    hidden = rank[:, None, :] < t[None, :, None]  # (b, steps + 1, N)
    batch = torch.where(hidden[:, :, None, :], torch.as_tensor(mask_value, dtype=X.dtype), X[:, None])
    flat = _label_probs(predict, batch.reshape(b * (steps + 1), d, N), labels.repeat_interleave(steps + 1))
    return flat.view(b, steps + 1)


def random_orders(b: int, N: int, steps: int, seed: int = 0) -> torch.Tensor:
    """(b, steps) random masking orders, one random permutation of the N tokens per row."""
    b, N = validate.positive_int("b", b), validate.positive_int("N", N)
    steps = validate.positive_int("steps", steps, 0)
    if steps > N:
        raise ValueError(f"steps must be <= N = {N}, got {steps}")
    gen = torch.Generator().manual_seed(validate.positive_int("seed", seed, 0))
    return torch.argsort(torch.rand(b, N, generator=gen), dim=1)[:, :steps]


def intensity_order(X, steps: int) -> torch.Tensor:
    """(b, steps): the faintest tokens first (total intensity over channels; ties to the smallest index)."""
    X = torch.as_tensor(X)
    if X.ndim != 3:
        raise ValueError(f"X must be a (b, d, N) tensor, got shape {tuple(X.shape)}")
    steps = validate.positive_int("steps", steps, 0)
    if steps > X.shape[2]:
        raise ValueError(f"steps must be <= N = {X.shape[2]}, got {steps}")
    return torch.sort(X.abs().sum(1), dim=1, stable=True).indices[:, :steps]


def ink_removed(X, orders, t: int) -> torch.Tensor:
    """(b,): the share of each input's total intensity carried by the first t tokens of its order."""
    X = torch.as_tensor(_refuse_complex("X", X))
    if X.ndim != 3 or not bool(torch.isfinite(X).all()):
        raise ValueError(f"X must be a finite (b, d, N) tensor, got shape {tuple(X.shape)}")
    orders = _orders(orders, X.shape[0], X.shape[2])
    t = validate.positive_int("t", t, 0)
    if t > orders.shape[1]:
        raise ValueError(f"t must be <= the order length {orders.shape[1]}, got {t}")
    ink = X.abs().sum(1).double()  # (b, N)
    if bool((ink.sum(1) == 0).any()):
        raise ValueError("X must have some intensity in every input (a blank input has no share to remove)")
    return torch.gather(ink, 1, orders[:, :t]).sum(1) / ink.sum(1)


def mean_jaccard(kept: Sequence[set], labels, within: bool = True) -> float:
    """Mean Jaccard similarity of the kept sets over pairs of the same class (``within``) or of different
    classes; nan when there is no such pair."""
    labels = _integer_labels(labels)
    if len(labels) != len(kept):
        raise ValueError(f"labels must have one entry per kept set ({len(kept)}), got {len(labels)}")
    values = [len(a & b) / len(a | b) for (a, la), (b, lb) in itertools.combinations(zip(kept, labels), 2)
              if (la == lb) == within and (a | b)]
    return float(np.mean(values)) if values else math.nan


def _integer_labels(labels) -> list[int]:
    values = torch.as_tensor(labels).flatten()
    if values.dtype == torch.bool or values.is_complex() or (
            values.dtype.is_floating_point and not bool((values == values.round()).all())):
        raise ValueError(f"labels must be integer class labels, got {labels!r}")
    return [int(v) for v in values]


def random_jaccard(N: int, k: int) -> float:
    """E |A ∩ B| / |A ∪ B| for two independent uniform k-subsets of N tokens (hypergeometric overlap)."""
    N, k = validate.positive_int("N", N), validate.positive_int("k", k)
    if k > N:
        raise ValueError(f"k must be <= N = {N}, got {k}")
    total = math.comb(N, k)
    return sum(math.comb(k, i) * math.comb(N - k, k - i) / total * i / (2 * k - i) for i in range(k + 1))


def _runner_up(probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    p = probs.clone()
    p[torch.arange(len(labels)), labels] = -1.0
    return p.argmax(1)


def _check_study(X, y, budget: int, n_images: int, grid) -> tuple[torch.Tensor, torch.Tensor, int, int, int, int]:
    X, y = _inputs(X, y)
    budget = validate.positive_int("budget", budget)
    if budget >= X.shape[2]:
        raise ValueError(f"budget must be < N = {X.shape[2]} (keep at least one token), got {budget}")
    n_images = validate.positive_int("n_images", n_images)
    if len(tuple(grid)) != 2:
        raise ValueError(f"grid must be (rows, cols), got {grid!r}")
    rows, cols = (validate.positive_int(name, v) for name, v in zip(("grid[0]", "grid[1]"), grid))
    if rows * cols != X.shape[2]:
        raise ValueError(f"grid must have rows x cols = N = {X.shape[2]} tokens, got {tuple(grid)}")
    return X, y, budget, n_images, rows, cols


def masking_study(X, y, train, test, seed: int, n_images: int, epochs: int, budget: int, grid: tuple[int, int],
                  mask_value: float = 0.0, motif: Optional[torch.Tensor] = None, model_kw: Optional[dict] = None,
                  lr: float = 3e-3, batch: int = 64) -> dict:
    """One seed of Section 6's experiment with its controls, on tokens X (n, d, N) with labels y (n,).

    Trains a `TinyViT` (torch seeded with ``seed``) on X[train], keeps an untrained copy of it (its
    initial weights, the **untrained twin**) and scores a fixed image set, the first ``n_images`` inputs
    of X[test] (the same for every seed and every model, so the model-free rules do not depend on a
    model). Each image loses ``budget`` tokens:

    * greedily for the true label, with the trained model (``greedy``) and with the twin (``twin``);
    * greedily for the runner-up class of the trained model (``rival``, the wrong-label control);
    * in a random order (``random``) and faintest first (``faint``: it keeps the ``N - budget`` brightest
      tokens, the brightness rule, which needs no model);
    * by one mask shared by all scored images, fitted greedily on those same images with the trained model
      (``fixed``, `global_greedy_mask`: the best a fixed set of important positions can do on them).

    ``p_<rule>`` is the mean over the scored images of the probability of the searched class at the
    budget (the trained model's, the twin's for ``twin``); ``jaccard_<rule>_within`` / ``_across``
    compare the kept sets within a class and across classes (rules greedy, twin, faint). ``motif``
    (n, k): the tokens that define each input's class (synthetic data); ``motif3_<rule>`` is then the
    fraction of scored images that keep at least 3 of them. The result also holds the curves, the kept
    sets, the trained ``model`` and its ``twin`` (in eval mode, on `tfbook.device.default_device`) and
    ``predict`` / ``predict_twin`` (CPU inputs (b, d, N) -> CPU float64 probabilities)."""
    return masking_studies(X, y, train, test, [seed], n_images, epochs, budget, grid, mask_value, motif,
                           model_kw, lr, batch)[0]


def masking_studies(X, y, train, test, seeds: Sequence[int], n_images: int, epochs: int, budget: int,
                    grid: tuple[int, int], mask_value: float = 0.0, motif: Optional[torch.Tensor] = None,
                    model_kw: Optional[dict] = None, lr: float = 3e-3, batch: int = 64) -> list[dict]:
    """`masking_study` for each of ``seeds``, the models trained together (`train_classifiers`).

    Seed s's model starts from `TinyViT` under ``torch.manual_seed(s)`` and sees its batches in the order
    drawn from s, exactly as a separate `masking_study`; only the training steps are shared. Its untrained
    twin is a copy taken before training. Training runs on `tfbook.device.default_device` in float32; the
    searches run on the CPU and call the model there."""
    X, y, budget, n_images, rows, cols = _check_study(X, y, budget, n_images, grid)
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
        raise ValueError(f"seeds must be a sequence of ints >= 0, got {seeds!r}")
    seeds = [validate.positive_int("seed", s, 0) for s in seeds]
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    dev = device.default_device()
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(TinyViT(X.shape[1], rows, cols, int(y.max()) + 1, **(model_kw or {})).to(dev))
    twins = [copy.deepcopy(m) for m in models]  # the initial weights, never trained
    train_classifiers(models, X[train].to(dev), y[train].to(dev), epochs, seeds, lr=lr, batch=batch)
    return [_study(model.eval(), twin.eval(), X, y, test, seed, n_images, budget, mask_value, motif)
            for model, twin, seed in zip(models, twins, seeds)]


def _predictor(model: TinyViT) -> Predict:
    """CPU inputs (b, d, N) -> CPU float64 probabilities (b, classes) of ``model``, without gradients."""
    dev = next(model.parameters()).device

    def predict(batch_X: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return model(batch_X.to(dev)).double().cpu()

    return predict


def _kept(orders: torch.Tensor, N: int) -> list[set]:
    """The kept token sets of masking orders (b, steps) over N tokens."""
    return [set(range(N)) - set(o.tolist()) for o in orders]


def _study(model: TinyViT, twin: TinyViT, X: torch.Tensor, y: torch.Tensor, test, seed: int, n_images: int,
           budget: int, mask_value: float, motif: Optional[torch.Tensor]) -> dict:
    predict, predict_twin = _predictor(model), _predictor(twin)
    N = X.shape[2]
    Xt, yt = X[test], y[test]
    p_test, p_test_twin = predict(Xt), predict_twin(Xt)
    Xs, ys = Xt[:n_images], yt[:n_images]  # the scored images: fixed, whatever the model
    b = len(ys)
    rows = torch.arange(b)
    rival = _runner_up(p_test[:n_images], ys)
    order, p_true = greedy_mask_batch(predict, Xs, ys, budget, mask_value)  # (b, budget), (b, budget + 1)
    order_twin, p_twin = greedy_mask_batch(predict_twin, Xs, ys, budget, mask_value)
    order_rival, p_rival = greedy_mask_batch(predict, Xs, rival, budget, mask_value)
    g_order, _ = global_greedy_mask(predict, Xs, ys, budget, mask_value)  # (budget,)
    orders = {"greedy": order, "twin": order_twin, "rival": order_rival,  # each (b, budget)
              "random": random_orders(b, N, budget, seed), "faint": intensity_order(Xs, budget),
              "fixed": g_order[None].expand(b, -1)}
    curves = {"greedy": p_true, "twin": p_twin, "rival": p_rival}  # each (b, budget + 1)
    for rule in ("random", "faint", "fixed"):
        curves[rule] = order_curves(predict, Xs, ys, orders[rule], mask_value)
    masked = Xs.clone()
    masked[rows[:, None], :, order] = mask_value
    kept = {rule: _kept(o, N) for rule, o in orders.items()}
    out = {
        "accuracy": float((p_test.argmax(1) == yt).double().mean()),
        "accuracy_twin": float((p_test_twin.argmax(1) == yt).double().mean()),
        "images": b,
        "still_correct": float((predict(masked).argmax(1) == ys).double().mean()),
        "rival_wins": float((p_rival[:, -1] > 0.5).double().mean()),
        "ink_greedy": float(ink_removed(Xs, order, budget).median()),
        "ink_random": float(ink_removed(Xs, orders["random"], budget).median()),
        "kept": kept["greedy"], "kept_sets": kept, "fixed_order": g_order, "labels": ys, "rival": rival,
        "order": order, "inputs": Xs, "model": model, "twin": twin, "predict": predict,
        "predict_twin": predict_twin,
    }
    for rule, curve in curves.items():
        out[f"curve_{rule}"] = curve.numpy()
        out[f"p_{rule}"] = float(curve[:, -1].mean())
    for rule in ("greedy", "twin", "faint"):
        out[f"jaccard_{rule}_within"] = mean_jaccard(kept[rule], ys.tolist(), True)
        out[f"jaccard_{rule}_across"] = mean_jaccard(kept[rule], ys.tolist(), False)
    if motif is not None:
        mt = torch.as_tensor(motif)[test][:n_images]
        out["motif_tokens"] = mt
        for rule, sets in kept.items():
            counts = np.array([len(k & set(m.tolist())) for k, m in zip(sets, mt)])
            out[f"motif_kept_{rule}"] = counts
            out[f"motif3_{rule}"] = float(np.mean(counts >= 3))
    return out
