"""Tests for tfbook.colsym: exact algebra, squaring/product errors, Lemma 2, Theorem 1 bounds and sizes."""
import itertools
import math
from fractions import Fraction

import pytest
import sympy
import torch

import tfbook.colsym as cs
from tfbook.colsym.verify import sup_error

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
    assert torch.equal(cs.msp(five, X), torch.zeros(4, dtype=F64))
    assert torch.allclose(cs.msp_partition(five, X), torch.zeros(4, dtype=F64), atol=1e-10)


def test_paper_examples_coefficient_and_example3():
    assert cs.term_coefficient(((1,), (1,), (1,), (2,), (2,))) == 12
    x1, x2, x3 = sympy.symbols("x1 x2 x3")
    X = [[x1, x2, x3]]
    poly = sum(X[0][i] * X[0][j] for i, j in itertools.permutations(range(3), 2))
    assert sympy.expand(poly - 2 * (x1 * x2 + x1 * x3 + x2 * x3)) == 0


@pytest.mark.parametrize("n", [2, 3, 4])
def test_lemma3_identity_symbolically(n):
    d = 2
    syms = sympy.symbols(f"x0:{d * n}")
    cols = [syms[i * d:(i + 1) * d] for i in range(n)]

    def P(T):
        return sum(math.prod(math.prod(c ** a for c, a in zip(cols[i], alpha)) for i, alpha in zip(idx, T))
                   for idx in itertools.permutations(range(n), len(T))) if len(T) <= n else 0

    for T in [((0, 1), (1, 0)), ((1, 0), (1, 0), (1, 1)), ((0, 1), (1, 0), (1, 0))]:
        T_minus, last, T_js = cs.lemma3_terms(T)
        assert sympy.expand(P(T) - (P(T_minus) * P((last,)) - sum(P(t) for t in T_js))) == 0


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
    assert err.min() >= 0 and float(err.max()) == pytest.approx(cs.squaring_error(N, L), rel=1e-12)
    grid = 2 ** (L * cs.choose_k(N))
    xg = torch.arange(grid + 1, dtype=F64)[:, None] / grid
    assert torch.equal(net(xg)[:, 0], xg[:, 0] ** 2)
    assert net.width == 2 ** cs.choose_k(N) + 1 <= 3 * N and net.depth == L


@pytest.mark.parametrize("N,L", [(1, 1), (3, 2), (4, 3)])
def test_product_error_range_attained(N, L):
    net = cs.build_product_fnn(N, L)
    delta = cs.squaring_error(N, L)
    g = 2 ** (L * cs.choose_k(N))
    j = torch.arange(g, dtype=F64)
    top = net(torch.stack([j / g, (j + 1) / g], 1))[:, 0] - j * (j + 1) / g**2
    assert float(top.max()) == pytest.approx(2 * delta, rel=1e-9)
    low = net(torch.tensor([[1 / (2 * g), 3 / (2 * g)]], dtype=F64))[0, 0] - 3 / (4 * g * g)
    assert float(low) == pytest.approx(-delta, rel=1e-9)
    X = torch.rand(20000, 2, dtype=F64)
    e = net(X)[:, 0] - X[:, 0] * X[:, 1]
    assert -delta - 1e-15 <= float(e.min()) and float(e.max()) <= 2 * delta + 1e-15
    assert float(net(X).max()) <= 1.0 and float(net(X).min()) >= 0.0


def test_lemma2_conversion_equal_on_nonnegative_fails_on_negative():
    net = cs.build_product_fnn(3, 2)
    tf = cs.fnn_to_transformer(net)
    X = torch.rand(500, 2, dtype=F64)
    assert torch.allclose(cs.run_converted(tf, X), net(X)[:, 0], rtol=0, atol=1e-14)
    neg = torch.tensor([[-0.5, 0.5]], dtype=F64)
    assert abs(float(cs.run_converted(tf, neg) - net(neg)[:, 0])) > 0.1
    assert tf.depth == net.depth + 1


# --- the Theorem 1 transformer -------------------------------------------------------------------

def _check_theorem(coeffs, d, n, N, L, n_random=64):
    model = cs.build_transformer(coeffs, d, n, N, L)
    res = sup_error(model, coeffs, n_random=n_random, ascent_steps=5, n_starts=2)
    assert res["sup"] <= cs.theorem1_bound(coeffs, d, n, N, L)
    s = model.s
    assert model.width <= cs.paper_width(d, s, N)
    assert model.depth == cs.impl_depth(s, L) <= cs.paper_depth(s, L)
    return model, res


@pytest.mark.parametrize("d,s,N,L,n", [(1, 3, 3, 3, 5), (2, 2, 4, 3, 6), (2, 3, 2, 4, 3), (1, 2, 1, 2, 3)])
def test_theorem1_example1(d, s, N, L, n):
    _check_theorem(cs.example1_coeffs(d, s), d, n, N, L)


def test_recursive_bound_per_T_and_exact_zero_beyond_n():
    d, s, N, L, n = 2, 3, 4, 3, 2
    model = cs.build_transformer(cs.example1_coeffs(d, s), d, n, N, L)
    X = torch.rand(64, d, n, dtype=F64)
    for r, Ts in model.keys.items():
        for T in Ts:
            err = float((model.read(X, T) - cs.msp(T, X)).abs().max())
            assert err <= cs.recursive_error_bound(T, n, N, L)
            if r > n:
                assert torch.equal(model.read(X, T), torch.zeros(64, dtype=F64))


def test_attention_is_exactly_uniform_and_unique_and_invariance():
    coeffs = cs.random_coeffs(2, 3, seed=1)
    model = cs.build_transformer(coeffs, 2, 8, 3, 3)
    X = torch.randint(0, 256, (16, 2, 8), dtype=F64) / 256
    states = model.stream(X, return_all=True)
    att = model.attention()
    A = att.attention_matrices(states[model.attention_block])[0]
    assert torch.equal(A, torch.full_like(A, 1 / 8))
    with_attention = [b for b in model.transformer.blocks if b.attention is not None]
    assert len(with_attention) == 1 and len(att.heads) == 1
    perm = torch.randperm(8)
    assert torch.equal(model(X[:, :, perm]), model(X))  # n a power of 2, dyadic X: bitwise


def test_parameters_independent_of_n_and_flattened_grows():
    coeffs = cs.example1_coeffs(2, 2)
    models = [cs.build_transformer(coeffs, 2, n, 4, 2) for n in (2, 7, 64, 300)]
    assert len({m.num_parameters() for m in models}) == 1
    assert len({m.num_stored_parameters() for m in models}) == 1
    flat = [cs.parameter_count_flattened(m) for m in models]
    assert flat == sorted(flat) and flat[-1] > 100 * flat[0] / 2


def test_builds_are_deterministic_and_weights_dyadic():
    coeffs = cs.example1_coeffs(1, 2)
    a, b = cs.build_transformer(coeffs, 1, 4, 3, 2), cs.build_transformer(coeffs, 1, 4, 3, 2)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_signed_variant_and_bad_input():
    with pytest.raises(ValueError, match="negative"):
        cs.build_transformer({((1,),): -1.0}, 1, 3, 2, 2)
    model = cs.build_transformer({((1,), (1,)): -1.0, ((2,),): 1.0}, 1, 3, 4, 3, signed=True)
    X = torch.rand(32, 1, 3, dtype=F64)
    coeffs = {((1,), (1,)): -1.0, ((2,),): 1.0}
    assert float((model(X) - cs.evaluate(coeffs, X)).abs().max()) <= cs.theorem1_bound(coeffs, 1, 3, 4, 3, signed=True)
    with pytest.raises(ValueError, match="length d = 2"):
        cs.build_transformer({((1,),): 1.0}, 2, 3, 2, 2)
    with pytest.raises(ValueError, match="not be all zero"):
        cs.build_transformer({((0, 0),): 1.0}, 2, 3, 2, 2)
    with pytest.raises(ValueError, match="N must be an int >= 1"):
        cs.build_transformer({((1,),): 1.0}, 1, 3, 0, 2)
    with pytest.raises(ValueError, match="L must be an int >= 1"):
        cs.build_transformer({((1,),): 1.0}, 1, 3, 2, 0)
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
    assert torch.equal(model(X), cs.evaluate(coeffs, X))
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
