"""Tests for chapter 1 constructions: exact sums, |x|, max, Yarotsky's squaring error, sizes, traces."""
import pytest
import torch

from tfbook import claims as cl
from tfbook import foundation as fd
from tfbook.layers import perturb
from tfbook.model import Sizes

F64 = torch.float64


@pytest.mark.parametrize("n", [1, 2, 8, 16])
def test_token_sum_exact_on_dyadic_input(n):
    model = fd.build_token_sum(2, n)
    X = torch.randint(0, 64, (5, n, 2), dtype=F64) / 64
    out = model.read(model(model.embed(x=X)), "sum")
    assert torch.equal(out, X.sum(1, keepdim=True).expand_as(out))


def test_abs_max_exact_on_grid():
    model = fd.build_abs_max()
    g = torch.arange(-32, 33, dtype=F64) / 8
    x, y = [t.reshape(1, -1) for t in torch.meshgrid(g, g, indexing="ij")]
    H = model(model.embed(x=x, y=y))
    assert torch.equal(model.read(H, "abs")[..., 0], x.abs())
    assert torch.equal(model.read(H, "max")[..., 0], torch.maximum(x, y))


@pytest.mark.parametrize("m", [1, 2, 5, 9])
def test_squaring_sup_error_exact_and_attained(m):
    model = fd.build_squaring(m)
    x = torch.arange(0, 2**12 + 1, dtype=F64) / 2**12
    err = fd.run_squaring(model, x) - x**2
    assert err.min() >= 0
    assert float(err.max()) == 4.0 ** -(m + 1)
    mid = (2 * torch.arange(2**m, dtype=F64) + 1) / 2 ** (m + 1)
    assert torch.equal(fd.run_squaring(model, mid) - mid**2, torch.full_like(mid, 4.0 ** -(m + 1)))
    assert torch.equal(fd.run_squaring(model, x), fd.square_interp_closed_form(x, m))  # dyadic x: both exact
    assert model.depth == m and model.width == 2


def test_sizes_against_hand_counts():
    d, n = 3, 8
    # one head: W_Q, W_K (1 x 2d), W_V (d x 2d), W_O (2d x d); non-zeros: d reads, d writes of n
    assert fd.build_token_sum(d, n).counted_sizes() == Sizes(
        layers=1, attention_layers=1, ewml_layers=0, ff_layers=0, max_heads=1, embed_dim=2 * d, ff_width=0,
        attention_width=d, stored=2 * 2 * d + 2 * (d * 2 * d), nonzero=2 * d, max_abs_weight=float(n))
    # five ReLUs on four slots: W_1 (5 x 4), b_1 (5), W_2 (4 x 5); reads x, -x, x - y, y, -y and five writes
    assert fd.build_abs_max().counted_sizes() == Sizes(
        layers=1, attention_layers=0, ewml_layers=0, ff_layers=1, max_heads=0, embed_dim=4, ff_width=5,
        attention_width=0, stored=45, nonzero=6 + 5, max_abs_weight=1.0)
    for m in (1, 2, 6):
        D = 2 if m == 1 else 3  # x, S and (for m > 1) the sawtooth slot
        sizes = fd.build_squaring(m).counted_sizes()
        # per layer: 2 reads, one bias -1/2, writes to S (2) and y (2, except the last layer)
        assert (sizes.layers, sizes.ff_width, sizes.embed_dim) == (m, 2, D)
        assert sizes.stored == m * (2 * D + 2 + D * 2)
        assert sizes.nonzero == 7 * (m - 1) + 5
        assert sizes.max_abs_weight == (1.0 if m == 1 else 4.0)


def test_trace_agrees_with_return_all():
    model = fd.build_squaring(4)
    H = model.embed(x=torch.rand(2, 9, dtype=F64))
    trace, states = model.trace(H), model(H, return_all=True)
    assert len(trace.states) == len(states) == 5 and all(torch.equal(a, b) for a, b in zip(trace.states, states))
    summer = fd.build_token_sum(2, 4)
    H = summer.embed(x=torch.rand(3, 4, 2, dtype=F64))
    (name,) = summer.layer_names
    # W_Q = W_K = 0: equal scores
    assert torch.equal(summer.trace(H).attention[name], torch.full((3, 1, 4, 4), 0.25, dtype=F64))


def test_perturbed_core_breaks_exactness():
    """A 1e-3 change of every layer's update moves each construction off its exact value."""
    x = torch.arange(0, 2**8 + 1, dtype=F64) / 2**8
    sq = fd.build_squaring(5)
    summer = fd.build_token_sum(2, 8)
    X = torch.randint(0, 64, (3, 8, 2), dtype=F64) / 64
    with perturb(scale=1 + 1e-3):
        assert float((fd.run_squaring(sq, x) - fd.square_interp_closed_form(x, 5)).abs().max()) > 1e-4
        # exact unperturbed; 1e-3 off perturbed
        assert not torch.equal(summer.read(summer(summer.embed(x=X)), "sum"), X.sum(1, keepdim=True).expand(3, 8, 2))


def test_perturbed_core_breaks_abs_max_and_the_sign_of_the_squaring_error():
    g = torch.arange(-32, 33, dtype=F64) / 8
    absmax = fd.build_abs_max()
    x = torch.arange(0, 2**10 + 1, dtype=F64) / 2**10
    sq = fd.build_squaring(6)
    with perturb(scale=1 + 1e-3):
        H = absmax(absmax.embed(x=g.reshape(1, -1), y=g.flip(0).reshape(1, -1)))
        assert not torch.equal(absmax.read(H, "abs")[0, :, 0], g.abs())  # exact unperturbed; 1e-3 off perturbed
        assert float((fd.run_squaring(sq, x) - x**2).min()) < 0  # f_m - x^2 >= 0 no longer holds


def test_statement_formulas_are_registered_and_match_the_built_models():
    formulas = (fd.squaring_error_bound, fd.token_sum_nonzero, fd.token_sum_max_weight, fd.abs_max_width,
                fd.squaring_depth, fd.squaring_width)
    assert all(cl.FORMULAS[f"{fn.__module__}.{fn.__qualname__}"] is fn for fn in formulas)
    assert (fd.token_sum_nonzero(3), fd.token_sum_max_weight(8), fd.abs_max_width()) == (6, 8, 5)
    assert (fd.squaring_depth(7), fd.squaring_width(), fd.squaring_error_bound(2)) == (7, 2, 4.0**-3)
    with pytest.raises(ValueError, match="must be a real number"):
        fd.squaring_depth(fd.build_squaring(2))  # a formula takes the paper's parameters, never a model
    sizes = fd.build_token_sum(3, 8).counted_sizes()
    assert (sizes.nonzero, sizes.max_abs_weight) == (fd.token_sum_nonzero(3), fd.token_sum_max_weight(8))
    assert fd.build_abs_max().width == fd.abs_max_width()
    net = fd.build_squaring(7)
    assert (net.depth, net.width) == (fd.squaring_depth(7), fd.squaring_width())
    claims = cl.Claims("test")
    claims.check("P2", "depth", net.depth, kind="size", formula=fd.squaring_depth, params={"m": 7}, relation="==")
    assert claims.items[0].formula == "tfbook.foundation.squaring_depth(m=7)" and claims.all_hold()


def test_sawtooth_closed_form_teeth():
    x = torch.arange(0, 2**6 + 1, dtype=F64) / 2**6
    g3 = fd.sawtooth_closed_form(x, 3)
    assert torch.equal(g3[::8], torch.tensor([0.0, 1.0] * 4 + [0.0], dtype=F64))


def test_bad_input():
    with pytest.raises(ValueError, match="m must be an int >= 1"):
        fd.build_squaring(0)
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        fd.build_token_sum(2, 0)
    with pytest.raises(ValueError, match=r"x must have every entry <= 1"):
        fd.run_squaring(fd.build_squaring(2), torch.tensor([1.5]))
