"""colsym on the meta device: small constructions and every reference the notebooks compare against.

Meta tensors have shapes and no values, so a function that allocates on the CPU instead of its input's
device fails here without a GPU. The bench construction (Theorem 1, d=2 s=3 N=4 L=4, n=1024, forward only)
is covered by tests/test_device.py; this file takes a smaller Theorem 1 transformer (its stream, P_T
read-outs and attention weights), the Lemma 1/2/7 gadgets, the Section 9.1 flattened network, and the
references of tfbook.colsym.algebra (P_T three ways, f), approximant (the closed-form recipe) and verify.
"""
import pytest
import torch

import tfbook.colsym as cs
from tfbook.colsym import verify
from tfbook.colsym.algebra import as_batch, column_monomial
from tfbook.colsym.approximant import approximant_values, interpolated_square, product
from tfbook.colsym.flatten import flattened_network, run_flattened
from tests.meta_helpers import on_meta

META = torch.device("meta")
F64 = torch.float64

# Functions that must read values, so cannot run on meta (the notebooks run them on their device), with
# the reason.
NEEDS_VALUES = {
    "squaring.fnn_to_transformer": "a builder: the gadgets read the FNN's weights (on the CPU); the result "
                                   "is moved to the FNN's device",
    "verify.gradient_ascent / sup_error": "keep the best point per start (data-dependent indexing); floats",
    "checks.prop1 / prop2 / prop3 / approximant / single_layer_sweep / theorem1 / sizes":
        "claims: compare floats",
    "algebra.msp_symbolic / expand / decompose_column_symmetric": "SymPy and exact fractions, no tensors",
    "bounds.* (recursive_error_bound, section8_constant, sup_norm, ...)": "numbers in, numbers out",
}
COEFFS = {((1, 0),): 1.0, ((0, 1), (1, 0)): 0.5, ((1, 1),): 2.0, ((1, 0), (1, 0)): 1.0}


@pytest.mark.parametrize("normalized", [False, True])
def test_a_small_theorem1_transformer_runson_meta(normalized):
    model = cs.build_transformer(COEFFS, 2, 3, 2, 1, normalized=normalized).to(META)
    X = torch.empty(4, 2, 3, dtype=F64, device=META)
    H0 = model.stream(X, upto=model.attention_block)
    assert on_meta(model(X), model.embed(X), H0, model.stream(X, return_all=True),
                    model.attention().attention_weights(H0), model.msp_values(X),
                    model.read_msp(X, ((1, 0), (1, 0))))
    assert tuple(model(X).shape) == (4,)


def test_algebra_and_approximant_references_follow_their_input_to_meta():
    model = cs.build_transformer(COEFFS, 2, 3, 2, 1).to(META)
    X = torch.empty(4, 2, 3, dtype=F64, device=META)
    T = ((0, 1), (1, 0), (1, 1))
    outs = [cs.msp(T, X), cs.msp((), X), cs.msp_bruteforce(T, X), cs.msp_partition(T, X),
            cs.evaluate(COEFFS, X), cs.evaluate({(): 1.0}, X)]
    assert on_meta(*outs) and all(tuple(t.shape) == (4,) for t in outs)
    assert on_meta(as_batch(X[0]), column_monomial(X, (2, 1)))
    x = torch.empty(5, dtype=F64, device=META)
    mono, P = approximant_values(model, X)
    assert on_meta(interpolated_square(x, 3), product(x, x, 3), mono, P)


def test_squaring_gadgets_and_the_flattened_network_runon_meta():
    x = torch.empty(6, dtype=F64, device=META)
    assert on_meta(cs.run_slots(cs.build_sawtooth(3).to(META), "g", x=x),
                    cs.run_slots(cs.build_product(2, 2).to(META), "psi", x=x, y=x))
    square, prod = cs.build_square_fnn(3, 2).to(META), cs.build_product_fnn(2, 2)
    converted = cs.fnn_to_transformer(prod)  # a builder: reads the FNN's weights, on the CPU
    assert converted.layers[0].W_1.device.type == "cpu"
    converted, prod = converted.to(META), prod.to(META)
    x2 = torch.empty(6, 2, dtype=F64, device=META)
    assert on_meta(square(x[:, None]), prod(x2), cs.run_converted(converted, x2))
    model = cs.build_transformer(COEFFS, 2, 3, 2, 1).to(META)
    net = flattened_network(model)  # built from the model's weights, on the model's device
    X = torch.empty(4, 2, 3, dtype=F64, device=META)
    assert net.layers[0].W_1.device.type == "meta" and on_meta(run_flattened(net, model, X))


def test_verify_inputs_and_errors_follow_the_model_to_meta():
    model = cs.build_transformer(COEFFS, 2, 3, 2, 1).to(META)
    batches = verify.candidate_inputs(model, 4, seed=0, device=META)  # drawn on the CPU, moved
    assert set(batches) == set(verify.FAMILIES) and on_meta(batches)
    X = torch.cat(list(batches.values()))
    assert on_meta(verify.errors(model, COEFFS, X)) and tuple(verify.errors(model, COEFFS, X).shape) == (len(X),)
