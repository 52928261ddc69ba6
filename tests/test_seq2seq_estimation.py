"""Unit tests of `tfbook.seq2seq.estimation` (paper 003, Section 5): the separable evaluation against the
direct one, finite-class ERM, difference quotients, the Lemma C.4 bound, window features at any length."""
import math

import numpy as np
import pytest
import torch

from tfbook.seq2seq import build_extractor, chi_for, extract_reference, trig_eval, unit_ball_coeffs
from tfbook.seq2seq import estimation as est
from tfbook.seq2seq import formulas


def _direct(coeffs: dict, Xf: np.ndarray) -> np.ndarray:
    """Σ_r c_r Π_k ψ_{r_k}(x_k), one term at a time (the definition)."""
    return trig_eval(coeffs, torch.tensor(Xf)).numpy()


@pytest.mark.parametrize("a, kind, T", [((1.0, 2.0), "mixed", 7), ((1.0, 2.0), "anisotropic", 5),
                                        ((1.0, 1.5, 2.0), "mixed", 5), ((1.5,), "mixed", 6)])
def test_separable_evaluation_equals_the_direct_sum(a, kind, T):
    coeffs = unit_ball_coeffs(a, kind, T, seed=3)
    Xf = np.random.default_rng(1).uniform(size=(257, len(a)))
    want = _direct(coeffs, Xf)
    assert np.abs(est.evaluate(coeffs, Xf) - want).max() <= 1e-12
    assert np.abs(est.evaluate(coeffs, Xf, rows=10) - want).max() <= 1e-12     # row chunks
    keys = list(coeffs)
    assert np.abs(est.design(Xf, keys) @ np.array([coeffs[k] for k in keys]) - want).max() <= 1e-12


def test_separable_evaluation_single_terms_and_edge_points():
    Xf = np.array([[0.0, 0.25], [0.5, 1.0], [0.125, 0.75]])
    for r in [(0, 0), (3, 0), (-3, 0), (0, 5), (-2, -7), (9, 1)]:
        assert np.abs(est.evaluate({r: 1.7}, Xf) - _direct({r: 1.7}, Xf)).max() <= 1e-12
    assert np.array_equal(est.psi_table(np.array([0.3]), np.array([0])), np.ones((1, 1)))
    assert np.array_equal(est.evaluate({}, Xf), np.zeros(3))


def test_finite_class_losses_match_the_squared_errors_and_erm_errs_at_the_noise_level():
    truth, dirs = {(1,): 0.4, (-2,): 0.3}, [(1,), (-3,), (2,), (-3,)]
    deltas = np.array([0.0, 0.02, -0.05, 0.3])
    loss = est.finite_class_losses(truth, deltas, dirs, 50, 8, 1.0, np.random.default_rng(5))
    g = np.random.default_rng(5)                                    # the same draws, by hand
    Xf = g.uniform(size=(400, 1))
    Y = est.evaluate(truth, Xf) + g.standard_normal(400)
    want = [np.sum((est.evaluate(truth, Xf) + dl * est.evaluate({r: 1.0}, Xf) - Y) ** 2)
            for dl, r in zip(deltas, dirs)]
    assert np.allclose(loss, want, rtol=1e-12, atol=0)
    # with δ at the noise level ERM sometimes picks a wrong member; with δ far above it, never
    gen = np.random.default_rng(0)
    near = np.array([0.0, 0.01, 0.01, 0.01])
    picks = [int(np.argmin(est.finite_class_losses(truth, near, dirs, 200, 8, 1.0, gen))) for _ in range(20)]
    assert any(k != 0 for k in picks)
    far = np.array([0.0, 1.0, 1.0, 1.0])
    assert all(int(np.argmin(est.finite_class_losses(truth, far, dirs, 200, 8, 1.0, gen))) == 0 for _ in range(5))


def test_finite_class_losses_bad_input():
    gen = np.random.default_rng(0)
    with pytest.raises(ValueError, match="deltas and dirs"):
        est.finite_class_losses({(1,): 1.0}, [0.0, 0.1], [(1,)], 10, 8, 1.0, gen)
    with pytest.raises(ValueError, match="^n must be"):
        est.finite_class_losses({(1,): 1.0}, [0.0], [(1,)], 0, 8, 1.0, gen)
    with pytest.raises(ValueError, match="^sigma must be"):
        est.finite_class_losses({(1,): 1.0}, [0.0], [(1,)], 10, 8, -1.0, gen)


def test_difference_quotients_of_maps_with_known_lipschitz_constants():
    X = torch.rand(5, 2, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    q = est.difference_quotients(X, 3.0 * X)
    assert q.shape == (10,) and np.allclose(q, 3.0, rtol=1e-12)
    q = est.difference_quotients(X, X.flip(-1)[:, :1])              # a projection: quotient <= 1
    assert (q <= 1.0 + 1e-15).all() and (q > 0).all()
    with pytest.raises(ValueError, match="distinct"):
        est.difference_quotients(torch.stack([X[0], X[0]]), torch.zeros(2, 1))
    with pytest.raises(ValueError, match="same batch"):
        est.difference_quotients(X, X[:3])


@pytest.mark.parametrize("U", [1, 7, 40])
def test_built_extractor_is_one_lipschitz_and_meets_its_error_at_chi_for(U):
    offsets, eps = [(0, 1), (1, -1), (0, 0)], 1e-3
    chi = chi_for(U, 1, eps)
    model = build_extractor(offsets, 2, U, chi=chi)
    gen = torch.Generator().manual_seed(U)
    N = 2 * U + 1
    X = torch.cat([torch.randint(0, 2, (3, 2, N), generator=gen).double(),
                   torch.rand(3, 2, N, generator=gen, dtype=torch.float64)])
    Y = model(X)
    assert float((Y - extract_reference(X, offsets)).abs().max()) <= eps
    q = est.difference_quotients(X, Y)
    assert q.max() <= 1.0 + 1e-12 and q.min() >= 0.99
    s = model.sizes()
    assert s.B <= formulas.app_e_chi(U, len(offsets), eps)          # below App. E's χ = U² log(2HU/ε)
    lip = est.lemma_c4_lipschitz(2, s.D, s.H, s.L, s.W, s.B)
    assert lip >= 6 * s.H * s.B**3 * s.D**4 and q.max() <= lip
    weak = build_extractor(offsets, 2, U, chi=chi / 8)              # too small a scale misses the error
    assert float((weak(X) - extract_reference(X, offsets)).abs().max()) > eps


def test_lemma_c4_lipschitz_value_and_bad_input():
    # (BW)^L · 6HB³D⁴(2BD)² · dB at B = 2, W = 3, L = 1, H = 1, D = 4, d = 1
    assert math.isclose(est.lemma_c4_lipschitz(1, 4, 1, 1, 3, 2.0), 6 * 6 * 8 * 256 * 256 * 2)
    with pytest.raises(ValueError, match="^B must be"):
        est.lemma_c4_lipschitz(1, 4, 1, 1, 3, 0.5)
    with pytest.raises(ValueError, match="^D must be"):
        est.lemma_c4_lipschitz(1, 0, 1, 1, 3, 2.0)


def test_app_e_chi_is_where_the_printed_bound_equals_eps():
    from tfbook.claims import FORMULAS
    assert FORMULAS["tfbook.seq2seq.formulas.app_e_chi"] is formulas.app_e_chi
    for U, H, eps in [(1, 3, 1e-3), (10, 2, 1e-6), (1000, 3, 1e-3)]:
        chi = formulas.app_e_chi(U, H, eps)
        assert math.isclose(2 * H * U * math.exp(-chi / U**2), eps, rel_tol=1e-9)


def test_window_features_relative_offsets_and_frames():
    X = np.arange(2 * 2 * 8, dtype=float).reshape(2, 2, 8)          # (n, d, N)
    F = est.window_features(X, [(0, -1), (1, 2)])
    assert F.shape == (16, 2)
    assert F[0].tolist() == [X[0, 0, 7], X[0, 1, 2]] and F[8 + 6].tolist() == [X[1, 0, 5], X[1, 1, 0]]
    framed = est.window_features(X, [(0, -1), (1, 2)], frame=4)     # two circular frames of 4 per sequence
    assert framed[0].tolist() == [X[0, 0, 3], X[0, 1, 2]] and framed[4].tolist() == [X[0, 0, 7], X[0, 1, 6]]
    assert np.array_equal(est.window_features(X, [(0, 1)], frame=8), est.window_features(X, [(0, 1)]))
    with pytest.raises(ValueError, match="^frame must divide"):
        est.window_features(X, [(0, 0)], frame=3)
    with pytest.raises(ValueError, match="channel"):
        est.window_features(X, [(2, 0)])
    with pytest.raises(ValueError, match="^X must have shape"):
        est.window_features(X[0], [(0, 0)])


def test_fitted_map_transfers_across_lengths_but_not_when_read_in_frames():
    coords, trig = [(0, -1), (0, 0), (1, 1)], {(1, 0, 0): 0.5, (0, -1, 0): 0.4, (1, 0, -1): 0.3}
    g = np.random.default_rng(0)
    feats = est.window_features(g.uniform(size=(300, 2, 8)), coords)
    fit = est.sieve_fit(feats, est.evaluate(trig, feats) + 0.1 * g.standard_normal(len(feats)),
                        (1.0, 1.0, 1.0), "mixed", 2.5)
    mse = {}
    for N, frame in [(8, None), (64, None), (64, 8)]:
        Xt = g.uniform(size=(8192 // N, 2, N))
        target = est.evaluate(trig, est.window_features(Xt, coords))
        mse[N, frame] = np.mean((est.evaluate(fit, est.window_features(Xt, coords, frame=frame)) - target) ** 2)
    assert abs(mse[64, None] / mse[8, None] - 1) < 0.2 and mse[64, 8] > 10 * mse[8, None]
