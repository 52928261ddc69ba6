"""Lemma 4 (product) and Lemma 5 (ReLU B-spline) as one-token constructions on the core layers.

* ``product_net(m_q, R=1.0)``: prod(x, y) = 2R^2 [f((x+y)/2R) - f(x/2R) - f(y/2R)], f = Yarotsky's f_{m_q};
  ``net(z)`` maps (batch, 2) in [0, R]^2 to (batch,). prod - xy lies in [-R^2 4^-m_q, R^2 4^-m_q / 2];
  the lower end is attained at x = y = R(2i+1)/2^m_q; prod = 0 when x = 0 or y = 0.
* ``bspline_net(m, d, m_q)``: prod_c N_m(u_c) for u in (-inf, 2^53]^d (every u the transformer forms:
  |u| <= 2^52 + m), exactly 0 outside [0, m+1]^d, with sup error at most ``bspline_net_error(m, d, m_q)``
  = C(m, d) 4^-m_q. Above 2^53 the floats are 2 apart, u - j rounds and the recipe's first layer is
  no longer exact (errors of 0.1 at m = 3): ``forward`` refuses such u.

Each network has ``width`` (stream width, independent of m_q), ``depth`` (feed-forward layers, affine
in m_q) and ``num_parameters()``.
"""
from __future__ import annotations

import numpy as np
import torch

from tfbook import validate
from tfbook import gadgets as gd
from tfbook.besov.program import Stream, emit_spline, num_saw, spline_scratch, spline_weights
from tfbook.besov.references import order
from tfbook.device import DTYPE
from tfbook.layout import Layout
from tfbook.model import Construction

U_MAX = 2.0**53  # the largest u at which the spline's first layer is exact (integers are floats up to here)


class BesovConstruction(Construction):
    """The chapter's size accessors, each one `Sizes` field of `counted_sizes()`."""

    @property
    def width(self) -> int:
        """The residual-stream width: ``counted_sizes().embed_dim``."""
        return self.layout.dim

    @property
    def depth(self) -> int:
        """The number of core layers: ``counted_sizes().layers``."""
        return len(self.layers)

    def num_parameters(self) -> int:
        """Stored scalars: ``counted_sizes().stored`` (with the index entries of weights stored sparse)."""
        return self.counted_sizes().stored

    def to_device(self, device) -> "BesovConstruction":
        """Move every layer to ``device`` (``tfbook.device.default_device()`` in the notebooks); returns self.
        Inputs must be on the same device; the results are float64 on it."""
        for layer in self.layers:
            layer.to(device)
        return self


class SlotNet(BesovConstruction):
    """A one-token construction: inputs written to coordinates ``inp``, the answer read from ``out_index``."""

    def __init__(self, layout, layers: list, inp, out_index: int):
        super().__init__(layout, layers)
        self.inp, self.out_index = [int(i) for i in np.ravel(inp)], int(out_index)

    def _run(self, z: torch.Tensor) -> torch.Tensor:
        H = torch.zeros(z.shape[0], 1, self.layout.dim, dtype=DTYPE, device=z.device)
        H[:, 0, self.inp] = z
        return super().forward(H)[:, 0, self.out_index]


class ProductNet(SlotNet):
    """Lemma 4 on [0, R]^2: `tfbook.gadgets.polarisation_product` with k = 1 composition per layer, L = m_q."""

    def __init__(self, m_q: int, R: float):
        self.m_q, self.R = m_q, R
        plan = gd.Planner(Layout([("x", 1), ("y", 1), ("prod", 1)]))
        plan.add(gd.polarisation_product("x", "y", "prod", k=1, L=m_q, R=R, tag="lemma4"), phase="lemma4")
        lay = plan.layout
        super().__init__(lay, plan.layers(), [lay.index("x"), lay.index("y")], lay.index("prod"))

    def forward(self, z) -> torch.Tensor:
        z = validate.tensor("z", z, shape=(None, 2), low=0.0, high=self.R)
        return self._run(z)


class BSplineNet(SlotNet):
    """Lemma 5: prod_{c<d} N_m(u_c) for u_c <= 2^53 (`tfbook.besov.program.emit_spline`)."""

    def __init__(self, m: int, d: int, m_q: int):
        self.m, self.d, self.m_q = m, d, m_q
        st = Stream()
        U = st.alloc("u", (d,))
        slots = {k: st.alloc(k, v) for k, v in spline_scratch((), m, d).items()}
        saw = st.alloc("saw", (num_saw(m, d), 3))
        prog: list = []
        out = emit_spline(prog, st.dim, U, slots, saw, m, m_q)
        super().__init__(st.layout, [(name, layer.build(name)) for name, layer in prog], U, int(out))

    def forward(self, u) -> torch.Tensor:
        u = validate.tensor("u", u, shape=(None, self.d), high=U_MAX)
        return self._run(u)


def product_net(m_q: int, R: float = 1.0) -> ProductNet:
    """Lemma 4's product network with Yarotsky depth m_q on [0, R]^2 (width 6, depth m_q)."""
    return ProductNet(order("m_q", m_q), validate.real("R", R, low=0, low_open=True))


def product_error_range(m_q: int, R: float = 1.0) -> tuple[float, float]:
    """Lemma 4's range of prod - xy on [0, R]^2: [-R^2 4^-m_q, R^2 4^-m_q / 2] (the lower end is attained
    at x = y = R(2i+1)/2^m_q; the values are in fact never above xy)."""
    m_q, R = order("m_q", m_q), validate.real("R", R, low=0, low_open=True)
    return -R * R * 4.0**-m_q, R * R * 4.0**-m_q / 2


def bspline_net(m: int, d: int, m_q: int) -> BSplineNet:
    """Lemma 5's ReLU network for prod_c N_m(u_c), u_c <= 2^53, exact zeros outside [0, m+1]^d."""
    return BSplineNet(order("m", m), order("d", d), order("m_q", m_q))


def spline_factor_constant(m: int) -> float:
    """C1(m): one factor's error is at most C1(m) 4^-m_q, C1 = (m-1) sum_j |w_j| (m - 1 products per power)."""
    return (m - 1) * float(np.abs(spline_weights(m)).sum())


def bspline_net_error(m: int, d: int, m_q: int) -> float:
    """C(m, d) 4^-m_q with C(m, d) = d C1(m) + (d - 1): d factors, d - 1 tree products on [0, 1]."""
    m, d, m_q = order("m", m), order("d", d), order("m_q", m_q)
    return (d * spline_factor_constant(m) + (d - 1)) * 4.0**-m_q


def yarotsky(t, m_q: int) -> torch.Tensor:
    """Reference f_{m_q}(t) on [0, 1]: the piecewise-linear interpolant of t^2 at the multiples of 2^-m_q."""
    t = validate.tensor("t", t, low=0.0, high=1.0)
    h = 2.0**-order("m_q", m_q)
    i = torch.clamp(torch.floor(t / h), max=2**m_q - 1)
    a, b = i * h, (i + 1) * h
    return a * a + (t - a) * (a + b)


def product_reference(x, y, m_q: int, R: float = 1.0) -> torch.Tensor:
    """Reference 2R^2 [f((x+y)/2R) - f(x/2R) - f(y/2R)] from the interpolant form of f."""
    x, y = torch.as_tensor(x, dtype=DTYPE), torch.as_tensor(y, dtype=DTYPE)
    return 2 * R * R * (yarotsky((x + y) / (2 * R), m_q) - yarotsky(x / (2 * R), m_q) - yarotsky(y / (2 * R), m_q))


__all__ = ["product_net", "product_error_range", "bspline_net", "bspline_net_error", "spline_factor_constant",
           "yarotsky", "product_reference", "ProductNet", "BSplineNet", "SlotNet"]
