"""Squaring and product networks with the paper's width parameter N (Lemmas 1, 2, 7; Lu et al. 2021).

The networks themselves are `tfbook.gadgets` (Yarotsky squaring with k compositions per layer, the
product psi, Definition 1 FNNs, Lemma 2's conversion); this module maps the paper's width parameter N
to k and assembles them. k is chosen with (k-1) 2^(k-1) + 1 <= N <= k 2^k (Lu et al.'s rule; the paper's
own rule is lost in the text), so that N <= 4^k and delta = 4^-(Lk+1) <= N^-L / 4.
"""
from __future__ import annotations

import torch

from tfbook import gadgets as gd
from tfbook import validate
from tfbook.device import DTYPE
from tfbook.layout import Layout
from tfbook.model import Construction

K_RULES = ("lu2021", "greedy")


def choose_k(N: int, rule: str = "lu2021") -> int:
    """k for width parameter N: Lu's rule (k-1)2^(k-1)+1 <= N <= k 2^k, or "greedy" (largest k with 2^k <= 4N)."""
    N = validate.positive_int("N", N)
    validate.choice("rule", rule, K_RULES)
    k = 1
    if rule == "greedy":
        while 2 ** (k + 1) <= 4 * N:
            k += 1
        return k
    while N > k * 2**k:
        k += 1
    return k


def squaring_error(N: int, L: int, rule: str = "lu2021") -> float:
    """delta = 4^-(Lk+1): sup error of the depth-L squaring network (Lemma 1), k = choose_k(N)."""
    return gd.squaring_error(choose_k(N, rule), validate.positive_int("L", L))


def product_error(N: int, L: int, rule: str = "lu2021") -> float:
    """e_psi = 2 delta: the product gadget's error lies in [-delta, 2 delta]."""
    return gd.product_error_range(choose_k(N, rule), validate.positive_int("L", L))[1]


FNN = gd.FNN


def build_square_fnn(N: int, L: int, rule: str = "lu2021") -> gd.FNN:
    """Lemma 1 as a Definition 1 FNN: width 2^k + 1 (K sawtooth units and a carry of S), depth L, output f_{Lk}(x)."""
    k, L = choose_k(N, rule), validate.positive_int("L", L)
    return gd.FNN(gd.square_fnn_layers(k, L, torch.ones(1, 1, dtype=DTYPE)))


def build_product_fnn(N: int, L: int, rule: str = "lu2021") -> gd.FNN:
    """psi(x, y) = relu(2 f((x+y)/2) - f(x)/2 - f(y)/2) as an FNN: three squaring nets side by side, then a ReLU."""
    k, L = choose_k(N, rule), validate.positive_int("L", L)
    return gd.FNN(gd.product_fnn_layers(k, L))


def fnn_to_transformer(fnn: gd.FNN) -> Construction:
    """Lemma 2: the FNN as residual feed-forward layers FF_l(H) = H + [I, -I] relu([A_l; I] H + [b_l; 0]).

    One token whose single slot ``h`` has width W (the largest layer of the FNN): the input sits in its
    first coordinates, the output appears in coordinate 0. Depth L + 1, hidden width 2W. Equals the FNN
    when every input, hidden and output value is non-negative. Built on the FNN's device.
    """
    device = fnn.layers[0].W_1.device
    affine = [(A.cpu(), None if b is None else b.cpu()) for A, b in fnn.affine]  # built on the CPU
    plan = gd.Planner(Layout([("h", gd.fnn_width(affine))]))
    plan.add(gd.from_fnn(affine, "h", tag="lemma2"), phase="lemma2")
    return Construction(plan.layout, plan.layers()).to(device)


def run_converted(model: Construction, x: torch.Tensor) -> torch.Tensor:
    """Feed (batch, d_in) inputs to a Lemma 2 transformer as one token each; return coordinate 0."""
    x = validate.tensor("x", x, shape=(None, None))
    H = torch.zeros(x.shape[0], 1, model.layout.dim, dtype=DTYPE, device=x.device)
    H[:, 0, : x.shape[1]] = x
    return model(H)[:, 0, 0]


def _single(layout: Layout, gadget: gd.Gadget, phase: str) -> Construction:
    plan = gd.Planner(layout)
    plan.add(gadget, phase=phase)
    return Construction(plan.layout, plan.layers())


def build_sawtooth(m: int) -> Construction:
    """Lemma 7's g_m as m residual feed-forward layers of two ReLUs (one hat per layer): slots ``x`` -> ``g``."""
    return _single(Layout([("x", 1), ("g", 1)]), gd.sawtooth("x", "g", 1, validate.positive_int("m", m), tag="saw"),
                   "sawtooth")


def build_product(N: int, L: int, rule: str = "lu2021") -> Construction:
    """The product gadget exactly as the Theorem 1 transformer uses it (residual form, L+1 layers): ``x, y -> psi``."""
    k, L = choose_k(N, rule), validate.positive_int("L", L)
    return _single(Layout([("x", 1), ("y", 1)]), gd.product("x", "y", "psi", k, L, tag="prod"), "product")


def run_slots(model: Construction, out: str, **inputs: torch.Tensor) -> torch.Tensor:
    """Evaluate a scalar gadget network: equal-shaped tensors for its input slots (one token each) -> ``out``."""
    first = next(iter(inputs.values()))
    flat = {name: validate.tensor(name, v).reshape(1, -1) for name, v in inputs.items()}
    return model.read(model(model.embed(**flat)), out)[0, :, 0].reshape(first.shape)
