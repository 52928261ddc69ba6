"""Tests for chapter 1 constructions: exact sums, |x|, max and Yarotsky's squaring error."""
import pytest
import torch

from tfbook import foundation as fd

F64 = torch.float64


@pytest.mark.parametrize("n", [1, 2, 8, 16])
def test_token_sum_exact_on_dyadic_input(n):
    model = fd.build_token_sum(2, n)
    X = torch.randint(0, 64, (5, n, 2), dtype=F64) / 64
    out = model.layout.read(model(model.embed(x=X)), "sum")
    assert torch.equal(out, X.sum(1, keepdim=True).expand_as(out))


def test_abs_max_exact_on_grid():
    model = fd.build_abs_max()
    g = torch.arange(-32, 33, dtype=F64) / 8
    x, y = [t.reshape(1, -1) for t in torch.meshgrid(g, g, indexing="ij")]
    H = model(model.embed(x=x, y=y))
    assert torch.equal(model.layout.read(H, "abs")[..., 0], x.abs())
    assert torch.equal(model.layout.read(H, "max")[..., 0], torch.maximum(x, y))


@pytest.mark.parametrize("m", [1, 2, 5, 9])
def test_squaring_sup_error_exact_and_attained(m):
    model = fd.build_squaring(m)
    x = torch.arange(0, 2**12 + 1, dtype=F64) / 2**12
    err = fd.run_squaring(model, x) - x**2
    assert err.min() >= 0
    assert float(err.max()) == pytest.approx(4.0 ** -(m + 1), rel=1e-12)
    mid = (2 * torch.arange(2**m, dtype=F64) + 1) / 2 ** (m + 1)
    assert torch.allclose(fd.run_squaring(model, mid) - mid**2, torch.full_like(mid, 4.0 ** -(m + 1)), rtol=1e-9, atol=0)
    assert torch.equal(fd.run_squaring(model, x), fd.square_interp_closed_form(x, m))
    assert model.depth == m and model.width == 2


def test_sawtooth_closed_form_teeth():
    x = torch.arange(0, 2**6 + 1, dtype=F64) / 2**6
    g3 = fd.sawtooth_closed_form(x, 3)
    assert torch.equal(g3[::8], torch.tensor([0.0, 1.0] * 4 + [0.0], dtype=F64))


def test_bad_input():
    with pytest.raises(ValueError, match="m must be an int >= 1"):
        fd.build_squaring(0)
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        fd.build_token_sum(2, 0)
    with pytest.raises(ValueError, match=r"x must lie in \[0, 1\]"):
        fd.run_squaring(fd.build_squaring(2), torch.tensor([1.5]))
