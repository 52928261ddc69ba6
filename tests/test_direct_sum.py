"""`tfbook.layers.direct_sum`: the sum of G layers computes, block by block, what each layer computes
alone (dense and sparse storage, every normaliser, null keys, cross-attention, masks), keeps no reference
to its summands, and refuses layers that cannot share one call."""
import pytest
import torch

from tfbook.layers import Attention, FeedForward, direct_sum, sparse

F64 = torch.float64


def _feed_forward(gen, D, m, biases=True, residual=True):
    W_1 = torch.randn(m, D, generator=gen, dtype=F64)
    W_2 = torch.randn(D if residual else D + 1, m, generator=gen, dtype=F64)
    b_1 = torch.randn(m, generator=gen, dtype=F64) if biases else None
    b_2 = torch.randn(W_2.shape[0], generator=gen, dtype=F64) if biases else None
    return FeedForward(W_1, b_1, W_2, b_2, residual=residual)


def _attention(gen, D, heads, m_qk, m_v, D_kv=None, **options):
    D_kv = D if D_kv is None else D_kv
    r = lambda *shape: torch.randn(*shape, generator=gen, dtype=F64)  # noqa: E731
    null = {}
    if options.pop("null", False):
        null = {"null_key": r(heads, m_qk), "null_value": r(heads, m_v)}
    return Attention.stacked(r(heads, m_qk, D), r(heads, m_qk, D_kv), r(heads, m_v, D_kv), r(heads, D, m_v),
                             b_Q=r(heads, m_qk), b_K=r(heads, m_qk), **null, **options)


def _blocks(X, sizes):
    return torch.split(X, list(sizes), dim=-1)


def test_feed_forward_sum_is_block_diagonal():
    gen = torch.Generator().manual_seed(0)
    layers = [_feed_forward(gen, 3, 5), _feed_forward(gen, 4, 2, biases=False), _feed_forward(gen, 2, 7)]
    total = direct_sum(layers)
    X = torch.randn(2, 6, 9, generator=gen, dtype=F64)
    want = torch.cat([layer(x) for layer, x in zip(layers, _blocks(X, (3, 4, 2)))], dim=-1)
    assert torch.allclose(total(X), want, rtol=0, atol=1e-12)
    assert total.hidden_width == 14 and total.W_1[5:7, 3:7].abs().sum() > 0 and total.W_1[:5, 3:].abs().sum() == 0


@pytest.mark.parametrize("normalization", ["softmax", "hard", "relu", "linear"])
def test_attention_sum_runs_each_summands_heads_on_its_block(normalization):
    gen = torch.Generator().manual_seed(1)
    options = {"normalization": normalization, "causal": True, "null": True}
    layers = [_attention(gen, 4, 2, 3, 2, **dict(options)), _attention(gen, 3, 1, 5, 4, **dict(options)),
              _attention(gen, 5, 3, 1, 1, **dict(options))]
    if normalization == "hard":  # integer weights: exact ties, resolved alike in the sum and alone
        for layer in layers:
            for name in ("W_Q", "W_K"):
                layer.set_weight(name, getattr(layer, name).round())
            layer.b_Q.data.round_()
            layer.b_K.data.round_()
    total = direct_sum(layers)
    X = torch.randn(2, 6, 12, generator=gen, dtype=F64)
    if normalization == "hard":
        X = X.round()
    want = torch.cat([layer(x) for layer, x in zip(layers, _blocks(X, (4, 3, 5)))], dim=-1)
    assert total.num_heads == 6
    assert torch.allclose(total(X), want, rtol=0, atol=1e-10)


def test_cross_attention_sum_with_key_mask_and_cache():
    gen = torch.Generator().manual_seed(2)
    layers = [_attention(gen, 3, 1, 2, 2, D_kv=4, cross=True, null=True),
              _attention(gen, 2, 2, 3, 1, D_kv=3, cross=True, null=True)]
    total = direct_sum(layers)
    X = torch.randn(3, 2, 5, generator=gen, dtype=F64)
    memory = torch.randn(3, 6, 7, generator=gen, dtype=F64)
    mask = torch.rand(3, 6, generator=gen) > 0.3
    want = torch.cat([layer(x, memory=mem, key_mask=mask) for layer, x, mem
                      in zip(layers, _blocks(X, (3, 2)), _blocks(memory, (4, 3)))], dim=-1)
    assert torch.allclose(total(X, memory=memory, key_mask=mask), want, rtol=0, atol=1e-12)
    kv = total.project_memory(memory)
    assert torch.allclose(total(X, kv=kv, key_mask=mask), want, rtol=0, atol=1e-12)


def test_a_large_sum_is_stored_sparse_and_computes_the_same(monkeypatch):
    gen = torch.Generator().manual_seed(3)
    ffs = [_feed_forward(gen, 6, 6) for _ in range(20)]
    atts = [_attention(gen, 6, 1, 2, 2, normalization="softmax") for _ in range(20)]
    X = torch.randn(2, 4, 120, generator=gen, dtype=F64)
    dense_ff, dense_att = direct_sum(ffs), direct_sum(atts)
    monkeypatch.setattr(sparse, "SPARSE_MIN_NUMEL", 1000)
    sparse_ff, sparse_att = direct_sum(ffs), direct_sum(atts)
    assert not dense_ff._sparse and set(sparse_ff._sparse) == {"W_1", "W_2"}
    assert set(sparse_att._sparse) == {"W_Q", "W_K", "W_V", "W_O"}
    assert torch.allclose(sparse_ff(X), dense_ff(X), rtol=0, atol=1e-12)
    assert torch.allclose(sparse_att(X), dense_att(X), rtol=0, atol=1e-12)


def test_the_sum_keeps_no_reference_to_its_summands():
    gen = torch.Generator().manual_seed(4)
    layers = [_feed_forward(gen, 3, 4), _feed_forward(gen, 3, 4)]
    total = direct_sum(layers, name="sum")
    X = torch.randn(1, 2, 6, generator=gen, dtype=F64)
    before = total(X)
    with torch.no_grad():
        layers[0].W_1.mul_(0)
        layers[0].b_2.add_(1)
    assert torch.equal(total(X), before) and total.name == "sum"


def test_layers_that_cannot_share_a_call_are_refused():
    gen = torch.Generator().manual_seed(5)
    with pytest.raises(ValueError, match="at least one"):
        direct_sum([])
    with pytest.raises(ValueError, match="all be Attention or all be FeedForward"):
        direct_sum([_feed_forward(gen, 2, 2), _attention(gen, 2, 1, 1, 1)])
    with pytest.raises(ValueError, match="share normalization"):
        direct_sum([_attention(gen, 2, 1, 1, 1, normalization="hard"), _attention(gen, 2, 1, 1, 1)])
    with pytest.raises(ValueError, match="share causal"):
        direct_sum([_attention(gen, 2, 1, 1, 1, causal=True), _attention(gen, 2, 1, 1, 1)])
    with pytest.raises(ValueError, match="null key"):
        direct_sum([_attention(gen, 2, 1, 1, 1, null=True), _attention(gen, 2, 1, 1, 1)])
    with pytest.raises(ValueError, match="residual"):
        direct_sum([_feed_forward(gen, 2, 2), _feed_forward(gen, 2, 2, residual=False)])
