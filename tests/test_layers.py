"""Core layers against a naive per-query, per-head reference written straight from the definitions."""
import itertools
import math

import pytest
import torch

from tfbook import layers
from tfbook.device import DTYPE
from tfbook.layers import (Attention, Block, ElementwiseMultiplication, FeedForward, HeadWeights, Transformer,
                           perturb)


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=DTYPE)


def random_stack(h, m_qk, m_v, D, D_kv=None, seed=0, biases=True):
    D_kv = D if D_kv is None else D_kv
    W = dict(W_Q=rand(h, m_qk, D, seed=seed), W_K=rand(h, m_qk, D_kv, seed=seed + 1),
             W_V=rand(h, m_v, D_kv, seed=seed + 2), W_O=rand(h, D, m_v, seed=seed + 3))
    if biases:
        W.update(b_Q=rand(h, m_qk, seed=seed + 4), b_K=rand(h, m_qk, seed=seed + 5), b_V=rand(h, m_v, seed=seed + 6))
    return W


def naive(W, H, X, normalization, *, temperature=1.0, divisor="keys", causal=False, window=None,
          boundary="masked", null=None, key_mask=None, offset=0):
    """Per batch row, head and query: list the (multiset of) visible keys, normalise, sum the values."""
    B, n, D = H.shape
    m = X.shape[1]
    h = W["W_Q"].shape[0]
    b = lambda name, i, size: W[name][i] if name in W else torch.zeros(size, dtype=DTYPE)  # noqa: E731
    out = H.clone()
    for bi, hi, i in itertools.product(range(B), range(h), range(n)):
        q = W["W_Q"][hi] @ H[bi, i] + b("b_Q", hi, W["W_Q"].shape[1])
        pos = i + offset
        if window is None:
            keys = [j for j in range(m) if (not causal or j <= pos)]
        elif boundary == "masked":
            keys = [j for j in range(m) if abs(j - pos) <= window and (not causal or j <= pos)]
        else:
            keys = [(pos + o) % m for o in range(-window, window + 1)]
        if key_mask is not None:
            keys = [j for j in keys if key_mask[bi, j]]
        scores = [q @ (W["W_K"][hi] @ X[bi, j] + b("b_K", hi, W["W_K"].shape[1])) for j in keys]
        values = [W["W_V"][hi] @ X[bi, j] + b("b_V", hi, W["W_V"].shape[1]) for j in keys]
        if null is not None:
            scores.insert(0, q @ null[0][hi])
            values.insert(0, null[1][hi])
        if not scores:
            continue
        s = torch.stack(scores)
        if normalization == "softmax":
            a = torch.softmax(s / temperature, 0)
        elif normalization == "relu":
            a = torch.relu(s) / (len(scores) if divisor == "keys" else divisor)
        elif normalization == "linear":
            a = s
        else:
            top = (s == s.max()).to(DTYPE)
            a = top / top.sum()
        out[bi, i] += W["W_O"][hi] @ sum(a[k] * values[k] for k in range(len(values)))
    return out


CASES = [
    dict(normalization="softmax"),
    dict(normalization="softmax", temperature=0.3),
    dict(normalization="softmax", causal=True),
    dict(normalization="relu"),
    dict(normalization="relu", divisor=7),
    dict(normalization="relu", causal=True),
    dict(normalization="hard"),
    dict(normalization="hard", causal=True),
    dict(normalization="linear"),
    dict(normalization="softmax", window=1),
    dict(normalization="softmax", window=2, boundary="circular"),
    dict(normalization="softmax", window=4, boundary="circular"),  # 2U+1 > n: keys repeat
    dict(normalization="relu", window=4, boundary="circular"),
    dict(normalization="hard", window=1, boundary="circular"),
    dict(normalization="relu", window=1, causal=True),
    dict(normalization="softmax", null=True),
    dict(normalization="hard", null=True, causal=True),
    dict(normalization="hard", null=True),  # every key present: the unmasked path (the Turing decoder's)
    dict(normalization="relu", null=True),
    dict(normalization="softmax", key_mask=True),
    dict(normalization="hard", key_mask=True, null=True),
]


def _layer(W, case, cross=False):
    options = dict(causal=case.get("causal", False), temperature=case.get("temperature", 1.0),
                   relu_divisor=case.get("divisor", "keys"), window=case.get("window"),
                   boundary=case.get("boundary", "masked"), cross=cross)
    if case.get("null"):
        options.update(null_key=case["null_pair"][0], null_value=case["null_pair"][1])
    return Attention.stacked(**W, normalization=case["normalization"], **options)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_attention_matches_naive_reference(case):
    B, n, D, h = 2, 5, 6, 3
    W = random_stack(h, 2, 3, D)
    H = rand(B, n, D, seed=11)
    if case.get("normalization") == "hard":  # integer scores make ties real
        W = {k: v.round() for k, v in W.items()}
        H = H.round()
    case = dict(case)
    if case.get("null"):
        case["null_pair"] = (rand(h, 2, seed=20), rand(h, 3, seed=21))
    key_mask = None
    if case.get("key_mask"):
        key_mask = torch.tensor([[True, False, True, True, False], [False, True, True, True, True]])
    layer = _layer(W, case)
    got = layer(H, key_mask=key_mask)
    want = naive(W, H, H, case["normalization"], temperature=case.get("temperature", 1.0),
                 divisor=case.get("divisor", "keys"), causal=case.get("causal", False), window=case.get("window"),
                 boundary=case.get("boundary", "masked"), null=case.get("null_pair"), key_mask=key_mask)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_hard_attention_unmasked_path_equals_an_all_present_mask_bitwise():
    B, n, D, h = 3, 6, 5, 2
    W = {k: v.round() for k, v in random_stack(h, 2, 3, D).items()}
    layer = Attention.stacked(**W, normalization="hard", null_key=rand(h, 2, seed=22).round(),
                              null_value=rand(h, 3, seed=23))
    H = rand(B, n, D, seed=12).round()  # integer scores: ties among the winners
    everyone = torch.ones(B, n, dtype=torch.bool)
    # integer scores: the same weights 1/k, then the same path
    assert torch.equal(layer(H), layer(H, key_mask=everyone))
    weights = layer.attention_weights(H)
    assert torch.equal(weights, layer.attention_weights(H, key_mask=everyone))
    assert bool((weights.sum(-1) == 1).all()) and bool(((weights > 0).sum(-1) > 1).any())  # ties share weight


@pytest.mark.parametrize("normalization", ["softmax", "relu", "hard", "linear"])
def test_cross_attention_matches_naive_reference(normalization):
    B, n, m, D, D_kv, h = 2, 3, 4, 5, 7, 2
    W = random_stack(h, 2, 3, D, D_kv)
    H, X = rand(B, n, D, seed=1), rand(B, m, D_kv, seed=2)
    layer = Attention.stacked(**W, normalization=normalization, cross=True)
    assert layer.kind == "xattn"
    torch.testing.assert_close(layer(H, memory=X), naive(W, H, X, normalization), rtol=1e-12, atol=1e-12)


def test_self_attention_cache_equals_full_causal_run():
    B, m, D, h = 2, 6, 5, 2
    W = random_stack(h, 2, 2, D)
    layer = Attention.stacked(**W, normalization="softmax", causal=True)
    H = rand(B, m, D, seed=3)
    full = layer(H)
    for t in range(m):  # query t alone, its cache the states 0..t
        step = layer(H[:, t:t + 1], memory=H[:, : t + 1])
        torch.testing.assert_close(step[:, 0], full[:, t], rtol=1e-12, atol=1e-12)


def test_heads_from_list_equal_stacked_and_per_head_sum():
    D, h = 6, 4
    W = random_stack(h, 2, 3, D, biases=False)
    heads = [HeadWeights(W["W_Q"][i], W["W_K"][i], W["W_V"][i], W["W_O"][i]) for i in range(h)]
    H = rand(3, 5, D, seed=4)
    batched = Attention(heads, "softmax")(H)
    loop = H + sum(Attention([hw], "softmax")(H) - H for hw in heads)
    torch.testing.assert_close(batched, loop, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(Attention.stacked(**W)(H), batched, rtol=0, atol=0)
    view = Attention(heads, "softmax").heads[2]
    assert torch.equal(view.W_V, W["W_V"][2]) and torch.equal(view.b_Q, torch.zeros(2, dtype=DTYPE))


def test_head_chunking_gives_the_same_result(monkeypatch):
    import tfbook.layers as layers
    W = random_stack(50, 1, 1, 8)
    H = rand(4, 9, 8, seed=5)
    layer = Attention.stacked(**W, normalization="relu")
    whole = layer(H)
    monkeypatch.setattr(layers.attention, "CHUNK_ELEMENTS", 4 * 9 * 9 * 7)  # chunks of 7 heads
    assert len(layer._chunks(4, 9, 9)) == 8
    torch.testing.assert_close(layer(H), whole, rtol=1e-13, atol=1e-13)


def test_unused_features_store_no_parameters():
    W = random_stack(2, 2, 2, 4, biases=False)
    names = {n for n, _ in Attention.stacked(**W).named_parameters()}
    assert names == {"W_Q", "W_K", "W_V", "W_O"}
    ff = FeedForward(torch.eye(4), None, torch.eye(4), None)
    assert {n for n, _ in ff.named_parameters()} == {"W_1", "W_2"}


def test_ewml_matches_naive_reference():
    D, h, n = 5, 3, 4
    W = random_stack(h, 2, 3, D)
    layer = ElementwiseMultiplication(**W)
    H = rand(2, n, D, seed=7)
    want = H.clone()
    for b, i, m in itertools.product(range(2), range(n), range(h)):
        x = H[b, i]
        gate = (W["W_Q"][m] @ x + W["b_Q"][m]) @ (W["W_K"][m] @ x + W["b_K"][m])
        want[b, i] += gate * (W["W_O"][m] @ (W["W_V"][m] @ x + W["b_V"][m]))
    torch.testing.assert_close(layer(H), want, rtol=1e-12, atol=1e-12)
    assert layer.kind == "ewml"


def test_dense_forms_reproduce_the_layers():
    D, h = 5, 3
    W = random_stack(h, 2, 3, D, biases=False)
    H = rand(1, 4, D, seed=8)
    layer = Attention.stacked(**W, normalization="relu")
    d = layer.dense()
    want = H.clone()
    for i, m in itertools.product(range(4), range(h)):
        s = torch.stack([torch.relu((d["Q"][m] @ H[0, i]) @ (d["K"][m] @ H[0, j])) for j in range(4)]) / 4
        want[0, i] += sum(s[j] * (d["V"][m] @ H[0, j]) for j in range(4))
    torch.testing.assert_close(layer(H), want, rtol=1e-12, atol=1e-12)
    wide = Attention.stacked(**random_stack(2, 7, 2, 5, biases=False))  # m_qk > D: product form
    dq = wide.dense()
    torch.testing.assert_close(torch.einsum("hij,hik->hjk", dq["Q"], dq["K"]),
                               torch.einsum("hij,hik->hjk", wide.W_Q, wide.W_K), rtol=1e-12, atol=1e-12)
    e = ElementwiseMultiplication(**W).dense()
    assert e["Q"].shape == (h, D, D) and e["V"].shape == (h, D, D)


def test_feed_forward_and_transformer_names():
    ff = FeedForward(rand(3, 4), rand(3), rand(4, 3), rand(4))
    H = rand(2, 5, 4, seed=9)
    torch.testing.assert_close(ff(H), H + torch.relu(H @ ff.W_1.T + ff.b_1) @ ff.W_2.T + ff.b_2)
    strided = rand(5, 2, 4, seed=8).transpose(0, 1)  # (2, 5, 4), not contiguous: the batched product
    torch.testing.assert_close(ff(strided), ff(strided.contiguous()), rtol=1e-14, atol=1e-14)
    assert ff(H[0, 0]).shape == (4,) and ff(H[:, :0]).shape == (2, 0, 4)  # one token; no tokens
    att = Attention.stacked(**random_stack(1, 2, 2, 4))
    model = Transformer([Block(attention=att, feed_forward=ff)])
    assert [n for n, _ in model.named_sublayers()] == ["block0.attn", "block0.ff"]
    states = model(H, return_all=True)
    assert len(states) == 3 and torch.equal(states[-1], model(H))  # forward is the return_all loop


def test_perturb_scales_noises_and_selects():
    W = random_stack(3, 2, 2, 4)
    layer = Attention.stacked(**W, name="A1")
    H = rand(2, 5, 4, seed=10)
    y = layer(H)
    update = y - H
    with perturb(scale=1 + 1e-3) as p:
        torch.testing.assert_close(layer(H) - H, update * (1 + 1e-3), rtol=1e-12, atol=1e-12)
    assert p.hits == 1
    with perturb(scale=0.0, names=["B*"]) as p:
        assert torch.equal(layer(H), y) and p.hits == 0  # no layer selected: the same path as without
    with perturb(scale=0.0, kinds=["attn"]):
        assert torch.equal(layer(H), H)  # the update scaled by 0: H + 0
    with perturb(add=0.1, seed=3):
        noisy = layer(H) - H
    assert 0 < float((noisy - update).abs().max()) <= 0.1
    with perturb(scale=0.0, heads=[1]):  # dropping head 1 = the sum of heads 0 and 2
        dropped = layer(H) - H
    parts = [Attention.stacked(**{k: v[i:i + 1] for k, v in W.items()})(H) - H for i in range(3)]
    torch.testing.assert_close(dropped, parts[0] + parts[2], rtol=1e-12, atol=1e-12)
    assert not layers.hooks._ACTIVE


@pytest.mark.parametrize("bad", [
    dict(normalization="sparsemax"), dict(temperature=0.0), dict(relu_divisor=0), dict(window=-1),
    dict(boundary="zero"), dict(cross=True, causal=True), dict(null_key=torch.zeros(2, 2)),
])
def test_attention_rejects_bad_options(bad):
    W = random_stack(2, 2, 2, 4)
    with pytest.raises(ValueError):
        Attention.stacked(**W, **bad)


def test_bad_shapes_are_rejected():
    W = random_stack(2, 2, 2, 4)
    layer = Attention.stacked(**W)
    with pytest.raises(ValueError, match="H must have shape"):
        layer(rand(2, 3, 5))
    with pytest.raises(ValueError, match="key_mask"):
        layer(rand(2, 3, 4), key_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="is required for cross-attention"):
        Attention.stacked(**W, cross=True)(rand(2, 3, 4))
    with pytest.raises(ValueError, match="W_O"):
        Attention.stacked(W["W_Q"], W["W_K"], W["W_V"], W["W_O"][:, :3])
    with pytest.raises(ValueError, match="perturb|scale|add"):
        with perturb(add=-1.0):
            pass


def test_fully_masked_query_gets_no_update():
    W = random_stack(1, 2, 2, 4)
    H = rand(1, 3, 4)
    for norm in ("softmax", "relu", "hard"):
        out = Attention.stacked(**W, normalization=norm)(H, key_mask=torch.zeros(1, 3, dtype=torch.bool))
        assert torch.equal(out, H) and not math.isnan(float(out.sum()))


def test_projected_cache_equals_memory_and_full_causal_run():
    B, m, D, h = 2, 6, 5, 2
    W = random_stack(h, 2, 3, D)
    layer = Attention.stacked(**W, normalization="hard", causal=True, null_key=rand(h, 2, seed=30),
                              null_value=rand(h, 3, seed=31))
    H = rand(B, m, D, seed=12).round()
    full = layer(H)
    Kt, Vt = layer.project_memory(H[:, :0])
    for t in range(m):  # grow the projected cache one position at a time
        k, v = layer.project_memory(H[:, t:t + 1])
        Kt, Vt = torch.cat([Kt, k], -1), torch.cat([Vt, v], -1)
        step = layer(H[:, t:t + 1], kv=(Kt, Vt))
        torch.testing.assert_close(step, layer(H[:, t:t + 1], memory=H[:, : t + 1]), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(step[:, 0], full[:, t], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="not both"):
        layer(H, memory=H, kv=(Kt, Vt))
    with pytest.raises(ValueError, match="project_memory"):
        layer(H, kv=(Kt[:, :1], Vt))


def _constructions():
    """name -> (build, inputs): each core layer kind alone, a Transformer, and chapter 1's constructions."""
    from tfbook import foundation as fd

    W, X = random_stack(2, 2, 3, 4), rand(2, 3, 4, seed=40)
    ff = dict(W_1=rand(5, 4, seed=41), b_1=rand(5, seed=42), W_2=rand(4, 5, seed=43), b_2=rand(4, seed=44))
    return {
        "attn": (lambda: Attention.stacked(**W, causal=True, null_key=rand(2, 2, seed=45),
                                           null_value=rand(2, 3, seed=46)), dict(H=X)),
        "xattn": (lambda: Attention.stacked(**random_stack(2, 2, 3, 4, 5), cross=True),
                  dict(H=X, memory=rand(2, 6, 5, seed=47))),
        "ewml": (lambda: ElementwiseMultiplication(**random_stack(3, 2, 2, 4)), dict(H=X)),
        "mlp": (lambda: FeedForward(**ff), dict(H=X)),
        "transformer": (lambda: Transformer([Block(Attention.stacked(**W), FeedForward(**ff)),
                                             Block(feed_forward=FeedForward(**ff))]), dict(H=X)),
        "token sum": (lambda: fd.build_token_sum(2, 3), dict(H=rand(2, 3, 4, seed=48))),
        "abs max": (lambda: fd.build_abs_max(), dict(H=rand(2, 3, 4, seed=49))),
        "squaring": (lambda: fd.build_squaring(3), dict(H=rand(2, 3, 3, seed=50))),
    }


def _core_layers(model) -> list:
    return [m for m in model.modules() if getattr(m, "kind", None) in layers.KINDS]


def _sabotaged(monkeypatch, **env: str) -> None:
    """Install the process-wide sabotages as the module does at import, from ``env``; undone after the test."""
    for name in (layers.PERTURB_ENV, layers.WEIGHTS_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name, value in (("_ACTIVE", list(layers.hooks._ACTIVE)), ("_CORE", None), ("_WEIGHTS", None)):
        monkeypatch.setattr(layers.hooks, name, value)
    layers.hooks._sabotage_from_environment()


@pytest.mark.parametrize("name", list(_constructions()))
def test_the_sabotages_hit_every_core_layer(name, monkeypatch):
    build, inputs = _constructions()[name]
    clean = build()
    _sabotaged(monkeypatch, TFBOOK_PERTURB_CORE="1e-3", TFBOOK_PERTURB_WEIGHTS="1e-3")
    before = layers.sabotage_hits()
    model = build()
    built = layers.sabotage_hits()
    n_layers = len(_core_layers(model))
    assert n_layers > 0 and built["TFBOOK_PERTURB_WEIGHTS"] > before["TFBOOK_PERTURB_WEIGHTS"]
    for a, b in zip(_core_layers(clean), _core_layers(model)):  # every layer stores a changed tensor
        assert any(not torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters())), a.name
    with torch.no_grad():
        model(**inputs)
    after = layers.sabotage_hits()
    assert after["TFBOOK_PERTURB_CORE"] - built["TFBOOK_PERTURB_CORE"] == n_layers  # every layer call scaled
    assert after["TFBOOK_PERTURB_WEIGHTS"] == built["TFBOOK_PERTURB_WEIGHTS"]  # the weights are touched once


def test_weight_noise_is_seeded_uniform_on_every_entry_and_counted(monkeypatch):
    _sabotaged(monkeypatch, TFBOOK_PERTURB_WEIGHTS="0.01")
    W_1 = torch.tensor([[0.0, 2.0], [-4.0, 0.0], [0.0, 0.0]], dtype=DTYPE)
    layer = FeedForward(W_1, torch.zeros(3, dtype=DTYPE), torch.ones(2, 3, dtype=DTYPE), None)
    change = layer.W_1 - W_1
    assert bool((change != 0).all()) and float(change.abs().max()) <= 0.01 * 4  # zeros included
    assert torch.equal(layer.b_1, torch.zeros(3, dtype=DTYPE))  # max|w| = 0: nothing to scale the noise by
    assert layers.sabotage_hits()["TFBOOK_PERTURB_WEIGHTS"] == 2
    _sabotaged(monkeypatch, TFBOOK_PERTURB_WEIGHTS="0.01")  # a fresh process: the same noise
    assert torch.equal(FeedForward(W_1, torch.zeros(3, dtype=DTYPE), torch.ones(2, 3, dtype=DTYPE), None).W_1,
                       layer.W_1)
    _sabotaged(monkeypatch)
    assert layers.sabotage_hits() == {"TFBOOK_PERTURB_CORE": 0, "TFBOOK_PERTURB_WEIGHTS": 0}
    assert torch.equal(FeedForward(W_1, None, torch.ones(2, 3, dtype=DTYPE), None).W_1, W_1)


@pytest.mark.parametrize("env, value", [("TFBOOK_PERTURB_CORE", "often"), ("TFBOOK_PERTURB_WEIGHTS", "inf"),
                                        ("TFBOOK_PERTURB_WEIGHTS", "-1e-3")])
def test_sabotage_variables_are_validated(env, value, monkeypatch):
    with pytest.raises(ValueError, match=f"{env} must be a finite real number"):
        _sabotaged(monkeypatch, **{env: value})
