"""Soundness of the chapter's margin certificates, on small instances the notebooks do not use.

A certificate r_c claims that no parameter perturbation of norm <= r_c changes a prediction. Each test
attacks that claim: at r_c no attack (projected gradient descent on all of theta, random directions,
perturbations aligned with the gradient of F) flips an input and every perturbed F lies in the interval
bounds, also at 3 r_c; a certificate inflated past the gap to the best attack is refuted by a flip (2x for
one-block circuits). The machines' best attack lies about 12x above their certificate, so there a 2x
inflation is caught by the bounds instead: at 2 r_c they prove no longer every sign. The bounds of one
correction and of one hard-attention layer are checked against perturbations built to reach them.
"""
import math

import pytest
import torch

import tfbook.turing as tg
from tfbook.layers import Attention
from tfbook.turing import robustness as rb
from tests.numerics import assert_close_scaled

F64 = torch.float64
CIRCUITS = {  # held out: the notebooks certify random_circuit(8, 4, 6, 1) and (12, 6, 12, 0)
    "OR": tg.Circuit(2, [[("OR", (0, 1))]]),
    "OR3": tg.Circuit(3, [[("OR", (0, 2))]]),
    "NAND": tg.Circuit(3, [[("AND", (0, 2))], [("NOT", (0,))]]),
    "3-2-2": tg.random_circuit(3, 2, 2, seed=10),
    "4-3-3": tg.random_circuit(4, 3, 3, seed=10),
}


def _perturbed(params, delta, output):
    """output() with theta + delta, theta restored exactly afterwards."""
    originals = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p, d in zip(params, delta):
            p.add_(d)
    try:
        return output().detach()
    finally:
        with torch.no_grad():
            for p, o in zip(params, originals):
                p.copy_(o)


def _gradient_aligned(params, output, b: int, radius: float, sign: float) -> list[torch.Tensor]:
    """The perturbation of norm ``radius`` along +-grad of output()[b]: first-order extreme of that F."""
    for p in params:
        p.requires_grad_(True)
    try:
        grads = torch.autograd.grad(output()[b], params, allow_unused=True)
    finally:
        for p in params:
            p.requires_grad_(False)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
    norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
    return [sign * radius * g / norm for g in grads]


def assert_sound_at(params, output, bounds, radius: float, seeds=range(3), steps: int = 60):
    """At ``radius``: PGD flips no input, and random and gradient-aligned perturbations of that norm keep
    every sign and stay within ``bounds(radius)`` (to 1e-12)."""
    sign = torch.sign(output().detach())
    for seed in seeds:
        assert rb.pgd_flip(params, lambda: sign * output(), radius, steps=steps, seed=seed) is None, seed
    assert_within_bounds(params, output, bounds, radius, seeds, keep_sign=True)


def assert_within_bounds(params, output, bounds, radius: float, seeds=range(3), keep_sign: bool = False):
    """Random and gradient-aligned perturbations of norm ``radius`` give lo <= F <= hi (to 1e-12), (lo, hi) =
    ``bounds(radius)``; with ``keep_sign`` they also keep every sign."""
    F = output().detach()
    sign = torch.sign(F)
    lo, hi = bounds(radius)
    deltas = []
    for seed in seeds:
        gen = torch.Generator().manual_seed(100 + seed)
        d = [torch.randn(p.shape, generator=gen, dtype=F64) for p in params]
        norm = math.sqrt(sum(float((t**2).sum()) for t in d))
        deltas.append([radius * t / norm for t in d])
    deltas += [_gradient_aligned(params, output, b, radius, s) for b in range(len(F)) for s in (1.0, -1.0)]
    for delta in deltas:
        got = _perturbed(params, delta, output)
        assert not keep_sign or bool((torch.sign(got) == sign).all())
        assert bool(((lo - 1e-12 <= got) & (got <= hi + 1e-12)).all()), (lo, got, hi)


def _circuit(name):
    net = tg.build_circuit_network(CIRCUITS[name])
    X = tg.all_inputs(CIRCUITS[name].num_inputs)
    return net, X, [p for _, p in net.theta()], lambda: net(X)


@pytest.mark.parametrize("name", sorted(CIRCUITS))
def test_circuit_certificate_is_sound(name):
    net, X, params, output = _circuit(name)
    # a correction's 3 relu(g - 1/3) - 3 relu(g - 2/3) is 1 up to an ulp that depends on the BLAS's order of sums
    out = output()
    assert_close_scaled(out, 2 * CIRCUITS[name].evaluate(X).to(F64) - 1)
    lo, hi = rb.output_bounds(net, X, 0.0)
    assert_close_scaled(lo, out)  # radius 0: the run itself, by interval arithmetic (other sums)
    assert_close_scaled(hi, out)
    lower = rb.certified_radius(net, X)
    assert lower > 0
    assert_sound_at(params, output, lambda r: rb.output_bounds(net, X, r), lower)
    assert_within_bounds(params, output, lambda r: rb.output_bounds(net, X, r), 3 * lower)


@pytest.mark.parametrize("name", ["OR", "OR3"])
def test_circuit_certificate_doubled_is_refuted(name):
    """One gate block: the certificate is within 2x of the margin (PGD flips at 1.7-1.8 r_c), so PGD
    flips an input at 2 r_c. With a correction the best attack found sits 2.2-3.4 r_c above it."""
    net, X, params, output = _circuit(name)
    lower = rb.certified_radius(net, X)
    sign = torch.sign(output())
    flips = (rb.pgd_flip(params, lambda: sign * output(), 2 * lower, steps=60, seed=s) for s in range(3))
    flip = next((f for f in flips if f is not None), None)
    assert flip is not None and rb._norm(flip) <= 2 * lower * (1 + 1e-9)
    assert not bool((torch.sign(_perturbed(params, flip, output)) == sign).all())


def _machine(name):
    tm, T, L = {"parity": (tg.parity(), 2, 1), "random": (tg.random_tm(2, "01", 0), 2, 1)}[name]
    model = tg.build_transformer(tm, T, device="cpu")
    xs = tg.all_strings("01", L)
    return model, xs, [p for _, p in model.theta()], lambda: model.forward_trace(xs).F


@pytest.mark.parametrize("name", ["parity", "random"])
def test_machine_certificate_is_sound_and_refuted_at_16x(name):
    """The transformer's certificate is looser: the best attack found flips at about 12 r_c on these
    (smallest) instances, 16-65 r_c on larger ones; 16 r_c is refuted, so a 20x inflation is caught."""
    model, xs, params, output = _machine(name)
    F = output()
    assert_close_scaled(F.abs(), torch.ones_like(F), scale=float(model.theta_cls.abs().sum()))  # F = theta_cls . o_T
    lo, hi = rb.tm_output_bounds(model, xs, 0.0)
    assert torch.allclose(lo, F, rtol=0, atol=1e-12) and torch.allclose(hi, F, rtol=0, atol=1e-12)
    lower = rb.tm_certified_radius(model, xs, iters=12)
    assert lower > 0
    assert_sound_at(params, output, lambda r: rb.tm_output_bounds(model, xs, r), lower, steps=40)
    assert_within_bounds(params, output, lambda r: rb.tm_output_bounds(model, xs, r), 3 * lower)
    attacked = rb.tm_parameter_attack(model, xs, start_radius=16 * lower, seeds=(0,))
    assert attacked <= 16 * lower


@pytest.mark.parametrize("name", ["parity", "random"])
def test_machine_certificate_doubled_is_not_proved_by_its_sound_bounds(name):
    """No attack found reaches 2 r_c on a machine (the best flips at about 12 r_c), so no flip can refute a
    certificate inflated 2x. The certificate is the largest radius at which `tm_output_bounds` proves every
    sign, and those bounds are tested for soundness above (and layer by layer below): at r_c they prove
    every sign, one bisection step above r_c (0.1 / 2^12) they no longer do, so a certificate of 2 r_c, or
    of 1.01 r_c, has no proof behind it."""
    model, xs, params, output = _machine(name)
    F = output()
    lower = rb.tm_certified_radius(model, xs, hi=0.1, iters=12)

    def proved(r):
        lo, hi = rb.tm_output_bounds(model, xs, r)
        return bool(torch.where(F > 0, lo > 0, hi < 0).all())

    step = 0.1 / 2**12
    assert lower > 50 * step and proved(lower)
    assert not proved(lower + step) and not proved(2 * lower)


def _correction_output(z, C1, c1, C2):
    return torch.relu(torch.relu(z @ C1.T + c1) @ C2.T)


@pytest.mark.parametrize("z", [[1.0], [0.5, 1.0, 1.0], [0.0, 0.2, 0.9, 1.0], [0.4, 0.6, 1.0, 0.0]])
def test_correction_bounds_contain_the_extreme_perturbations(z):
    """`_round_bounds` at a point z: C1', c1' within r of [I; I], [-1/3; -2/3] and C2' within r of
    [3I, -3I] (each layer up to r, as the certificates propagate them); for every output coordinate the
    perturbation aligned with its gradient, the first-order extreme, lies inside the bounds."""
    z = torch.tensor([z], dtype=F64)
    n, r = z.shape[1], 1e-3
    eye = torch.eye(n, dtype=F64)
    base = [torch.cat([eye, eye]), torch.cat([torch.full((n,), -1 / 3), torch.full((n,), -2 / 3)]).to(F64),
            torch.cat([3 * eye, -3 * eye], 1)]
    lo, hi = rb._round_bounds(z, z, r)
    for k in range(n):
        for sign in (1.0, -1.0):
            params = [t.clone().requires_grad_(True) for t in base]
            grads = torch.autograd.grad(_correction_output(z, *params)[0, k], params)
            first = math.sqrt(float((grads[0] ** 2).sum() + (grads[1] ** 2).sum())) or 1.0
            second = math.sqrt(float((grads[2] ** 2).sum())) or 1.0  # 1: a bit with no gradient
            moved = [t + sign * r * g / (first if i < 2 else second)
                     for i, (t, g) in enumerate(zip(base, grads))]
            got = float(_correction_output(z, *moved)[0, k])
            assert float(lo[0, k]) - 1e-15 <= got <= float(hi[0, k]) + 1e-15, (k, sign, got)


def test_hard_attention_bounds_keep_every_key_that_can_still_win():
    """Query (1, 0.9), keys (1, 0) -> value 0 and (0, 1) -> value 1: the first wins by 0.1. Moving the query
    rows by r = 0.06 against each other lets the second win; the bounds at r must contain its value."""
    W_Q = torch.tensor([[[1.0, 0, 0], [0, 1.0, 0]]], dtype=F64)
    W_V = torch.tensor([[[0, 0, 1.0]]], dtype=F64)
    W_O = torch.tensor([[[0.0], [0.0], [1.0]]], dtype=F64)
    layer = Attention.stacked(W_Q, W_Q.clone(), W_V, W_O, b_Q=torch.zeros(1, 2, dtype=F64),
                              b_K=torch.zeros(1, 2, dtype=F64), b_V=torch.zeros(1, 1, dtype=F64),
                              normalization="hard", null_key=torch.full((1, 2), -1.0, dtype=F64),
                              null_value=torch.zeros(1, 1, dtype=F64), cross=True)
    h = torch.tensor([[1.0, 0.9, 0.0]], dtype=F64)
    memory = torch.tensor([[[1.0, 0, 0], [0, 1.0, 1.0]]], dtype=F64)
    assert float(layer(h[:, None], memory=memory)[0, 0, 2]) == 0.0
    r = 0.06
    x = torch.cat([h[0], torch.ones(1, dtype=F64)])  # the query row's input (h, 1)
    step = r / math.sqrt(2) * x / float(x.norm())  # norm r in all
    with torch.no_grad():
        layer.W_Q[0, 0] -= step[:3]
        layer.b_Q[0, 0] -= step[3]
        layer.W_Q[0, 1] += step[:3]
        layer.b_Q[0, 1] += step[3]
    got = float(layer(h[:, None], memory=memory)[0, 0, 2])
    assert got == 1.0  # the second key won
    with torch.no_grad():
        layer.W_Q.copy_(W_Q)
        layer.b_Q.zero_()
    flat = memory[0]
    keys = tuple(t.permute(1, 2, 0)[None] for t in rb._affine_heads(flat, flat, layer.W_K, layer.b_K, 0.0))
    values = tuple(t.permute(1, 2, 0)[None] for t in rb._affine_heads(flat, flat, layer.W_V, layer.b_V, 0.0))
    lo, hi = rb._hard_attention_bounds(layer, h, h, keys, values, torch.ones(1, 2, dtype=torch.bool), r)
    assert float(lo[0, 2]) <= got <= float(hi[0, 2])


def _query_call(model, trace, move):
    """The call of ``move``: the layer, its query input h (1, 1, w) and keys/values of positions 0..t."""
    layer = model.layer(move.layer)
    states = trace.state(trace.layer_names[trace.layer_names.index(move.layer) - 1])[move.input]  # (T+1, w)
    K, V = layer.project_memory(states[None])  # (1, 1, m, T+1)
    t = move.step
    return layer, states[None, t:t + 1], (K[..., : t + 1], V[..., : t + 1])


@pytest.mark.parametrize("machine", ["palindrome", "increment"])
def test_query_row_move_costs_exactly_what_cauchy_schwarz_says(machine):
    """Held-out machines (03 attacks the palindrome at T = 40): for the cheapest calls, the core's own scores with
    the query rows moved along (k_l - k_w) x^T close the gap at 1.01x the move's radius and not at 0.99x, and
    random moves of 0.99x that norm never close it."""
    model = tg.build_transformer(getattr(tg, machine)(), 12, device="cpu")
    xs = tg.all_strings("01", 2)
    trace = model.forward_trace(xs, record=True)
    moves = rb.query_row_moves(model, xs)
    assert moves and all(a.radius <= b.radius for a, b in zip(moves, moves[1:]))
    gen = torch.Generator().manual_seed(5)
    for move in moves[:4]:
        layer, h, kv = _query_call(model, trace, move)
        scores = layer.scores(h, kv=kv)[0, 0, 0]  # (t + 2,), null first
        assert torch.allclose(scores, trace.scores[move.layer][move.step][move.input], rtol=0, atol=1e-12)
        assert float(scores[move.winner] - scores[move.loser]) == pytest.approx(move.gap, abs=1e-9)
        x = torch.cat([h[0, 0], torch.ones(1, dtype=F64)])
        keys = torch.cat([layer.null_key[0, :, None], kv[0][0, 0]], 1)  # (m, t + 2)
        dk = keys[:, move.loser] - keys[:, move.winner]
        optimal = torch.outer(dk / dk.norm(), x / x.norm())
        W_Q, b_Q = layer.W_Q.detach().clone(), layer.b_Q.detach().clone()
        directions = [(f, optimal) for f in (0.99, 1.01)]
        for _ in range(20):
            d = torch.randn(optimal.shape, generator=gen, dtype=F64)
            directions.append((0.99, d / d.norm()))
        try:
            for factor, direction in directions:
                delta = factor * move.radius * direction
                with torch.no_grad():
                    layer.W_Q[0] += delta[:, :-1]
                    layer.b_Q[0] += delta[:, -1]
                moved = layer.scores(h, kv=kv)[0, 0, 0]
                with torch.no_grad():
                    layer.W_Q.copy_(W_Q)
                    layer.b_Q.copy_(b_Q)
                assert bool(moved[move.loser] > moved[move.winner]) == (factor > 1), (move, factor)
        finally:
            with torch.no_grad():
                layer.W_Q.copy_(W_Q)
                layer.b_Q.copy_(b_Q)


def test_query_row_attack_flips_above_the_certificate():
    """The palindrome at T = 12 (03 uses T = 40): the move found flips its input when applied here by hand, and
    its norm lies above the sound certificate."""
    model = tg.build_transformer(tg.palindrome(), 12, device="cpu")
    xs = tg.all_strings("01", 2)
    move, norm, tried = rb.query_row_attack(model, xs, tries=40)
    assert move is not None and 1 <= tried <= 40
    assert norm == pytest.approx(1.001 * move.radius, rel=1e-9)
    trace = model.forward_trace(xs, record=True)
    layer, h, kv = _query_call(model, trace, move)
    x = torch.cat([h[0, 0], torch.ones(1, dtype=F64)])
    keys = torch.cat([layer.null_key[0, :, None], kv[0][0, 0]], 1)
    dk = keys[:, move.loser] - keys[:, move.winner]
    delta = 1.001 * move.radius * torch.outer(dk / dk.norm(), x / x.norm())
    F = model.forward_trace([xs[move.input]]).F[0]
    params = [layer.W_Q, layer.b_Q]
    moved = _perturbed(params, [delta[None, :, :-1], delta[None, :, -1]],
                       lambda: model.forward_trace([xs[move.input]]).F)[0]
    assert float(moved * F) <= 0
    assert rb.tm_certified_radius(model, xs, iters=10) < norm


@pytest.mark.parametrize("bad", [{"tries": 0}, {"tries": 1.5}, {"lift": 1.0}, {"lift": math.nan}])
def test_query_row_attack_refuses_bad_arguments(bad):
    model = tg.build_transformer(tg.parity(), 2, device="cpu")
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        rb.query_row_attack(model, ["0"], **bad)


def test_tm_output_bounds_pass_the_whole_radius_to_every_layer(monkeypatch):
    """The certificate composes the layer bounds tested above; each must see the whole radius r (a bound computed
    for r / 2 is a certificate twice too large that no attack found can refute), and the first layer the
    interval h0 +- r."""
    model, xs, _, _ = _machine("parity")
    seen, first = [], []

    def spy(function):
        def wrapped(*args):
            seen.append((function.__name__, args[-2] if function.__name__ == "_affine" else args[-1]))
            if not first:  # the first layer is a work layer: _affine(lo, hi, W, b, r, True)
                first.append(((args[1] - args[0]) / 2).clone())
            return function(*args)
        return wrapped

    for name in ("_affine", "_affine_heads", "_round_bounds", "_hard_attention_bounds"):
        monkeypatch.setattr(rb, name, spy(getattr(rb, name)))
    r = 3e-4
    rb.tm_output_bounds(model, xs, r)
    assert {name for name, _ in seen} == {"_affine", "_affine_heads", "_round_bounds", "_hard_attention_bounds"}
    assert all(radius == r for _, radius in seen), sorted({radius for _, radius in seen})
    assert torch.allclose(first[0], torch.full_like(first[0], r), rtol=1e-12, atol=0)
