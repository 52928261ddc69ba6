"""turing on the meta device: the circuit network and every reference the notebooks compare against.

Meta tensors have shapes and no values, so a function that allocates on the CPU instead of its input's
device fails here without a GPU. The bench construction (the palindrome transformer's decoder loop) is
listed in tests/test_device.py as needing values; this file takes a small Lemma B.1 circuit network (plain,
uncorrected, pushed, perturbed, hidden bits), its Boolean reference `Circuit.evaluate`, the certificate's
interval bounds, and the parts of the Turing-machine transformer that run on its device (encoder input,
positions, cell decoding).
"""
import pytest
import torch

import tfbook.turing as tg
from tfbook.layers import perturb
from tfbook.turing import robustness as rb
from tests.meta_helpers import on_meta

META = torch.device("meta")
F64 = torch.float64

# Functions that must read values, so cannot run on meta (the notebooks run them on their device), with
# the reason.
NEEDS_VALUES = {
    "TMTransformer and TMFleet .forward_trace / run / run_batch / decode / tape_after / write_log":
        "autoregressive: each step's written symbol is decoded from the output; the Trace comes back "
        "on the CPU (copying a meta tensor there has no data)",
    "robustness.tm_output_bounds / tm_certified_radius / readout_attack / correction_row_attack / "
    "push_tolerance":
        "run on the model's device but return on the CPU beside the Trace's F, and bisect on floats",
    "transformer.score_gaps": "keeps the finite gaps only (data-dependent indexing)",
    "robustness.circuit_readout_attack": "one perturbation per distinct output gate (torch.unique)",
    "robustness.certified_radius / circuit_parameter_attack / pgd_flip / attacked_radius / "
    "circuit_push_tolerance / smallest_breaking_push / noise_flip_fraction":
        "bisections and attacks: stop on a float (did an input flip?)",
    "CircuitNetwork.l1_norm, TMTransformer.l1_norm, counted_sizes": "return floats / count non-zeros",
    "margin.flip_radius": "bisection on a float; margin.random_direction draws on the CPU (moved to each "
                          "parameter's device by flip_radius)",
    "margin.toy_output / toy_margin_*": "NumPy and SciPy (SLSQP), no tensors",
    "learning.train_mlp / learning_curves / circuit_learning_curves": "return 0-1 errors as floats",
    "circuits.random_circuit / relevant_inputs": "builders: search for a circuit that reads enough inputs",
    "fleet.build_fleet, layers.direct_sum": "builders: write their summands' non-zero entries (built on the CPU, "
                                            "then moved to the device)",
}


@pytest.fixture(scope="module")
def circuit_and_net():
    c = tg.random_circuit(6, depth=3, width=6, seed=0, min_relevant=3)
    return c, tg.build_circuit_network(c).to(META)


def test_the_circuit_network_runson_meta(circuit_and_net):
    c, net = circuit_and_net
    X = tg.all_inputs(6).to(META)
    out, hidden = net(X, return_hidden=True)
    assert on_meta(out, *hidden, net(X, correct=False), net(X, block_noise=0.2))
    with perturb(add=0.1, names=["*.gate2", "*.round2"], seed=1):
        assert on_meta(net(X), net(X, correct=False))
    assert tuple(out.shape) == (64,) and all(h.shape[0] == 64 for h in hidden)
    assert on_meta(c.evaluate(X), c.evaluate(X).double())


def test_the_certificates_bounds_follow_the_network_to_meta(circuit_and_net):
    _, net = circuit_and_net
    X = torch.empty(5, 6, dtype=F64, device=META)
    W = net.layers[0].W_1
    assert on_meta(*rb.output_bounds(net, X, 0.01), *rb.output_bounds(net, X, 0.01, correct=False),
                    *rb._round_bounds(X, X, 0.1), *rb._affine(X, X, W, net.layers[0].b_1, 0.1, True))
    assert tuple(rb.output_bounds(net, X, 0.01)[0].shape) == (5,)


def test_the_tm_transformers_device_parts_runon_meta():
    model = tg.build_transformer(tg.parity(), 8, device=META)
    enc, mask = model.encode(["01", "1"], META, 8)
    bits = torch.empty(2, 9, model.P, dtype=F64, device=META)
    assert on_meta(enc, mask, model.beta(3, META), model.beta(3), model._cells(bits, 8))
    assert tuple(model._cells(bits, 8).shape) == (2, 9)
    with pytest.raises((NotImplementedError, RuntimeError)):  # still true: else take it off NEEDS_VALUES
        model.forward_trace(["01"])


def test_a_fleets_device_parts_runon_meta():
    fleet = tg.build_fleet([tg.parity(), tg.counter()], 8, device=META)
    enc, mask = fleet.encode(["01", "1"], META, 8)
    assert on_meta(enc, mask, fleet.beta(3), *(p for p in fleet.parameters()))
    assert tuple(enc.shape) == (2, 2, fleet.w) and tuple(fleet.beta(3).shape) == (fleet.w,)
    with pytest.raises((NotImplementedError, RuntimeError)):  # still true: else take it off NEEDS_VALUES
        fleet.forward_trace(["01"])
