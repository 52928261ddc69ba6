"""Paper 003's models, data helpers, references and checks stay on the device of their input.

Run on the ``meta`` device (shapes without values): a tensor allocated on the CPU inside a function
that receives a meta tensor fails with "not on the expected device", so these tests catch the CPU/CUDA
mixing that the full profile would hit on a GPU. Functions that must read values (the checks turn
errors into floats, `difference_quotients` returns NumPy, `static_baselines` solves on the host) are
run until their first value read: they must fail there ("item() cannot be called on meta tensors")
and not earlier on a device mismatch.

Exempt from the core-sabotage check: on the meta device there are no values to sabotage.
"""
import pytest
import torch

import tfbook.seq2seq as s2s
from tfbook.claims import Claims
from tfbook.seq2seq import checks, estimation as est
from tfbook.seq2seq.models import PositionalEncoding

META = torch.device("meta")
VALUE_READ = r"item\(\) cannot be called on meta tensors"
OFFSETS = [(0, 2), (1, -1)]
IMPORTANCE = {(0, 0): 1.0, (0, 1): 0.25, (): 0.5}
CHANNELS = [[1], [0, 1]]


def _meta(*shape) -> torch.Tensor:
    return torch.empty(*shape, dtype=torch.float64, device=META)


def _paper_tensors(model) -> list[torch.Tensor]:
    w = model.paper_weights()
    return [w["E"]] + [t for layer in w["layers"] for h in layer["heads"] for t in h]


def _extractor():
    return s2s.build_extractor(OFFSETS, 2, 3).to_device(META)


def _selector(code: str = "onehot"):
    return s2s.build_selector(IMPORTANCE, CHANNELS, 2, 2, gap=0.1, code=code, code_dim=8).to_device(META)


@pytest.mark.parametrize("build", [_extractor, _selector, lambda: _selector("random"),
                                   lambda: s2s.build_approximator(OFFSETS, {(1, -1): 1.0}, 2, 3, 1e-3)
                                   .to_device(META)])
def test_to_device_moves_layers_and_paper_weights(build):
    model = build()
    assert model.to_device(META) is model
    tensors = list(model.parameters()) + list(model.buffers()) + _paper_tensors(model)
    assert tensors and all(t.device.type == "meta" for t in tensors)
    if model._pe.code_rows is not None:
        assert model._pe.code_rows.device.type == "meta"


def test_built_models_run_and_trace_on_meta():
    for model, d, N in ((_extractor(), 2, 14), (_selector(), 2, 15)):
        for boundary in model._boundaries:
            out = model(_meta(3, d, N), boundary=boundary)
            assert out.device.type == "meta" and out.shape == (3, model.out, N)
        trace = model.run_trace(_meta(3, d, N))
        assert trace.attention and all(a.device.type == "meta" for a in trace.attention.values())


def test_positional_encoding_follows_the_positions():
    pe = PositionalEncoding(6, 1, 0.3, one_at=0, code_at=3, code_rows=s2s.codes(5, 3, "random", 0))
    P = pe(torch.arange(-2, 9, device=META))
    assert P.device.type == "meta" and P.shape == (6, 11)


def test_data_helpers_take_a_device():
    X = checks.stress_inputs(3, 2, 7, seed=1, device=META)
    assert X.device.type == "meta" and X.shape == (6, 2, 7) and X.dtype == torch.float64
    cpu = checks.stress_inputs(3, 2, 7, seed=1)
    assert cpu.device.type == "cpu" and torch.equal(cpu, checks.stress_inputs(3, 2, 7, seed=1, device="cpu"))
    for kind, dim in (("onehot", 9), ("random", 16)):
        u = s2s.codes(9, dim, kind, seed=2, device=META)
        assert u.device.type == "meta" and u.shape == (9, dim)
        assert torch.equal(s2s.codes(9, dim, kind, seed=2), s2s.codes(9, dim, kind, seed=2, device="cpu"))


def test_basis_and_shift_follow_their_input():
    x = _meta(4, 5, 3)
    assert s2s.trig_eval({(1, 0, -2): 0.5, (0, 0, 0): 1.0}, x).device.type == "meta"
    assert all(s2s.psi(r, x).device.type == "meta" for r in (-2, 0, 3))
    assert s2s.shift(x, 2).device.type == "meta"
    assert s2s.importance_values(IMPORTANCE, _meta(2, 2, 9)).device.type == "meta"


def test_attention_rows_runs_on_the_models_device():
    rows = checks.attention_rows(_extractor(), 2, 7)
    assert rows.device.type == "meta" and rows.shape == (2, 7, 7)


@pytest.mark.parametrize("name", ["extraction_error", "approximation_error", "check_equivariance",
                                  "check_matches_paper", "selection_accuracy", "difference_quotients",
                                  "static_baselines"])
def test_value_reading_helpers_reach_their_first_value_read_on_meta(name):
    X = _meta(2, 2, 14)
    ext, sel, Xs = _extractor(), _selector(), _meta(2, 2, 15)
    calls = {
        "extraction_error": lambda: checks.extraction_error(ext, OFFSETS, X, "zero"),
        "approximation_error": lambda: checks.approximation_error(ext, OFFSETS, {(1, -1): 1.0}, X),
        "check_equivariance": lambda: checks.check_equivariance(Claims("t"), ext, X, range(3)),
        "check_matches_paper": lambda: checks.check_matches_paper(Claims("t"), ext, X, "zero"),
        "selection_accuracy": lambda: checks.selection_accuracy(sel, IMPORTANCE, CHANNELS, 2, Xs),
        "difference_quotients": lambda: est.difference_quotients(X, ext(X)),
        "static_baselines": lambda: s2s.static_baselines(Xs, Xs[:, 0], 2),
    }
    with pytest.raises(RuntimeError, match=VALUE_READ):
        calls[name]()


def test_trig_network_runs_on_meta_core_layers():
    from tfbook import gadgets as gd

    maps, _ = s2s.trig_network({(1, -2): 0.5, (0, 3): 0.25}, 2, 1e-3)
    out = gd.FNN(maps).to(META)(_meta(11, 2))
    assert out.device.type == "meta" and out.shape == (11, 1)
