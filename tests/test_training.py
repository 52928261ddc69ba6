"""Tests for tfbook.training: determinism, learning, parameter counts against hand counts, bad input."""
import pytest
import torch

from tfbook import training as tr


def _data(n: int = 256, tokens: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, tokens, 1, generator=g)  # (n, tokens, 1)
    return X, X.sum((1, 2))  # a linear target: trivially learnable


def test_same_seed_same_result_and_seeds_differ():
    X, y = _data()
    make = lambda: tr.TinyTransformer(4, 1, width=8, heads=2, ff=8)  # noqa: E731
    a = tr.fit(make, X, y, X, y, seed=3, epochs=2, batch_size=32)
    b = tr.fit(make, X, y, X, y, seed=3, epochs=2, batch_size=32)
    c = tr.fit(make, X, y, X, y, seed=4, epochs=2, batch_size=32)
    assert a == b
    assert a.test_mse != c.test_mse


@pytest.mark.parametrize("make", [lambda: tr.MLP(4, 1, width=16),
                                  lambda: tr.TinyTransformer(4, 1, width=16, heads=2, ff=16)])
def test_learns_linear_target_much_better_than_constant(make):
    X, y = _data(512)
    Xt, yt = _data(256, seed=1)
    r = tr.fit(make, X, y, Xt, yt, seed=0, epochs=30, batch_size=32, lr=1e-2)
    assert r.constant_mse > 0.25  # Var(sum of 4 uniforms) = 1/3
    assert r.test_mse < 0.1 * r.constant_mse


def test_per_token_window_model_shapes_and_mask():
    m = tr.TinyTransformer(6, 2, width=8, heads=2, ff=8, window=1, circular=True, pool="token")
    assert m(torch.rand(5, 6, 2)).shape == (5, 6)
    mask = tr.window_mask(6, 1, circular=True)
    assert (~mask).sum(1).tolist() == [3] * 6  # each query sees itself and both circular neighbours
    assert not mask[0, 5] and tr.window_mask(6, 1)[0, 5]
    assert tr.MLP(12, 6)(torch.rand(5, 6, 2)).shape == (5, 6)


@pytest.mark.parametrize("n,d_in,w,heads,blocks,ff", [(4, 1, 16, 2, 1, 32), (8, 3, 12, 3, 2, 20)])
def test_transformer_parameter_count_by_hand(n, d_in, w, heads, blocks, ff):
    block = (3 * w * w + 3 * w) + (w * w + w) + (w * ff + ff) + (ff * w + w) + 4 * w  # attn, out, FF, 2 LayerNorms
    hand = (d_in * w + w) + n * w + blocks * block + (w + 1)
    assert tr.num_parameters(tr.TinyTransformer(n, d_in, w, heads, blocks, ff, window=1)) == hand


@pytest.mark.parametrize("i,o,w,h", [(4, 1, 32, 2), (16, 8, 10, 3)])
def test_mlp_parameter_count_by_hand(i, o, w, h):
    assert tr.num_parameters(tr.MLP(i, o, w, h)) == (i * w + w) + (h - 1) * (w * w + w) + (w * o + o)


def test_compare_runs_every_model_and_seed():
    X, y = _data(64)
    out = tr.compare({"mlp": lambda: tr.MLP(4, 1, width=4)}, X, y, X, y, [0, 1], epochs=1, batch_size=16)
    assert list(out) == ["mlp"] and len(out["mlp"]) == 2 and out["mlp"][0].parameters == 4 * 4 + 4 + 4 * 4 + 4 + 5


@pytest.mark.parametrize("call,name", [
    (lambda: tr.TinyTransformer(4, 1, width=10, heads=3), "width"),
    (lambda: tr.TinyTransformer(0, 1), "n"),
    (lambda: tr.TinyTransformer(4, 1, pool="max"), "pool"),
    (lambda: tr.TinyTransformer(4, 1, window=-1), "window"),
    (lambda: tr.TinyTransformer(4, 1, blocks=1.0), "blocks"),
    (lambda: tr.MLP(4, 1, hidden=0), "hidden"),
    (lambda: tr.window_mask(4, 1, circular="yes"), "circular"),
    (lambda: tr.fit(lambda: tr.MLP(4), *_data(8), *_data(8), seed=-1), "seed"),
    (lambda: tr.fit(lambda: tr.MLP(4), *_data(8), *_data(8), seed=0, epochs=0), "epochs"),
    (lambda: tr.fit(lambda: tr.MLP(4), *_data(8), *_data(8), seed=0, lr=0.0), "lr"),
    (lambda: tr.fit(lambda: tr.MLP(4), _data(8)[0], torch.zeros(7), *_data(8), seed=0), "y"),
    (lambda: tr.fit(lambda: tr.MLP(4), *_data(8), torch.rand(8, 5, 1), torch.zeros(8), seed=0), "X_test"),
    (lambda: tr.compare({}, *_data(8), *_data(8), [0]), "factories"),
    (lambda: tr.compare({"m": lambda: tr.MLP(4)}, *_data(8), *_data(8), []), "seeds"),
])
def test_bad_arguments_raise_value_error_naming_them(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_fit_trains_on_the_data_device_and_refuses_mixed_devices():
    X, y = torch.rand(32, 4, 1), torch.rand(32, 1)
    meta = torch.device("meta")
    with pytest.raises(ValueError, match="must be on one device"):
        tr.fit(lambda: tr.MLP(4, 1, width=4), X.to(meta), y, X, y, seed=0, epochs=1)
    cpu = tr.fit(lambda: tr.MLP(4, 1, width=4), X, y, X, y, seed=0, epochs=2, batch_size=8)
    again = tr.fit(lambda: tr.MLP(4, 1, width=4), X, y, X, y, seed=0, epochs=2, batch_size=8)
    assert cpu == again
