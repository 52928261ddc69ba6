"""Tests for tfbook.icgd: Theorem 1's transformer running projected GD on a deep network in context."""
import math

import pytest
import torch

from tfbook.claims import ClaimError, Claims
from tfbook.device import DTYPE
from tfbook.icgd import ReluSum, build_transformer, interpolant
from tfbook.icgd import bounds as Bd
from tfbook.icgd import construct as C
from tfbook.icgd import verify as V
from tfbook.icgd.nets import ACT, ACTIVATIONS, LOSSES, NetSpec, autograd_gradient, explicit_gradient
from tfbook.icgd.paper_forms import paper_layer, relu_attention
from tfbook.icgd.relu_sums import tailed_interpolant
from tfbook.layers import perturb


def _model(act="tanh", **kw):
    args = dict(dx=3, dy=2, K=3, N=3, n=7, L=2, eta=0.4, activation=act, box=1.5, M=32,
                delta=1e-5 if act == "relu" else None)
    args.update(kw)
    return build_transformer(**args)


# --- sums of ReLUs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["softplus", "sigmoid", "tanh"])
@pytest.mark.parametrize("M", [1, 5, 40])
def test_interpolant_knots_norms_and_error(name, M):
    g, R = ACT[name].r, 3.7
    rs = interpolant(g, R, M)
    assert rs.num_terms <= M + 1 and bool((rs.l1_norms() <= 1 + 1e-12).all())
    knots = torch.linspace(-R, R, M + 1, dtype=DTYPE)
    assert torch.allclose(rs(knots), g(knots), atol=1e-12)
    mid = (knots[1:] + knots[:-1]) / 2  # linear between knots
    assert torch.allclose(rs(mid), (g(knots[1:]) + g(knots[:-1])) / 2, atol=1e-12)
    t = torch.linspace(-R, R, 4001, dtype=DTYPE)
    assert float((rs(t) - g(t)).abs().max()) <= (2 * R / M) ** 2 / 8 * ACT[name].max_ddr + 1e-12
    left = torch.tensor([-R - 1.0, -R - 10.0], dtype=DTYPE)  # constant left of -R
    assert torch.allclose(rs(left), g(torch.tensor([-R], dtype=DTYPE)).expand(2), atol=1e-12)


def test_relusum_evaluates_its_definition():
    a = torch.tensor([[0.5, -0.5], [-0.2, 0.3], [0.0, 1.0]], dtype=DTYPE)
    c = torch.tensor([2.0, -1.0, 0.25], dtype=DTYPE)
    rs = ReluSum(a, c)
    t = torch.linspace(-3, 3, 61, dtype=DTYPE).reshape(61, 1)
    naive = sum(c[h] * torch.relu(a[h, 0] * t + a[h, 1]) for h in range(3))
    assert rs.num_terms == 3 and torch.allclose(rs(t), naive, atol=1e-15)
    assert rs(t).shape == t.shape


def test_interpolant_errors_fall_like_M_squared():
    errs = [float((interpolant(torch.tanh, 4.0, M)(t) - torch.tanh(t)).abs().max())
            for M in (16, 64) for t in [torch.linspace(-4, 4, 20001, dtype=DTYPE)]]
    assert 10 < errs[0] / errs[1] < 22  # ratio 16 for M^-2


# --- the reference network and Lemma 1 -------------------------------------------------------------

@pytest.mark.parametrize("N", [2, 3, 4, 6])
@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("loss", LOSSES)
def test_lemma1_matches_autograd(N, act, loss):
    spec = NetSpec(3, 2, 4, N)
    g = torch.Generator().manual_seed(N)
    w = torch.stack([spec.random_w(0.8, g) for _ in range(2)])
    X = torch.randn(2, 9, 3, generator=g, dtype=DTYPE)
    Y = torch.randn(2, 9, 2, generator=g, dtype=DTYPE)
    parts = explicit_gradient(spec, w, X, Y, act, loss)
    ref = autograd_gradient(spec, w, X, Y, act, loss)
    assert float(ref.abs().max()) > 1e-3
    assert float((parts.grad - ref).abs().max()) <= 1e-12


# --- construction: layers, slots, contract --------------------------------------------------------------

def _naive(layer, H):
    if layer.kind == "mlp":
        W1, W2 = layer.dense()
        assert W1.shape == (layer.hidden_width, H.shape[-1]) and W2.shape == (H.shape[-1], layer.hidden_width)
        return H + torch.relu(H @ W1.T) @ W2.T
    Q, K, Vm = layer.dense()
    D = H.shape[-1]
    assert Q.shape == K.shape == Vm.shape == (layer.num_heads, D, D)
    q = torch.einsum("hde,bie->bhid", Q, H)
    k = torch.einsum("hde,bse->bhsd", K, H)
    v = torch.einsum("hde,bse->bhsd", Vm, H)
    if layer.kind == "ewml":
        return H + torch.einsum("bhi,bhid->bid", (q * k).sum(-1), v)
    T = H.shape[1]
    return H + torch.einsum("bhis,bhsd->bid", torch.relu(q @ k.transpose(-1, -2)), v) / T


@pytest.mark.parametrize("act", ["relu", "sigmoid"])
def test_every_layer_matches_naive_dense_reference(act):
    m = _model(act, M=6)
    assert m.layer_types[:m.block_size] == (["attn"] * (m.spec.N + 1) + ["mlp"] + ["ewml"] * m.spec.N
                                             + ["attn", "mlp"])
    X, Y, xq, w0 = V.random_prompt(m, 2, seed=5)
    states = m(m.embed(X, Y, xq, w0), return_all=True)
    for layer, Hin, Hout in zip(m.layers[:m.block_size], states, states[1:]):
        assert float((_naive(layer, Hin) - Hout).abs().max()) <= 1e-9 * (1 + float(Hout.abs().max()))
    G = torch.randn(1, 5, m.embed_dim, generator=torch.Generator().manual_seed(0), dtype=DTYPE)  # arbitrary states
    for layer in m.layers[:m.block_size]:
        assert float((_naive(layer, G) - layer(G)).abs().max()) <= 1e-9 * (1 + float(G.abs().max()) ** 3)
        # the library's reference (what icgd/03 prints) is this test's formula
        assert torch.allclose(paper_layer(layer, G), _naive(layer, G), rtol=1e-12, atol=1e-12)
    Q, K, Vm = next(layer for layer in m.layers if layer.kind == "attn").dense()
    # the printed matrix form (swap) with Q and K exchanged is the vector form
    assert torch.allclose(relu_attention(G, K, Q, Vm, swap=True), relu_attention(G, Q, K, Vm), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(relu_attention(G, Q, K, Vm, swap=True), relu_attention(G, Q, K, Vm))


def test_every_slot_of_one_block_relu_exact():
    m = _model("relu", delta=1e-4)
    X, Y, xq, w0 = V.random_prompt(m, 2, seed=3)
    parts = explicit_gradient(m.spec, w0, X, Y, "relu", "squared")
    assert float(parts.grad.abs().max()) > 1e-3
    errs = V.slot_errors(m, X, Y, xq, w0)
    assert set(errs) == {"g"} | {f"{s}{j}" for j in range(1, 4) for s in ("p", "s")} | {"r0", "r1", "r2"}
    assert max(errs.values()) <= 1e-9


@pytest.mark.parametrize("act", ["softplus", "sigmoid", "tanh"])
def test_slots_within_lemmas_2_to_4(act):
    m = _model(act, M=48, R=None if act != "softplus" else 8.0)
    X, Y, xq, w0 = V.random_prompt(m, 2, seed=4)
    errs = V.slot_errors(m, X, Y, xq, w0)
    c = Bd.constants(m, w0[:, None], X, Y)
    for j in range(1, m.spec.N + 1):
        assert 0 < errs[f"p{j}"] <= Bd.lemma2(c, j, m.spec.out(j))
        assert 0 < errs[f"r{j - 1}"] <= Bd.lemma3(c, j, m.spec.out(j - 1) if j > 1 else m.spec.dx)
    assert errs["g"] <= Bd.lemma4(c)
    assert max(errs[f"s{j}"] for j in range(1, 4)) <= Bd.lemma6(c)


@pytest.mark.parametrize("act,loss", [("relu", "squared"), ("tanh", "logcosh"), ("softplus", "squared")])
def test_state_contract_query_and_permutation(act, loss):
    m = _model(act, loss=loss, R=6.0 if act == "softplus" else None)
    X, Y, xq, w0 = V.random_prompt(m, 3, seed=7)
    claims = Claims("contract")
    V.check_state_contract(claims, m, X, Y, xq, w0)
    V.check_query(claims, m, X, Y, xq, w0)
    V.check_permutation(claims, m, X, Y, xq, w0)
    assert claims.all_hold()


def test_relu_transformer_is_projected_gd_and_box_is_active():
    m = _model("relu", box=0.6, eta=10.0, L=3)
    X, Y, xq, w0 = V.random_prompt(m, 2, seed=11)
    ws = m.run(X, Y, xq, w0)
    assert ws.shape == (2, m.L + 1, m.spec.D_N) and torch.equal(ws[:, 0], w0)  # the embedded w0, read back
    proj = V.reference_gd(m, X, Y, w0)
    free = V.reference_gd(m, X, Y, w0, box=None)
    assert float((ws - proj).abs().max()) <= 1e-9
    assert float((ws - free).abs().max()) >= 1e-2  # the box is active: unprojected GD differs
    assert float(ws.abs().max()) <= m.box


def test_prompt_length_changes_the_step():
    m = _model("relu", n=7, L=2)
    for n_prime in (3, 12):
        X, Y, xq, w0 = V.random_prompt(m, 2, n_prime=n_prime, seed=n_prime)
        ws = m.run(X, Y, xq, w0)
        eff = m.eta * (m.n + 1) * n_prime / (m.n * (n_prime + 1))
        assert float((ws - V.reference_gd(m, X, Y, w0, eta=eff)).abs().max()) <= 1e-9
        assert float((ws - V.reference_gd(m, X, Y, w0)).abs().max()) >= 1e-4


def test_smooth_error_falls_with_M():
    errs = []
    for M in (16, 64):
        m = _model("sigmoid", M=M, box=2.0, eta=1.0)
        X, Y, xq, w0 = V.random_prompt(m, 2, seed=1)
        errs.append(float((m.run(X, Y, xq, w0) - V.reference_gd(m, X, Y, w0)).norm(dim=-1).max()))
    assert 0 < errs[1] < errs[0] / 8


def test_sizes_against_formulas():
    for act, kw in (("tanh", {}), ("relu", {}), ("softplus", {"loss": "logcosh", "R": 5.0})):
        m = _model(act, **kw)
        s, D = m.spec, m.embed_dim
        assert m.num_layers == (2 * s.N + 4) * m.L == len(m.layers) == len(m.layer_types)
        assert D == s.dx + 2 * s.dy + s.D_N + 3 * ((s.N - 1) * s.K + s.dy) + 2
        assert s.D_N == (s.dx + s.dy) * s.K + (s.N - 2) * s.K ** 2
        hr, hd = m.r_hat.num_terms, m.dr_hat.num_terms
        want = ([s.out(j) * hr for j in range(1, s.N + 1)] + [((s.N - 1) * s.K + s.dy) * hd, 0, s.dy]
                + [s.K] * (s.N - 1) + [2 * ((s.N - 1) * s.K + s.dy), 0])
        assert m.heads_per_layer() == want * m.L
        assert m.width == 2 * (D - s.dx - s.dy - 2)
        dense = sum(3 * h * D * D if k != "mlp" else 0 for h, k in zip(m.heads_per_layer(), m.layer_types))
        dense += sum(2 * l.hidden_width * D for l in m.layers if l.kind == "mlp")
        assert m.num_parameters() == dense
        assert all(float(rs.l1_norms().max()) <= 1 + 1e-12 for rs in (m.r_hat, m.dr_hat))
    names = m.layout.names()
    assert names[:3] == ["x", "y", "w"] and names[-2:] == ["one", "t"] and {"g", "p3", "r2", "s1"} <= set(names)


def test_size_formulas_are_registered_paper_formulas():
    from tfbook.claims import FORMULAS

    formulas = (Bd.D_N, Bd.num_layers, Bd.attention_layers, Bd.ewml_layers, Bd.mlp_layers, Bd.max_heads,
                Bd.embed_dim, Bd.relu_term_l1_bound)
    assert all(FORMULAS[f"{f.__module__}.{f.__qualname__}"] is f for f in formulas)
    for act, M in (("tanh", 32), ("relu", 32)):
        m = _model(act, M=M)
        s, counted = m.spec, m.counted_sizes()
        terms = (M + 1, M + 1) if act != "relu" else (1, 2)  # interpolants; ReLU itself and the ramp
        assert s.D_N == Bd.D_N(s.dx, s.dy, s.K, s.N)
        assert counted.layers == Bd.num_layers(s.N, m.L)
        assert counted.attention_layers == Bd.attention_layers(s.N, m.L)
        assert counted.ewml_layers == Bd.ewml_layers(s.N, m.L)
        assert counted.ff_layers == Bd.mlp_layers(m.L)
        assert counted.max_heads == Bd.max_heads(s.dy, s.K, s.N, *terms)
        assert counted.embed_dim == Bd.embed_dim(s.dx, s.dy, s.K, s.N)
        assert Bd.paper_sizes(s.dx, s.dy, s.K, s.N, m.L, *terms) == counted.__class__(
            **{k: getattr(counted, k) for k in ("layers", "attention_layers", "ewml_layers", "ff_layers",
                                                "max_heads", "embed_dim", "ff_width")})
    with pytest.raises(ValueError, match="real number"):
        Bd.embed_dim(m, 1, 2, 3)  # a model is not a paper's parameter


def test_a_model_that_does_nothing_fails_the_invariance_claims():
    m = _model("tanh")
    X, Y, xq, w0 = V.random_prompt(m, 2, seed=0)
    for check in (V.check_state_contract, V.check_query):
        check(Claims("ok"), m, X, Y, xq, w0)
        with perturb(scale=0.0), pytest.raises(ClaimError):
            check(Claims("dead"), m, X, Y, xq, w0)
    assert V.query_leak(m, X, Y, xq, w0) == (0.0, 0.0)
    with perturb(scale=0.0):
        assert V.query_leak(m, X, Y, xq, w0) == (math.inf, math.inf)
    leak = V.query_leak(V.drop_query_gate(m), X, Y, xq, w0)
    assert 0 < leak[0] < math.inf and 0 < leak[1] < math.inf


def test_deterministic_no_autograd_weights_fixed(monkeypatch):
    torch.manual_seed(1)
    a = _model("softplus", R=5.0)
    torch.manual_seed(2)
    torch.randn(100)
    b = _model("softplus", R=5.0)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    before = [p.clone() for p in a.parameters()]

    def boom(*args, **kwargs):
        raise AssertionError("autograd used")

    monkeypatch.setattr(torch.autograd, "grad", boom)
    monkeypatch.setattr(torch.autograd, "backward", boom)
    monkeypatch.setattr(torch.Tensor, "backward", boom)
    c = _model("tanh")
    X, Y, xq, w0 = V.random_prompt(a, 2, seed=0)
    a.run(X, Y, xq, w0)
    c.run(X, Y, xq, w0)
    assert all(torch.equal(p, q) for p, q in zip(before, a.parameters()))


def test_a_priori_R_covers_worst_prompts():
    for act in ("softplus", "tanh", "relu"):
        m = _model(act, box=1.0, M=64)
        X = torch.ones(1, 7, 3, dtype=DTYPE)
        w0 = torch.ones(1, m.spec.D_N, dtype=DTYPE)  # the largest pre-activations
        H = m.embed(X, torch.ones(1, 7, 2, dtype=DTYPE), X[:, 0], w0)
        trace = m.trace(H)
        worst = 0.0
        lay = m.layout
        S = trace.state("b0.deriv")
        for j in range(1, m.spec.N + 1):
            src = lay.read(S, "x" if j == 1 else f"p{j - 1}")
            Vj = m.spec.matrices(w0)[j - 1]
            worst = max(worst, float((src @ Vj.transpose(-1, -2)).abs().max()))
        assert 0.99 * m.R <= worst <= m.R  # attained by the worst prompt


# --- safe defaults: tables whose accuracy does not depend on their range -------------------------------

HELD_OUT = (dict(dx=4, dy=2, K=3, N=3, n=9, L=2, eta=0.5), dict(dx=7, dy=2, K=3, N=5, n=13, L=3, eta=0.5))


def _gd_ratios(m, prompts):
    """|w_hat - w_GD| / |w_GD - w0| after the L steps, one per prompt."""
    X, Y, xq, w0 = prompts
    ref = V.reference_gd(m, X, Y, w0)[:, -1]
    err = (m.run(X, Y, xq, w0)[:, -1] - ref).norm(dim=-1)
    disp = (ref - w0).norm(dim=-1)
    assert float(disp.min()) > 1e-3  # GD moves: the ratio has a scale
    return err / disp


def _extreme_prompt(m):
    """Every x, y at +bound and every weight at +box: the largest pre-activations and residuals."""
    s = m.spec
    ones = lambda *shape: torch.ones(*shape, dtype=DTYPE)  # noqa: E731
    return ones(1, m.n, s.dx) * m.x_bound, ones(1, m.n, s.dy) * m.y_bound, ones(1, s.dx), ones(1, s.D_N) * m.box


def _dead_output_prompt(m):
    """x at +bound, V_1 .. V_(N-1) at +box, V_N at -box: the output units' pre-activations are about
    -K^(N-1) dx, so p(N), r'(N-1) and the gradient vanish to rounding (GD moves w by ~1e-14)."""
    s = m.spec
    X, Y, xq, w = _extreme_prompt(m)
    w[:, s.offset(s.N):] = -m.box
    return X, Y, xq, w


def _near_converged_prompt(m, seed):
    """A random prompt whose w0 is 400 GD steps in: the next L steps move w by a few 1e-3."""
    X, Y, xq, w0 = V.random_prompt(m, 1, seed=seed, live=True)
    return X, Y, xq, V.reference_gd(m, X, Y, w0, steps=400)[:, -1]


@pytest.mark.parametrize("act", ["softplus", "tanh", "sigmoid"])
@pytest.mark.parametrize("size", [0, 1])
def test_default_configuration_on_held_out_sizes(act, size):
    """R=None, the default M: no range error on admissible prompts, and the accuracy criterion of
    `verify.gd_criterion` (5% of GD's displacement plus the tables' errors carried through Lemmas 2-6 and
    Corollary 1.1) on every kind of prompt: random ones without selection, a dead-output prompt (GD moves
    ~1e-14, the transformer ~1e-3: a 5% criterion alone fails there) and a near-converged one. Worst
    ratio over these, when written: 0.13 (softplus, dead output); GD with a step 10% too large scores
    1.3 to 2.

    Before the tables had tails (interpolant on [-R, R] with R = 567 for softplus at the second size)
    the relative error was 2.4 at M=64 and 0.9 at M=256."""
    kw = {} if act == "softplus" else {"activation": act}  # softplus is the default
    m = build_transformer(**HELD_OUT[size], **kw)
    assert m.activation == act and m.R >= m.spec.dx  # the a-priori range, not a user's
    m.run(*_extreme_prompt(m))  # the largest admissible arguments stay inside the tables' ranges
    prompts = {"random": V.random_prompt(m, 3, seed=10), "dead output": _dead_output_prompt(m),
               "near-converged": _near_converged_prompt(m, 3)}
    for name, prompt in prompts.items():
        assert V.gd_criterion(m, *prompt)["ratio"] <= 1.0, name
    if act == "softplus":  # the dead prompt is one: GD stays put, the tables move w
        X, Y, xq, w0 = prompts["dead output"]
        gd = V.reference_gd(m, X, Y, w0)
        assert float((gd[:, -1] - w0).norm()) < 1e-10 < float((m.run(X, Y, xq, w0)[:, -1] - w0).norm())
    # the criterion has force: GD with a 10% larger step fails it on the random prompts
    X, Y, xq, w0 = prompts["random"]
    wrong = build_transformer(**dict(HELD_OUT[size], eta=1.1 * HELD_OUT[size]["eta"]), **kw)
    gd = V.reference_gd(m, X, Y, w0)
    err = (wrong.run(X, Y, xq, w0) - gd).norm(dim=-1)
    bound = V.GD_RELATIVE * (gd - w0[:, None]).norm(dim=-1) + V.gd_tolerance(m, X, Y, w0, gd)
    assert float((err[:, 1:] / bound[:, 1:]).max()) > 1.2


def test_running_gradient_error_bounds_each_step():
    """The per-step gradient error of the transformer is within `bounds.running_gradient_error` at its own
    iterate (sound: held-out sizes, every smooth activation, log-cosh too), and the bound is not vacuous:
    within 1000x of the error, and below 1% of the gradient itself."""
    for act, loss in (("softplus", "squared"), ("tanh", "logcosh"), ("sigmoid", "squared")):
        m = build_transformer(**HELD_OUT[0], activation=act, loss=loss)
        X, Y, xq, w0 = V.random_prompt(m, 3, seed=4)
        ws = m.run(X, Y, xq, w0)
        step = V.per_step_errors(m, ws, X, Y) / m.eta  # (B, L): the gradient error of each block
        bound = torch.stack([Bd.running_gradient_error(m, ws[:, l], X, Y) for l in range(m.L)], 1)
        grad = torch.stack([autograd_gradient(m.spec, ws[:, l], X, Y, act, loss).norm(dim=-1)
                            for l in range(m.L)], 1)
        assert float((step / bound).max()) <= 1.0
        assert float((step / bound).max()) >= 1e-3
        assert float((bound / grad).max()) <= 0.01
    m = build_transformer(**HELD_OUT[0], activation="relu", delta=1e-3)
    X, Y, _, w0 = V.random_prompt(m, 1, seed=4)
    with pytest.raises(ValueError, match="ReLU ramp"):
        Bd.running_gradient_error(m, w0, X, Y)


@pytest.mark.parametrize("size", [dict(dx=3, dy=1, K=4, N=3, n=20, L=4, eta=0.5),  # notebook 05's ReLU sizes
                                  dict(dx=5, dy=1, K=3, N=4, n=10, L=2, eta=0.5), HELD_OUT[1]])
def test_relu_logcosh_within_one_percent_of_gd(size):
    """ReLU + log-cosh at the default M: the loss table's error no longer grows with R_u (49 to 568 here)."""
    m = build_transformer(**size, activation="relu", loss="logcosh", delta=1e-5)
    assert m.R_u >= 40
    m.run(*_extreme_prompt(m))
    for seed in (0, 10):
        assert float(_gd_ratios(m, V.random_prompt(m, 3, seed=seed, live=True)).max()) <= 0.01


@pytest.mark.parametrize("key", sorted(C.TABLES))
def test_tables_accuracy_is_independent_of_their_range(key):
    """Below the cut c the table is the interpolant on [-R, R]; beyond it M - 1 pieces on [-c, c] and the
    function's own tails: the sup error over [-R, R] stays under `table_bound`, for R = 3 or R = 600."""
    g = C._FUNCTIONS[key]
    for M in (32, 256):
        c, bound = C.table_cut(key, M)
        assert 2 < c < 12 and bound < (0.02 if M == 32 else 5e-4)
        errs = []
        for R in (3.0, 50.0, 600.0):
            rs = C.table(key, R, M)
            assert rs.num_terms == M + 1 and float(rs.l1_norms().max()) <= 1 + 1e-12
            core = min(R, c)  # knots and midpoints of the core, a coarser grid of the tails
            t = torch.cat([torch.linspace(-R, R, 60001, dtype=DTYPE), torch.linspace(-core, core, 8 * M + 1,
                                                                                   dtype=DTYPE)])
            errs.append(float((rs(t) - g(t)).abs().max()))
            assert errs[-1] <= C.table_bound(key, R, M) * (1 + 1e-9) + 1e-15
        assert errs[2] <= bound * (1 + 1e-9) and errs[1] <= bound * (1 + 1e-9)
        plain = float((interpolant(g, 600.0, M)(t) - g(t)).abs().max())  # the old table on [-600, 600]
        assert plain >= 50 * errs[2]
    with pytest.raises(ValueError, match="M"):
        tailed_interpolant(torch.tanh, 3.0, 1)


# --- mutations ---------------------------------------------------------------------------------------

def test_mutations_break_the_claims():
    m = _model("relu", L=2)
    X, Y, xq, w0 = V.random_prompt(m, 2, seed=3)

    def gd_claim():
        c = Claims("gd")
        err = float((m.run(X, Y, xq, w0) - V.reference_gd(m, X, Y, w0)).abs().max())
        c.check("Thm 1", "ReLU net: |w_hat - w_GD|", err, 1e-9)

    gd_claim()
    with perturb(scale=1 + 1e-3, names=["b0.update"], heads=[0]), pytest.raises(ClaimError):
        gd_claim()
    with perturb(scale=1 + 1e-3), pytest.raises(ClaimError):
        gd_claim()
    with perturb(scale=0.0, names=["*.proj"]), pytest.raises(ClaimError):
        V.check_state_contract(Claims("c"), m, X, Y, xq, w0)
    bad = V.drop_query_gate(m)
    with pytest.raises(ClaimError):
        V.check_query(Claims("q"), bad, X, Y, xq, w0)
    V.check_query(Claims("q"), m, X, Y, xq, w0)  # the original keeps its gate


# --- bad input -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,name", [
    ({"dx": 0}, "dx"), ({"dy": 1.0}, "dy"), ({"K": -1}, "K"), ({"n": 0}, "n"), ({"L": True}, "L"), ({"M": 0}, "M"),
    ({"N": 1}, "N"), ({"eta": 0.0}, "eta"), ({"eta": math.inf}, "eta"), ({"box": -1.0}, "box"),
    ({"x_bound": math.nan}, "x_bound"), ({"y_bound": 0}, "y_bound"), ({"R": 0.0}, "R"),
    ({"activation": "gelu"}, "activation"), ({"loss": "l1"}, "loss"),
    ({"activation": "relu", "delta": None}, "delta"), ({"activation": "relu", "delta": 0.0}, "delta")])
def test_build_errors(kw, name):
    args = dict(dx=2, dy=1, K=2, N=2, n=3, L=1, eta=0.1)
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        build_transformer(**args)


def test_embed_run_and_interpolant_errors():
    m = build_transformer(2, 1, 2, 2, 3, 1, 0.1, activation="relu", delta=0.01)
    X, Y, xq, w0 = V.random_prompt(m, 2, seed=0)
    bad = [((X[0], Y, xq, w0), "X"), ((X, Y[:, :2], xq, w0), "Y"), ((X, Y, xq[:1], w0), "x_query"),
           ((X, Y, xq, w0[:, :-1]), "w0"), ((X[:, :0], Y[:, :0], xq, w0), "X"), ((X * 2, Y, xq, w0), "X"),
           ((X, Y, xq * 2 + 1, w0), "x_query"), ((X, Y * 3, xq, w0), "Y"), ((X, Y, xq, w0 * 3), "w0"),
           ((X.clone().fill_(math.nan), Y, xq, w0), "X")]
    for args, name in bad:
        with pytest.raises(ValueError, match=name):
            m.embed(*args)
    with pytest.raises(ValueError):
        m(torch.zeros(1, 3, m.embed_dim + 1, dtype=DTYPE))
    with pytest.raises(ValueError, match="R"):
        interpolant(torch.tanh, 0.0, 4)
    with pytest.raises(ValueError, match="M"):
        interpolant(torch.tanh, 1.0, 0)


# --- Theorem 6's quantiser and App. G's experiment (small scale) -----------------------------------------

def test_quantization_ff_steps_penalty_and_errors():
    from tfbook.icgd.softmax_univ import embed, quant, quantization_ff

    D, B, delta = 8, 2.0, 1e-3
    ff = quantization_ff(2, D, B, delta)
    assert ff.kind == "mlp"
    z = torch.tensor([[[0.1, 0.6], [1.3, 1.9], [2.5, 0.3], [-0.4, 0.2]]], dtype=DTYPE)  # (1, 4, 2) off the ramps
    q = ff(embed(z))[..., 2:4]
    out = ((z < 0) | (z > B)).to(DTYPE).sum(-1, keepdim=True)  # penalties per token
    assert torch.allclose(q, quant(z, D, B) - B * out, atol=1e-10)
    with pytest.raises(ValueError, match="D"):
        quantization_ff(1, 0, 1.0, 0.1)
    with pytest.raises(ValueError, match="delta"):
        quantization_ff(1, 4, 1.0, 0.0)


def test_experiment_pieces_small():
    from tfbook.icgd import experiments as ex

    cfg = ex.ExperimentConfig(d=3, target_width=4, train_points=6, test_points=8, width=16, blocks=1, heads=2,
                              steps=30, test_prompts=64, gd_steps=20)
    model, log = ex.train(cfg, "relu")
    assert len(log["losses"]) == 30 and all(math.isfinite(v) for v in log["losses"])
    ts = ex.test_set(cfg, 0.0, seed=1)
    assert ts.x.shape == (64, 9, 3) and ts.y.shape == (64, 9) and float(ts.within_var.mean()) > 0
    cm = ex.context_mean(ts)
    assert torch.allclose(cm[:, 3], ts.y[:, :3].mean(1))
    ls = ex.least_squares(ts)
    Xa = torch.cat([ts.x[0, :6], torch.ones(6, 1)], 1).double()
    beta = torch.linalg.solve(Xa.T @ Xa + 1e-3 * torch.eye(4, dtype=torch.float64), Xa.T @ ts.y[0, :6].double())
    assert abs(float(ls[0, 6]) - float(torch.cat([ts.x[0, 6], torch.ones(1)]).double() @ beta)) < 1e-4
    assert float(ex.r2(ts.y, ts.y).min()) == 1.0
    res = ex.evaluate(cfg, {"relu": model}, [4])
    assert set(res) == set(cfg.mixtures) and "GD baseline" in res[0.0] and len(res[0.0]["relu"]["r2"]) == 9


def test_interpolant_accepts_scalar_and_numpy_functions():
    import numpy as np

    t = -1.5 + 3.0 * torch.arange(7, dtype=DTYPE) / 6  # the knots -R + 2Rm/M
    for g in (math.tanh, np.tanh, lambda v: v ** 2):
        rs = interpolant(g, 1.5, 6)
        want = torch.tensor([float(g(float(v))) for v in t], dtype=DTYPE)
        assert rs.num_terms == 7 and float((rs(t) - want).abs().max()) <= 1e-12


def test_depth_sweep_small():
    from dataclasses import replace

    from tfbook.icgd import experiments as ex

    cfg = ex.ExperimentConfig(d=3, target_width=4, train_points=6, test_points=8, width=16, heads=2, steps=5,
                              test_prompts=32, seed=3)
    out = ex.depth_sweep(cfg, [1, 2], ("softmax", "relu"))
    s = out["settings"]
    assert s["depths"] == [1, 2] and s["attentions"] == ["softmax", "relu"] and s["seed"] == 3
    assert s["device"] == "cpu" and s["config"]["steps"] == 5 and s["torch"] == torch.__version__
    for attention in ("softmax", "relu"):
        assert set(out["curves"][attention]) == {1, 2}
        for c in out["curves"][attention].values():
            assert len(c["r2"]) == len(c["r2_within"]) == 9 and c["seconds"] >= 0
            assert all(math.isfinite(v) for v in c["r2"] + c["r2_within"] + [c["final_loss"]])
    # each depth is a different model: the two curves differ; the sweep is deterministic
    assert out["curves"]["softmax"][1]["r2"] != out["curves"]["softmax"][2]["r2"]
    again = ex.depth_sweep(cfg, [1, 2], ("softmax", "relu"))
    assert again["curves"] == {a: {d: {**c, "seconds": again["curves"][a][d]["seconds"]} for d, c in v.items()}
                               for a, v in out["curves"].items()}
    # the depth-2 curve is the one `train` gives with blocks=2 on the same test prompts
    model, _ = ex.train(replace(cfg, blocks=2), "relu")
    ts = ex.test_set(cfg, 0.0, seed=cfg.seed + 100)
    with torch.no_grad():
        assert ex.r2(model(ts.x, ts.y), ts.y).tolist() == out["curves"]["relu"][2]["r2"]
    for bad, name in (([], "depths"), ([0], "depths"), ([1.5], "depths")):
        with pytest.raises(ValueError, match=name):
            ex.depth_sweep(cfg, bad)
    with pytest.raises(ValueError, match="attentions"):
        ex.depth_sweep(cfg, [1], ("linear",))


@pytest.mark.parametrize("kwargs, message", [
    ({"d": 0}, "d must be an int >= 1"), ({"steps": 2.5}, "steps must be an int"),
    ({"width": 30, "heads": 4}, "multiple of heads"),
    ({"lr": 0.0}, "lr must be"), ({"mixtures": (0.0, 1.5)}, "mixtures must be"), ({"seed": -1}, "seed must be an int >= 0"),
])
def test_experiment_config_is_validated(kwargs, message):
    from tfbook.icgd import experiments as ex

    with pytest.raises(ValueError, match=message):
        ex.ExperimentConfig(**kwargs)


def test_delta_is_refused_for_smooth_activations():
    with pytest.raises(ValueError, match="delta .* applies only to activation 'relu'"):
        build_transformer(dx=2, dy=1, K=2, N=2, n=3, L=1, eta=0.1, activation="tanh", M=8, delta=0.1)


def _prompt(model, n, box, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = model.spec

    def uniform(*shape, scale=1.0):
        return (torch.rand(*shape, generator=g, dtype=DTYPE) * 2 - 1) * scale

    return uniform(1, n, s.dx), uniform(1, n, s.dy), uniform(1, s.dx), uniform(1, s.D_N, scale=box)


def test_a_run_outside_the_tables_range_raises_and_the_a_priori_range_does_not():
    kw = dict(dx=3, dy=1, K=4, N=3, n=5, L=2, eta=1e-5, activation="softplus", box=2.0)
    small = build_transformer(**kw, R=2.0)
    prompt = _prompt(small, 5, 2.0)
    with pytest.raises(ValueError, match=r"block 0, layer fwd2: a pre-activation of size .* leaves its table's range \[-2, 2\]"):
        small.run(*prompt)
    with pytest.raises(ValueError, match="leaves its table's range"):  # model(H) is guarded too
        small(small.embed(*prompt))
    safe = build_transformer(**kw)
    H = safe.embed(*prompt)
    worst = max(float(safe.preactivations(H, j).abs().max()) for j in (1,))
    assert worst <= safe.R and torch.equal(safe(H), safe.block_states(H)[-1])  # both run self._run
    assert torch.equal(safe(H.numpy()), safe(H))  # an array is taken as float64 tokens
    with pytest.raises(ValueError, match=r"H must have shape \(\*, \*, "):
        safe(H[..., :-1])


def test_relu_log_cosh_residual_outside_the_loss_table_raises():
    model = build_transformer(dx=3, dy=1, K=4, N=2, n=5, L=1, eta=0.1, activation="relu", delta=1e-3,
                              loss="logcosh", box=2.0, R=0.5)
    with pytest.raises(ValueError, match=r"layer loss: a residual p\(N\) - y \(query included\) of size"):
        model.run(*_prompt(model, 5, 2.0))


@pytest.mark.parametrize("R", [0.5, 2.0, 10.0])
def test_relu_with_a_small_user_range_cannot_leak_the_query_into_the_gradient(R):
    """Held-out sizes: with ReLU the tables are exact, but R sets the query gate R_g. Where the query's
    p(N) exceeds R_u the gate no longer zeroes its g slot and the query enters the gradient: the run must
    refuse (it used to return a w several GD steps away from the true one, without a word)."""
    kw = dict(dx=3, dy=1, K=4, N=3, n=5, L=2, eta=0.01, activation="relu", delta=1e-3, box=2.0)
    model = build_transformer(**kw, R=R)
    X, Y, _, w0 = _prompt(model, 5, 2.0, seed=2)
    prompt = (X, Y, torch.ones(1, 3, dtype=DTYPE), w0.abs())  # admissible; every unit of the query alive
    H = model.embed(*prompt)
    states = build_transformer(**kw)(H, return_all=True)  # the a-priori range: a safe gate
    query_pN = max(float(model.read(S[:, -1], "p3").abs().max()) for S in states)
    assert query_pN > model.R_u  # the case the guard exists for
    with pytest.raises(ValueError, match=r"residual p\(N\) - y \(query included\) of size .* leaves"):
        model.run(*prompt)
    safe = build_transformer(**kw)
    assert float(V.step_relative_errors(safe, safe.run(*prompt), *prompt[:2]).max()) < 0.05


def test_hand_built_tokens_outside_the_admissible_prompts_raise():
    """model(H) skips `embed`'s checks; the run itself refuses a query x beyond x_bound (softplus and ReLU)."""
    for kw in (dict(activation="softplus"), dict(activation="relu", delta=1e-3)):
        model = build_transformer(dx=2, dy=1, K=3, N=2, n=4, L=1, eta=0.01, **kw)
        H = model.embed(*_prompt(model, 4, 1.0, seed=1))
        bad = H.clone()
        bad[:, -1, model.layout["x"]] = 50.0
        with pytest.raises(ValueError, match=r"H must have every \|x entry\| <= 1 .* got 50"):
            model(bad)
        bad = H.clone()
        bad[:, 0, model.layout["w"]] = 3.0
        with pytest.raises(ValueError, match=r"H must have every \|w entry\| <= 1"):
            model(bad)
        model(H)  # the admissible tokens run


# --- per-step claim, parameter norms (Theorem 1's B_theta) ------------------------------------------------

def test_step_relative_errors_separate_a_wrong_step_and_a_dropped_gate():
    """The per-step error relative to the exact step: small for the construction, about 0.02 for GD with a
    2% wrong step, large without the query gate, 1 for a model that leaves w in place."""
    kw = dict(dx=3, dy=1, K=4, N=3, n=20, L=3, activation="sigmoid", box=1.0, M=64)
    m = build_transformer(**kw, eta=0.5)
    X, Y, xq, w0 = V.random_prompt(m, 2, seed=0)
    ok = float(V.step_relative_errors(m, m.run(X, Y, xq, w0), X, Y).max())
    wrong = build_transformer(**kw, eta=0.51)
    off = V.step_relative_errors(m, wrong.run(X, Y, xq, w0), X, Y, eta=0.5)
    gate = V.step_relative_errors(m, V.drop_query_gate(m).run(X, Y, xq, w0), X, Y)
    assert 0 < ok < 0.005 < 0.015 < float(off.min()) <= float(off.max()) < 0.025 and float(gate.max()) > 0.005
    ws = wrong.run(X, Y, xq, w0)
    exact = torch.stack([V.reference_gd(m, X, Y, ws[:, l], steps=1)[:, 1] for l in range(3)], dim=1)
    assert torch.allclose(V.per_step_errors(m, ws, X, Y, eta=0.5), (ws[:, 1:] - exact).norm(dim=-1), atol=1e-14)
    assert torch.allclose(off, (ws[:, 1:] - exact).norm(dim=-1) / (exact - ws[:, :-1]).norm(dim=-1), atol=1e-12)
    with perturb(scale=0.0):
        assert torch.allclose(V.step_relative_errors(m, m.run(X, Y, xq, w0), X, Y), torch.ones(2, 3, dtype=DTYPE))


def _norm_params(m):
    return dict(dy=m.spec.dy, K=m.spec.K, N=m.spec.N, eta=m.eta, C1=m.r_hat.C, C2=m.dr_hat.C, R3=m.R_g,
                C3=4.0 if m.u_hat is None else m.u_hat.C, C_w=1.0 + max(1.0, m.box))


@pytest.mark.parametrize("act,loss", [("tanh", "squared"), ("softplus", "logcosh"), ("relu", "squared")])
def test_theta_norms_within_the_proofs_constants(act, loss):
    """B_theta of (C.1) (largest entries) per layer, against Lemmas 2-5, D.16 and our projection."""
    from tfbook.claims import FORMULAS

    assert FORMULAS[f"{Bd.theta_norm_bound.__module__}.{Bd.theta_norm_bound.__qualname__}"] is Bd.theta_norm_bound
    m = _model(act, loss=loss, M=16, R=5.0 if act == "softplus" else None)
    norms = V.theta_norms(m)
    s, bs = m.spec, m.block_size
    assert len(norms) == m.num_layers and norms[bs:] == norms[:bs] * (m.L - 1)  # the blocks share their weights
    C3 = 4.0 if m.u_hat is None else m.u_hat.C
    tol = 1 + 1e-12
    assert all(v <= (1 + s.K * m.r_hat.C) * tol for v in norms[:s.N])  # Lemma 2
    assert norms[s.N] == pytest.approx(1 + ((s.N - 1) * s.K + s.dy) * m.dr_hat.C, rel=1e-12)  # Lemma 3, attained
    assert norms[s.N] > 1 + s.K * (s.N - 1) * m.dr_hat.C  # above the printed constant: the d_y units
    assert norms[s.N + 1] <= (m.R_g + 1 + C3) * tol  # Lemma 4
    assert norms[s.N + 2: 2 * s.N + 2] == [1.0 + s.dy] + [1.0 + s.K] * (s.N - 1)  # Lemma 5: 1 + heads
    assert norms[-2] <= 1 + 2 * m.eta * s.N * s.K and norms[-1] == 1.0 + max(1.0, m.box)  # D.16, projection
    assert max(norms) <= Bd.theta_norm_bound(**_norm_params(m)) * tol
    with pytest.raises(ValueError, match="real number"):
        Bd.theta_norm_bound(**dict(_norm_params(m), C1=m.r_hat))
    # layer by layer: each type against its own proof's constant, whose largest is theta_norm_bound
    per_layer = {k: f(**_norm_params(m)) for k, f in Bd.THETA_NORM_BOUNDS.items()}
    assert max(per_layer.values()) == Bd.theta_norm_bound(**_norm_params(m))
    assert all(FORMULAS[f"{f.__module__}.{f.__qualname__}"] is f for f in Bd.THETA_NORM_BOUNDS.values())
    kinds = [next(k for k in Bd.THETA_LAYERS if layer.name.split(".")[1].startswith(k)) for layer in m.layers[:bs]]
    assert all(v <= per_layer[k] * tol for v, k in zip(norms, kinds))
    assert norms[s.N] * 1.37 > per_layer["deriv"]  # a derivative layer 37 % too large fails its own bound


def test_relu_weights_grow_like_one_over_delta():
    """The ramp's coefficients are (1 + delta)/delta: max |weight| and B_theta grow like 1/delta."""
    from tfbook import plotting

    deltas = [1e-3, 1e-5, 1e-7]
    ms = [_model("relu", delta=d) for d in deltas]
    inv = [1 / d for d in deltas]
    max_w = [float(m.counted_sizes().max_abs_weight) for m in ms]
    assert plotting.fit_slope(inv, max_w)[0] == pytest.approx(1, abs=0.01)
    assert plotting.fit_slope(inv, [max(V.theta_norms(m)) for m in ms])[0] == pytest.approx(1, abs=0.01)


def test_permutation_claim_holds_at_small_delta():
    """Rounding grows like 1/delta; the permutation claim's tolerance grows with the largest weight.

    Whether the rounding noise of this model exceeds a fixed 1e-10 depends on the BLAS's summation order
    (it does on some CPUs, not under ``MKL_CBWR=COMPATIBLE``), so the test asserts the tolerance's
    scaling, never the size of the noise.
    """
    m = build_transformer(dx=7, dy=2, K=3, N=5, n=13, L=3, eta=0.5, activation="relu", delta=1e-7)
    X, Y, xq, w0 = V.random_prompt(m, 3, seed=0)
    biggest = float(m.counted_sizes().max_abs_weight)
    assert biggest >= 1e6  # the ReLU ramp's 1/delta
    tol = V.ROUNDOFF * max(1.0, biggest / 1e3)  # check_permutation's tolerance
    assert tol >= 1e3 * V.ROUNDOFF  # scaled well above the fixed ROUNDOFF for these large weights
    perm = torch.randperm(13, generator=torch.Generator().manual_seed(2))  # the permutation check_permutation draws
    diff = float((m.run(X[:, perm], Y[:, perm], xq, w0) - m.run(X, Y, xq, w0)).abs().max())
    assert diff <= tol
    claims = Claims("perm")
    V.check_permutation(claims, m, X, Y, xq, w0)
    assert claims.all_hold()


def test_constants_reuse_the_table_errors():
    m = _model("sigmoid", M=16)
    X, Y, xq, w0 = V.random_prompt(m, 2, seed=0)
    ws = m.run(X, Y, xq, w0)
    c = Bd.constants(m, ws, X, Y)
    assert Bd.constants(m, ws, X, Y, eps=(c.eps_r, c.eps_dr, c.eps_l)) == c and c.eps_r > 0


def test_model_takes_float32_tokens_and_refuses_junk_naming_H():
    m = _model("tanh", M=8)
    H = m.embed(*V.random_prompt(m, 1, seed=0))
    assert torch.equal(m(H.float()), m(H.float().double()))  # other dtypes are taken as float64 tokens
    for junk in (["a"], "tokens", {"H": 1}):
        with pytest.raises(ValueError, match="H must be a real tensor"):
            m(junk)


def test_a_tables_closed_form_is_its_core_layer_and_no_sabotage_moves_it():
    """Bounds and design quantities (R, the tail) read the table's closed form: it equals the core layer to
    roundoff, and a perturbed core changes the layer but not the closed form nor the bounds' tables errors."""
    from tests.numerics import assert_close_scaled

    rs = interpolant(torch.tanh, 3.0, 32)
    t = torch.linspace(-4, 4, 801, dtype=DTYPE)
    exact = rs.closed_form(t)
    assert_close_scaled(exact, rs(t), scale=float(rs.c.abs().sum()) * 5)  # |a . [t; 1]| <= 4 + 1
    eps = Bd.table_errors("tanh", "squared", 3.0, rs, rs, None, 1.0)
    with perturb(scale=1.001):
        assert float((rs(t) - exact).abs().max()) > 1e-4
        assert torch.equal(rs.closed_form(t), exact)  # the same code path, untouched by the core
        assert Bd.table_errors("tanh", "squared", 3.0, rs, rs, None, 1.0) == eps
