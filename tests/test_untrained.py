"""The claims audit's run without training (``TFBOOK_UNTRAINED=1``, `tfbook.training.untrained`): every training
routine of the library keeps its initial parameters there, says so by a hit, and trains as before otherwise."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from tfbook import training
from tfbook.besov import estimation as besov_est
from tfbook.icgd import experiments as icl
from tfbook.seq2seq import estimation as s2s_est
from tfbook.seq2seq.masking import TinyViT, train_classifier, train_classifiers
from tfbook.turing.learning import train_mlp


@pytest.fixture
def untrained(monkeypatch):
    monkeypatch.setenv(training.UNTRAINED_ENV, "1")


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # no step: the stored tensors untouched


def _vit_data():
    gen = torch.Generator().manual_seed(0)
    return torch.rand(32, 1, 16, generator=gen), torch.randint(0, 3, (32,), generator=gen)


def test_the_hook_counts_its_hits_and_refuses_a_bad_setting(monkeypatch):
    monkeypatch.delenv(training.UNTRAINED_ENV, raising=False)
    before = training.untrained_hits()
    assert not training.untrained("test") and training.untrained_hits() == before
    monkeypatch.setenv(training.UNTRAINED_ENV, "1")
    assert training.untrained("test") and training.untrained_hits() == before + 1
    monkeypatch.setenv(training.UNTRAINED_ENV, "yes")
    with pytest.raises(ValueError, match="TFBOOK_UNTRAINED must be"):
        training.untrained("test")


def test_fit_keeps_the_initial_model(untrained):
    X = torch.rand(64, 4, 1, generator=torch.Generator().manual_seed(1))
    y = X.sum((1, 2))
    short = training.fit(lambda: training.MLP(4, 1, width=8), X, y, X, y, seed=3, epochs=1)
    long = training.fit(lambda: training.MLP(4, 1, width=8), X, y, X, y, seed=3, epochs=20)
    torch.manual_seed(3)
    initial = training.MLP(4, 1, width=8)
    with torch.no_grad():
        expected = float((initial(X) - y).pow(2).mean())
    assert short.test_mse == long.test_mse and abs(short.test_mse - expected) <= 1e-6 * expected


def test_fit_trains_without_the_hook(monkeypatch):
    monkeypatch.delenv(training.UNTRAINED_ENV, raising=False)
    X = torch.rand(64, 4, 1, generator=torch.Generator().manual_seed(1))
    y = X.sum((1, 2))
    short = training.fit(lambda: training.MLP(4, 1, width=8), X, y, X, y, seed=3, epochs=1)
    long = training.fit(lambda: training.MLP(4, 1, width=8), X, y, X, y, seed=3, epochs=100, lr=1e-2)
    assert long.test_mse < 0.5 * short.test_mse


def test_the_masking_classifiers_keep_their_weights(untrained):
    X, y = _vit_data()
    torch.manual_seed(0)
    model = TinyViT(1, 4, 4, 3, dim=16, depth=1, heads=2, mlp=16)
    start = copy.deepcopy(model.state_dict())
    losses = train_classifier(model, X, y, epochs=3)
    assert _same(start, model.state_dict()) and len(losses) == 1
    models = [TinyViT(1, 4, 4, 3, dim=16, depth=1, heads=2, mlp=16) for _ in range(2)]
    starts = [copy.deepcopy(m.state_dict()) for m in models]
    histories = train_classifiers(models, X, y, epochs=3, seeds=[0, 1])
    assert all(_same(s, m.state_dict()) for s, m in zip(starts, models)) and [len(h) for h in histories] == [1, 1]


def test_the_icl_transformers_keep_their_initial_weights(untrained):
    cfg = icl.ExperimentConfig(width=8, blocks=1, heads=2, steps=5, batch=4, test_prompts=4)
    models, log = icl.train_ensemble([cfg], "softmax")
    torch.manual_seed(cfg.seed)
    fresh = icl.ICLTransformer(cfg.d, cfg.width, cfg.blocks, cfg.heads, "softmax", cfg.test_points + 1)
    assert _same(fresh.state_dict(), models[0].state_dict()) and len(log["losses"][0]) == 1


def test_the_circuit_mlp_does_not_depend_on_its_epochs(untrained):
    gen = torch.Generator().manual_seed(0)
    X = torch.randint(0, 2, (64, 6), generator=gen).float()
    y = X[:, 0]
    a = train_mlp(X[:48], y[:48], X[48:], y[48:], width=8, epochs=1)
    b = train_mlp(X[:48], y[:48], X[48:], y[48:], width=8, epochs=200)
    assert a == b


def test_the_sieve_fits_return_the_zero_function(untrained):
    rng = np.random.default_rng(0)
    Xf = rng.uniform(size=(200, 1))
    fit = s2s_est.sieve_fit(Xf, np.cos(2 * np.pi * Xf[:, 0]), (1.0,), "mixed", 2.0)
    assert fit and set(fit.values()) == {0.0}
    target = lambda X: torch.sin(3 * X[:, 0])  # noqa: E731
    result = besov_est.sieve_fit(target, (1.0, 1.0), "iso", 400, seed=0, n_test=500)
    assert result.level == 0.0 and 0.3 < result.test_mse < 0.7  # E sin(3x)^2 on [0, 1]: 0.5 - sin(6)/12
