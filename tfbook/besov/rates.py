"""The paper's rate calculators: smoothness statistics, eta, nu, D(K, d'), atom counts, risk exponents, t(K).

* ``smoothness(alpha)`` -> (alpha_max, alpha_min, alpha_tilde = (sum 1/alpha)^-1)
* ``D(K, dprime)`` = (1 + (d'-1)/K)^K (1 + K/(d'-1))^(d'-1), an upper bound on binom(K+d'-1, d'-1)
* ``eta(p, q, r)``, ``nu(alpha_min, p, r)``, ``num_atoms(K, nu, dprime)`` (Theorem 1's N)
* ``risk_exponents(a, eta, D)`` (Theorems 3 and 4, with the balancing exponent's "+3" corrected to -3)
* ``token_count(K, s, p, version)`` (Theorem 5's t: the statement's s^t >= K + 1/p or the proof's 2K + 1/p)
* ``balance_fit``: the numerical check of the exponents by minimising the bias-variance bound.
* ``paper_scope(alpha, m, p)``: (alpha_bar, min(m, m - 1 + 1/p)); Theorems 1-4 assume the first < the second.
* ``hat_alpha_tilde(alpha)``: the approximation exponent of hat atoms on the paper's anisotropic levels
  (hats saturate at order 2).
"""
from __future__ import annotations

import math

import numpy as np

from tfbook import validate

INF = math.inf
VERSIONS = ("proof", "statement")


def _positive_or_inf(name: str, value) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a positive real number or inf, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a positive real number or inf, got {value!r}") from exc
    if math.isnan(x) or x <= 0:
        raise ValueError(f"{name} must be a positive real number or inf, got {value!r}")
    return x


def _inv(x: float) -> float:
    return 0.0 if math.isinf(x) else 1.0 / x


def smoothness(alpha) -> tuple[float, float, float]:
    """(alpha_max, alpha_min, alpha_tilde) of an array-like of positive smoothness values (inf allowed)."""
    try:
        a = np.asarray(alpha, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"alpha must be an array-like of positive numbers, got {alpha!r}") from exc
    if a.size == 0 or np.isnan(a).any() or (a <= 0).any():
        raise ValueError(f"alpha must be a non-empty array-like of positive numbers (inf allowed), got {alpha!r}")
    inv = float(np.sum(1.0 / a))
    return float(a.max()), float(a.min()), (INF if inv == 0 else 1.0 / inv)


def paper_scope(alpha, m: int, p=INF) -> tuple[float, float]:
    """(alpha_bar, min(m, m - 1 + 1/p)): the hypothesis alpha_bar < min(m, m - 1 + 1/p) of Theorems 1-4
    for B-spline atoms N_m (m = 1: hats)."""
    m = validate.positive_int("m", m, 1)
    return smoothness(alpha)[0], min(float(m), m - 1 + _inv(_positive_or_inf("p", p)))


def hat_alpha_tilde(alpha, order: float = 2.0) -> float:
    """alpha_tilde min(1, order / alpha_bar): hats approximate a coordinate of smoothness alpha_c at order
    min(alpha_c, 2), so on the levels k_c = K alpha_min / alpha_c the error is N~^(-this) instead of
    N~^(-alpha_tilde) once alpha_bar > 2."""
    a_max, _, a_tilde = smoothness(alpha)
    return a_tilde * min(1.0, validate.real("order", order, low=0, low_open=True) / a_max)


def D(K: int, dprime: int) -> float:
    """D_{K,d'} = (1 + (d'-1)/K)^K (1 + K/(d'-1))^(d'-1); 1 for d' = 1."""
    K = validate.positive_int("K", K, 1)
    dprime = validate.positive_int("dprime", dprime, 1)
    if dprime == 1:
        return 1.0
    return (1 + (dprime - 1) / K) ** K * (1 + K / (dprime - 1)) ** (dprime - 1)


def eta(p, q, r) -> float:
    """The exponent eta of Theorem 1: three branches in (p, r)."""
    p, q, r = (_positive_or_inf(n, v) for n, v in (("p", p), ("q", q), ("r", r)))
    if r <= p:
        value = 1.0 / min(r, 1.0) - _inv(q)
    elif not math.isinf(r):
        value = 1.0 / r - _inv(q)
    else:
        value = 1.0 - _inv(q)
    return max(value, 0.0)


def delta(p, r) -> float:
    """delta = (1/p - 1/r)_+."""
    p, r = _positive_or_inf("p", p), _positive_or_inf("r", r)
    return max(_inv(p) - _inv(r), 0.0)


def nu(alpha_min, p, r) -> float:
    """nu = (alpha_min - delta) / (2 delta); inf when delta = 0; ValueError when delta >= alpha_min."""
    a = _positive_or_inf("alpha_min", alpha_min)
    dl = delta(p, r)
    if dl == 0:
        return INF
    if dl >= a:
        raise ValueError(f"nu needs delta = (1/p - 1/r)_+ < alpha_min, got delta = {dl:.6g} >= {a:.6g}")
    return (a - dl) / (2 * dl)


def num_atoms(K: int, nu, dprime: int) -> float:
    """N = (2 + (1 - 2^-nu)^-1) 2^K D(K*, d') with K* = ceil(K (1 + 1/nu)); 3 2^K D(K, d') for nu = inf."""
    K = validate.positive_int("K", K, 1)
    v = _positive_or_inf("nu", nu)
    if math.isinf(v):
        return 3.0 * 2.0**K * D(K, dprime)
    K_star = math.ceil(K * (1 + 1 / v) - 1e-12)
    return (2 + 1 / (1 - 2.0**-v)) * 2.0**K * D(K_star, dprime)


def risk_exponents(a, eta, D) -> tuple[float, float, float]:
    """(rate, log_power, balance_power): E||f - f_hat||^2 <~ n^-rate (log n)^log_power at
    2^K ~ n^(1/(1+2a)) (log n)^balance_power. Mixed case: a = alpha_min, D = d l; anisotropic: a = alpha_tilde, D = 1."""
    a = validate.real("a", a, low=0, low_open=True)
    e = validate.real("eta", eta, low=0)
    Dv = validate.positive_int("D", D, 1)
    rate = 2 * a / (2 * a + 1)
    log_power = (2 * (Dv - 1) * (e + a) + 6 * a) / (1 + 2 * a)
    balance_power = ((2 * e - 1) * (Dv - 1) - 3) / (1 + 2 * a)
    return rate, log_power, balance_power


def paper_balance_power(a, eta, D) -> float:
    """The balancing exponent as printed in the paper, with "+3" (shown to be wrong by `balance_fit`)."""
    return ((2 * eta - 1) * (D - 1) + 3) / (1 + 2 * a)


def token_count(K: int, s, p=INF, version: str = "proof") -> int:
    """Theorem 5's t: the smallest integer t with s^t >= 2K + 1/p ("proof") or K + 1/p ("statement")."""
    K = validate.positive_int("K", K, 1)
    p = _positive_or_inf("p", p)
    s = validate.real("s", s)
    version = validate.choice("version", version, VERSIONS)
    if s <= max(1.0, _inv(p)):
        raise ValueError(f"s must be > max(1, 1/p) = {max(1.0, _inv(p)):.6g}, got {s!r}")
    target = (2 * K if version == "proof" else K) + _inv(p)
    t = max(0, math.floor(math.log(target) / math.log(s)) - 1)
    while s**t < target:
        t += 1
    return t


def balance_fit(a: float, eta: float, D: int, log_n=np.linspace(200.0, 5000.0, 60)) -> tuple[float, float]:
    """Minimise 2^{-2aK} K^{2 eta (D-1)} + K^{D+2} 2^K / n over real K for each log n; fit
    (log_power, balance_power) as the slopes of log(risk n^rate) and log(2^K* n^{-1/(1+2a)}) against log log n."""
    risks, Ks = [], []
    for ln in log_n:
        lo, hi = 1.0, 10.0 * ln
        grid = np.linspace(lo, hi, 4001)

        def log_risk(K):
            bias = -2 * a * K * math.log(2) + 2 * eta * (D - 1) * np.log(K)
            var = (D + 2) * np.log(K) + K * math.log(2) - ln
            return np.logaddexp(bias, var)

        for _ in range(4):  # refine the grid around the minimiser
            K = grid[np.argmin(log_risk(grid))]
            width = (grid[1] - grid[0]) * 4
            grid = np.linspace(max(lo, K - width), K + width, 4001)
        K = grid[np.argmin(log_risk(grid))]
        Ks.append(K)
        risks.append(float(log_risk(np.array([K]))[0]))
    ll = np.log(log_n)
    rate = 2 * a / (2 * a + 1)
    y_risk = np.array(risks) + rate * log_n
    y_bal = np.array(Ks) * math.log(2) - log_n / (1 + 2 * a)
    return float(np.polyfit(ll, y_risk, 1)[0]), float(np.polyfit(ll, y_bal, 1)[0])
