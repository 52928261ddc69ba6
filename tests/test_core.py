"""Unit tests for the tfbook core: layer algebra against hand-computed results, slots."""

import pytest
import torch

from tfbook.layers import Attention, Block, FeedForward, HeadWeights, Transformer
from tfbook.layout import FFBuilder, Layout

F64 = torch.float64


def test_softmax_attention_matches_hand_computation():
    # two tokens, D = 2, one head with W_Q = W_K = I, W_V = I, W_O = I
    H = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]], dtype=F64)
    I = torch.eye(2, dtype=F64)
    att = Attention([HeadWeights(I, I, I, I)], "softmax")
    scores = H[0] @ H[0].T  # [[1, 0], [0, 4]]
    A = torch.softmax(scores, dim=-1)
    expected = H[0] + A @ H[0]
    assert torch.allclose(att(H)[0], expected, atol=0, rtol=1e-15)
    assert torch.allclose(att.attention_matrices(H)[0][0], A)


def test_relu_attention_divides_by_number_of_tokens():
    H = torch.tensor([[[1.0], [-2.0], [3.0]]], dtype=F64)
    one = torch.ones(1, 1, dtype=F64)
    att = Attention([HeadWeights(one, one, one, one)], "relu")
    A = att.attention_matrices(H)[0][0]
    assert torch.equal(A, torch.relu(H[0] @ H[0].T) / 3)  # integer scores, the same division by 3


def test_hard_attention_averages_ties_and_respects_causality():
    H = torch.tensor([[[1.0], [1.0], [0.0]]], dtype=F64)
    one = torch.ones(1, 1, dtype=F64)
    att = Attention([HeadWeights(one, one, one, one)], "hard")
    A = att.attention_matrices(H)[0][0]
    assert torch.equal(A[0], torch.tensor([0.5, 0.5, 0.0], dtype=F64))
    causal = Attention([HeadWeights(one, one, one, one)], "hard", causal=True)
    Ac = causal.attention_matrices(H)[0][0]
    assert torch.equal(Ac[0], torch.tensor([1.0, 0.0, 0.0], dtype=F64))
    assert torch.equal(Ac[2], torch.tensor([1 / 3, 1 / 3, 1 / 3], dtype=F64))  # all scores 0 tie


def test_zero_head_is_identity():
    H = torch.randn(2, 5, 4, dtype=F64)
    for norm in ("softmax", "relu", "hard"):
        assert torch.equal(Attention([HeadWeights.zeros(4, 2)], norm)(H), H)


def test_feed_forward_formula_and_residual_flag():
    W1 = torch.tensor([[1.0, -1.0], [0.0, 2.0]], dtype=F64)
    b1 = torch.tensor([0.5, -1.0], dtype=F64)
    W2 = torch.tensor([[1.0, 0.0], [3.0, 1.0]], dtype=F64)
    b2 = torch.tensor([0.0, 1.0], dtype=F64)
    H = torch.tensor([[[2.0, 1.0]]], dtype=F64)
    hidden = torch.relu(torch.tensor([2 - 1 + 0.5, 2 - 1.0], dtype=F64))  # [1.5, 1]
    out = W2 @ hidden + b2
    assert torch.equal(FeedForward(W1, b1, W2, b2)(H)[0, 0], H[0, 0] + out)  # small dyadic values: exact
    assert torch.equal(FeedForward(W1, b1, W2, b2, residual=False)(H)[0, 0], out)


def test_transformer_returns_all_states_and_counts():
    lay = Layout([("x", 1), ("y", 1)])
    ff = FFBuilder(lay)
    ff.unit(read={"x": 1.0}, write={"y": 2.0})
    model = Transformer([Block(Attention([HeadWeights.zeros(2)], "softmax"), ff.build()) for _ in range(2)])
    H = torch.tensor([[[1.0, 0.0]]], dtype=F64)
    states = model(H, return_all=True)
    assert len(states) == 5  # input + 2 x (attention, feed-forward)
    assert torch.equal(states[-1][0, 0], torch.tensor([1.0, 4.0], dtype=F64))
    assert model.depth == 2 and model.width == 1
    per_block = 4 * 2 + (2 + 1 + 2 + 2)  # W_Q, W_K, W_V, W_O (2 each; absent biases store nothing); W_1, b_1, W_2, b_2
    assert model.num_parameters() == 2 * per_block
    assert model.num_nonzero() == 2 * 2


def test_layout_slots_and_builder():
    lay = Layout([("a", 2), ("b", 1)])
    assert lay.dim == 3 and lay["a"] == slice(0, 2) and lay.index(("a", 1)) == 1 and lay.index("b") == 2
    assert torch.equal(lay.vector({("a", 1): 2.0, "b": -1.0}), torch.tensor([0.0, 2.0, -1.0], dtype=F64))
    ff = FFBuilder(lay)
    ff.unit(read={("a", 0): 1.0, ("a", 1): -1.0}, write={"b": 1.0}, bias=0.25)
    ff.add_bias({"a": 3.0})
    layer = ff.build(min_width=4)
    assert layer.hidden_width == 4
    H = torch.tensor([[[1.0, 0.5, 0.0]]], dtype=F64)
    assert torch.equal(layer(H)[0, 0], torch.tensor([4.0, 0.5, 0.75], dtype=F64))  # dyadic values: exact
    with pytest.raises(ValueError, match="slot 'a' already exists"):
        lay.add("a")
    with pytest.raises(ValueError, match="unknown slot 'c'"):
        lay.index("c")
    with pytest.raises(ValueError, match="out of range"):
        lay.index(("b", 1))
    with pytest.raises(ValueError, match="positive int"):
        lay.add("z", 0)


def test_bad_layer_input_raises_value_error():
    I = torch.eye(2, dtype=F64)
    with pytest.raises(ValueError, match="normalization must be one of"):
        Attention([HeadWeights(I, I, I, I)], "sparsemax")
    with pytest.raises(ValueError, match="W_K must have 2 rows"):
        HeadWeights(I, torch.eye(3, dtype=F64), I, I)
    with pytest.raises(ValueError, match=r"b_1 must have shape \(2,\)"):
        FeedForward(I, torch.zeros(3), I, torch.zeros(2))
    with pytest.raises(ValueError, match="at least one Block"):
        Transformer([])
    with pytest.raises(ValueError, match=r"shape \(batch, n, D\)"):
        Transformer([Block(feed_forward=FeedForward(I, torch.zeros(2), I, torch.zeros(2)))])(torch.zeros(2, 2))
