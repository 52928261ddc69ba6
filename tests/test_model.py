"""The construction base: named layers, Trace against return_all, Sizes counted against hand counts."""
import pytest
import torch

from tfbook.device import DTYPE
from tfbook.layers import Attention, Block, ElementwiseMultiplication, FeedForward, HeadWeights, perturb
from tfbook.layout import FFBuilder, Layout
from tfbook.model import Construction, Sizes


def small_model() -> Construction:
    lay = Layout([("x", 2), ("y", 1), ("z", 1)])
    ff = FFBuilder(lay)
    ff.unit(read={("x", 0): 1.0}, write={"y": 2.0})
    ff.unit(read={("x", 1): -1.0}, write={"z": 3.0}, bias=0.5)
    head = HeadWeights(lay.matrix([{"x": 1.0}]), lay.matrix([{"x": 1.0}]), lay.matrix([{"y": 1.0}]),
                       lay.matrix([{"z": 1.0}]).T)
    ew = ElementwiseMultiplication(*(torch.zeros(3, 1, lay.dim, dtype=DTYPE) for _ in range(3)),
                                   torch.zeros(3, lay.dim, 1, dtype=DTYPE))
    return Construction(lay, [("A", Attention([head], "softmax")), ("F", ff.build()), ("E", ew)])


def test_trace_agrees_with_return_all_and_records_attention():
    model = small_model()
    H = model.embed(x=torch.randn(2, 4, 2, dtype=DTYPE))
    states = model(H, return_all=True)
    trace = model.trace(H)
    assert trace.names == ["A", "F", "E"] and len(states) == 4
    for a, b in zip(states, trace.states):
        assert torch.equal(a, b)
    assert torch.equal(trace.state("F"), states[2])
    assert trace.attention["A"].shape == (2, 1, 4, 4)
    torch.testing.assert_close(trace.attention["A"].sum(-1), torch.ones(2, 1, 4, dtype=DTYPE))
    with pytest.raises(ValueError, match="unknown layer"):
        trace.state("G")


def test_counted_sizes_match_hand_counts():
    s = small_model().counted_sizes()
    # attention: W_Q, W_K, W_V (1 x 4 each), W_O (4 x 1); ff: W_1 (2x4), b_1 (2), W_2 (4x2), b_2 (4);
    # ewml: 3 heads x (3 x 4 + 4); non-zeros: one per attention matrix, W_1 2, b_1 1, W_2 2
    assert s == Sizes(layers=3, attention_layers=1, ewml_layers=1, ff_layers=1, max_heads=3, embed_dim=4, ff_width=2,
                      attention_width=1, stored=16 + 22 + 48, nonzero=4 + 2 + 1 + 2, max_abs_weight=3.0)
    rows = s.compare(Sizes(layers=3, embed_dim=5))
    assert rows == [("layers", 3, 3), ("embed_dim", 4, 5)]


def test_names_are_set_and_reach_perturb():
    model = small_model()
    assert [layer.name for layer in model.layers] == ["A", "F", "E"]
    H = model.embed(x=torch.randn(1, 3, 2, dtype=DTYPE))
    with perturb(scale=0.0, names=["F"]) as p:
        out = model(H)
    assert p.hits == 1
    assert torch.equal(out, model.layer("E")(model.layer("A")(H)))  # F scaled by 0, E's zero weights: + 0 exactly


def test_from_blocks_names_layers_and_keeps_blocks():
    lay = Layout([("x", 1)])
    ff = FeedForward(torch.ones(1, 1), None, torch.ones(1, 1), None)
    model = Construction.from_blocks(lay, [Block(feed_forward=ff)])
    assert model.layer_names == ["block0.ff"] and model.blocks[0].feed_forward is ff


def test_bad_input():
    lay = Layout([("x", 1)])
    ff = FeedForward(torch.ones(1, 1), None, torch.ones(1, 1), None)
    with pytest.raises(ValueError, match="distinct"):
        Construction(lay, [("a", ff), ("a", ff)])
    with pytest.raises(ValueError, match="core layer"):
        Construction(lay, [("a", torch.nn.Linear(1, 1))])
    model = Construction(lay, [("a", ff)])
    with pytest.raises(ValueError, match=r"shape \(batch, n, 1\)"):
        model(torch.zeros(1, 2, 3, dtype=DTYPE))
    with pytest.raises(ValueError, match="slot 'x' needs shape"):
        model.embed(x=torch.zeros(1, 2, 3))


def test_to_device_and_dtype_work():
    model = small_model().to(torch.device("cpu"))
    assert model.to(torch.float64).layer("A").W_Q.dtype == torch.float64
