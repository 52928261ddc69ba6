"""The paper's sample-complexity statements evaluated with the numbers of a built model (Wei, Chen & Ma, Sec. 2, App. A).

All O(.) constants and polylogarithmic factors are set to 1, so these are the *shapes* of the bounds, comparable with each
other, not certified numbers of samples:

* `lemma24_samples`: Lemma 2.4, n = (alpha^2 log p / gamma^2 + 1) / eps^2.
* `cor_a1_bound`: Corollary A.1 for a network that fits n samples with margins >= gamma:
  alpha sqrt(log p) / (gamma sqrt(n)) + (log(1/delta) + log n) / sqrt(n).
* `finite_class_samples`: ERM over a finite class in the realizable case, n = (log|G| + log(1/delta)) / eps.
* `circuit_class_log_size`, `tm_class_log_size`: log of the number of circuits / machines of the given sizes.
* `parameter_count_samples`: a VC bound for ReLU networks with W parameters and L layers, n = W L log W / eps^2.
"""
from __future__ import annotations

import math

from tfbook import validate


def lemma24_samples(alpha: float, p: int, gamma: float, eps: float) -> float:
    """(alpha^2 log p / gamma^2 + 1) / eps^2."""
    validate.real("gamma", gamma, low=0, low_open=True)
    validate.real("eps", eps, low=0, low_open=True)
    return (alpha**2 * math.log(validate.positive_int("p", p)) / gamma**2 + 1) / eps**2


def cor_a1_bound(alpha: float, p: int, gamma: float, n: int, delta: float = 0.01) -> float:
    """alpha sqrt(log p) / (gamma sqrt(n)) + (log(1/delta) + log n) / sqrt(n)."""
    validate.real("alpha", alpha, low=0)
    validate.real("gamma", gamma, low=0, low_open=True)
    validate.real("delta", delta, low=0, low_open=True, high=1, high_open=True)
    p = validate.positive_int("p", p)
    n = validate.positive_int("n", n)
    return alpha * math.sqrt(math.log(p)) / (gamma * math.sqrt(n)) + (math.log(1 / delta) + math.log(n)) / math.sqrt(n)


def cor_a1_samples(alpha: float, p: int, gamma: float, eps: float, delta: float = 0.01) -> int:
    """The smallest n (by doubling, then bisection) with `cor_a1_bound` <= eps."""
    validate.real("eps", eps, low=0, low_open=True)
    hi = 1
    while cor_a1_bound(alpha, p, gamma, hi, delta) > eps:
        hi *= 2
    lo = max(1, hi // 2)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if cor_a1_bound(alpha, p, gamma, mid, delta) > eps else (lo, mid)
    return hi


def finite_class_samples(log_size: float, eps: float, delta: float = 0.01) -> float:
    """(log|G| + log(1/delta)) / eps: ERM over a finite class containing the target."""
    return (log_size + math.log(1 / delta)) / validate.real("eps", eps, low=0, low_open=True)


def circuit_class_log_size(size: int, width: int) -> float:
    """log of the number of layered circuits with ``size`` gates of width <= ``width``: each gate picks one of 4 ops
    and at most two parents, log|G| <= s log(4 r^2)."""
    return validate.positive_int("size", size) * math.log(4 * validate.positive_int("width", width) ** 2)


def tm_class_log_size(states: int, symbols: int) -> float:
    """log of the number of transition tables with ``states`` working states (plus accept and reject) over ``symbols``
    symbols: each of the k |A| entries picks a state, a symbol and a move."""
    k, A = validate.positive_int("states", states), validate.positive_int("symbols", symbols)
    return k * A * math.log((k + 2) * A * 2)


def parameter_count_samples(W: int, L: int, eps: float) -> float:
    """W L log W / eps^2 (the VC dimension of ReLU networks with W parameters and L layers is O(W L log W))."""
    W = validate.positive_int("W", W)
    return W * validate.positive_int("L", L) * math.log(W) / validate.real("eps", eps, low=0, low_open=True) ** 2
