"""Sparse storage in the core: large, sparse weights are stored as CSR arrays behind dense semantics."""
import copy

import pytest
import torch

from tfbook import layers
from tfbook.layers import Attention, FeedForward, perturb, weight_from_entries
from tfbook.layout import Layout
from tfbook.model import Construction

F64 = torch.float64
D = 2048  # D x D = 2**22 scalars: large enough to be stored sparse (at least 2**21)


def sparse_matrix(rows: int, cols: int, per_row: int, seed: int) -> torch.Tensor:
    """A dense (rows, cols) matrix with ``per_row`` random non-zeros in each row."""
    g = torch.Generator().manual_seed(seed)
    W = torch.zeros(rows, cols, dtype=F64)
    idx = torch.randint(0, cols, (rows, per_row), generator=g)
    W.scatter_(1, idx, torch.randn(rows, per_row, generator=g, dtype=F64))
    return W


def reference(H, W_1, b_1, W_2):
    return H + torch.relu(H @ W_1.T + b_1) @ W_2.T


@pytest.fixture(scope="module")
def weights():
    W_1, W_2 = sparse_matrix(D, D, 4, 0), sparse_matrix(D, D, 3, 1)
    b_1 = torch.randn(D, generator=torch.Generator().manual_seed(2), dtype=F64)
    return W_1, b_1, W_2


def dense_twin(monkeypatch, *args, **kwargs) -> FeedForward:
    """The same layer stored dense (the sparse threshold out of reach)."""
    with monkeypatch.context() as m:
        m.setattr(layers.sparse, "SPARSE_MIN_NUMEL", 2**62)
        return FeedForward(*args, **kwargs)


def test_only_large_sparse_weights_are_stored_sparse(weights):
    W_1, b_1, W_2 = weights
    big = FeedForward(W_1, b_1, W_2, None)
    assert sorted(big._sparse) == ["W_1", "W_2"] and "W_1" not in big._parameters
    assert big.W_1_values.numel() == int(torch.count_nonzero(W_1))
    small = FeedForward(W_1[:64, :64], b_1[:64], W_2[:64, :64], None)  # sparse but small
    assert not small._sparse and isinstance(small._parameters["W_1"], torch.nn.Parameter)
    denseish = sparse_matrix(D, D, 300, 3)  # about 14 % non-zero: CSR would take over a quarter
    mixed = FeedForward(denseish, None, W_2, None)  # each weight is decided alone
    assert sorted(mixed._sparse) == ["W_2"] and "W_1" in mixed._parameters
    assert sorted(FeedForward(W_1, None, denseish, None)._sparse) == ["W_1"]


def test_forward_equals_the_dense_computation(weights, monkeypatch):
    W_1, b_1, W_2 = weights
    H = torch.randn(2, 3, D, generator=torch.Generator().manual_seed(4), dtype=F64)
    layer = FeedForward(W_1, b_1, W_2, None)
    want = reference(H, W_1, b_1, W_2)
    scale = want.abs().max()
    assert float((layer(H) - want).abs().max() / scale) < 1e-12
    assert float((dense_twin(monkeypatch, W_1, b_1, W_2, None)(H) - want).abs().max() / scale) < 1e-12
    flat = FeedForward(W_1, b_1, W_2, torch.ones(D, dtype=F64), residual=False)
    assert float((flat(H) - (want - H + 1)).abs().max() / scale) < 1e-12


def test_accessors_state_dict_and_counts_are_dense(weights, monkeypatch):
    W_1, b_1, W_2 = weights
    layer = FeedForward(W_1, b_1, W_2, None, name="ff")
    # accessors: the stored values, dense
    assert layer.W_1.layout == torch.strided and torch.equal(layer.W_1, W_1) and torch.equal(layer.W_2, W_2)
    dense = layer.dense()
    assert torch.equal(dense["W1"], W_1) and torch.equal(dense["W2"], W_2) and torch.equal(dense["b1"], b_1)
    state = layer.state_dict()
    assert sorted(state) == ["W_1", "W_2", "b_1"] and torch.equal(state["W_1"], W_1) and torch.equal(state["W_2"], W_2)
    copy = FeedForward(torch.zeros(D, D, dtype=F64), torch.zeros(D, dtype=F64), torch.zeros(D, D, dtype=F64), None)
    copy.load_state_dict(state)
    assert sorted(copy._sparse) == ["W_1", "W_2"] and torch.equal(copy.W_1, W_1)
    twin = dense_twin(monkeypatch, W_1, b_1, W_2, None)
    model = Construction(_layout(), [("ff", layer)])
    dense_model = Construction(_layout(), [("ff", twin)])
    nnz = int(torch.count_nonzero(W_1)) + int(torch.count_nonzero(W_2))
    sizes, dense_sizes = model.counted_sizes(), dense_model.counted_sizes()
    assert sizes.nonzero == dense_sizes.nonzero == nnz + int(torch.count_nonzero(b_1))
    assert sizes.stored == 2 * nnz + 2 * (D + 1) + D  # values + column indices + row pointers, and b_1
    assert dense_sizes.stored == 2 * D * D + D and sizes.max_abs_weight == dense_sizes.max_abs_weight


def _layout() -> Layout:
    layout = Layout()
    layout.add("x", D)
    return layout


def test_perturb_and_weight_noise_act_as_on_the_dense_layer(weights, monkeypatch):
    W_1, b_1, W_2 = weights
    H = torch.randn(1, 2, D, generator=torch.Generator().manual_seed(5), dtype=F64)
    layer, twin = FeedForward(W_1, b_1, W_2, None, name="ff"), dense_twin(monkeypatch, W_1, b_1, W_2, None, name="ff")
    with perturb(scale=0.5, add=1e-3, names=["ff"], seed=3):
        got = layer(H)
    with perturb(scale=0.5, add=1e-3, names=["ff"], seed=3):
        want = twin(H)
    assert float((got - want).abs().max()) < 1e-12 * float(want.abs().max())
    noisy = []
    for min_numel in (layers.sparse.SPARSE_MIN_NUMEL, 2**62):
        monkeypatch.setattr(layers.hooks, "_WEIGHTS", layers.WeightNoise(1e-3, torch.Generator().manual_seed(0)))
        monkeypatch.setattr(layers.sparse, "SPARSE_MIN_NUMEL", min_numel)
        noisy.append(FeedForward(W_1.to_sparse_coo(), b_1, W_2, None))
        assert layers.hooks._WEIGHTS.hits == 3  # W_1 (given sparse), b_1, W_2: noised dense, zeros included
    # the same seeded noise, dense
    assert not noisy[0]._sparse and torch.equal(noisy[0].W_1, noisy[1].W_1) and torch.equal(noisy[0].W_2, noisy[1].W_2)
    assert int(torch.count_nonzero(noisy[0].W_1)) == D * D


def test_weight_from_entries_builds_sparse_only_when_large_and_sparse():
    rows = torch.arange(D).repeat(2).numpy()
    cols = (torch.arange(2 * D) % 7).numpy()
    values = torch.linspace(-1, 1, 2 * D, dtype=F64).numpy()
    W = weight_from_entries((D, D), [(rows, cols, values), (rows[:5], cols[:5], values[:5])])
    assert W.layout == torch.sparse_coo
    want = torch.zeros(D, D, dtype=F64)
    for r, c, v in ((rows, cols, values), (rows[:5], cols[:5], values[:5])):
        want.index_put_((torch.as_tensor(r), torch.as_tensor(c)), torch.as_tensor(v), accumulate=True)
    assert torch.allclose(W.to_dense(), want, rtol=0, atol=1e-15)
    assert torch.equal(FeedForward(W, None, want, None).W_1, W.to_dense())  # <= 2 entries per index: one addition
    small = weight_from_entries((64, 64), [(rows[:64], cols[:64], values[:64])])
    assert small.layout == torch.strided


def test_sparse_attention_projections(monkeypatch):
    m = 2048  # W_V (1, m, D) and W_O (1, D, m): 2**22 scalars each
    g = torch.Generator().manual_seed(6)
    W_Q, W_K = torch.randn(1, 2, D, generator=g, dtype=F64), torch.randn(1, 2, D, generator=g, dtype=F64)
    zero, ar = torch.zeros(m, dtype=torch.long).numpy(), torch.arange(m).numpy()
    perm = torch.randperm(D, generator=g).numpy()
    W_V = weight_from_entries((1, m, D), [(zero, ar, perm[:m], torch.ones(m, dtype=F64).numpy())])
    W_O = weight_from_entries((1, D, m), [(zero, perm[::-1][:m].copy(), ar, torch.full((m,), 0.5, dtype=F64).numpy())])
    attn = Attention.stacked(W_Q, W_K, W_V, W_O, normalization="softmax")
    assert sorted(attn._sparse) == ["W_O", "W_V"] and attn.num_heads == 1 and attn.value_width == m
    with monkeypatch.context() as mp:
        mp.setattr(layers.sparse, "SPARSE_MIN_NUMEL", 2**62)
        twin = Attention.stacked(W_Q, W_K, W_V.to_dense(), W_O.to_dense(), normalization="softmax")
    H = torch.randn(2, 5, D, generator=g, dtype=F64)
    assert float((attn(H) - twin(H)).abs().max()) < 1e-12 * float(twin(H).abs().max())
    assert torch.equal(attn.heads[0].W_O, twin.heads[0].W_O) and torch.equal(attn.W_V, twin.W_V)
    assert torch.equal(attn.heads[0].b_V, torch.zeros(m, dtype=F64))
    assert torch.equal(attn.state_dict()["W_O"], W_O.to_dense())


def test_construction_forward_keeps_its_input_and_runs_on_meta(weights, monkeypatch):
    monkeypatch.setattr(layers.sparse, "MODEL_SPARSE_MIN", 2**62)  # keep c dense between the sparse a and b
    W_1, b_1, W_2 = weights
    layer = FeedForward(W_1, b_1, W_2, None)
    eye = torch.eye(D, dtype=F64)
    model = Construction(_layout(), [("a", layer), ("c", FeedForward(eye[:3], None, eye[:, :3], None)),
                                     ("b", FeedForward(W_2, None, W_1, None))])  # dense c between sparse a, b
    assert model.layer("b")._sparse and not model.layer("c")._sparse
    H = torch.randn(2, 3, D, generator=torch.Generator().manual_seed(7), dtype=F64)
    saved = H.clone()
    out = model(H)
    stepwise = H
    for _, lay in model.named_layers():
        stepwise = lay(stepwise)
    assert torch.equal(H, saved) and out.is_contiguous()
    assert float((out - stepwise).abs().max()) < 1e-12 * float(stepwise.abs().max())
    states = model(H, return_all=True)
    assert len(states) == 4 and torch.equal(states[-1], stepwise)  # return_all: the same layer-by-layer calls
    assert torch.equal(model.trace(H).states[-1], stepwise)
    meta = model.to("meta")
    result = meta(torch.empty(2, 3, D, dtype=F64, device="meta"))
    assert result.device.type == "meta" and result.shape == (2, 3, D)
    assert meta.layer("a").W_1.device.type == "meta" and meta.layer("a").W_1.shape == (D, D)


def test_a_large_model_stores_its_small_sparse_weights_sparse(weights, monkeypatch):
    """`compact`: past MODEL_SPARSE_MIN scalars, every weight whose CSR fits a quarter is stored sparse,
    whatever its size; accessors and outputs are unchanged; shared layers and noised weights are left."""
    W_1, b_1, W_2 = weights
    monkeypatch.setattr(layers.sparse, "MODEL_SPARSE_MIN", 2**24)  # four 2^22 weights make a large model here
    eye = torch.eye(D, dtype=F64)
    small = (eye[:3], None, eye[:, :3], None)  # 3 x 2048 and 2048 x 3, three non-zeros each
    dense_c = Construction(_layout(), [("c", FeedForward(*small))])  # 12 k scalars: left as built
    assert not dense_c.layer("c")._sparse
    big = [("a", FeedForward(W_1, b_1, W_2, None)), ("b", FeedForward(W_2, None, W_1, None))]
    model = Construction(_layout(), big + [("c", FeedForward(*small))])
    assert 4 * D * D >= layers.sparse.MODEL_SPARSE_MIN  # the model is large: c is compacted
    c = model.layer("c")
    # W_1 (3 rows) fits a quarter; W_2 (2048 rows: 2049 row pointers for 3 values) does not
    assert sorted(c._sparse) == ["W_1"] and torch.equal(c.W_1, eye[:3]) and torch.equal(c.W_2, eye[:, :3])
    assert sum(t.numel() for t in c.parameters()) + c.stored_entries() == 3 + 3 + 4 + 3 * D
    H = torch.randn(2, 3, D, generator=torch.Generator().manual_seed(8), dtype=F64)
    assert torch.equal(c(H), dense_c.layer("c")(H))  # 0/1 weights: every product and sum exact
    assert torch.equal(model.state_dict()["layers.2.W_1"], eye[:3])
    first = FeedForward(*small)
    second = copy.copy(first)  # another layer object on the same storage, as icgd's repeated blocks
    second._parameters = dict(first._parameters)
    shared = Construction(_layout(), big + [("c", first), ("d", second)])
    assert sorted(second._sparse) == ["W_1"] and second.W_1_values is first.W_1_values  # compacted once
    assert torch.equal(second(H), dense_c.layer("c")(H))  # 0/1 weights: exact
    with monkeypatch.context() as mp:
        mp.setattr(layers.hooks, "_WEIGHTS", layers.WeightNoise(1e-3, torch.Generator().manual_seed(0)))
        noisy = Construction(_layout(), [("a", FeedForward(W_1, b_1, W_2, None)),
                                         ("b", FeedForward(W_2, None, W_1, None)), ("c", FeedForward(*small))])
        assert not noisy.layer("c")._sparse and not noisy.layer("a")._sparse


@pytest.mark.parametrize("N", [200, 10**4])
def test_the_besov_transformer_stores_at_most_three_scalars_per_nonzero(N):
    """Issue target: stored (values plus index entries) <= 3 x non-zeros at N = 200 and 10^4 atoms
    (l = 4, d = 1, m = 1, m_q = 8), as `python -m tfbook.build.bench --sparse-scale` measures it."""
    import tfbook.besov as bv

    k, j, c = bv.random_atoms(N, 4, 1, 1, 3, seed=0)
    sizes = bv.build_transformer(k, j, c, 1, 8, 30.0).counted_sizes()
    assert sizes.stored <= 3 * sizes.nonzero, (sizes.stored, sizes.nonzero)
