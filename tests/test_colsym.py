"""Tests for tfbook.colsym: exact algebra, squaring/product errors, Lemma 2, Theorem 1 bounds and sizes."""
import math
from fractions import Fraction

import numpy as np
import pytest
import sympy
import torch

import tfbook.colsym as cs
from tfbook import claims as cl
from tfbook.colsym import checks, verify
from tfbook.layers import perturb
from tfbook.model import Sizes

F64 = torch.float64


# --- algebra -------------------------------------------------------------------------------------

@pytest.mark.parametrize("d,s,per_rank", [(1, 5, [5, 6, 4, 2, 1]), (2, 3, [9, 9, 4]), (3, 3, [19, 24, 10]),
                                          (2, 4, [14, 23, 13, 5])])
def test_counts_per_rank_and_bounds(d, s, per_rank):
    counts = cs.count_bounds(d, s)
    assert counts["per_rank"] == per_rank
    assert all(c <= b for c, b in zip(counts["per_rank"], counts["per_rank_bound"]))
    assert counts["total"] <= counts["total_bound"]
    assert counts["monomials"] == counts["monomials_formula"] == math.comb(s + d, d) - 1


def test_partition_formula_equals_bruteforce_and_zero_beyond_n():
    X = torch.rand(4, 2, 4, dtype=F64)
    for T in [((1, 0),), ((0, 1), (1, 0)), ((1, 0), (1, 0), (0, 2)), ((1, 1), (1, 0), (0, 1), (1, 0))]:
        assert torch.allclose(cs.msp_bruteforce(T, X), cs.msp_partition(T, X), rtol=1e-12, atol=1e-12)
    five = tuple([(1, 0)] * 5)
    assert torch.equal(cs.msp(five, X), torch.zeros(4, dtype=F64))  # rank 5 > n = 4: an empty sum, exactly 0
    assert torch.allclose(cs.msp_partition(five, X), torch.zeros(4, dtype=F64), atol=1e-10)


def test_paper_examples_coefficient_and_example3():
    assert cs.term_coefficient(((1,), (1,), (1,), (2,), (2,))) == 12
    x1, x2, x3 = sympy.symbols("x1 x2 x3")
    assert sympy.expand(cs.msp_symbolic(((1,), (1,)), [(x1,), (x2,), (x3,)]) - 2 * (x1 * x2 + x1 * x3 + x2 * x3)) == 0


@pytest.mark.parametrize("n", [2, 3, 4])
def test_lemma3_terms_give_the_identity_symbolically(n):
    syms = sympy.symbols(f"x0:{2 * n}")
    cols = [syms[2 * i:2 * i + 2] for i in range(n)]
    P = lambda T: cs.msp_symbolic(T, cols)  # noqa: E731
    for T in [((0, 1), (1, 0)), ((1, 0), (1, 0), (1, 1)), ((0, 1), (1, 0), (1, 0)), ((1, 0),) * (n + 1)]:
        T_minus, last, T_js = cs.lemma3_terms(tuple(sorted(T)))
        assert sympy.expand(P(tuple(sorted(T))) - (P(T_minus) * P((last,)) - sum(P(t) for t in T_js))) == 0


def test_lemma6_round_trip_and_rejects_asymmetric():
    d, n = 2, 3
    coeffs = {(): Fraction(1, 2), ((1, 0),): Fraction(3), ((0, 1), (1, 0)): Fraction(1, 4), ((1, 0), (1, 0)): Fraction(2)}
    assert cs.decompose_column_symmetric(cs.expand(coeffs, d, n), d, n) == coeffs
    poly = cs.expand(coeffs, d, n)
    key = next(k for k in poly if k != ((0, 0),) * n)
    poly[key] += 1
    with pytest.raises(ValueError, match="not column-symmetric"):
        cs.decompose_column_symmetric(poly, d, n)


# --- squaring, product, Lemma 2 ---------------------------------------------------------------

@pytest.mark.parametrize("N,k", [(1, 1), (2, 1), (3, 2), (8, 2), (9, 3), (24, 3), (25, 4), (64, 4), (65, 5)])
def test_k_rule(N, k):
    assert cs.choose_k(N) == k


@pytest.mark.parametrize("N,L", [(1, 1), (3, 2), (9, 2), (4, 3)])
def test_square_fnn_error_exact_width_depth(N, L):
    net = cs.build_square_fnn(N, L)
    x = torch.arange(0, 2**14 + 1, dtype=F64)[:, None] / 2**14
    err = net(x)[:, 0] - x[:, 0] ** 2
    assert err.min() >= 0 and float(err.max()) == cs.squaring_error(N, L)
    grid = 2 ** (L * cs.choose_k(N))
    xg = torch.arange(grid + 1, dtype=F64)[:, None] / grid
    assert torch.equal(net(xg)[:, 0], xg[:, 0] ** 2)  # dyadic grid, dyadic weights: every value exact
    assert net.width == 2 ** cs.choose_k(N) + 1 <= 3 * N and net.depth == L


@pytest.mark.parametrize("N,L", [(1, 1), (3, 2), (4, 3)])
def test_product_error_range_attained(N, L):
    net = cs.build_product_fnn(N, L)
    delta = cs.squaring_error(N, L)
    g = 2 ** (L * cs.choose_k(N))
    j = torch.arange(g, dtype=F64)
    top = net(torch.stack([j / g, (j + 1) / g], 1))[:, 0] - j * (j + 1) / g**2
    assert torch.equal(top, torch.full_like(top, 2 * delta))  # dyadic grid: exact
    low = net(torch.tensor([[1 / (2 * g), 3 / (2 * g)]], dtype=F64))[0, 0] - 3 / (4 * g * g)
    assert float(low) == -delta
    X = torch.rand(20000, 2, dtype=F64)
    e = net(X)[:, 0] - X[:, 0] * X[:, 1]
    assert -delta - 1e-15 <= float(e.min()) and float(e.max()) <= 2 * delta + 1e-15
    assert float(net(X).max()) <= 1.0 and float(net(X).min()) >= 0.0


def test_lemma2_conversion_equal_on_nonnegative_fails_on_negative():
    net = cs.build_product_fnn(3, 2)
    tf = cs.fnn_to_transformer(net)
    X = torch.randint(0, 2**12 + 1, (500, 2), dtype=F64) / 2**12
    assert torch.equal(cs.run_converted(tf, X), net(X)[:, 0])  # 12-bit dyadic X, dyadic weights: both exact
    neg = torch.tensor([[-0.5, 0.5]], dtype=F64)
    assert abs(float(cs.run_converted(tf, neg) - net(neg)[:, 0])) > 0.1
    sizes = tf.counted_sizes()
    assert sizes.layers == net.depth + 1 and sizes.ff_width == 2 * sizes.embed_dim == 2 * net.width


# --- the Theorem 1 transformer -------------------------------------------------------------------

NON_VACUOUS = [(1, 2, 4, 8, 5), (2, 2, 4, 8, 6), (1, 3, 9, 6, 4), (2, 1, 4, 7, 5)]


@pytest.mark.parametrize("d,s,N,L,n", NON_VACUOUS)
def test_theorem1_example1_non_vacuous(d, s, N, L, n):
    assert 8.0**s * float(N) ** -L <= 1e-3  # the bound is at most a thousandth of ||f||
    coeffs = cs.example1_coeffs(d, s)
    model = cs.build_transformer(coeffs, d, n, N, L)
    claims = cl.Claims("test")
    res = checks.theorem1(claims, model, coeffs, "Example 1", cs.theorem1_bound(coeffs, d, n, N, L), n_random=32,
                          ascent_steps=3)
    checks.sizes(claims, model, "Example 1")
    assert model.depth == cs.impl_depth(s, L) and claims.all_hold()
    assert res["sup"] <= 1e-6 * cs.sup_norm(coeffs, n)  # and far below it: the rate is 4^-Lk, not N^-L


def _mutant_setting():
    d, s, N, L, n = 2, 2, 4, 8, 6
    coeffs = cs.example1_coeffs(d, s)
    return coeffs, cs.build_transformer(coeffs, d, n, N, L), cs.theorem1_bound(coeffs, d, n, N, L)


def test_mutation_zero_one_write_into_out_breaks_theorem1():
    coeffs, model, bound = _mutant_setting()
    T = model.keys[2][-1]
    (clip_layer,) = model.gadget_layers(f"clip{T}")
    out = model.layout.index("out")

    def drop_out(layer, update):
        update = update.clone()
        update[..., out] = 0.0
        return update

    checks.theorem1(cl.Claims("intact"), model, coeffs, "Example 1", bound, n_random=16, ascent_steps=0)
    with perturb(fn=drop_out, names=[clip_layer]) as p, pytest.raises(cl.ClaimError):
        checks.theorem1(cl.Claims("mutant"), model, coeffs, "Example 1", bound, n_random=16, ascent_steps=0)
    assert p.hits > 0


def test_mutation_attention_value_breaks_prop2_and_theorem1():
    coeffs, model, bound = _mutant_setting()
    X = verify.candidate_inputs(model, 16, 0)["random"]
    checks.prop2(cl.Claims("intact"), model, X)
    with perturb(scale=1 + 1e-3, kinds=["attn"]):
        with pytest.raises(cl.ClaimError, match="Prop 2: degree-1"):
            checks.prop2(cl.Claims("mutant"), model, X)
        with pytest.raises(cl.ClaimError):
            checks.theorem1(cl.Claims("mutant"), model, coeffs, "Example 1", bound, n_random=16, ascent_steps=0)


def test_mutation_drop_the_clip_breaks_prop3():
    coeffs, model, _ = _mutant_setting()
    X = verify.candidate_inputs(model, 16, 0)["random"]
    checks.prop3(cl.Claims("intact"), model, [X])
    (clip_layer,) = model.gadget_layers(f"clip{model.keys[2][0]}")
    with perturb(scale=0.0, names=[clip_layer]), pytest.raises(cl.ClaimError, match="recursion"):
        checks.prop3(cl.Claims("mutant"), model, [X])


def test_perturbed_core_breaks_every_check():
    coeffs, model, bound = _mutant_setting()
    X = verify.candidate_inputs(model, 16, 0)["random"]
    for check in (lambda c: checks.prop1(c, model, X), lambda c: checks.prop2(c, model, X),
                  lambda c: checks.prop3(c, model, [X]),
                  lambda c: checks.theorem1(c, model, coeffs, "Ex 1", bound, n_random=16, ascent_steps=0)):
        check(cl.Claims("intact"))
        for scale in (1 + 1e-3, 0.0):  # a 1e-3 change of every layer, and a model that does nothing
            with perturb(scale=scale), pytest.raises(cl.ClaimError):
                check(cl.Claims("perturbed"))


def test_single_layer_mutation_sweep_is_noticed_layer_by_layer():
    """Every core layer scaled alone by 1 +- 1e-3 breaks a check: the closed-form approximant check notices the late
    sawtooth layers (4 of the 20 escape Props 1-3 and Theorem 1, whose bounds leave room)."""
    coeffs, model, bound = _mutant_setting()
    X = verify.candidate_inputs(model, 16, 0)["random"]
    checks.approximant(cl.Claims("intact"), model, X)
    escaped_bounds = []
    for layer in model.layers:
        for scale in (1 + 1e-3, 1 - 1e-3):
            with perturb(scale=scale, names=[layer.name]):
                with pytest.raises(cl.ClaimError, match="closed-form"):
                    checks.approximant(cl.Claims("mutant"), model, X)
                try:
                    checks.prop1(cl.Claims("m"), model, X)
                    checks.prop2(cl.Claims("m"), model, X)
                    checks.prop3(cl.Claims("m"), model, [X])
                    checks.theorem1(cl.Claims("m"), model, coeffs, "Ex 1", bound, n_random=16, ascent_steps=0)
                    escaped_bounds.append(layer.name)
                except cl.ClaimError:
                    pass
    assert 0 < len(escaped_bounds) < 2 * len(model.layers)  # the bounds alone miss some layers (the point of the sweep)


def test_closed_form_square_is_the_grid_interpolant():
    from tfbook.colsym.approximant import interpolated_square
    x = torch.linspace(0, 1, 1025, dtype=F64)
    for m in (1, 3, 10):
        f = interpolated_square(x, m)
        grid = torch.arange(2**m + 1, dtype=F64) / 2**m
        assert torch.allclose(interpolated_square(grid, m), grid**2, rtol=0, atol=1e-15)  # exact at the nodes
        err = f - x**2
        assert float(err.min()) >= -1e-15 and float(err.max()) <= 4.0 ** -(m + 1) + 1e-15  # Lemma 1's delta


def test_check_kinds_formulas_and_trivial_scales():
    coeffs, model, bound = _mutant_setting()
    X = verify.candidate_inputs(model, 16, 0)["random"]
    claims = cl.Claims("kinds")
    checks.prop1(claims, model, X)
    checks.prop2(claims, model, X)
    checks.prop3(claims, model, [X])
    checks.theorem1(claims, model, coeffs, "Ex 1", bound, n_random=16, ascent_steps=0)
    checks.sizes(claims, model, "Ex 1")
    assert claims.all_hold()
    sizes = [c for c in claims.items if c.kind == "size"]
    assert len(sizes) == 7 and all(c.formula.startswith("tfbook.colsym.bounds.") for c in sizes)
    errors = [c for c in claims.items if c.kind == "construction" and not c.roundoff]
    assert len(errors) == 4 and all(c.trivial is not None and float(c.bound_over_trivial) < 1 for c in errors)
    (thm,) = [c for c in claims.items if c.ref == "Thm 1" and c.kind == "construction"]
    assert thm.trivial == cl.fmt(cs.sup_norm(coeffs, 6), noise=0)  # ||f||_inf, the zero network's error


def test_size_formulas_are_registered_paper_formulas():
    names = ["paper_width", "paper_depth", "prop1_width", "prop1_depth", "prop3_depth", "paper_ff_layers",
             "paper_heads", "paper_attention_layers", "prop1_attention_layers", "prop2_query_key_weight",
             "lemma1_width", "product_width", "lemma2_depth", "lemma2_width", "values_over_n",
             "flattened_increments", "flattened_increment_floor"]
    for name in names:
        assert cl.FORMULAS[f"tfbook.colsym.bounds.{name}"] is getattr(cs, name)
    assert (cs.paper_width(2, 3, 4), cs.paper_depth(3, 2), cs.prop3_depth(3, 2), cs.paper_ff_layers(3, 2)) == (
        12 * 4**3 * 4, 2 * 3 * 2 + 9, 2 * 3 + 1 + 2 * 4, 2 * 7)
    assert cs.impl_depth(3, 2) == cs.prop3_depth(3, 2)
    assert cs.paper_sizes(2, 3, 4, 2) == Sizes(**{f: fn(**p) for f, (fn, p) in cs.paper_size_formulas(2, 3, 4, 2).items()})
    with pytest.raises(ValueError, match="must be a real number"):
        cs.paper_width(2, 3, cs.build_transformer({((1,),): 1.0}, 1, 3, 2, 2))


def test_theorem1_claim_refuses_a_vacuous_bound():
    coeffs = cs.example1_coeffs(1, 2)
    model = cs.build_transformer(coeffs, 1, 4, 2, 1)  # 8^2 2^-1 = 32: the bound exceeds ||f||
    with pytest.raises(ValueError, match="not below the trivial scale"):
        checks.theorem1(cl.Claims("vacuous"), model, coeffs, "Ex 1", cs.theorem1_bound(coeffs, 1, 4, 2, 1),
                        n_random=4, ascent_steps=0)


def test_prop3_claims_exact_zeros_beyond_n_with_the_falling_clip():
    d, s, N, L, n = 2, 3, 4, 3, 2
    model = cs.build_transformer(cs.example1_coeffs(d, s), d, n, N, L)
    X = torch.rand(64, d, n, dtype=F64)
    claims = cl.Claims("zeros")
    checks.prop3(claims, model, [X])
    (claim,) = claims.items
    assert "rank > n" in claim.statement and claim.holds
    T = model.keys[3][0]
    (clip_layer,) = model.gadget_layers(f"clip{T}")
    slot = model.layout.index(f"P{T}")

    def leak(layer, update):  # a rank-3 P~_T that is no longer exactly zero, however small
        update = update.clone()
        update[..., slot] += 1e-9
        return update

    with perturb(fn=leak, names=[clip_layer]), pytest.raises(cl.ClaimError, match="rank > n"):
        checks.prop3(cl.Claims("leak"), model, [X])
    paper = cs.build_transformer({T: c for T, c in cs.example1_coeffs(d, s).items() if len(T) <= 2}, d, n, N, L,
                                 clip="paper")
    claims = cl.Claims("paper clip")
    checks.prop3(claims, paper, [X])
    assert "rank > n" not in claims.items[0].statement and claims.all_hold()


def test_search_attains_prop1_and_prop2_bounds():
    model = cs.build_transformer({((1, 1),): 1.0}, 2, 5, 3, 2)
    pairs = verify.candidate_inputs(model, 64, 0)["adjacent grid pairs"]
    claims = cl.Claims("test")
    assert checks.prop1(claims, model, pairs) == pytest.approx(1.0, rel=1e-9)
    assert checks.prop2(claims, model, pairs) == pytest.approx(1.0, rel=1e-9)


def test_gradient_ascent_returns_best_point_visited():
    coeffs = cs.example1_coeffs(1, 3)
    model = cs.build_transformer(coeffs, 1, 5, 3, 3)
    X0 = torch.rand(4, 1, 5, dtype=F64)
    X, e = verify.gradient_ascent(model, coeffs, X0, steps=8)
    # e: the same chunked call, the same rows
    assert torch.equal(e, verify.errors(model, coeffs, X)) and bool((e >= verify.errors(model, coeffs, X0)).all())


def test_gradient_ascent_in_small_chunks_is_the_same_search(monkeypatch):
    """The gradients are taken in memory-bounded chunks (a backward pass keeps every layer's states):
    chunks of one input give the gradients of one pass over the batch, up to rounding."""
    coeffs = cs.example1_coeffs(1, 3)
    model = cs.build_transformer(coeffs, 1, 5, 3, 3)
    X0 = torch.rand(6, 1, 5, dtype=F64, generator=torch.Generator().manual_seed(2))
    whole = verify._error_gradient(model, coeffs, X0)
    monkeypatch.setattr(verify, "MEMORY", 1)  # one input per chunk
    assert verify.chunk_size(model) == 1
    chunked = verify._error_gradient(model, coeffs, X0)
    assert whole.shape == X0.shape and float(whole.abs().max()) > 0
    assert torch.allclose(whole, chunked, rtol=1e-9, atol=1e-9 * float(whole.abs().max()))


def test_recursive_bound_per_T_and_exact_zero_beyond_n():
    d, s, N, L, n = 2, 3, 4, 3, 2
    model = cs.build_transformer(cs.example1_coeffs(d, s), d, n, N, L)
    X = torch.rand(64, d, n, dtype=F64)
    rows = checks.prop3(cl.Claims("test"), model, [X])
    assert {r for r, *_ in rows} == {1, 2, 3}
    for T in model.keys[3]:
        assert torch.equal(model.read_msp(X, T), torch.zeros(64, dtype=F64))  # clipped to [0, 0]: exactly 0


def test_section8_constant_below_8s_over_2():
    for s in range(2, 6):
        ratio, T, n = cs.section8_constant(1, s, 60)
        assert ratio <= 8.0**s / 2 and len(T) == s == n  # the worst case is the top rank at n = r
    assert cs.section8_constant(2, 3, 30)[0] == cs.section8_constant(1, 3, 30)[0]


def test_attention_is_exactly_uniform_and_unique_and_invariance():
    coeffs = cs.random_coeffs(2, 3, seed=1)
    model = cs.build_transformer(coeffs, 2, 8, 3, 3)
    X = torch.randint(0, 256, (16, 2, 8), dtype=F64) / 256
    trace = model.trace(model.embed(X))
    (name,) = trace.attention
    assert name == model.layer_names[model.attention_block] == "sum." + str(model.attention_block)
    # W_Q = W_K = 0: softmax of equal scores
    assert torch.equal(trace.attention[name], torch.full_like(trace.attention[name], 1 / 8))
    assert sum(layer.kind == "attn" for layer in model.layers) == 1 and model.attention().num_heads == 1
    perm = torch.randperm(8)
    assert torch.equal(model(X[:, :, perm]), model(X))  # n a power of 2, dyadic X: bitwise


def test_trace_agrees_with_return_all_and_stream_upto():
    model = cs.build_transformer(cs.example1_coeffs(1, 2), 1, 4, 3, 2)
    X = torch.rand(3, 1, 4, dtype=F64)
    states = model.stream(X, return_all=True)
    trace = model.trace(model.embed(X))
    assert len(states) == len(trace.states) == model.depth + 1
    assert all(torch.equal(a, b) for a, b in zip(states, trace.states))  # the same layer-by-layer calls
    assert torch.equal(model.stream(X, upto=5), states[5]) and torch.equal(trace.state(model.layer_names[4]), states[5])


def test_sizes_against_hand_counts():
    # d=1, s=2, k=1, L=1: one monomial product (6 + 1 units), the attention, one rank-2 product (6 + 1), a clip (2)
    model = cs.build_transformer(cs.example1_coeffs(1, 2), d=1, n=3, N=1, L=1)
    assert model.layer_names == ["mono.0", "mono.1", "sum.2", "rank2.3", "rank2.4", "rank2.5"]
    assert [layer.hidden_width for layer in model.layers if layer.kind == "mlp"] == [6, 1, 6, 1, 2]
    D = 2 + 5 + 3 + 5  # x, out; the product (y 3, acc, psi); P_(1), P_(2), P_(1,1); the second product
    sizes = model.counted_sizes()
    assert (sizes.layers, sizes.attention_layers, sizes.ff_layers, sizes.max_heads) == (6, 1, 5, 1)
    assert (sizes.embed_dim, sizes.ff_width, sizes.attention_width) == (D, 6, 3)  # 2 monomials + the constant row
    assert (model.depth, model.width, model.embed_dim) == (6, 6, D)
    assert model.num_parameters() == 6 * (6 * 6 * D + 6 + D)
    assert sizes.compare(cs.paper_sizes(1, 2, 1, 1)) == [("layers", 6, 10), ("attention_layers", 1, 1),
                                                          ("max_heads", 1, 1), ("ff_width", 6, 48),
                                                          ("attention_width", 3, 48)]


def test_parameters_independent_of_n():
    coeffs = cs.example1_coeffs(2, 2)
    models = [cs.build_transformer(coeffs, 2, n, 4, 2) for n in (2, 7, 64, 300)]
    assert len({m.num_parameters() for m in models}) == 1
    assert len({m.num_stored_parameters() for m in models}) == 1
    assert len({m.num_nonzero() for m in models}) == 1


def test_builds_are_deterministic_and_weights_dyadic():
    coeffs = {T: 1.0 for Ts in cs.enumerate_msp(2, 3).values() for T in Ts}  # dyadic coefficients, n a power of 2
    a, b = cs.build_transformer(coeffs, 2, 4, 3, 2), cs.build_transformer(coeffs, 2, 4, 3, 2)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
        scaled = p * 2.0**40
        assert torch.equal(scaled, scaled.round()) and float(p.abs().max()) <= 2.0**12


def test_coefficients_of_any_real_type_and_lemma6_feeds_the_construction():
    d, n = 1, 3
    poly = cs.expand({((1,), (1,)): Fraction(1, 2), ((2,),): 3, (): np.int64(2)}, d, n)
    coeffs = cs.decompose_column_symmetric(poly, d, n)
    assert all(isinstance(c, Fraction) for c in coeffs.values())
    model = cs.build_transformer(coeffs, d, n, 4, 8)  # 8^2 4^-8 ~ 1e-3: a model that outputs 0 fails the bound
    X = torch.rand(16, d, n, dtype=F64)
    bound = cs.theorem1_bound(coeffs, d, n, 4, 8)
    assert bound <= 1e-3 * float(cs.evaluate(coeffs, torch.ones(1, d, n, dtype=F64)).abs().max())
    assert float((model(X) - cs.evaluate(coeffs, X)).abs().max()) <= bound
    same = cs.build_transformer({T: np.float32(float(c)) if T else np.int64(2) for T, c in coeffs.items()}, d, n, 4, 8)
    assert torch.equal(same(X), model(X))  # 1/2, 3, 2 exact in float32: the same weights, the same path


def test_paper_clip_rejects_rank_beyond_n_terms():
    coeffs = cs.example1_coeffs(1, 3)
    with pytest.raises(ValueError, match="rank > n = 2"):
        cs.build_transformer(coeffs, 1, 2, 3, 2, clip="paper")
    kept = {T: c for T, c in coeffs.items() if len(T) <= 2}
    model = cs.build_transformer(kept, 1, 2, 3, 2, clip="paper")
    assert float(model.read_msp(torch.rand(8, 1, 2, dtype=F64), ((1,), (1,), (1,))).abs().max()) > 0  # not clipped to 0


def test_signed_variant_and_bad_input():
    with pytest.raises(ValueError, match="negative"):
        cs.build_transformer({((1,),): -1.0}, 1, 3, 2, 2)
    coeffs = {((1,), (1,)): -1.0, ((2,),): 1.0}
    model = cs.build_transformer(coeffs, 1, 3, 4, 8, signed=True)
    X = torch.rand(32, 1, 3, dtype=F64)
    bound = cs.theorem1_bound(coeffs, 1, 3, 4, 8, signed=True)  # 8^2 4^-8 (1 + 3) ~ 4e-3
    f = cs.evaluate(coeffs, X)
    assert bound <= 0.1 * float(f.abs().max())  # a model that outputs 0 fails the bound
    assert float((model(X) - f).abs().max()) <= bound
    with pytest.raises(ValueError, match="length d = 2"):
        cs.build_transformer({((1,),): 1.0}, 2, 3, 2, 2)
    with pytest.raises(ValueError, match="not be all zero"):
        cs.build_transformer({((0, 0),): 1.0}, 2, 3, 2, 2)
    with pytest.raises(ValueError, match="N must be an int >= 1"):
        cs.build_transformer({((1,),): 1.0}, 1, 3, 0, 2)
    with pytest.raises(ValueError, match="L must be an int >= 1"):
        cs.build_transformer({((1,),): 1.0}, 1, 3, 2, 0)
    with pytest.raises(ValueError, match="must be a finite real number"):
        cs.build_transformer({((1,),): "1"}, 1, 3, 2, 2)
    good = cs.build_transformer({((1,),): 1.0}, 1, 3, 2, 2)
    with pytest.raises(ValueError, match=r"shape \(batch, d=1, n=3\)"):
        good(torch.rand(2, 1, 4, dtype=F64))
    with pytest.raises(ValueError, match=r"entries in \[0, 1\]"):
        good(torch.full((2, 1, 3), 1.5, dtype=F64))
    with pytest.raises(ValueError, match="clip must be one of"):
        cs.build_transformer({((1,),): 1.0}, 1, 3, 2, 2, clip="n")
    with pytest.raises(ValueError, match="rule must be one of"):
        cs.choose_k(3, "fast")
    with pytest.raises(ValueError, match="multi-index"):
        cs.msp(((1, -1),), torch.rand(2, 3, dtype=F64))


def test_degree_one_is_exact_and_constant():
    coeffs = {(): 2.5, ((1, 0),): 1.0, ((0, 1),): 3.0}
    model = cs.build_transformer(coeffs, 2, 4, 1, 1)
    X = torch.randint(0, 16, (8, 2, 4), dtype=F64) / 16
    assert torch.equal(model(X), cs.evaluate(coeffs, X))  # X on 1/16, coefficients 2.5, 1, 3: exact
    assert model.depth == 1


def test_symbolic_msp_matches_numeric():
    syms = sympy.symbols("a0:6")
    cols = [syms[2 * i:2 * i + 2] for i in range(3)]
    T = ((0, 1), (1, 0))
    expr = cs.msp_symbolic(T, cols)
    X = torch.rand(2, 3, dtype=F64)
    value = float(expr.subs({s: float(X[k % 2, k // 2]) for k, s in enumerate(syms)}))
    assert value == pytest.approx(float(cs.msp(T, X)), rel=1e-12)
    assert cs.msp_symbolic(((1, 0),) * 4, cols) == 0


def test_the_rounding_allowance_on_attained_bounds_is_sixteen_ulps_and_far_below_a_fault():
    e_psi = cs.squaring.product_error(4, 8)  # the quick profile's e_psi, 1.2e-10: one ulp of 1 is 1.9e-6 e_psi
    allowance = checks.attained_bound(1 / e_psi) - 1
    assert allowance == pytest.approx(checks.ROUNDING_ULPS * 2.0 ** -52 / e_psi, rel=1e-12)
    assert 1e-5 < allowance < 1e-4  # a 1e-3 relative fault moves m~ by ~1e-3, i.e. 1e7 e_psi
    assert checks.attained_bound(1.0) == 1 + checks.TIGHT  # where the bound is the values' size, TIGHT rules
