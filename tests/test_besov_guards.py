"""Tests for tfbook.besov's guards: the masked gate's band, memory estimates before building, the paper's
formulas on arguments outside their ranges, and the sieve's target."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tfbook.besov as bv
from tfbook.besov import estimation as est
from tfbook.besov import formulas as fm
from tfbook.besov import grids as gr
from tfbook.besov import masked as mk
from tfbook.besov import references as rf

F64 = torch.float64
RANKINGS = torch.tensor([[1, 2, 3], [3, 1, 2]])
PIECES = [lambda X: 1 + X[:, :, 0].sum(1), lambda X: -2 + X[:, 0, 0] * X[:, 1, 0] - X[:, 2, 0]]


@pytest.mark.parametrize("band", [2.0**-54, 2.0**-60, 2.0**-1074])
def test_a_band_below_2_to_minus_53_is_refused(band):
    # at h = 2^-54 the gate read 0 at x_(0,0) = 1 and region 1 got region 0's answer (error 2.48)
    with pytest.raises(ValueError, match=r"band must be >= 1.1102"):
        mk.build_masked_transformer(PIECES, 2, RANKINGS, 1, 12, 40.0, band=band)


def test_the_narrowest_band_keeps_the_gate_exact_at_both_ends():
    model = mk.build_masked_transformer(PIECES, 2, RANKINGS, 1, 12, 40.0, band=2.0**-53)
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(12, 3, 1, dtype=F64, generator=gen)
    X[:4, 0, 0] = torch.tensor([1.0, 0.5, 1 - 2.0**-53, 0.5 + 2.0**-53], dtype=F64)  # region 1
    X[4:8, 0, 0] = torch.tensor([0.0, 0.5 - 2.0**-53, 0.25, 2.0**-60], dtype=F64)  # region 0, off the band
    ref = mk.masked_reference(X, model.atoms, RANKINGS, 1, 4.0)
    assert float((model(X) - ref).abs().max()) <= mk.masked_error_bound(model)
    assert float(ref[:4].abs().min()) > 0.1  # region 1's answers differ from 0


def test_memory_is_estimated_before_any_atom_is_listed():
    ranking = np.array([1, 2, 3])
    assert mk.masked_count(2, ranking, 3) == len(mk.masked_atoms(PIECES[0], 2, ranking, 3)[2])
    assert mk.masked_count(3, np.array([3, 1, 2]), 1) == len(mk.masked_atoms(PIECES[1], 3, [3, 1, 2], 1)[2])
    # K = 30 on 3 kept tokens took 23.5 GB before the machine was killed
    with pytest.raises(ValueError, match=r"K = 30 gives 1253325145181 atoms, estimated at .* GiB: over the limit"):
        mk.masked_atoms(PIECES[0], 30, ranking, 3)
    with pytest.raises(ValueError, match=r"K = 30 gives .* atoms, estimated at .* GiB: over the limit of 8 GiB"):
        mk.build_masked_transformer(PIECES, 30, RANKINGS, 3, 12, 40.0)
    with pytest.raises(ValueError, match=r"K = 40 gives .* atoms"):
        gr.sparse_interpolant(lambda X: X.sum((1, 2)), 3, 40)
    with pytest.raises(ValueError, match=r"K = 30 gives .* atoms"):
        gr.aniso_interpolant(lambda X: X.sum((1, 2)), [[1.0, 1.0]], 30)


def test_every_transformer_builder_checks_its_estimate(monkeypatch):
    k, j, c = bv.random_atoms(50, 2, 1, 1, 3, seed=0)
    bv.build_transformer(k, j, c, 1, 4, 8.0)
    monkeypatch.setattr(rf, "MEMORY_LIMIT", 2**20)
    with pytest.raises(ValueError, match=r"N = 50 gives 50 atoms, estimated at .* over the limit of 0.000977 GiB"):
        bv.build_transformer(k, j, c, 1, 4, 8.0)
    with pytest.raises(ValueError, match=r"N = 50 gives 50 atoms"):
        bv.fnn_baseline(k, j, c, 1, 4)
    with pytest.raises(ValueError, match=r"K = 2 gives"):
        mk.build_masked_transformer(PIECES, 2, RANKINGS, 1, 12, 40.0)


@pytest.mark.parametrize("call, name", [
    (lambda: fm.thm1_rounds(0), "l"),
    (lambda: fm.thm1_width(N=4, l=2, d=1, m=1.5), "m"),
    (lambda: fm.thm1_nonzero(N=-5, l=2, d=1, m=1, eps=0.1), "N"),
    (lambda: fm.thm1_nonzero(N=5, l=2, d=1, m=1, eps=0.0), "eps"),
    (lambda: fm.lemma4_depth(1.0, 0.0), "eps"),
    (lambda: fm.lemma4_depth(-1.0, 0.1), "R"),
    (lambda: fm.lemma5_depth(1, 1, 0.0), "eps"),
    (lambda: fm.lemma5_width(0, 1), "d"),
    (lambda: fm.lemma5_weight_bound(2.0), "m"),
    (lambda: fm.thm1_embedding(-1), "l"),
    (lambda: fm.thm1_weight_scale(0.0, 2, 1), "gamma"),
    (lambda: fm.thm1_weight_scale(1.0, -1, 1), "kmax"),
    (lambda: fm.flat_width(0, 4, 1), "N"),
    (lambda: fm.flat_width_slope([2], 4, 1, 1), "ls"),
    (lambda: fm.thm1_nonzero_slope([5], 2, 1, 1, 0.1), "Ns"),
    (lambda: fm.lemma6_attention_lipschitz(1, 3, -1.0), "B"),
    (lambda: mk.thm5_atoms(K=2, l=3, d=1, num_regions=-2), "num_regions"),
    (lambda: mk.thm5_atoms(K=0, l=3, d=1, num_regions=2), "K"),
])
def test_formulas_refuse_arguments_outside_the_papers_ranges(call, name):
    with pytest.raises(ValueError, match=rf"\b{name} must"):
        call()


def test_formulas_keep_their_values_inside_the_ranges():
    assert fm.thm1_rounds(1) == 0 and fm.thm1_rounds(5) == 3
    assert fm.thm1_width(4, 2, 1, 1) == 4 * 20 + 2
    assert fm.lemma4_depth(1.0, 2.0**-8) == 8.0
    assert mk.thm5_atoms(2, 3, 1, 2) == 2 * 3 * 4 * bv.D(2, 3)


@pytest.mark.parametrize("target, message", [
    (lambda X: torch.full((len(X),), math.nan, dtype=F64), "target\\(X\\) must contain only finite values"),
    (lambda X: X, "target\\(X\\) must have shape \\(200\\), got \\(200, 1\\)"),
    ("not a function", "target must be a callable"),
])
def test_sieve_fit_names_a_bad_target(target, message):
    # a NaN target used to say "n = 200 is too small", a wrong shape raised a RuntimeError
    with pytest.raises(ValueError, match=message):
        est.sieve_fit(target, [1.0], "aniso", 200, 0)
