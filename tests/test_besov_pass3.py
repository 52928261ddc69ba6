"""Paper 001, second pass: the shared product gadget in the slot programs, the sharp N epsilon example,
the vanishing atom j = 2^k, Theorem 1's non-zero and weight formulas, and moving models to a device."""
import math

import numpy as np
import pytest
import torch

import tfbook.besov as bv
from tfbook.besov.gadgets import SlotNet
from tfbook.besov.program import Stream, emit_product
from tfbook.model import Construction

F64 = torch.float64


def _product_slotnet(m_q: int, R: float, clear_y: bool) -> tuple[SlotNet, np.ndarray]:
    """x := prod(x, y) by `emit_product` on a one-token stream (x, y, 3 scratch slots); returns (net, y index)."""
    st = Stream()
    x, y, saw = st.alloc("x", (1,)), st.alloc("y", (1,)), st.alloc("saw", (1, 3))
    prog: list = []
    emit_product(prog, st.dim, x, y, saw, R, m_q, "p", clear_y=clear_y)
    return SlotNet(st.layout, [(n, layer.build(n)) for n, layer in prog], np.concatenate([x, y]), int(x[0])), y


def _grid(R: float) -> torch.Tensor:
    t = torch.linspace(0, R, 33, dtype=F64)
    return torch.cartesian_prod(t, t)


@pytest.mark.parametrize("m_q, R", [(1, 1.0), (3, 1.0), (6, 2.5)])
def test_emit_product_matches_the_shared_gadget(m_q, R):
    net, _ = _product_slotnet(m_q, R, clear_y=False)
    z = _grid(R)
    gadget = bv.product_net(m_q, R)(z)
    assert float((net._run(z) - gadget).abs().max()) <= 1e-13 * R * R
    # and the gadget is Lemma 4's product: exact at 0, within its error range elsewhere
    lo, hi = bv.product_error_range(m_q, R)
    err = net._run(z) - z[:, 0] * z[:, 1]
    assert float(err.min()) >= lo - 1e-12 and float(err.max()) <= hi + 1e-12
    assert float(net._run(torch.tensor([[0.0, R], [R, 0.0]], dtype=F64)).abs().max()) <= 1e-15


def test_emit_product_clears_y_and_scratch_for_reuse():
    net, y = _product_slotnet(4, 1.0, clear_y=True)
    z = _grid(1.0)
    H = torch.zeros(z.shape[0], 1, net.layout.dim, dtype=F64)
    H[:, 0, net.inp] = z
    H[:, 0, net.layout.index("saw")] = 0.7  # stale scratch from an earlier product
    out = Construction.forward(net, H)
    assert float(out[:, 0, int(y[0])].abs().max()) == 0.0
    assert float((out[:, 0, net.out_index] - net._run(z)).abs().max()) <= 1e-15


def test_emit_product_width_and_nonzeros_do_not_depend_on_the_stale_scratch():
    a, _ = _product_slotnet(5, 1.0, clear_y=False)
    b, _ = _product_slotnet(5, 1.0, clear_y=True)
    assert a.width == b.width == 5
    assert b.counted_sizes().nonzero - a.counted_sizes().nonzero == 2  # one clear unit: a read and a write


def _peaked(N: int):
    n = torch.arange(N)
    k = torch.stack([n + 1, torch.zeros_like(n)], 1)[..., None]
    j = torch.stack([2**n - 1, torch.zeros_like(n)], 1)[..., None]
    return k, j, torch.ones(N, dtype=F64)


@pytest.mark.parametrize("N", [1, 3, 9])
def test_n_distinct_atoms_attain_the_error_bound(N):
    k, j, c = _peaked(N)
    assert len({tuple(row) for row in torch.cat([k, j], 1).flatten(1).tolist()}) == N  # distinct atoms
    model = bv.build_transformer(k, j, c, 1, 20, 4.0)
    X = torch.tensor([[[0.5], [0.0]]], dtype=F64)
    err = float((model(X) - bv.expansion(X, k, j, c, 1)).abs()[0])
    bound = bv.error_bound(c, 2, 1, 1, 20, 4.0)
    assert err <= bound
    assert err >= bound * (1 - 1e-9)
    assert err == pytest.approx(N * bv.leak(2, 4.0), rel=1e-9)


@pytest.mark.parametrize("m", [1, 2, 3])
def test_the_atom_j_equal_2_to_the_k_vanishes_on_the_unit_interval(m):
    x = torch.linspace(0, 1, 2**10 + 1, dtype=F64)
    for k in range(0, 7):
        assert float(bv.bspline(2.0**k * x - 2**k, m).abs().max()) == 0.0
        assert float(bv.bspline(2.0**k * x - (2**k - 1), m).abs().max()) > 0.0


def test_random_atoms_use_the_corrected_index_set():
    for seed in range(20):
        k, j, _ = bv.random_atoms(30, 3, 2, 2, 4, seed=seed)
        assert bool((j >= -2).all()) and bool((j <= 2**k - 1).all())


def test_thm1_nonzero_is_affine_in_n_with_slope_one_in_log_log():
    S = [bv.thm1_nonzero(N, 4, 1, 1, 1e-3) for N in (10, 20, 30)]
    assert S[0] + S[2] == pytest.approx(2 * S[1], rel=1e-12)
    assert bv.thm1_nonzero_slope((10, 100, 1000), 4, 1, 1, 1e-3) == pytest.approx(1.0, abs=1e-2)
    assert bv.thm1_nonzero(5, 4, 1, 1, 1e-3, C=2.0) > bv.thm1_nonzero(5, 4, 1, 1, 1e-3, C=1.0)
    assert bv.thm1_nonzero(5, 4, 1, 1, 1e-6) > bv.thm1_nonzero(5, 4, 1, 1, 1e-3)  # finer accuracy, deeper


@pytest.mark.parametrize("N, l, d, m, kmax, gamma", [(4, 4, 1, 1, 2, 10.0), (3, 3, 2, 2, 5, 6.0), (5, 2, 1, 1, 7, 3.0)])
def test_built_sizes_against_the_theorem1_formulas(N, l, d, m, kmax, gamma):
    k, j, c = bv.random_atoms(N, l, d, m, kmax, seed=3)
    s = bv.build_transformer(k, j, c, m, 6, gamma).sizes()
    assert s["E"] == bv.thm1_embedding(l)
    assert s["S"] <= bv.thm1_nonzero(N, l, d, m, 4.0**-6)
    assert s["B"] <= bv.thm1_weight_scale(gamma, int(k.max()), m)
    if 2.0 ** int(k.max()) > max(gamma, 2 * (m + 1) ** m):  # the scales 2^k of M_(1,1) are the largest weights
        assert s["B"] == 2.0 ** int(k.max())


def test_to_device_moves_every_layer_and_keeps_the_values():
    k, j, c = bv.random_atoms(3, 2, 1, 1, 2, seed=0)
    model = bv.build_transformer(k, j, c, 1, 4, 5.0)
    X = bv.support_samples(k, j, 1, 5, seed=0)
    before = model(X)
    assert model.to_device(torch.device("cpu")) is model
    assert torch.equal(model(X), before)  # the same code path twice (to the same device)
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        model.to_device(dev)
        assert all(p.device.type == "cuda" for p in model.parameters())
        assert float((model(X.to(dev)).cpu() - before).abs().max()) <= 1e-12
    with pytest.raises(ValueError, match="m_q"):
        bv.build_transformer(k, j, c, 1, 0, 5.0)


def test_formulas_are_registered_for_size_claims():
    from tfbook import claims as cl

    for fn in (bv.thm1_embedding, bv.thm1_nonzero, bv.thm1_nonzero_slope, bv.thm1_weight_scale):
        assert cl.FORMULAS[f"{fn.__module__}.{fn.__qualname__}"] is fn
    assert math.isclose(bv.thm1_weight_scale(10.0, 2, 2), 18.0)
