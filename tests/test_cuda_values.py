"""The NEEDS_VALUES functions, run on a real device and compared with the CPU.

tests/test_meta_*.py and tests/test_device.py list, in their dicts ``NEEDS_VALUES``, the library functions that read
tensor values and so cannot run on torch's ``meta`` device; the project promises they are checked on CUDA when a
GPU is lent. This module is that check: for every entry that involves tensors, one test runs a representative
function at a small size on the device under test and on the CPU and asserts that the results agree (exactly for
discrete results: runs, symbols, tapes, counts, booleans; to a relative 1e-9 for float64 values; within the
bisection's own tolerance for bisections; loosely, with the reason, for float32 training) and that returned tensors
lie where the library documents.

Run it on a GPU machine with ``python3 -m pytest tests/test_cuda_values.py`` (the device is ``cuda``; the module is
skipped where CUDA is absent). ``TFBOOK_TEST_DEVICE=cpu python3 -m pytest tests/test_cuda_values.py`` runs it on the
CPU against itself (a check of the tests, not of a device).

Entries not covered (no tensors, nothing device-dependent):

* turing ``margin.toy_output / toy_margin_*``: NumPy and SciPy (SLSQP) only.
* colsym ``algebra.*`` (SymPy, exact fractions) and ``bounds.*`` (numbers in, numbers out).
* besov ``rates, formulas``: floats only.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable

import pytest
import torch

DEV = torch.device(os.environ.get("TFBOOK_TEST_DEVICE", "cuda"))
CPU = torch.device("cpu")
F64 = torch.float64
REL = 1e-9  # float64 results computed on two devices (summation order may differ)
ABS = 1e-12  # absolute floor for float64 values that are themselves rounding noise (errors of an exact construction)

pytestmark = pytest.mark.skipif(DEV.type == "cuda" and not torch.cuda.is_available(),
                                reason="no CUDA device (set TFBOOK_TEST_DEVICE=cpu to run these tests on the CPU)")

if DEV.type == "cuda":
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


# --- helpers -------------------------------------------------------------------------------------------
def close(a: float, b: float, rel: float = REL, abs_: float = ABS) -> bool:
    """Whether two floats agree to ``rel`` (or ``abs_``); infinities must be equal."""
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_)


def on(device: torch.device, *tensors: torch.Tensor) -> bool:
    """Whether every tensor lies on ``device`` (its type: cuda:0 counts as cuda)."""
    return bool(tensors) and all(t.device.type == device.type for t in tensors)


def same_tensor(a: torch.Tensor, b: torch.Tensor, rel: float = REL, abs_: float = ABS) -> bool:
    """Equal for discrete dtypes, close for floating ones (compared on the CPU)."""
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    return bool(torch.allclose(a, b, rtol=rel, atol=abs_, equal_nan=True))


def same_dict(a: dict, b: dict, rel: float = REL) -> bool:
    """Dicts of floats with equal keys and close values."""
    return a.keys() == b.keys() and all(close(float(a[k]), float(b[k]), rel) for k in a)


def both(fn: Callable[[torch.device], Any]) -> tuple[Any, Any]:
    """``fn`` run on the device under test and on the CPU."""
    return fn(DEV), fn(CPU)


def claim_rows(claims) -> list[tuple]:
    """The display rows of executed claims (the library promises they are identical on every machine)."""
    return [(c.ref, c.statement, c.measured, c.bound, c.relation, c.holds) for c in claims.items]


# --- foundation --------------------------------------------------------------------------------------
def test_foundation_slot_model_sizes():
    """foundation: SlotModel.width / num_parameters / counted_sizes."""
    import tfbook.foundation as fd

    dev, cpu = both(lambda d: fd.build_squaring(4).to(d))
    assert on(DEV, *dev.parameters())
    assert dev.counted_sizes() == cpu.counted_sizes()
    assert (dev.width, dev.num_parameters()) == (cpu.width, cpu.num_parameters())
    x = torch.linspace(0, 1, 17, dtype=F64)
    out = fd.run_squaring(dev, x[None].to(DEV))
    assert on(DEV, out) and same_tensor(out, fd.run_squaring(cpu, x[None]))


# --- bench (tests/test_device.py) ----------------------------------------------------------------------
def test_bench_palindrome_transformer():
    """test_device: "turing: palindrome transformer, T=64, batch 32" (the bench case itself)."""
    from tfbook.build import bench_core
    import tfbook.turing

    case = bench_core.as_benchmarks(tfbook.turing.bench_cases())["turing: palindrome transformer, T=64, batch 32"]
    dev, cpu = case.forward(case.build(DEV)), case.forward(case.build(CPU))
    assert on(CPU, dev.outputs, dev.writes, dev.F)  # the Trace comes back on the CPU
    assert same_tensor(dev.outputs, cpu.outputs) and same_tensor(dev.writes, cpu.writes)
    assert torch.equal(dev.F > 0, cpu.F > 0)  # signs of F = +-1: far from 0


# --- turing --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def parity_models():
    import tfbook.turing as tg

    tm = tg.parity()
    return tm, tg.build_transformer(tm, 6, device=DEV), tg.build_transformer(tm, 6, device=CPU)


@pytest.fixture(scope="module")
def circuit_nets():
    import tfbook.turing as tg

    c = tg.random_circuit(6, depth=3, width=6, seed=0, min_relevant=3)
    return c, tg.build_circuit_network(c).to(DEV), tg.build_circuit_network(c).to(CPU)


def test_turing_transformer_runs_decode_and_tapes(parity_models):
    """turing: TMTransformer .forward_trace / run / run_batch / decode / tape_after / write_log."""
    import tfbook.turing as tg

    tm, dev, cpu = parity_models
    xs = tg.all_strings("01", 3)
    td, tc = dev.forward_trace(xs), cpu.forward_trace(xs)
    assert on(CPU, td.outputs, td.writes, td.F)
    assert same_tensor(td.outputs, tc.outputs) and same_tensor(td.F, tc.F)
    assert all(same_tensor(a, b) for a, b in zip(dev.write_log(td), cpu.write_log(tc)))
    runs = dev.run_batch(xs)
    assert runs == cpu.run_batch(xs) == dev.decode(xs, td)
    assert all(r.same_as(tm.run(x, 6)) for r, x in zip(runs, xs))  # and both simulate the machine
    assert dev.run(xs[-1]) == cpu.run(xs[-1])
    assert [dev.tape_after(x, td, b, 3) for b, x in enumerate(xs)] == \
        [cpu.tape_after(x, tc, b, 3) for b, x in enumerate(xs)]


def test_turing_fleet_runs_and_direct_sum():
    """turing: TMFleet .forward_trace / run_batch / decode; fleet.build_fleet, layers.direct_sum."""
    import tfbook.turing as tg
    from tfbook.layers import direct_sum

    tms = [tg.parity(), tg.counter()]
    dev, cpu = both(lambda d: tg.build_fleet(tms, 6, device=d))
    assert on(DEV, *dev.parameters())
    assert all(same_tensor(p, q) for p, q in zip(dev.parameters(), cpu.parameters()))
    xs = tg.all_strings("01", 2)
    td = dev.forward_trace(xs)
    assert on(CPU, td.outputs, td.F) and same_tensor(td.F, cpu.forward_trace(xs).F)
    assert dev.run_batch(xs) == cpu.run_batch(xs) == dev.decode(xs, td)
    members = [tg.build_transformer(tm, 6, device=CPU) for tm in tms]
    layers = [m.layer("C0.ff") for m in members]
    sd, sc = both(lambda d: direct_sum(layers, name="C0.ff", device=d))
    assert on(DEV, *sd.parameters())
    h = torch.rand(3, 1, sum(m.w for m in members), dtype=F64, generator=torch.Generator().manual_seed(0))
    assert same_tensor(sd(h.to(DEV)), sc(h))


def test_turing_tm_robustness(parity_models):
    """turing: robustness.tm_output_bounds / tm_certified_radius / readout_attack / correction_row_attack /
    push_tolerance (and transformer.score_gaps)."""
    from tfbook.turing import robustness as rb
    from tfbook.turing import score_gaps

    _, dev, cpu = parity_models
    xs = ["0", "1", "011"]
    lo_d, hi_d = rb.tm_output_bounds(dev, xs, 1e-3)
    lo_c, hi_c = rb.tm_output_bounds(cpu, xs, 1e-3)
    assert on(CPU, lo_d, hi_d) and same_tensor(lo_d, lo_c) and same_tensor(hi_d, hi_c)
    hi, iters = 0.1, 6
    rd, rc = rb.tm_certified_radius(dev, xs, hi, iters), rb.tm_certified_radius(cpu, xs, hi, iters)
    assert rd > 0 and abs(rd - rc) <= hi / 2**iters  # the bisection's own tolerance
    for attack in (rb.readout_attack, rb.correction_row_attack):
        (rad_d, flip_d), (rad_c, flip_c) = attack(dev, xs), attack(cpu, xs)
        assert on(CPU, rad_d, flip_d) and same_tensor(rad_d, rad_c) and torch.equal(flip_d, flip_c)  # flips: booleans
    refs = cpu.run_batch(xs)
    pd = rb.push_tolerance(dev, xs, refs, iters=iters)
    pc = rb.push_tolerance(cpu, xs, refs, iters=iters)
    assert abs(pd - pc) <= (1 / 3) / 2**iters
    gd, gc = score_gaps(dev.forward_trace(xs, record=True)), score_gaps(cpu.forward_trace(xs, record=True))
    assert gd.numel() > 0 and same_tensor(gd, gc)


def test_turing_circuit_readout_attack(circuit_nets):
    """turing: robustness.circuit_readout_attack (torch.unique over the output gates)."""
    import tfbook.turing as tg
    from tfbook.turing import robustness as rb

    _, dev, cpu = circuit_nets
    X = tg.all_inputs(6)
    (rad_d, flip_d), (rad_c, flip_c) = rb.circuit_readout_attack(dev, X.to(DEV)), rb.circuit_readout_attack(cpu, X)
    assert on(DEV, rad_d, flip_d)  # on the network's (and X's) device
    assert same_tensor(rad_d, rad_c) and torch.equal(flip_d.cpu(), flip_c) and bool(flip_c.any())


def test_turing_circuit_bisections_and_attacks(circuit_nets):
    """turing: robustness.certified_radius / circuit_parameter_attack / pgd_flip / attacked_radius /
    circuit_push_tolerance / smallest_breaking_push / noise_flip_fraction."""
    import tfbook.turing as tg
    from tfbook.turing import robustness as rb

    _, dev, cpu = circuit_nets
    X = tg.all_inputs(6)
    Xd = X.to(DEV)
    iters = 12
    cd, cc = rb.certified_radius(dev, Xd, iters=iters), rb.certified_radius(cpu, X, iters=iters)
    assert cd > 0 and abs(cd - cc) <= 1.0 / 2**iters
    pd, pc = rb.circuit_push_tolerance(dev, Xd, iters=iters), rb.circuit_push_tolerance(cpu, X, iters=iters)
    assert abs(pd - pc) <= (1 / 3) / 2**iters
    nd, nc = rb.noise_flip_fraction(dev, Xd, 0.3), rb.noise_flip_fraction(cpu, X, 0.3)
    assert nd == nc  # the noise is drawn on the CPU generator: the same draws, the same flips
    # PGD in float64: the same start (CPU generator) and the same steps; a flip decided by a float can only
    # differ at a tie, so the attacked radii agree to well below the PGD's shrink factor
    ad = rb.circuit_parameter_attack(dev, Xd, inputs=16, seeds=(0,))
    ac = rb.circuit_parameter_attack(cpu, X, inputs=16, seeds=(0,))
    assert math.isfinite(ac) and close(ad, ac, rel=1e-6)


def test_turing_l1_norms_and_sizes(parity_models, circuit_nets):
    """turing: CircuitNetwork.l1_norm, TMTransformer.l1_norm, counted_sizes."""
    _, dev, cpu = parity_models
    assert close(dev.l1_norm(), cpu.l1_norm()) and close(dev.l1_norm(False), cpu.l1_norm(False))
    assert dev.counted_sizes() == cpu.counted_sizes()
    assert (dev.width, dev.num_parameters()) == (cpu.width, cpu.num_parameters())
    _, ndev, ncpu = circuit_nets
    assert close(ndev.l1_norm(), ncpu.l1_norm()) and ndev.counted_sizes() == ncpu.counted_sizes()


def test_turing_margin_flip_radius(circuit_nets):
    """turing: margin.flip_radius (random_direction drawn on the CPU, moved to each parameter's device)."""
    import tfbook.turing as tg

    _, dev, cpu = circuit_nets
    X = tg.all_inputs(6)

    def radius(net, X: torch.Tensor) -> float:
        clean = torch.sign(net(X))
        params = [p for _, p in net.theta()]
        return tg.flip_radius(params, lambda: bool((torch.sign(net(X)) != clean).any()), seed=0, iters=14)

    rd, rc = radius(dev, X.to(DEV)), radius(cpu, X)
    assert math.isfinite(rc) and rc > 0
    assert abs(math.log(rd / rc)) <= math.log(1e3 / 1e-12) / 2**14 + 1e-12  # one step of the log bisection


def test_turing_learning_curves():
    """turing: learning.train_mlp / learning_curves / circuit_learning_curves (float32 training)."""
    import tfbook.turing as tg
    from tfbook.turing.learning import train_mlp

    c = tg.random_circuit(5, depth=2, width=4, seed=1)
    X = tg.all_inputs(5)
    y = c.evaluate(X)
    # float32 Adam on two devices: the weights start equal but the rounding differs, so 0-1 errors can differ
    # by a few points of 32; require both to beat the majority-class baseline and to agree within 3 points
    rd = train_mlp(X.to(DEV), y.to(DEV), X.to(DEV), y.to(DEV), 16, depth=2, epochs=150, lr=1e-2)
    rc = train_mlp(X, y, X, y, 16, depth=2, epochs=150, lr=1e-2)
    baseline = min(float(y.double().mean()), 1 - float(y.double().mean()))
    assert rd["train_error"] < baseline and rc["train_error"] < baseline
    assert abs(rd["train_error"] - rc["train_error"]) <= 3 / 32 + 1e-9
    cd = tg.learning.circuit_learning_curves(c, [8], [24], epochs=60, depth=2, device=DEV)
    cc = tg.learning.circuit_learning_curves(c, [8], [24], epochs=60, depth=2, device=CPU)
    assert cd.keys() == cc.keys() and all(abs(a - b) <= 3 / 8 for k in cd for a, b in zip(cd[k], cc[k]))


def test_turing_circuit_builders(circuit_nets):
    """turing: circuits.random_circuit / relevant_inputs (builders on the CPU; the network runs on the device)."""
    import tfbook.turing as tg
    from tfbook.turing.circuits import relevant_inputs

    c, dev, cpu = circuit_nets
    assert relevant_inputs(c) >= 3
    X = tg.all_inputs(6)
    out_d = dev(X.to(DEV))
    assert on(DEV, out_d) and same_tensor(out_d, cpu(X))
    assert torch.equal((out_d > 0).cpu(), c.evaluate(X).bool())  # the network computes the circuit
    assert torch.equal(c.evaluate(X.to(DEV)).cpu(), c.evaluate(X))


# --- icgd ----------------------------------------------------------------------------------------------
def _icgd(device: torch.device, **kw):
    from tfbook.icgd.construct import build_transformer

    args = dict(activation="relu", loss="logcosh", delta=0.1)
    return build_transformer(2, 1, 3, 2, 4, 2, 0.5, **{**args, **kw}, device=device)


@pytest.fixture(scope="module")
def icgd_models():
    from tfbook.icgd import verify

    dev, cpu = _icgd(DEV), _icgd(CPU)
    prompts = [verify.random_prompt(m, B=2, seed=0, live=True) for m in (dev, cpu)]
    return dev, cpu, *prompts


def test_icgd_relu_sums():
    """icgd: relu_sums.sup_error; relu_sums.interpolant / tailed_interpolant / ramp (built on the CPU, then .to)."""
    from tfbook.icgd.relu_sums import interpolant, ramp, sup_error, tailed_interpolant

    for build in (lambda: interpolant(torch.tanh, 2.0, 16), lambda: tailed_interpolant(torch.tanh, 2.0, 8),
                  lambda: ramp(0.25)):
        rc = build()
        rd = build().to(DEV)
        assert on(DEV, rd.a, rd.c)
        t = torch.linspace(-3, 3, 101, dtype=F64)
        assert on(DEV, rd(t.to(DEV))) and same_tensor(rd(t.to(DEV)), rc(t))
        assert close(sup_error(torch.tanh, rd, 2.0, 2001), sup_error(torch.tanh, rc, 2.0, 2001))


def test_icgd_build_transformer_and_prompt(icgd_models):
    """icgd: construct.build_transformer (tables, a-priori R; device= moves it) and verify.random_prompt."""
    dev, cpu, pd, pc = icgd_models
    assert on(DEV, *dev.parameters()) and on(DEV, *pd)
    assert [n for n, _ in dev.named_parameters()] == [n for n, _ in cpu.named_parameters()]
    assert all(same_tensor(p, q, rel=0, abs_=0) for p, q in zip(dev.parameters(), cpu.parameters()))
    assert all(same_tensor(a, b, rel=0, abs_=0) for a, b in zip(pd, pc))  # drawn on the CPU generator
    wd, wc = dev.run(*pd), cpu.run(*pc)
    assert on(DEV, wd) and same_tensor(wd, wc)


def test_icgd_verify_measures(icgd_models):
    """icgd: verify.slot_errors / contract / query_leak / w_movement / theta_norms / lipschitz_estimate."""
    from tfbook.icgd import verify

    dev, cpu, pd, pc = icgd_models
    assert same_dict(verify.slot_errors(dev, *pd), verify.slot_errors(cpu, *pc))
    Hd, Hc = dev.embed(*pd), cpu.embed(*pc)
    assert same_dict(verify.contract(dev, Hd, dev(Hd)), verify.contract(cpu, Hc, cpu(Hc)))
    ld, lc = verify.query_leak(dev, *pd), verify.query_leak(cpu, *pc)
    assert all(close(a, b) for a, b in zip(ld, lc))
    assert close(verify.w_movement(dev, *pd), verify.w_movement(cpu, *pc))
    assert all(close(a, b) for a, b in zip(verify.theta_norms(dev), verify.theta_norms(cpu)))
    points = dev.run(*pd)
    assert close(verify.lipschitz_estimate(dev, points, pd[0], pd[1]),
                 verify.lipschitz_estimate(cpu, points.cpu(), pc[0], pc[1]))


def test_icgd_verify_claims(icgd_models):
    """icgd: verify.check_query / check_state_contract / check_permutation (claims: the same rows)."""
    from tfbook.claims import Claims
    from tfbook.icgd import verify

    dev, cpu, pd, pc = icgd_models
    rows = []
    for model, prompt in ((dev, pd), (cpu, pc)):
        claims = Claims("cuda values", scratch=True)
        for check in (verify.check_query, verify.check_state_contract, verify.check_permutation):
            check(claims, model, *prompt)
        rows.append(claim_rows(claims))
    assert rows[0] and rows[0] == rows[1]


def test_icgd_bounds_constants(icgd_models):
    """icgd: bounds.constants / table_errors."""
    from dataclasses import asdict

    from tfbook.icgd import bounds

    dev, cpu, pd, pc = icgd_models
    cd = bounds.constants(dev, dev.run(*pd), pd[0], pd[1])
    cc = bounds.constants(cpu, cpu.run(*pc), pc[0], pc[1])
    ad, ac = asdict(cd), asdict(cc)
    assert ad.keys() == ac.keys()
    for k in ad:
        if isinstance(ac[k], float):
            assert close(ad[k], ac[k]), k
        else:
            assert ad[k] == ac[k], k


def test_icgd_check_ranges():
    """icgd: construct.ICGDTransformer.check_ranges (reads the recorded ranges: a too small R fails on both)."""
    from tfbook.icgd import verify

    messages = []
    for device in (DEV, CPU):
        model = _icgd(device, activation="softplus", loss="squared", delta=None, R=0.05, M=16)
        with pytest.raises(ValueError, match="leaves its table's range") as err:
            model.run(*verify.random_prompt(model, B=2, seed=0))
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    ok = _icgd(DEV, activation="softplus", loss="squared", delta=None, M=16)  # a-priori R: every prompt fits
    assert on(DEV, ok.run(*verify.random_prompt(ok, B=2, seed=0)))


def nested_close(a: Any, b: Any, rel: float, abs_: float) -> bool:
    """Nested dicts and lists of numbers (None allowed) with equal structure and close numbers."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(nested_close(a[k], b[k], rel, abs_) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(
            nested_close(x, y, rel, abs_) for x, y in zip(a, b))
    if a is None or b is None:
        return a is b
    return close(float(a), float(b), rel, abs_)


def test_icgd_experiments_training():
    """icgd: experiments.train_ensemble / train / run / evaluate / summary (depth_sweep calls train and R^2)."""
    from tfbook.icgd import experiments as ex

    cfg = ex.ExperimentConfig(d=3, target_width=4, train_points=6, test_points=8, width=16, blocks=1, heads=2,
                              steps=4, test_prompts=48, gd_steps=10, mixtures=(0.0,))
    # float32 training on two devices: the same start (CPU seed) and prompts (CPU generators), but the rounding
    # differs; after 4 Adam steps (and the GD baseline's 10) the losses agree to a relative 1e-4 and the R^2
    # values (1 - MSE / variance, the variance of a few points) to 1e-3: still far below what a different start,
    # different prompts or a wrong update would change
    md, logd = ex.train(cfg, "relu", DEV)
    mc, logc = ex.train(cfg, "relu", CPU)
    assert on(DEV, *md.parameters())
    assert nested_close(logd["losses"], logc["losses"], 1e-4, 1e-6)
    ed, ec = ex.evaluate(cfg, {"relu": md}, [2]), ex.evaluate(cfg, {"relu": mc}, [2])
    assert nested_close(ed, ec, 1e-3, 1e-3)
    rd, rc = (ex.run(cfg, [0, 1], [2], [2], ("relu",), device) for device in (DEV, CPU))
    assert rd["settings"]["device"] == str(DEV) and nested_close(rd["curves"], rc["curves"], 1e-3, 1e-3)
    assert nested_close(ex.summary(rd, 2), ex.summary(rc, 2), 1e-3, 1e-3)


def test_icgd_linear_ceiling():
    """icgd: experiments.linear_ceiling (torch.linalg.lstsq)."""
    from tfbook.icgd import experiments as ex

    cfg = ex.ExperimentConfig(d=3, target_width=4, train_points=6, test_points=8, test_prompts=16)
    td, tc = ex.test_set(cfg, 0.3, seed=5, device=DEV), ex.test_set(cfg, 0.3, seed=5)
    assert all(same_tensor(a, b, rel=0, abs_=0) for a, b in zip((td.x, td.y), (tc.x, tc.y)))
    ld, lc = ex.linear_ceiling(td), ex.linear_ceiling(tc)
    assert on(DEV, ld) and same_tensor(ld, lc, rel=1e-5, abs_=1e-5)  # float32 result of a float64 fit


# --- besov ---------------------------------------------------------------------------------------------
def _smooth(X: torch.Tensor) -> torch.Tensor:
    """A smooth test function on [0, 1]^D (points (n, D) or sentences (n, l, 1))."""
    X = X.reshape(X.shape[0], -1)
    return torch.sin(3 * X).sum(1) + X.prod(1)


def test_besov_grid_evaluators():
    """besov: grids.hat_interpolate / sparse_evaluate (scipy on the host; the result on Y's device)."""
    from tfbook.besov import grids

    Y = torch.rand(40, 2, dtype=F64, generator=torch.Generator().manual_seed(0))
    hd, hc = grids.hat_interpolate(_smooth, [2, 3], Y.to(DEV)), grids.hat_interpolate(_smooth, [2, 3], Y)
    sd, sc = grids.sparse_evaluate(_smooth, 2, 3, Y.to(DEV)), grids.sparse_evaluate(_smooth, 2, 3, Y)
    assert on(DEV, hd, sd) and same_tensor(hd, hc) and same_tensor(sd, sc)


def test_besov_interpolant_builders_and_check_atoms():
    """besov: grids.aniso_interpolant / sparse_interpolant, masked.masked_atoms; references.check_atoms."""
    import tfbook.besov as bv
    from tfbook.besov import grids
    from tfbook.besov import masked as mk
    from tfbook.besov.references import check_atoms

    Y = torch.rand(30, 2, 1, dtype=F64, generator=torch.Generator().manual_seed(1))
    for k, j, c in (grids.sparse_interpolant(_smooth, 2, 3), mk.masked_atoms(_smooth, 2, [1, 2], 1)):
        kd, jd, cd = check_atoms(k.to(DEV), j.to(DEV), c.to(DEV), 1)
        kc, jc, cc = check_atoms(k, j, c, 1)
        assert all(same_tensor(a, b, rel=0, abs_=0) for a, b in ((kd, kc), (jd, jc), (cd, cc)))
        ed = bv.expansion(Y.to(DEV), k, j, c, 1)
        assert on(DEV, ed) and same_tensor(ed, bv.expansion(Y, k, j, c, 1))
    k, j, c = grids.aniso_interpolant(_smooth, [[1.0], [2.0]], 3)
    Xa = torch.rand(30, k.shape[1], k.shape[2], dtype=F64, generator=torch.Generator().manual_seed(2))
    assert same_tensor(bv.expansion(Xa.to(DEV), k, j, c, 1), bv.expansion(Xa, k, j, c, 1))
    bad = j.clone()
    bad[0, 0, 0] = 2 ** int(k[0, 0, 0]) + 5  # an index outside its level's range: rejected by value
    for device in (DEV, CPU):
        with pytest.raises(ValueError):
            check_atoms(k.to(device), bad.to(device), c.to(device), 1)


@pytest.fixture(scope="module")
def masked_setup():
    from tfbook.besov import masked as mk

    rankings = torch.tensor([[1, 2, 3], [3, 2, 1]])

    def piece(X):
        return (1 + X[:, :, 0]).prod(1)

    def build():
        return mk.build_masked_transformer([piece, piece], 1, rankings, 1, 4, 6.0)

    X = torch.rand(24, 3, 1, dtype=F64, generator=torch.Generator().manual_seed(3))
    X[:, 0, 0] = torch.where((X[:, 0, 0] - 0.5).abs() < 0.01, X[:, 0, 0] + 0.1, X[:, 0, 0]).clamp(0, 1)
    return rankings, build().to_device(DEV), build(), X


def test_besov_masked_forward(masked_setup):
    """besov: masked.MaskedTransformer.forward (refuses inputs inside the undecided band)."""
    _, dev, cpu, X = masked_setup
    out = dev(X.to(DEV))
    assert on(DEV, out) and same_tensor(out, cpu(X))
    bad = X.clone()
    bad[0, 0, 0] = 0.5 - dev.band / 2
    for model, device in ((dev, DEV), (cpu, CPU)):
        with pytest.raises(ValueError, match="undecided|band"):
            model(bad.to(device))


def test_besov_masked_reference_and_token_mask(masked_setup):
    """besov: masked.masked_reference; grids.token_mask (checks regions(X) by value)."""
    from tfbook.besov import grids
    from tfbook.besov import masked as mk

    rankings, _, cpu, X = masked_setup
    rd = mk.masked_reference(X.to(DEV), cpu.atoms, rankings, 1, cpu.u)
    rc = mk.masked_reference(X, cpu.atoms, rankings, 1, cpu.u)
    assert on(DEV, rd) and same_tensor(rd, rc)
    md, mc = grids.token_mask(X.to(DEV), mk.regions, rankings, 1), grids.token_mask(X, mk.regions, rankings, 1)
    assert on(DEV, md) and torch.equal(md.cpu(), mc)
    for device in (DEV, CPU):
        with pytest.raises(ValueError, match="regions"):
            grids.token_mask(X.to(device), lambda Z: mk.regions(Z) + 1, rankings, 1)


def test_besov_estimation():
    """besov: estimation.sieve_fit / fit_and_test / least_squares (sparse least squares on the host)."""
    from tfbook.besov import estimation as es

    g = torch.Generator().manual_seed(4)
    X, Xt = torch.rand(200, 2, dtype=F64, generator=g), torch.rand(100, 2, dtype=F64, generator=g)
    y = _smooth(X) + 0.1 * torch.randn(200, dtype=F64, generator=g)
    md = es.fit_and_test([2, 2], X.to(DEV), y.to(DEV), Xt.to(DEV), _smooth(Xt).to(DEV))
    assert close(md, es.fit_and_test([2, 2], X, y, Xt, _smooth(Xt)))

    def on_device(X: torch.Tensor) -> torch.Tensor:  # the target computed on the device, handed back to the host
        return _smooth(X.to(DEV)).cpu()

    fd = es.sieve_fit(on_device, [1.0, 1.0], "iso", 300, seed=0, noise=0.1, n_test=200)
    fc = es.sieve_fit(_smooth, [1.0, 1.0], "iso", 300, seed=0, noise=0.1, n_test=200)
    assert (fd.level, fd.atoms) == (fc.level, fc.atoms) and close(fd.test_mse, fc.test_mse)


# --- colsym --------------------------------------------------------------------------------------------
COEFFS = {((1, 0),): 1.0, ((0, 1), (1, 0)): 0.5, ((1, 1),): 2.0, ((1, 0), (1, 0)): 1.0}


@pytest.fixture(scope="module")
def colsym_models():
    import tfbook.colsym as cs

    return cs.build_transformer(COEFFS, 2, 3, 2, 1).to(DEV), cs.build_transformer(COEFFS, 2, 3, 2, 1)


def test_colsym_fnn_to_transformer():
    """colsym: squaring.fnn_to_transformer (reads the FNN's weights; the result on the FNN's device)."""
    from tfbook.colsym import squaring as sq

    fnn_d, fnn_c = sq.build_product_fnn(2, 2).to(DEV), sq.build_product_fnn(2, 2)
    td, tc = sq.fnn_to_transformer(fnn_d), sq.fnn_to_transformer(fnn_c)
    assert on(DEV, *td.parameters())
    x = torch.rand(20, 2, dtype=F64, generator=torch.Generator().manual_seed(5))
    od = sq.run_converted(td, x.to(DEV))
    assert on(DEV, od) and same_tensor(od, sq.run_converted(tc, x))


def test_colsym_sup_error_and_gradient_ascent(colsym_models):
    """colsym: verify.gradient_ascent / sup_error (best point per start: data-dependent indexing)."""
    from tfbook.colsym import verify

    dev, cpu = colsym_models
    sd = verify.sup_error(dev, COEFFS, n_random=16, seed=0, ascent_steps=4, n_starts=4)
    sc = verify.sup_error(cpu, COEFFS, n_random=16, seed=0, ascent_steps=4, n_starts=4)
    assert same_dict(sd, sc)
    X0 = verify.candidate_inputs(cpu, 4, seed=1)["random"]
    (Xd, ed), (Xc, ec) = verify.gradient_ascent(dev, COEFFS, X0.to(DEV), 4), verify.gradient_ascent(cpu, COEFFS, X0, 4)
    assert on(DEV, Xd, ed) and same_tensor(Xd, Xc) and same_tensor(ed, ec)


def test_colsym_checks(colsym_models):
    """colsym: checks.prop1 / prop2 / prop3 / approximant / theorem1 / sizes (claims: compare floats)."""
    from tfbook.claims import Claims
    from tfbook.colsym import checks

    dev, cpu = colsym_models
    X = torch.rand(6, 2, 3, dtype=F64, generator=torch.Generator().manual_seed(6))
    results, rows = [], []
    for model, device in ((dev, DEV), (cpu, CPU)):
        claims = Claims("cuda values", scratch=True)
        Xm = X.to(device)
        values = [check(claims, model, Xm) for check in (checks.prop1, checks.prop2, checks.approximant)]
        checks.prop3(claims, model, [Xm])
        t1 = checks.theorem1(claims, model, COEFFS, "cuda", 10.0, n_random=8, ascent_steps=2)
        checks.sizes(claims, model, "cuda")
        results.append((values, t1))
        rows.append(claim_rows(claims))
    (vd, td), (vc, tc) = results
    assert all(close(a, b) for a, b in zip(vd, vc)) and same_dict(td, tc)
    assert rows[0] and rows[0] == rows[1]
