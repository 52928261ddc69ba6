"""Tests for tfbook.turing: simulator, circuit networks, the Turing-machine transformer, margins, bad input."""
import math

import pytest
import torch

import tfbook.turing as tg
from tfbook.claims import ClaimError, Claims
from tfbook.layers import perturb
from tfbook.turing.machine import CATALOG, CATALOG_SYMBOLS, last_writes
from tfbook.turing import robustness as rb
from tfbook.turing.robustness import certified_radius, circuit_readout_attack, identity_chain, readout_attack
from tfbook.turing.sizes import l1_by_layer, l1_closed_form, lemma_bounds, w_tm
from tests.numerics import assert_close_scaled

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


def test_non_halting_counter_exact_at_long_horizon():
    tm, T = tg.counter(), 512
    model = tg.build_transformer(tm, T, device="cpu")
    xs = ["", "1101"]
    for x, got in zip(xs, model.run_batch(xs)):
        ref = tm.run(x, T)
        assert got.same_as(ref)
    writes = [i for i in last_writes(tm.run("", T).heads) if i is not None]
    assert max(writes) >= 2 ** (model.P - 3)  # i' needs every time bit (times use the low P - 2 bits)


def test_horizon_override_runs_the_same_weights_longer():
    tm = tg.palindrome()
    model = tg.build_transformer(tm, 20, device="cpu")
    assert model.max_horizon >= 30
    xs = tg.all_strings("01", 3)
    for x, got in zip(xs, model.run_batch(xs, horizon=30)):
        assert got.same_as(tm.run(x, 30))
    with pytest.raises(ValueError, match="horizon"):
        model.run("0", horizon=model.max_horizon + 1)


def test_edits_after_build_change_nothing_and_no_reference_kept():
    tm = tg.parity()
    model = tg.build_transformer(tm, 8, device="cpu")
    before = [r.states for r in model.run_batch(["0110", "1"])]
    tm.delta[("even", "1")] = ("acc", "1", 1)
    tm.delta.clear()
    assert [r.states for r in model.run_batch(["0110", "1"])] == before
    assert not any(isinstance(v, tg.TuringMachine) for v in vars(model).values())


def test_counterfactual_edit_of_the_transition_layer():
    tm = tg.parity()
    model = tg.build_transformer(tm, 12, device="cpu")
    lay, names = model.layout, model.state_names
    pair = ("pair", names.index("even") * len(model.alphabet) + model.alphabet.index("1"))
    W = model.layer("A2.ff").W_1
    with torch.no_grad():  # S(even, 1) = (odd, 1, R) becomes (even, 1, R): the edited machine accepts everything
        W[lay.index(("st", names.index("odd"))), lay.index(pair)] = 0.0
        W[lay.index(("st", names.index("even"))), lay.index(pair)] = 1.0
    edited = tg.TuringMachine({**tm.delta, ("even", "1"): ("even", "1", 1)}, "even", accept=["acc"], reject=["rej"])
    xs = tg.all_strings("01", 4)
    for x, got in zip(xs, model.run_batch(xs)):
        assert got.same_as(edited.run(x, 12))
    assert sum(tm.run(x, 12).accepted != edited.run(x, 12).accepted for x in xs) > 0


def test_weights_reloaded_into_a_skeleton_simulate_without_any_machine(monkeypatch):
    tm = tg.palindrome()
    model = tg.build_transformer(tm, 16, device="cpu")
    xs = tg.all_strings("01", 3)
    ref = [tm.run(x, 16) for x in xs]
    skeleton = tg.build_transformer(tm, 16, device="cpu")
    with torch.no_grad():
        for p in skeleton.parameters():
            p.zero_()
    skeleton.load_state_dict(model.state_dict())

    def refuse(*args, **kwargs):
        raise AssertionError("the transformer consulted a TuringMachine")

    monkeypatch.setattr(tg.TuringMachine, "run", refuse)
    assert all(g.same_as(r) for g, r in zip(skeleton.run_batch(xs), ref))


def test_sizes_against_the_paper_and_the_closed_form():
    tm = tg.parity()
    for T in (8, 300, 2**20):
        model = tg.build_transformer(tm, T, device="cpu")
        Z, A, P = len(model.state_names), len(model.alphabet), tg.position_bits(T)
        sizes = model.counted_sizes()
        assert model.width == sizes.embed_dim and model.num_parameters() == sizes.stored
        extra = sum(model.layout.size(s) for s in ("dir", "cy", "bw", "pair"))
        assert sizes.embed_dim - w_tm(Z, A, P) == extra == 2 + 2 * P + Z * A
        assert model.paper_sizes().embed_dim == w_tm(Z, A, P)
        assert model.num_layers == len(lemma_bounds(Z, A, P)) == P + 9
        # weights in Z/3: a float sum of their |.| is the integer closed form only up to its summation order
        for correction in (True, False):
            want = l1_closed_form(Z, A, P, 2, correction=correction)
            assert_close_scaled(model.l1_norm(correction=correction), want, scale=want)
        values = torch.cat([p.flatten() for _, p in model.theta()])
        assert float(values.abs().max()) <= 2 * P - 1
        assert torch.allclose(values * 3, (values * 3).round(), atol=1e-12)  # all weights in Z/3
    by_layer = l1_by_layer(model)
    # ~100 per-layer sums added in Python: n eps of the total, however they round
    assert_close_scaled(sum(sum(v.values()) for v in by_layer.values()) + A + 2 + 2, model.l1_norm(),
                        factor=256, scale=model.l1_norm())


def test_hidden_states_binary_and_score_gap():
    tm = tg.palindrome()
    model = tg.build_transformer(tm, 20, device="cpu")
    trace = model.forward_trace(tg.all_strings("01", 3), record=True)
    assert torch.all((trace.layer_states.abs() < 1e-12) | ((trace.layer_states - 1).abs() < 1e-12))
    for scores in trace.scores.values():
        for s in scores:
            finite = s[torch.isfinite(s)]
            assert torch.allclose(finite, finite.round(), atol=1e-9)
    gaps = tg.score_gaps(trace)
    assert len(gaps) > 0 and float(gaps.min()) >= 1 - 1e-9


def test_binary_search_reveals_the_last_write_msb_first():
    tm, T = tg.counter(), 40
    model = tg.build_transformer(tm, T, device="cpu")
    x = "1"
    trace = model.forward_trace([x], record=True)
    heads = tm.run(x, T).heads
    found = trace.state("C0.round")[0, :, model.layout.index(("scr4", 0))]
    for t, i_prime in enumerate(last_writes(heads)):
        assert int(found[t].round()) == (i_prime is not None)
        bits = tg.binary(i_prime or 0, model.P)
        for j in range(1, model.P + 1):
            scr3 = model.read(trace.state(f"C{j}.round")[0, t], "scr3").round().long().tolist()
            assert scr3[:j] == (bits[:j] if i_prime is not None else [0] * j)
    assert max(i for i in last_writes(heads) if i is not None) >= 2 ** (model.P - 2)


def test_softmax_attention_exact_beyond_the_temperature():
    tm, T = tg.palindrome(), 20
    model = tg.build_transformer(tm, T, device="cpu")
    xs = tg.all_strings("01", 3)
    ref = [tm.run(x, T) for x in xs]
    exact = model.run_batch(xs, attention="softmax", beta=math.log(3 * (T + 2)))
    assert all(g.same_as(r) for g, r in zip(exact, ref))
    assert not all(g.same_as(r) for g, r in zip(model.run_batch(xs, attention="softmax", beta=0.5), ref))


def test_noise_within_the_correction_radius_changes_nothing_and_above_it_breaks():
    tm = tg.increment()
    model = tg.build_transformer(tm, 14, device="cpu")
    xs = tg.all_strings("01", 4)
    ref = [tm.run(x, 14) for x in xs]

    def differ(eta, names, seed=1):
        with perturb(add=eta, names=names, seed=seed):
            return sum(not a.same_as(b) for a, b in zip(model.run_batch(xs), ref))

    assert differ(0.33, ["*.ff"]) == 0  # before every correction (Definition D.1)
    assert differ(0.45, ["*.ff"]) > 0
    assert differ(0.02, ["*.round"]) == 0  # after every correction: reaches the attention scores
    assert differ(0.3, ["*.round"]) > 0


def test_readout_attack_flips_and_certified_bound_holds():
    tm = tg.palindrome()
    model = tg.build_transformer(tm, 24, device="cpu")
    radius, flipped = readout_attack(model, tg.all_strings("01", 3))
    assert bool(flipped.all()) and float(radius.max()) <= 1 / math.sqrt(2) + 1e-12
    c = tg.random_circuit(8, 4, 6, seed=1)
    net = tg.build_circuit_network(c)
    X = tg.all_inputs(8)
    lower = certified_radius(net, X)
    upper, flipped = circuit_readout_attack(net, X)
    assert bool(flipped.all()) and 0 < lower < float(upper.min())
    for delta_seed in range(5):  # random perturbations of norm just below the certified radius never flip
        gen = torch.Generator().manual_seed(delta_seed)
        params = [p for _, p in net.theta()]
        dirs = [torch.randn(p.shape, generator=gen, dtype=F64) for p in params]
        norm = math.sqrt(sum(float((d**2).sum()) for d in dirs))
        F = net(X)
        with torch.no_grad():
            for p, d in zip(params, dirs):
                p += 0.999 * lower * d / norm
        assert bool((torch.sign(net(X)) == torch.sign(F)).all())
        with torch.no_grad():
            for p, d in zip(params, dirs):
                p -= 0.999 * lower * d / norm


def assert_certificate_survives_attack(net, X, radius):
    """A gradient attack on all of theta at 0.99 x the claimed radius, from three starts, flips no input."""
    sign = torch.sign(net(X))
    params = [p for _, p in net.theta()]
    for seed in range(3):
        assert rb.pgd_flip(params, lambda: sign * net(X), 0.99 * radius, steps=100, seed=seed) is None


def test_circuit_margin_bracket_certificate_survives_attack_and_inflated_certificate_is_caught():
    net = tg.build_circuit_network(tg.random_circuit(8, 4, 6, seed=1))
    X = tg.all_inputs(8)
    lower = certified_radius(net, X)
    assert_certificate_survives_attack(net, X, lower)
    upper = rb.circuit_parameter_attack(net, X)
    readout = float(circuit_readout_attack(net, X)[0].min())
    assert lower < upper < readout / 5  # the gradient attack is far stronger than the read-out attack
    lo, hi = rb.output_bounds(net, X, upper)  # a sound bound cannot prove every sign at a radius that flips one
    assert not bool(torch.where(net(X) > 0, lo > 0, hi < 0).all())
    with pytest.raises(AssertionError):  # a certificate inflated 8x is refuted by the attack
        assert_certificate_survives_attack(net, X, 8 * lower)
    with torch.no_grad():  # the certificate's case analysis needs the exact correction weights
        net.layer("L1.round1").b_1[0] += 1e-3
    with pytest.raises(ValueError, match="correction"):
        certified_radius(net, X)


def test_transformer_margin_bracket_correction_rows_and_certificate():
    model = tg.build_transformer(tg.palindrome(), 12, device="cpu")
    xs = tg.all_strings("01", 2)
    rows, flipped = rb.correction_row_attack(model, xs)
    assert bool(flipped.all())
    assert float((rows / readout_attack(model, xs)[0]).max()) < 0.5
    lower = rb.tm_certified_radius(model, xs, iters=8)
    assert 0 < lower < float(rows.min())
    lo, hi = rb.tm_output_bounds(model, xs, 0.0)
    F = model.forward_trace(xs).F
    assert torch.allclose(lo, F, rtol=0, atol=1e-12) and torch.allclose(hi, F, rtol=0, atol=1e-12)  # radius 0: the run
    lo, hi = rb.tm_output_bounds(model, xs, float(rows.max()))  # every input flips there: no proof of its sign
    assert not bool(torch.where(F > 0, lo > 0, hi < 0).any())
    with torch.no_grad():
        model.layer("E2.round").W_2[0, 0] += 1e-3
    with pytest.raises(ValueError, match="E2.round"):
        rb.tm_output_bounds(model, xs, 1e-3)


def test_push_tolerance_falls_like_one_over_P():
    counter = tg.counter()
    scaled = []
    for T in (12, 40):
        model = tg.build_transformer(counter, T, device="cpu")
        xs = ["", "1"]
        eta = rb.push_tolerance(model, xs, [counter.run(x, T) for x in xs])
        scaled.append(eta * model.P)
    assert all(0.1 <= v <= 0.16 for v in scaled), scaled
    with pytest.raises(ValueError, match="references"):
        rb.push_tolerance(model, xs, [])
    with pytest.raises(ValueError, match="radius"):
        rb.pgd_flip([torch.zeros(2, dtype=F64)], lambda: torch.ones(1, dtype=F64), 0.0)


def test_push_tolerance_of_right_only_runs_does_not_fall_until_one_over_2P():
    """1/(8P) holds for runs that re-read written cells; a head that only moves right meets only the
    encoder's match against its null key (1/(2P)) and, below it, a limit that does not change with P."""
    xs = tg.all_strings("01", 3)
    machines = {"right": tg.parity(), "back": tg.step_back(tg.parity())}
    scaled = {name: [] for name in machines}
    for name, tm in machines.items():
        for T in (6, 14) if name == "right" else (14, 30):
            model = tg.build_transformer(tm, T, device="cpu")
            scaled[name].append(model.P * rb.push_tolerance(model, xs, [tm.run(x, T) for x in xs]))
    assert scaled["right"][1] / scaled["right"][0] == pytest.approx(5 / 4)  # the same push at P = 4, 5
    assert all(0.25 <= v <= 0.5 for v in scaled["right"]), scaled
    assert all(0.1 <= v <= 0.16 for v in scaled["back"]), scaled
    assert [tg.residue(3).run(x, 6).accepted for x in ("", "111", "1101", "10")] == [True, True, True, False]
    back = tg.step_back(tg.parity()).run("11", 5)
    assert back.heads == [1, 2, 3, 2, 3, 4] and back.states[3:] == ["acc'", "acc", "acc"]


def test_identity_chain_certified_margin_flat_with_correction_and_falling_without():
    X = tg.all_inputs(2)
    corrected, plain = [], []
    for q in (4, 32):
        net = tg.build_circuit_network(identity_chain(2, q))
        corrected.append(certified_radius(net, X))
        plain.append(certified_radius(net, X, correct=False))
    assert corrected[1] >= 0.95 * corrected[0] > 0
    assert plain[1] < plain[0] / 4


def test_circuit_network_exact_formulas_and_radius():
    c = tg.random_circuit(10, 5, 8, seed=2)
    net = tg.build_circuit_network(c)
    X = tg.all_inputs(10)
    assert torch.allclose(net(X), 2 * c.evaluate(X).to(F64) - 1, rtol=0, atol=1e-12)
    assert_close_scaled(net.l1_norm(), tg.l1_formula(c), scale=tg.l1_formula(c))  # weights in Z/3: order matters
    assert net.num_relu_layers == 4 * len(c.layers) - 2  # the paper's 4q - 6 with q counting the input layer
    assert net.counted_sizes().compare(net.paper_sizes()) == [("ff_layers", 4 * len(c.layers) - 2, 4 * len(c.layers) - 2)]
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


@pytest.mark.parametrize("arg,kwargs", [
    ("initial", {"delta": {("<pre>", "_"): ("acc", "_", 1)}, "initial": "<pre>"}),
    ("delta", {"delta": {("s", "_"): ("<pre>", "_", 1), ("<pre>", "_"): ("acc", "_", 1)}, "initial": "s"}),
    ("accept", {"delta": {("s", "_"): ("acc", "_", 1)}, "initial": "s", "accept": ["acc", "<pre>"]}),
    ("reject", {"delta": {("s", "_"): ("acc", "_", 1)}, "initial": "s", "reject": ["<pre>"]}),
])
def test_the_pre_step_state_name_is_reserved(arg, kwargs):
    """A machine state named like the transformer's pre-step state once ran with every run wrong."""
    with pytest.raises(ValueError, match=f"^{arg} uses the reserved state name '<pre>'"):
        tg.TuringMachine(**{"accept": ["acc"], **kwargs})


def test_wrong_containers_and_non_bit_inputs_are_refused():
    delta = {("s", "_"): ("acc", "_", 1)}
    with pytest.raises(ValueError, match="^delta must be a mapping"):
        tg.TuringMachine(list(delta.items()), "s", accept=["acc"])
    with pytest.raises(ValueError, match="^accept must be an iterable of state names"):
        tg.TuringMachine(delta, "s", accept="acc")  # once the states "a" and "c"
    with pytest.raises(ValueError, match=r"^layers must be a list or tuple of layers, got generator"):
        tg.Circuit(2, (layer for layer in [[("AND", (0, 1))]]))
    with pytest.raises(ValueError, match=r"^layers\[0\] must be a list or tuple of gates"):
        tg.Circuit(2, [(gate for gate in [("AND", (0, 1))])])
    c = tg.Circuit(2, [[("AND", (0, 1))]])
    net = tg.build_circuit_network(c)
    for X in ([[0.5, 1.0]], [[1.0, 2.0]], [[-1.0, 0.0]]):  # 0.5 once gave F = 0 and evaluated as True
        for fn in (c.evaluate, net):
            with pytest.raises(ValueError, match=r"X must hold bits: every input in \{0, 1\}"):
                fn(torch.tensor(X, dtype=F64))
    with pytest.raises(ValueError, match=r"X must have shape \(batch, 2\)"):
        net(torch.zeros(3, 3, dtype=F64))
    # one gate block, no correction: integer arithmetic
    assert torch.equal(net(tg.all_inputs(2)), torch.tensor([-1.0, -1.0, -1.0, 1.0], dtype=F64))


def test_history_helpers_and_transformer_tape_over_time():
    tm = tg.palindrome()
    run = tm.run("0110", 12)
    history = tm.tape_history("0110", 12)
    assert len(history) == 13 and history[-1] == run.tape and history[0] == {1: "0", 2: "1", 3: "1", 4: "0"}
    assert last_writes([1, 2, 3, 2, 1, 0]) == [None, None, None, 2, 1, 0]
    model = tg.build_transformer(tm, 12, device="cpu")
    trace = model.forward_trace(["0110"])
    assert all(model.tape_after("0110", trace, 0, t) == history[t] for t in range(13))


def _exact_claims(model, xs, **run):
    """The notebooks' exactness claim: every hidden state is 0/1 to 1e-12 (with softmax attention: every
    corrected state, since softmax leaks e^(-beta) into the attention outputs before the correction)."""
    trace = model.forward_trace(xs, record=True, **run)
    rows = [i for i, n in enumerate(trace.layer_names) if run.get("attention") != "softmax" or n.endswith(".round")]
    states = trace.layer_states[:, :, rows]
    off = float((states - states.round()).abs().max())
    Claims("mutation").check("App C", "every hidden state is 0/1", off, 1e-12, "<=", roundoff=True)


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_a_1e3_perturbation_of_the_core_breaks_the_transformer_claims(attention):
    tm, T = tg.palindrome(), 12
    model = tg.build_transformer(tm, T, device="cpu")
    xs = tg.all_strings("01", 2)
    run = {"attention": attention, "beta": 2 * math.log(3 * (T + 2))}
    _exact_claims(model, xs, **run)  # holds unperturbed
    layers = [None] if attention == "softmax" else [None, ["A2.ff"], ["C0.attn"], ["CD.xattn"], ["E2.round"]]
    for names in layers:
        with perturb(scale=1 + 1e-3, names=names), pytest.raises(ClaimError):
            _exact_claims(model, xs, **run)


def test_dropping_one_head_breaks_the_simulation():
    tm, T = tg.palindrome(), 16
    model = tg.build_transformer(tm, T, device="cpu")
    xs = tg.all_strings("01", 3)
    ref = [tm.run(x, T) for x in xs]
    for name in ("C0.attn", "C3.attn", "CD.attn", "CD.xattn"):
        with perturb(scale=0.0, names=[name], heads=[0]):
            assert sum(not g.same_as(r) for g, r in zip(model.run_batch(xs), ref)) > 0


def test_a_1e3_perturbation_of_the_core_breaks_the_circuit_claims():
    c = tg.random_circuit(8, 4, 6, seed=1)
    net = tg.build_circuit_network(c)
    X = tg.all_inputs(8)

    def claim():
        err = float((net(X) - (2 * c.evaluate(X).to(F64) - 1)).abs().max())
        Claims("mutation").check("Lemma B.1", "F = 2G - 1", err, 1e-12, "<=", roundoff=True)

    claim()
    for kw in ({"scale": 1 + 1e-3}, {"scale": 1 + 1e-3, "names": ["L4.gate2"]}):
        with perturb(**kw), pytest.raises(ClaimError):
            claim()


def test_counted_sizes_against_a_hand_count():
    tm = tg.parity()
    model = tg.build_transformer(tm, 8, device="cpu")
    Z, A, P, w = len(model.state_names), len(model.alphabet), model.P, model.width
    L = P + 9
    heads = [(P + 1, 1)] + [(P + j + 1, 1) for j in range(1, P + 1)] + [(2 * P + 1, A), (P + 1, A + 1)]  # (key dim, value dim)
    stored = L * (2 * w * w + w) + L * (4 * w * w + 2 * w)  # work (W_1, b_1, identity W_2), correction
    stored += sum(2 * dk * w + 2 * mv * w + 3 * dk + 2 * mv for dk, mv in heads)  # W_Q, W_K, W_V, W_O, biases, null key/value
    stored += w * A + 2 * w  # E, h0, theta_cls
    s = model.counted_sizes()
    assert (s.stored, s.attention_layers, s.ff_layers, s.max_heads, s.ff_width, s.attention_width, s.embed_dim) == \
        (stored, P + 3, 2 * L, 1, 2 * w, A + 1, Z + 4 * A + 6 * P + 5 + Z * A)
    c = tg.random_circuit(6, 3, 4, seed=0)
    net = tg.build_circuit_network(c)
    widths = [len(layer) for layer in c.layers]
    hand, prev = 0, c.num_inputs
    for i, n in enumerate(widths):
        hand += (n * prev + n + n * n) + (n * n + n)  # gate1 (W1, b1, identity), gate2 (W2, b2, ...)
        hand += n * n + (2 * n * n + 2 * n + 4 * n * n) + (2 * n * n + n * n) if i < len(widths) - 1 else 1 + 1
        prev = n
    assert net.counted_sizes().stored == hand


def test_step_figure_draws_the_transformers_tape_and_scores():
    import matplotlib
    matplotlib.use("Agg")
    from tfbook.turing import plots as tplots
    tm = tg.palindrome()
    model = tg.build_transformer(tm, 30)
    fig = tplots.step_figure(model, "0110", 9, "CD")
    tape_ax = fig.axes[0]
    ref = tm.run("0110", 9)
    written = {c: s for c, s in tm.tape_history("0110", 9)[-1].items() if s != tm.blank}
    assert sorted(t.get_text() for t in tape_ax.texts) == sorted(written.values())
    assert f"head at {ref.heads[9]}" in tape_ax.get_title() and len(fig.axes) == 3
    with pytest.raises(ValueError, match="layer must be one of"):
        tplots.step_figure(model, "0110", 9, "A1")


def test_an_attack_on_a_model_already_on_the_boundary_is_radius_zero():
    """A dead network (F = 0 on every input) is flipped without moving: radius 0, not an error."""
    net = tg.build_circuit_network(tg.random_circuit(4, depth=2, width=3, seed=0))
    X = tg.all_inputs(4)
    with perturb(scale=0.0):
        assert float(net(X).abs().max()) == 0.0
        assert rb.circuit_parameter_attack(net, X, seeds=(0,)) == 0.0
    assert rb.circuit_parameter_attack(net, X, seeds=(0,)) > 0.0


@pytest.mark.parametrize("gamma", [0.0, -0.1, math.nan, math.inf])
def test_cor_a1_refuses_a_margin_that_is_not_positive_and_finite(gamma):
    """A NaN margin once gave n = 1 silently (NaN > eps is false) and 0 a ZeroDivisionError."""
    from tfbook.turing import bounds as bd

    assert bd.cor_a1_samples(10.0, 100, 0.1, 0.1) > 1
    with pytest.raises(ValueError, match="gamma must be"):
        bd.cor_a1_samples(10.0, 100, gamma, 0.1)
