"""Theorem 5 compiled (`tfbook.besov.masked`): the masked transformer TN o Q against independent references."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import tfbook.besov as bv
from tfbook.besov import masked as mk

F64 = torch.float64
RANKINGS = torch.tensor([[1, 2, 3], [3, 1, 2]])


def _pieces(seed: int):
    """Two smooth region pieces with random coefficients (products of cosines plus a coupling term)."""
    g = np.random.default_rng(seed)
    a, b, w = g.uniform(0.2, 0.8, (2, 3)), g.uniform(0, 6, (2, 3)), g.uniform(-1, 1, 2)

    def piece(r):
        def f_r(X):
            x = X[:, :, 0]
            prod = (1 + torch.as_tensor(a[r]) * torch.cos(torch.as_tensor(b[r]) * x)).prod(1)
            return prod + w[r] * x[:, 0] * x[:, 1] * x[:, 2]
        return f_r
    return [piece(0), piece(1)]


def _direct(X, pieces, K, t):
    """Independent reference: Q by hand, then per region the tensor interpolant (the kept token at level K,
    the rounded ones at level 0) by multilinear interpolation on the grid nodes, with scipy."""
    from scipy.interpolate import RegularGridInterpolator

    u = 2.0**K
    out = torch.empty(len(X), dtype=F64)
    for b in range(len(X)):
        r = int(X[b, 0, 0] >= 0.5)
        rank = RANKINGS[r]
        Y = X[b, :, 0].clone()
        for i in range(3):
            if rank[i] > t:
                Y[i] = torch.ceil(u * Y[i]) / u
        axes = [np.linspace(0, 1, 2**K + 1) if rank[i] <= t else np.array([0.0, 1.0]) for i in range(3)]
        mesh = torch.tensor(list(itertools.product(*axes)), dtype=F64)[:, :, None]
        vals = pieces[r](mesh).numpy().reshape([len(ax) for ax in axes])
        out[b] = float(RegularGridInterpolator(axes, vals)(Y.numpy()[None])[0])
    return out


@pytest.fixture(scope="module")
def built():
    pieces = _pieces(0)
    return pieces, mk.build_masked_transformer(pieces, 2, RANKINGS, 1, 12, 40.0)


def _points(model, n, seed):
    grid = torch.linspace(0, 1, 5, dtype=F64)
    X = torch.cat([torch.cartesian_prod(grid, grid, grid)[:, :, None],
                   torch.rand(n, 3, 1, generator=torch.Generator().manual_seed(seed), dtype=F64)])
    return X[~model.undecided(X)]


def test_network_equals_independent_reference(built):
    pieces, model = built
    X = _points(model, 60, 1)
    out = model(X)
    direct = _direct(X, pieces, 2, 1)
    ref = mk.masked_reference(X, model.atoms, RANKINGS, 1, 4.0)
    assert float((ref - direct).abs().max()) < 1e-12  # the atoms are the tensor interpolant
    assert float((out - direct).abs().max()) <= mk.masked_error_bound(model)
    assert float((out - direct).abs().max()) < 1e-12  # every product has a dyadic (rounded) factor


def test_gate_exact_at_band_edges_and_band_raises(built):
    pieces, model = built
    X = _points(model, 8, 2)[-8:].clone()
    X[:4, 0, 0], X[4:, 0, 0] = 0.5 - model.band, 0.5
    assert float((model(X) - _direct(X, pieces, 2, 1)).abs().max()) < 1e-12
    X[0, 0, 0] = 0.5 - model.band / 2
    with pytest.raises(ValueError, match="band"):
        model(X)


def test_two_kept_tokens_within_bound():
    pieces = _pieces(3)
    model = mk.build_masked_transformer(pieces, 1, RANKINGS, 2, 6, 8.0)
    X = _points(model, 40, 4)
    err = float((model(X) - mk.masked_reference(X, model.atoms, RANKINGS, 2, 2.0)).abs().max())
    assert err <= mk.masked_error_bound(model)
    assert err > 1e-9  # with two kept tokens the products and the attention leak are no longer exact


def test_zero_model_fails_the_bound(built):
    pieces, model = built
    X = _points(model, 20, 5)
    ref = mk.masked_reference(X, model.atoms, RANKINGS, 1, 4.0)
    head = model.transformer.named_sublayers()[-1][1]
    saved = head.W_2.clone()
    try:
        head.W_2.zero_()
        assert float((model(X) - ref).abs().max()) > mk.masked_error_bound(model)
    finally:
        head.W_2.copy_(saved)
    assert float((model(X) - ref).abs().max()) < 1e-12


def test_sizes_match_formulas(built):
    _, model = built
    s = model.sizes()
    closed = mk.masked_sizes(model.N, 3, 12)
    assert all(s[key] == closed[key] for key in closed)
    assert s["T"] == bv.thm1_rounds(3) and s["H"] == bv.thm1_heads()
    assert s["W"] <= bv.thm1_width(model.N, 3, 1, 1)
    assert model.N == 2 * (2**2 + 1) * 2**2  # kept token: 2^K + 1 hats; two rounded tokens: 2 x 2 level-0 hats
    assert model.N <= bv.thm5_atoms(2, 3, 1, 2) == 2 * 3 * 4 * 16  # D_{2,3} = 2^2 2^2
    assert s["B"] == 2.0**20  # the gate's 1/h


def test_thm5_atoms_is_a_registered_paper_formula():
    from tfbook.claims import FORMULAS
    assert FORMULAS["tfbook.besov.masked.thm5_atoms"] is bv.thm5_atoms
    assert bv.thm5_atoms(4, 2, 1, 1) == 3 * 16 * bv.D(4, 2)
    with pytest.raises(ValueError, match="K"):
        bv.thm5_atoms("4", 2, 1, 1)


def test_validation():
    pieces = _pieces(0)
    with pytest.raises(ValueError, match="rankings"):
        mk.build_masked_transformer(pieces, 2, torch.tensor([[2, 1, 3], [1, 2, 3]]), 1, 4, 10.0)
    with pytest.raises(ValueError, match="rankings"):
        mk.build_masked_transformer(pieces, 2, torch.tensor([[1, 1, 3], [1, 2, 3]]), 1, 4, 10.0)
    with pytest.raises(ValueError, match="band"):
        mk.build_masked_transformer(pieces, 2, RANKINGS, 1, 4, 10.0, band=0.001)
    with pytest.raises(ValueError, match="fs"):
        mk.build_masked_transformer(pieces[0], 2, RANKINGS, 1, 4, 10.0)
    with pytest.raises(ValueError, match="ranking"):
        mk.masked_atoms(pieces[0], 2, [1, 1, 2], 1)
