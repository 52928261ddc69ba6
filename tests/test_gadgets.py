"""Tests for tfbook.gadgets: exact values on dyadic grids, error ranges attained, Lemma 2, the planner."""
import pytest
import torch

from tfbook import gadgets as gd
from tfbook.layout import Layout
from tests.numerics import assert_close_scaled

F64 = torch.float64


def run(plan: gd.Planner, **inputs: torch.Tensor) -> torch.Tensor:
    """Embed (batch, n) or (batch, n, size) inputs into their slots and apply the planned layers."""
    first = next(iter(inputs.values()))
    H = torch.zeros(*first.shape[:2], plan.layout.dim, dtype=F64)
    for name, value in inputs.items():
        H[..., plan.layout[name]] = value if value.ndim == 3 else value.unsqueeze(-1)
    for _, layer in plan.layers():
        H = layer(H)
    return H


def scalar_plan(*gadgets: gd.Gadget, inputs=("x",)) -> gd.Planner:
    plan = gd.Planner(Layout([(name, 1) for name in inputs]))
    for g in gadgets:
        plan.add(g)
    return plan


def interp_square(x: torch.Tensor, m: int) -> torch.Tensor:
    """The interpolant of x^2 on j / 2^m (independent closed form)."""
    j = torch.clamp(torch.floor(x * 2.0**m), max=2**m - 1)
    return ((2 * j + 1) * x - j * (j + 1) / 2.0**m) / 2.0**m


@pytest.mark.parametrize("k,L", [(1, 1), (1, 4), (2, 1), (2, 3), (3, 2), (4, 2)])
def test_square_is_the_interpolant_with_exact_error(k, L):
    m = k * L
    plan = scalar_plan(gd.square({"x": 1.0}, "out", k, L))
    x = torch.arange(0, 2 ** (m + 2) + 1, dtype=F64) / 2 ** (m + 2)  # grid points and midpoints
    out = plan.layout.read(run(plan, x=x[None]), "out")[0, :, 0]
    assert torch.equal(out, interp_square(x, m))
    err = out - x**2
    assert float(err.min()) == 0.0 and float(err.max()) == gd.squaring_error(k, L) == 4.0 ** -(m + 1)
    mids = (2 * torch.arange(2**m, dtype=F64) + 1) / 2 ** (m + 1)
    assert torch.equal(interp_square(mids, m) - mids**2, torch.full_like(mids, 4.0 ** -(m + 1)))
    assert plan.depth == L and max(layer.hidden_width for _, layer in plan.layers()) == 2**k


def test_sawtooth_teeth():
    k, L = 2, 2
    plan = scalar_plan(gd.sawtooth({"x": 1.0}, "g", k, L))
    x = torch.arange(0, 2**6 + 1, dtype=F64) / 2**6
    g = plan.layout.read(run(plan, x=x[None]), "g")[0, :, 0]
    m = k * L
    scaled = x * 2.0 ** (m - 1)
    j = torch.clamp(torch.floor(scaled), max=2 ** (m - 1) - 1)
    t = scaled - j
    assert torch.equal(g, torch.where(t <= 0.5, 2 * t, 2 * (1 - t)))


@pytest.mark.parametrize("k,L", [(1, 1), (1, 3), (2, 2)])
def test_product_error_range_attained(k, L):
    plan = scalar_plan(gd.product({"x": 1.0}, {"y": 1.0}, "p", k, L), inputs=("x", "y"))
    g = 2 ** (k * L)
    lo, hi = gd.product_error_range(k, L)
    grid = torch.arange(0, 4 * g + 1, dtype=F64) / (4 * g)
    X, Y = [t.reshape(1, -1) for t in torch.meshgrid(grid, grid, indexing="ij")]
    p = plan.layout.read(run(plan, x=X, y=Y), "p")[0, :, 0]
    err = p - (X * Y)[0]
    assert float(err.min()) == lo and float(err.max()) == hi  # both ends attained, nothing beyond
    assert float(p.min()) >= 0.0 and float(p.max()) == 1.0
    j = torch.arange(g, dtype=F64)
    adj = plan.layout.read(run(plan, x=(j / g)[None], y=((j + 1) / g)[None]), "p")[0, :, 0]
    assert torch.equal(adj - j * (j + 1) / g**2, torch.full_like(j, hi))  # +2 delta at adjacent grid pairs
    low = plan.layout.read(run(plan, x=torch.tensor([[1 / (2 * g)]], dtype=F64), y=torch.tensor([[3 / (2 * g)]], dtype=F64)), "p")
    assert float(low) - 3 / (4 * g * g) == lo
    assert plan.depth == L + 1


@pytest.mark.parametrize("k,L,R", [(1, 2, 1.0), (2, 2, 2.0), (1, 3, 0.5)])
def test_polarisation_product_range_and_axes(k, L, R):
    plan = scalar_plan(gd.polarisation_product({"x": 1.0}, {"y": 1.0}, "p", k, L, R=R), inputs=("x", "y"))
    m = k * L
    lo, hi = gd.polarisation_error_range(k, L, R)
    assert (lo, hi) == (-R * R * 4.0**-m, R * R * 4.0**-m / 2)
    grid = R * torch.arange(0, 2 ** (m + 2) + 1, dtype=F64) / 2 ** (m + 2)
    X, Y = [t.reshape(1, -1) for t in torch.meshgrid(grid, grid, indexing="ij")]
    err = plan.layout.read(run(plan, x=X, y=Y), "p")[0, :, 0] - (X * Y)[0]
    assert float(err.min()) == lo  # attained at x = y = R 2^-m
    assert float(err.max()) == 0.0 <= hi  # never above x y: the stated upper end R^2 4^-m / 2 is not reached
    on_axes = (X[0] == 0) | (Y[0] == 0)
    assert torch.equal(err[on_axes], torch.zeros(int(on_axes.sum()), dtype=F64))
    assert plan.depth == L


def test_exact_piecewise_linear_gadgets():
    plan = scalar_plan(gd.identity({"x": 1.0}, "id"), gd.absolute({"x": 1.0}, "abs"),
                       gd.maximum({"x": 1.0}, {"y": 1.0}, "max"), gd.clip({"x": 1.0}, "clip", -0.5, 1.25),
                       gd.interpolant({"x": 1.0}, [-1.0, 0.0, 0.5, 2.0], [1.0, -2.0, 0.25, 0.25], "pl"),
                       gd.relu_sum({"x": 1.0, "y": -1.0}, [0.0, 1.0], [2.0, -3.0], {"rs": 1.0, "id": 0.0},
                                   constant=0.5), inputs=("x", "y"))
    assert plan.depth == 1
    g = torch.arange(-24, 25, dtype=F64) / 8
    X, Y = [t.reshape(1, -1) for t in torch.meshgrid(g, g, indexing="ij")]
    H = run(plan, x=X, y=Y)
    x, y = X[0], Y[0]
    got = {name: plan.layout.read(H, name)[0, :, 0] for name in ("id", "abs", "max", "clip", "pl", "rs")}
    assert torch.equal(got["id"], x) and torch.equal(got["abs"], x.abs())
    assert torch.equal(got["max"], torch.maximum(x, y)) and torch.equal(got["clip"], x.clamp(-0.5, 1.25))
    pl = torch.where(x <= -1, 1.0, torch.where(x <= 0, 1.0 - 3 * (x + 1), torch.where(x <= 0.5, -2 + 4.5 * x, 0.25)))
    assert torch.equal(got["pl"], pl.to(F64))
    assert torch.equal(got["rs"], 0.5 + 2 * torch.relu(x - y) - 3 * torch.relu(x - y - 1))


def test_fnn_and_lemma2_conversion():
    affine = gd.product_fnn_layers(2, 2)
    net = gd.FNN(affine)
    assert net.depth == 3 and net.width == 3 * (2**2 + 1)
    W = gd.fnn_width(affine)
    plan = gd.Planner(Layout([("h", W)]))
    plan.add(gd.from_fnn(affine, "h"))
    assert plan.depth == net.depth + 1 and max(layer.hidden_width for _, layer in plan.layers()) == 2 * W
    X = torch.randint(0, 2**10 + 1, (400, 2), dtype=F64) / 2**10
    H = torch.zeros(400, 1, W, dtype=F64)
    H[:, 0, :2] = X
    converted = run(plan, h=H)[:, 0, 0]
    assert torch.equal(converted, net(X)[:, 0])  # 10-bit dyadic X, dyadic weights: both exact
    # the residual gadget computes the same psi
    prod = scalar_plan(gd.product({"x": 1.0}, {"y": 1.0}, "p", 2, 2), inputs=("x", "y"))
    psi = prod.layout.read(run(prod, x=X[:, 0][None], y=X[:, 1][None]), "p")[0, :, 0]
    assert torch.equal(psi, net(X)[:, 0])  # dyadic: exact
    H_neg = torch.zeros(1, 1, W, dtype=F64)
    H_neg[0, 0, :2] = torch.tensor([-0.5, 0.5])
    assert abs(float(run(plan, h=H_neg)[0, 0, 0] - net(torch.tensor([[-0.5, 0.5]]))[0, 0])) > 0.1


@pytest.mark.parametrize("n", [1, 3, 8])
def test_uniform_sum(n):
    plan = gd.Planner(Layout([("x", 2)]))
    plan.add(gd.uniform_sum([{("x", 0): 1.0}, {("x", 0): 1.0, ("x", 1): -2.0}], ["s", {"t": 0.5}], n,
                            constant={"t": 3.0}))
    X = torch.randint(0, 64, (4, n, 2), dtype=F64) / 64
    H = run(plan, x=X)
    s = plan.layout.read(H, "s")[..., 0]
    if n & (n - 1) == 0:  # weights 1/n exact: the sum is exact on dyadic tokens
        assert torch.equal(s, X[..., 0].sum(1, keepdim=True).expand(4, n))
    assert torch.allclose(s, X[..., 0].sum(1, keepdim=True).expand(4, n), rtol=0, atol=1e-14)
    t = 0.5 * (X[..., 0] - 2 * X[..., 1]).sum(1, keepdim=True) + 3.0
    assert torch.allclose(plan.layout.read(H, "t")[..., 0], t.expand(4, n), rtol=0, atol=1e-14)


def test_planner_places_as_soon_as_possible_and_separates_kinds():
    plan = gd.Planner(Layout([("x", 1), ("y", 1)]))
    a = plan.add(gd.product("x", "y", "p", 1, 2, tag="p1"), phase="A")  # layers 0..2
    b = plan.add(gd.absolute("x", "ax"), phase="A")  # reads only x: shares layer 0
    c = plan.add(gd.uniform_sum(["ax"], ["s"], 4), phase="S")  # reads ax (ready at 1): attention at 1? taken -> 3
    d = plan.add(gd.clip({"p": 1.0, "s": 1.0}, "q", 0.0, 1.0), phase="B")  # after p (3) and s (4)
    assert (a.first, a.last, b.first, c.first, d.first) == (0, 2, 0, 3, 4)
    assert [name for name, _ in plan.layers()] == ["A.0", "A.1", "A.2", "S.3", "B.4"]
    assert len(plan.layers()[0][1].W_1) == 3 * 2 + 2  # the product's 6 units and |x|'s 2 share layer 0
    assert gd.product("x", "y", "p", 1, 2, tag="p1").reads == ["x", "y"]
    assert gd.product("x", "y", "p", 1, 2, tag="p1").writes == ["p"]
    with pytest.raises(ValueError, match="already placed"):
        plan.add(gd.absolute("x", "ax2"))


def test_bad_arguments():
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        gd.square("x", "o", 0, 1)
    with pytest.raises(ValueError, match="L must be an int >= 1"):
        gd.product("x", "y", "o", 1, 0)
    with pytest.raises(ValueError, match="R must be > 0"):
        gd.polarisation_product("x", "y", "o", 1, 1, R=0.0)
    with pytest.raises(ValueError, match="high must be >= 1"):
        gd.clip("x", "o", 1.0, 0.5)
    with pytest.raises(ValueError, match="strictly increasing"):
        gd.interpolant("x", [0.0, 0.0], [1.0, 2.0], "o")


# --- circuits: networks without skip connections ---------------------------------------------------
def circuit_net(n_in: int, build) -> gd.FNN:
    """The FNN of a circuit whose outputs are build(circuit, inputs)."""
    c = gd.Circuit(n_in)
    out = build(c, [c.input(k) for k in range(n_in)])
    return gd.FNN(c.affine_maps(out if isinstance(out, list) else [out]))


@pytest.mark.parametrize("m", [1, 3, 6])
def test_circuit_square_equals_the_residual_gadget(m):
    x = torch.arange(0, 2 ** (m + 2) + 1, dtype=F64) / 2 ** (m + 2)
    net = circuit_net(1, lambda c, v: gd.circuit.square(v[0], m))
    out = net(x[:, None])[:, 0]
    assert torch.equal(out, interp_square(x, m))
    assert float((out - x**2).max()) == gd.squaring_error(1, m)
    plan = scalar_plan(gd.square({"x": 1.0}, "out", 1, m))
    assert torch.equal(out, plan.layout.read(run(plan, x=x[None]), "out")[0, :, 0])
    assert net.depth == m and net.width == (2 if m == 1 else 3)  # two hat units and the carry of f


def test_circuit_exact_pieces():
    x = torch.arange(-3 * 2**10, 3 * 2**10 + 1, dtype=F64)[:, None] / 2**10  # dyadic: every value exact
    assert torch.equal(circuit_net(1, lambda c, v: gd.circuit.identity(v[0]))(x), x)
    assert torch.equal(circuit_net(1, lambda c, v: gd.circuit.absolute(v[0]))(x), x.abs())
    assert torch.equal(circuit_net(1, lambda c, v: gd.circuit.clip(v[0], -0.5, 1.25))(x), x.clamp(-0.5, 1.25))
    z = torch.arange(-2**6, 2**8 + 1, dtype=F64)[:, None] / 2**8  # [-1/4, 1] on a dyadic grid
    for b in (0, 1, 4):
        got = circuit_net(1, lambda c, v: gd.circuit.sawtooth(v[0], b))(z)
        assert torch.equal(got, (2.0**b * z - torch.round(2.0**b * z)).abs())
        # a value needed later is carried up exactly: z + S(2^b z) at the sawtooth's depth
        carried = circuit_net(1, lambda c, v: v[0] + gd.circuit.sawtooth(v[0], b))(z)
        assert torch.equal(carried, z + got)


def test_circuit_product_and_trig_within_their_bounds():
    xy = torch.rand(5000, 2, dtype=F64, generator=torch.Generator().manual_seed(1)) * 2 - 1
    c = gd.Circuit(2)
    p = gd.circuit.product(gd.Approx(c.input(0), 1.0, 0.0), gd.Approx(c.input(1), 1.0, 0.0), 4)
    err = float((gd.FNN(c.affine_maps([p.val]))(xy)[:, 0] - xy[:, 0] * xy[:, 1]).abs().max())
    assert 0.1 * p.err < err <= p.err == 2 * gd.squaring_error(1, 4)
    half = gd.circuit.product(gd.Approx(c.input(0), 1.0, 0.0), gd.Approx(c.const(0.5), 0.5, 0.0), 4)
    assert half.err == 0.0 and half.val.level == 0  # a constant factor is exact and free
    x = torch.rand(3000, 1, dtype=F64, generator=torch.Generator().manual_seed(2))
    for n in (1, 5):
        c = gd.Circuit(1)
        C, S = gd.circuit.TrigFeatures(c, 6, gd.circuit.taylor_terms(4.0**-6)).pair(0, n)
        out = gd.FNN(c.affine_maps([C.val, S.val]))(x)
        err = max(float((out[:, 0] - torch.cos(2 * torch.pi * n * x[:, 0])).abs().max()),
                  float((out[:, 1] - torch.sin(2 * torch.pi * n * x[:, 0])).abs().max()))
        assert err <= max(C.err, S.err) < 0.05


def test_feed_forward_layers_merge_the_output_map():
    import numpy as np
    import scipy.sparse as sp
    from tfbook.model import Construction
    c = gd.Circuit(2)
    x, y = c.input(0), c.input(1)
    maps = c.affine_maps([gd.circuit.absolute(x - y) + gd.circuit.identity(y) * 3.0])
    layers = gd.feed_forward_layers(maps, "f")
    assert [name for name, _ in layers] == ["f.1"]  # two affine maps: one core layer
    model = Construction(Layout([("x", 2)]), layers)
    H = torch.rand(1, 50, 2, dtype=F64, generator=torch.Generator().manual_seed(3))
    # random (non-dyadic) H in [0, 1): the network sums |x - y| and 3 y in its BLAS order (maybe fused); terms <= 4
    assert_close_scaled(model(H)[0, :, 0], (H[0, :, 0] - H[0, :, 1]).abs() + 3 * H[0, :, 1], scale=4.0)
    affine = [(sp.csr_matrix(np.array([[1.0, -2.0]])), np.array([0.5]))]  # a single map, no ReLU in the paper
    one = Construction(Layout([("x", 2)]), gd.feed_forward_layers(affine))
    assert_close_scaled(one(H)[0, :, 0], H[0, :, 0] - 2 * H[0, :, 1] + 0.5, scale=3.5)  # |x| + 2|y| + 0.5, H in [0, 1)


def test_circuit_bad_arguments():
    c = gd.Circuit(2)
    with pytest.raises(ValueError, match="k must be < n_in = 2"):
        c.input(2)
    with pytest.raises(ValueError, match="high must be >= 1"):
        gd.circuit.clip(c.input(0), 1.0, 0.5)
    with pytest.raises(ValueError, match="m must be an int >= 1"):
        gd.circuit.square(c.input(0), 0)
    with pytest.raises(ValueError, match="tol must be > 0"):
        gd.circuit.taylor_terms(0.0)
    with pytest.raises(ValueError, match="factors must hold"):
        gd.circuit.tree_product([], 2)
    with pytest.raises(ValueError, match="level must be >= the value's level 1"):
        c.lift(c.relu(c.input(0)), 0)
    with pytest.raises(ValueError, match="affine must hold at least one"):
        gd.feed_forward_layers([])
    with pytest.raises(ValueError, match="affine maps must chain"):
        gd.feed_forward_layers([(torch.ones(2, 3), torch.zeros(2)), (torch.ones(1, 3), torch.zeros(1))])
