"""Least squares over hat dictionaries (tfbook.besov.estimation) and the scope calculators of rates.

Exempt from the core-sabotage check: nothing here runs through the core layers (a least-squares fit and formulas).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tfbook.besov import estimation as est, rates
from tfbook.besov.grids import weierstrass

F64 = torch.float64


def _rough(X: torch.Tensor) -> torch.Tensor:
    return 1 + 0.5 * weierstrass(X[:, 0], 0.5, seed=2)


def test_sparse_features_match_the_dense_dyadic_features():
    X = torch.rand(300, 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    dense = est.hat_features(X, [2, 0, 3]).numpy()
    sparse = est.sparse_hat_features(X.numpy(), [4, 1, 8]).toarray()
    np.testing.assert_allclose(sparse, dense, atol=1e-14)


@pytest.mark.parametrize("M", [[3], [5, 7], [1, 6, 3]])
def test_sparse_features_on_any_grid_are_a_partition_of_unity_with_2_to_the_d_nonzeros(M):
    X = np.random.default_rng(1).random((400, len(M)))
    Phi = est.sparse_hat_features(X, M)
    assert Phi.shape == (400, est.atoms(M))
    np.testing.assert_allclose(np.asarray(Phi.sum(1)).ravel(), 1.0, atol=1e-14)
    assert (np.diff(Phi.indptr) == 2 ** len(M)).all()
    # a multilinear function lies in the span: least squares recovers it at fresh points
    f = lambda Z: 0.3 + Z @ np.arange(1.0, len(M) + 1) + Z.prod(1)
    coef = est.least_squares(Phi, f(X))
    Z = np.random.default_rng(2).random((100, len(M)))
    np.testing.assert_allclose(est.sparse_hat_features(Z, M) @ coef, f(Z), atol=1e-8)


def test_resolutions_follow_the_anisotropic_levels():
    assert est.resolutions([0.5, 1.0, 2.0], "aniso", 4) == [16, 4, 2]
    assert est.resolutions([0.5, 1.0, 2.0], "iso", 2) == [4, 4, 4]
    assert est.resolutions([0.5, 1.0], "aniso", 0.5) == [1, 1]  # 2^0.5 and 2^0.25 round to 1


def test_the_level_is_chosen_without_the_test_set_and_grows_with_n():
    small = est.sieve_fit(_rough, [0.5], "aniso", 400, 0, noise=0.5, n_test=100)
    other_test = est.sieve_fit(_rough, [0.5], "aniso", 400, 0, noise=0.5, n_test=3000)
    assert small.level == other_test.level and small.atoms == other_test.atoms
    large = est.sieve_fit(_rough, [0.5], "aniso", 20000, 0, noise=0.5, n_test=100)
    assert large.atoms >= 3 * small.atoms
    fixed = est.sieve_fit(_rough, [0.5], "aniso", 400, 0, noise=0.5, level=3.0, n_test=100)
    assert (fixed.level, fixed.atoms) == (3.0, 9)


def test_clipping_bounds_the_predictions():
    wild = est.sieve_fit(_rough, [0.5], "aniso", 200, 0, noise=5.0, level=5.0, n_test=500)
    clipped = est.sieve_fit(_rough, [0.5], "aniso", 200, 0, noise=5.0, level=5.0, n_test=500, clip=1.5)
    assert clipped.test_mse < wild.test_mse
    assert clipped.test_mse <= 1.5**2  # |prediction| <= 1.5 and 0.5 <= f <= 1.5


def test_a_rough_coordinate_is_estimated_at_its_rate_and_a_fixed_dictionary_stalls():
    ns, seeds = [1000, 4000, 16000], [0, 1]
    fits = [[est.sieve_fit(_rough, [0.5], "aniso", n, s, noise=0.5, n_test=2000) for s in seeds] for n in ns]
    chosen = est.fitted_slopes(ns, [[f.test_mse for f in row] for row in fits])[0]
    fixed = [[est.sieve_fit(_rough, [0.5], "aniso", n, s, noise=0.5, level=1.0, n_test=2000) for s in seeds]
             for n in ns]
    stalled = est.fitted_slopes(ns, [[f.test_mse for f in row] for row in fixed])[0]
    assert abs(chosen - (-0.5)) < 0.15  # 2 alpha / (2 alpha + 1) = 0.5 in one dimension
    assert stalled > -0.2


def test_fitted_slopes_of_a_power_law():
    ns = [100, 1000, 10000]
    mse = np.array([[n**-0.4, 3 * n**-0.6] for n in ns])
    pooled, per_seed = est.fitted_slopes(ns, mse)
    np.testing.assert_allclose(per_seed, [-0.4, -0.6], atol=1e-12)
    assert -0.6 < pooled < -0.4


@pytest.mark.parametrize("call, match", [
    (lambda: est.sieve_fit(_rough, [0.5], "sparse", 100, 0), "kind must be one of"),
    (lambda: est.sieve_fit(_rough, [0.5], "aniso", 6, 0), "too small"),
    (lambda: est.sieve_fit(_rough, [0.5], "aniso", 100, 0, noise=-1.0), "noise must be >= 0"),
    (lambda: est.sieve_fit(_rough, [0.5], "aniso", 100, 0, clip=0.0), "clip must be > 0"),
    (lambda: est.sieve_fit(_rough, [0.5], "aniso", 100, 0, step=0.0), "step must be > 0"),
    (lambda: est.sieve_fit(_rough, [0.5], "aniso", 100, 0, level=-1.0), "level must be >= 0"),
    (lambda: est.sieve_fit(_rough, [0.0], "aniso", 100, 0), "alpha must be"),
    (lambda: est.fitted_slopes([1, 2], [[1.0], [0.0]]), "mse must be a positive"),
    (lambda: rates.paper_scope([1.0], 0), "m must be an int >= 1"),
    (lambda: rates.hat_alpha_tilde([1.0], order=0), "order must be > 0"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_paper_scope_and_hat_saturation():
    assert rates.paper_scope([0.5, 1.0], 1) == (1.0, 0.0)  # hats at p = inf: nothing qualifies
    assert rates.paper_scope([0.5, 1.0], 1, 2.0) == (1.0, 0.5)
    assert rates.paper_scope([0.5, 3.0], 4) == (3.0, 3.0)
    held_out = [0.6, 2.5, 1.7, 3.1, 0.9]
    a_tilde = rates.smoothness(held_out)[2]
    assert rates.hat_alpha_tilde([0.5, 2.0]) == rates.smoothness([0.5, 2.0])[2]  # no saturation up to 2
    assert math.isclose(rates.hat_alpha_tilde(held_out), a_tilde * 2 / 3.1)


def test_exponents_of_theorems_4_and_3():
    r4, r3 = est.exponents([0.5, 1.5])
    assert math.isclose(r4, 0.75 / 1.75) and math.isclose(r3, 1 / 3)  # alpha_tilde = 0.375
    r4, r3 = est.exponents([1.0, 1.0, 1.0])
    assert math.isclose(r4, r3)  # isotropic smoothness: the theorems agree


def test_fine_weierstrass_is_bounded_and_base_2_is_the_dyadic_one():
    t = torch.rand(500, generator=torch.Generator().manual_seed(3), dtype=F64)
    np.testing.assert_allclose(est.fine_weierstrass(t, 0.7, seed=4, base=2.0), weierstrass(t, 0.7, seed=4), atol=1e-14)
    w = est.fine_weierstrass(torch.linspace(0, 1, 20001, dtype=F64), 0.5, seed=1)
    assert w.abs().max() <= 1 and w.abs().max() > 0.3
    # Hölder exponent 0.5: increments over h scale like h^0.5 (ratio 2^0.5 per halving of h, within 25%)
    x = torch.rand(4000, generator=torch.Generator().manual_seed(5), dtype=F64)
    inc = [float((est.fine_weierstrass(x + h, 0.5) - est.fine_weierstrass(x, 0.5)).pow(2).mean().sqrt())
           for h in (2.0**-8, 2.0**-9)]
    assert 2**0.5 / 1.25 < inc[0] / inc[1] < 2**0.5 * 1.25


def test_balanced_amplitudes_and_the_product_target():
    amps = est.balanced_amplitudes([1.5, 0.5], amp=0.4)
    assert math.isclose(amps[1], 0.4) and math.isclose(amps[0], 0.4 / (2 * math.pi))
    f = est.product_target([1.5, 0.5], amps)
    X = torch.rand(1000, 2, generator=torch.Generator().manual_seed(6), dtype=F64)
    y = f(X)
    assert y.shape == (1000,) and (y >= (1 - amps[0]) * (1 - amps[1])).all() and (y <= (1 + amps[0]) * (1 + amps[1])).all()
    with pytest.raises(ValueError, match="one entry per coordinate"):
        est.product_target([1.5, 0.5], [0.1])
    with pytest.raises(ValueError, match="base must be > 1"):
        est.fine_weierstrass(X[:, 0], 0.5, base=1.0)


def test_the_anisotropic_grid_beats_the_isotropic_one_by_the_exponents_gap():
    # the design of the notebook, on fewer seeds: slopes on either side of the midpoint of the two exponents
    alpha, ns, seeds = [0.5, 1.5], [1000, 4000, 16000], [0, 1]
    amps = est.balanced_amplitudes(alpha)
    f, F = est.product_target(alpha, amps), math.prod(1 + a for a in amps)
    r4, r3 = est.exponents(alpha)
    aniso = est.fitted_slopes(ns, est.risk_table(f, alpha, "aniso", ns, seeds, 0.1, F, n_test=2000))
    iso = est.fitted_slopes(ns, est.risk_table(f, alpha, "iso", ns, seeds, 0.1, F, n_test=2000))
    assert aniso[0] <= -(r4 + r3) / 2 <= iso[0]
    assert (iso[1] - aniso[1]).min() >= (r4 - r3) / 2
