"""Tests for tfbook.turing: simulator, circuit networks, the Turing-machine transformer, margins, bad input."""
import math

import pytest
import torch

import tfbook.turing as tg
from tfbook.turing.machine import CATALOG, CATALOG_SYMBOLS

F64 = torch.float64


def test_simulator_known_outputs():
    assert tg.balanced().run("(())", 60).accepted and not tg.balanced().run("())(", 60).accepted
    inc = tg.increment().run("0111", 30)
    assert inc.accepted and inc.tape_string() == "1000"
    assert not tg.increment().run("111", 30).accepted  # overflow rejects
    assert tg.copy().run("ab", 200).tape_string() == "ab#ab"
    assert tg.palindrome().run("0110", 60).accepted and not tg.palindrome().run("01", 60).accepted
    r = tg.parity().run("11", 5)
    assert r.states == ["even", "odd", "even", "acc", "acc", "acc"] and r.heads == [1, 2, 3, 4, 5, 6]


def test_terminal_states_loop_and_two_way_tape():
    left = tg.TuringMachine({("s", "_"): ("s", "1", -1), ("s", "1"): ("acc", "1", -1)}, "s", accept=["acc"]).run("", 4)
    assert left.heads == [1, 0, -1, -2, -3] and left.states == ["s"] * 5
    assert left.tape == {1: "1", 0: "1", -1: "1", -2: "1"}
    loop = tg.TuringMachine({("s", "_"): ("acc", "1", -1), ("s", "1"): ("s", "1", 1)}, "s", accept=["acc"]).run("", 3)
    assert loop.heads == [1, 0, 1, 2] and loop.states == ["s", "acc", "acc", "acc"]
    assert loop.tape == {1: "1", 0: "_"} and loop.accepted


@pytest.mark.parametrize("name,max_len", [("parity", 5), ("palindrome", 4), ("balanced", 4), ("copy", 3), ("increment", 4)])
def test_transformer_exact_on_catalog(name, max_len):
    tm = CATALOG[name]()
    xs = tg.all_strings(CATALOG_SYMBOLS[name], max_len)
    T = max(tm.runtime(x, 400) for x in xs) + 2
    model = tg.build_transformer(tm, T, device="cpu")
    for x, got in zip(xs, model.run_batch(xs)):
        assert got.same_as(tm.run(x, T)), x


def test_transformer_exact_on_random_machines_with_left_excursions():
    xs = tg.all_strings("01", 3)
    left = 0
    for seed in range(12):
        tm = tg.random_tm(3, "01", seed)
        model = tg.build_transformer(tm, 16, device="cpu")
        for x, got in zip(xs, model.run_batch(xs)):
            ref = tm.run(x, 16)
            assert got.same_as(ref), (seed, x)
            left += min(ref.heads) < 1
    assert left > 0


def test_long_inputs_and_long_horizon():
    tm = tg.parity()
    model = tg.build_transformer(tm, 40, device="cpu")
    xs = ["1" * 60, "10" * 25, ""]  # inputs longer than the horizon are fine
    for x, got in zip(xs, model.run_batch(xs)):
        assert got.same_as(tm.run(x, 40))


def test_edits_after_build_change_nothing_and_no_reference_kept():
    tm = tg.parity()
    model = tg.build_transformer(tm, 8, device="cpu")
    before = [r.states for r in model.run_batch(["0110", "1"])]
    tm.delta[("even", "1")] = ("acc", "1", 1)
    tm.delta.clear()
    assert [r.states for r in model.run_batch(["0110", "1"])] == before
    assert not any(isinstance(v, tg.TuringMachine) for v in vars(model).values())


def test_sizes_and_weights_structure():
    tm = tg.parity()
    model = tg.build_transformer(tm, 8, device="cpu")
    Z, A, P = len(tm.states) + 1, len(tm.alphabet), tg.position_bits(8)
    assert model.width == Z + 4 * A + 6 * P + 5 + Z * A
    assert model.num_layers == P + 9
    assert model.num_parameters() == model.paper_parameter_count()
    values = torch.cat([p.flatten() for p in model.parameters()])
    assert float(values.abs().max()) <= 2 * P - 1
    assert torch.allclose(values * 3, (values * 3).round(), atol=1e-12)  # all weights in Z/3


def test_hidden_states_binary_and_score_gap():
    tm = tg.palindrome()
    model = tg.build_transformer(tm, 20, device="cpu")
    trace = model.forward_trace(tg.all_strings("01", 3), record=True)
    assert torch.all((trace.outputs.abs() < 1e-12) | ((trace.outputs - 1).abs() < 1e-12))
    for scores in trace.scores.values():
        for s in scores:
            finite = s[torch.isfinite(s)]
            assert torch.allclose(finite, finite.round(), atol=1e-9)
    gaps = tg.score_gaps(trace)
    assert len(gaps) > 0 and float(gaps.min()) >= 1 - 1e-9


def test_noise_within_radius_changes_nothing():
    tm = tg.increment()
    model = tg.build_transformer(tm, 14, device="cpu")
    xs = tg.all_strings("01", 4)
    ref = [tm.run(x, 14) for x in xs]
    noisy = model.run_batch(xs, noise=0.33)
    assert all(a.same_as(b) for a, b in zip(noisy, ref))


def test_circuit_network_exact_formulas_and_radius():
    c = tg.random_circuit(10, 5, 8, seed=2)
    net = tg.build_circuit_network(c)
    X = tg.all_inputs(10)
    assert torch.allclose(net(X), 2 * c.evaluate(X).to(F64) - 1, rtol=0, atol=1e-12)
    assert net.l1_norm() == tg.l1_formula(c)
    assert net.num_relu_layers == 4 * len(c.layers) - 2
    assert float((net(X, block_noise=0.33) - net(X)).abs().max()) <= 1e-12
    assert float((net(X, block_noise=0.34) - net(X)).abs().max()) > 0.01


def test_toy_margin():
    for d in (1, 2, 8):
        assert tg.toy_margin_numeric(d) == pytest.approx(tg.toy_margin_closed_form(d), abs=1e-6)
        assert tg.toy_margin_numeric(d, rounded=True) >= 1 / 3
    assert tg.toy_margin_closed_form(64) == pytest.approx(math.log(2) / 8, rel=0.01)


def test_bad_input():
    with pytest.raises(ValueError, match="hole"):
        tg.TuringMachine({("s", "0"): ("s", "0", 1)}, "s", accept=["a"])
    with pytest.raises(ValueError, match="move must be"):
        tg.TuringMachine({("s", "_"): ("s", "_", 0)}, "s", accept=["a"])
    with pytest.raises(ValueError, match="T must be an int >= 1"):
        tg.build_transformer(tg.parity(), 0)
    with pytest.raises(ValueError, match="outside the alphabet"):
        tg.parity().run("012", 3)
    with pytest.raises(ValueError, match="outside the alphabet"):
        tg.build_transformer(tg.parity(), 3, device="cpu").run("2")
    with pytest.raises(ValueError, match="needs 2 parent"):
        tg.Circuit(2, [[("AND", (0,))]])
    with pytest.raises(ValueError, match="exactly one gate"):
        tg.Circuit(2, [[("ID", (0,)), ("ID", (1,))]])
    with pytest.raises(ValueError, match="must index the previous layer"):
        tg.Circuit(2, [[("NOT", (5,))]])
    with pytest.raises(ValueError, match="op 'XOR'"):
        tg.Circuit(2, [[("XOR", (0, 1))]])


def test_history_helpers_and_transformer_tape_over_time():
    from tfbook.turing.machine import last_writes

    tm = tg.palindrome()
    run = tm.run("0110", 12)
    history = tm.tape_history("0110", 12)
    assert len(history) == 13 and history[-1] == run.tape and history[0] == {1: "0", 2: "1", 3: "1", 4: "0"}
    assert last_writes([1, 2, 3, 2, 1, 0]) == [None, None, None, 2, 1, 0]
    model = tg.build_transformer(tm, 12, device="cpu")
    trace = model.forward_trace(["0110"])
    assert all(model.tape_after("0110", trace, 0, t) == history[t] for t in range(13))
