"""Upper and lower bounds on the all-layer margin of the chapter's constructions (Wei, Chen & Ma, eq. 2.1).

* `readout_attack` (Turing-machine transformer) and `circuit_readout_attack` (circuit network): the
  targeted perturbation of the read-out parameters that moves F to 0 with the smallest l2 norm
  among read-out perturbations. Applied to the built model, it flips the prediction, so its norm is an
  **upper bound** on the margin rho.
* `correction_row_attack` (Turing-machine transformer): the two rows of the last correction that
  compute the terminal-state bit, moved against each other; applied to the built model, an upper bound.
* `query_row_moves`, `apply_query_move`, `query_row_attack` (Turing-machine transformer): a rank-one move of one
  self-attention layer's query rows that lifts a losing key past the winner of one call, at the Cauchy-Schwarz
  cost g / (||k_l - k_w|| ||(h, 1)||) of closing the score gap g; the cheapest moves are applied to the built model
  until one flips a prediction: an upper bound, often below the correction-row attack (keys far apart).
* `pgd_flip`, `attacked_radius`, `circuit_parameter_attack`, `tm_parameter_attack`: projected gradient
  descent on a perturbation of **all** of theta (l2 ball of a given radius), shrinking the radius while it still
  flips an input; every radius reported was applied to the built model and flipped it: an upper bound.
* `noise_flip_fraction` (circuit network): the fraction of inputs whose prediction flips under uniform
  noise on the selected layers' outputs, averaged over several draws (random, not worst-case, noise).
* `certified_radius` (circuit network) and `tm_certified_radius` (Turing-machine transformer): the
  largest r (by bisection) such that **every** parameter perturbation of l2 norm <= r keeps the sign
  of F on the given inputs, proved by interval bound propagation through the built layers: a **lower
  bound** on rho. Each row of a perturbed layer changes its pre-activation by at most
  r sqrt(|h|^2 + 1); a correction layer is bounded per coordinate by the case analysis of
  round(z) = 3 relu(z - 1/3) - 3 relu(z - 2/3), under which an input error below 1/3 disappears
  (Definition D.1) and only the correction's own perturbation remains. Hard attention keeps its
  winner while the winner's score interval lies above every other key's; otherwise the output is
  bounded by the hull of the values of every key that can still win (the transformer's score gap
  of 1 is what keeps that set a single key).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from tfbook import validate
from tfbook.device import DTYPE
from tfbook.layers import perturb
from tfbook.turing.circuits import CircuitNetwork
from tfbook.turing.transformer import TMTransformer, Trace


def readout_attack(model: TMTransformer, xs: Sequence[str], **run) -> tuple[torch.Tensor, torch.Tensor]:
    """Per input: the radius 1 / ||o_T|| of delta theta_cls = -F o_T / ||o_T||^2, and whether applying it to the
    built model (then restoring theta_cls exactly) makes F <= 0 for an accepted input or >= 0 for a rejected one."""
    trace = model.forward_trace(list(xs), **run)
    o_T, F = trace.outputs[:, -1], trace.F  # (B, w), (B,)
    radius = F.abs() / o_T.norm(dim=1)
    flipped = torch.zeros(len(xs), dtype=torch.bool)
    original = model.theta_cls.detach().clone()
    try:
        for b, x in enumerate(xs):
            with torch.no_grad():
                model.theta_cls.copy_(original - (F[b] * o_T[b] / (o_T[b] @ o_T[b])).to(original.device))
            F_new = float(model.forward_trace([x], **run).F[0])
            flipped[b] = F_new * float(F[b]) <= 1e-9 * abs(float(F[b]))
    finally:
        with torch.no_grad():
            model.theta_cls.copy_(original)
    return radius, flipped


def circuit_readout_attack(net: CircuitNetwork, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per input: the radius |F| / sqrt(g^2 + 1) of (delta W_d, delta b_d) = -F (g, 1) / (g^2 + 1), g the output gate,
    and whether applying it to the built network flips F (to 0, counted as a flip). F is determined by g, so
    inputs with equal g share one perturbation."""
    last = net.layer(net.layer_names[-1])
    H = torch.as_tensor(X, dtype=DTYPE).unsqueeze(1)
    for name, layer in net.named_layers()[:-1]:
        H = layer(H)
    g = torch.relu(H[:, 0] @ last.W_1.T + last.b_1)[:, 0]  # (batch,) output gate before the read-out
    F = net(X)
    radius = F.abs() / torch.sqrt(g**2 + 1)
    W, b = last.W_2.detach().clone(), last.b_2.detach().clone()
    flipped = torch.zeros(len(F), dtype=torch.bool, device=F.device)
    try:
        for value in torch.unique(g):  # inputs with the same output gate get the same perturbation
            rows = g == value
            scale = float(F[rows][0]) / (float(value) ** 2 + 1)
            with torch.no_grad():
                last.W_2.copy_(W - scale * value)
                last.b_2.copy_(b - scale)
            flipped[rows] = net(X[rows]) * F[rows] <= 1e-9
    finally:
        with torch.no_grad():
            last.W_2.copy_(W)
            last.b_2.copy_(b)
    return radius, flipped


def correction_row_attack(model: TMTransformer, xs: Sequence[str], **run) -> tuple[torch.Tensor, torch.Tensor]:
    """Per input: the radius sqrt(2) / (6 ||(h, 1)||) of moving the last correction's two rows for the terminal-state
    bit c (h the correction's input at position T) by -+a (h, 1) / ||(h, 1)||, a = 1 / (6 ||(h, 1)||), which takes
    round(z_c) = 3 relu(z_c - 1/3) - 3 relu(z_c - 2/3) from 1 to 0; and whether applying it to the built model
    (then restoring the rows exactly) makes F <= 0 for an accepted input or >= 0 for a rejected one. The rows are
    shared by every position, so only the run decides whether the prediction flips."""
    trace = model.forward_trace(list(xs), record=True, **run)
    last = model.layer_names[-1]
    if not last.endswith(".round"):
        raise ValueError(f"the model's last core layer must be a correction, got {last!r}")
    h = trace.state(model.layer_names[-2])[:, -1]  # (B, w): the last correction's input at position T
    o_T = trace.outputs[:, -1]
    layer, w = model.layer(last), model.w
    hn = torch.sqrt((h**2).sum(1) + 1)  # ||(h, 1)||
    radius = math.sqrt(2) / (6 * hn)
    flipped = torch.zeros(len(xs), dtype=torch.bool)
    W, b = layer.W_1.detach().clone(), layer.b_1.detach().clone()
    try:
        for i, x in enumerate(xs):
            on = torch.nonzero(o_T[i] * model.theta_cls.cpu() != 0).flatten()
            if len(on) != 1:
                raise ValueError(f"input {x!r}: o_T must hold exactly one terminal-state bit, got {len(on)}")
            c = int(on[0])
            a = 1 / (6 * float(hn[i]))
            u = torch.cat([h[i], torch.ones(1, dtype=DTYPE)]).to(W.device) / float(hn[i])  # unit (h, 1)
            with torch.no_grad():
                layer.W_1[c] -= a * u[:-1]
                layer.b_1[c] -= a * u[-1]
                layer.W_1[w + c] += a * u[:-1]
                layer.b_1[w + c] += a * u[-1]
            F_new = float(model.forward_trace([x], **run).F[0])
            with torch.no_grad():
                layer.W_1.copy_(W)
                layer.b_1.copy_(b)
            flipped[i] = F_new * float(trace.F[i]) <= 1e-9 * abs(float(trace.F[i]))
    finally:
        with torch.no_grad():
            layer.W_1.copy_(W)
            layer.b_1.copy_(b)
    return radius, flipped


@dataclass(frozen=True)
class QueryMove:
    """A rank-one move of one self-attention layer's query rows (W_Q, b_Q) that lifts a losing key past the
    winner of one call: the call (layer, input index, step t, loser and winner slots, null key = slot 0), the score
    gap g it closes, ||k_l - k_w||, ||(h, 1)|| and the move's norm (lift * g / (||k_l - k_w|| ||(h, 1)||))."""

    layer: str
    input: int
    step: int
    loser: int
    winner: int
    gap: float
    key_distance: float
    query_norm: float
    radius: float


def _queries_and_keys(model: TMTransformer, trace: Trace, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention layer ``name``: its input at every position (B, T+1, w) and its keys, null first (B, m, T+2)."""
    layer = model.layer(name)
    before = trace.state(trace.layer_names[trace.layer_names.index(name) - 1])  # (B, T+1, w)
    keys, _ = layer.project_memory(before.to(layer.W_K.device))  # (B, 1, m, T+1)
    null = layer.null_key[None, 0, :, None].expand(len(before), -1, 1)  # (B, m, 1)
    return before, torch.cat([null, keys[:, 0]], 2).cpu()


def query_row_moves(model: TMTransformer, xs: Sequence[str], **run) -> list[QueryMove]:
    """Every call of every self-attention layer on the recorded run of ``xs``: the cheapest move of the layer's query
    rows that closes the gap between the winner w and a losing key l (gap > 1/2, distinct keys), cheapest first.

    The score of key j moves by <delta x, k_j> for x = (h, 1), so by Cauchy-Schwarz closing the gap g costs at least
    g / (||k_l - k_w|| ||x||), attained by delta = g (k_l - k_w) x^T / (||k_l - k_w|| ||x||)^2."""
    return _moves(model, model.forward_trace(list(xs), record=True, **run))


def _moves(model: TMTransformer, trace: Trace) -> list[QueryMove]:
    moves = []
    for name, calls in trace.scores.items():
        if model.layer(name).kind != "attn":
            continue
        before, keys = _queries_and_keys(model, trace, name)
        x_norm = torch.sqrt((before**2).sum(2) + 1)  # (B, T+1): ||(h, 1)||
        for t, scores in enumerate(calls):  # scores (B, t + 2)
            top, win = scores.max(1)
            for b in range(len(scores)):
                dk = (keys[b, :, : t + 2] - keys[b, :, win[b], None]).norm(dim=0)  # (t + 2,)
                gap = top[b] - scores[b]
                cost = torch.where((gap > 0.5) & (dk > 0), gap / (dk * x_norm[b, t]), torch.full_like(gap, math.inf))
                lose = int(cost.argmin())
                if math.isfinite(float(cost[lose])):
                    moves.append(QueryMove(name, b, t, lose, int(win[b]), float(gap[lose]), float(dk[lose]),
                                           float(x_norm[b, t]), float(cost[lose])))
    return sorted(moves, key=lambda m: m.radius)


def apply_query_move(model: TMTransformer, xs: Sequence[str], move: QueryMove, lift: float = 1.001,
                     **run) -> tuple[float, bool]:
    """Move the query rows of ``move.layer`` by lift * g (k_l - k_w) x^T / (||k_l - k_w|| ||x||)^2 (keys and x from
    the recorded run of ``xs``), run input ``xs[move.input]`` and restore the rows exactly: the move's norm, and whether
    F changed sign (to 0 counted as a change). The rows are shared by every position and step, so only the run
    decides whether the prediction flips."""
    lift = validate.real("lift", lift, low=1, low_open=True)
    return _apply(model, xs, model.forward_trace(list(xs), record=True, **run), move, lift, run)


def _apply(model: TMTransformer, xs: Sequence[str], trace: Trace, move: QueryMove, lift: float,
           run: dict) -> tuple[float, bool]:
    before, keys = _queries_and_keys(model, trace, move.layer)
    b = move.input
    dk = keys[b, :, move.loser] - keys[b, :, move.winner]  # (m,)
    x = torch.cat([before[b, move.step], torch.ones(1, dtype=DTYPE)])  # (w + 1,): (h, 1)
    scores = trace.scores[move.layer][move.step][b]
    gap = float(scores[move.winner] - scores[move.loser])
    delta = lift * gap * torch.outer(dk, x) / float((dk @ dk) * (x @ x))  # (m, w + 1)
    layer = model.layer(move.layer)
    W_Q, b_Q = layer.W_Q.detach().clone(), layer.b_Q.detach().clone()
    try:
        with torch.no_grad():
            layer.W_Q[0] += delta[:, :-1].to(W_Q.device)
            layer.b_Q[0] += delta[:, -1].to(W_Q.device)
        F_new = float(model.forward_trace([xs[b]], **run).F[0])
    finally:
        with torch.no_grad():
            layer.W_Q.copy_(W_Q)
            layer.b_Q.copy_(b_Q)
    F = float(trace.F[b])
    return float(delta.norm()), F_new * F <= 1e-9 * abs(F)


def query_row_attack(model: TMTransformer, xs: Sequence[str], tries: int = 20, lift: float = 1.001,
                     **run) -> tuple[Optional[QueryMove], float, int]:
    """Apply the `query_row_moves` cheapest first (at most ``tries``) until one flips its input's prediction:
    (that move, its norm, the number tried), or (None, inf, tries) when none does. The norm, applied to the built
    model, is an upper bound on the all-layer margin; every move tried costs one run of one input."""
    tries = validate.positive_int("tries", tries)
    lift = validate.real("lift", lift, low=1, low_open=True)
    trace = model.forward_trace(list(xs), record=True, **run)
    for k, move in enumerate(_moves(model, trace)[:tries], 1):
        norm, flipped = _apply(model, xs, trace, move, lift, run)
        if flipped:
            return move, norm, k
    return None, math.inf, tries


def _norm(tensors: Sequence[torch.Tensor]) -> float:
    return math.sqrt(sum(float((t.detach() ** 2).sum()) for t in tensors))


def pgd_flip(params: Sequence[torch.Tensor], signed_output: Callable[[], torch.Tensor], radius: float, steps: int = 40,
             start: Optional[Sequence[torch.Tensor]] = None, seed: int = 0) -> Optional[list[torch.Tensor]]:
    """Projected gradient descent for a perturbation delta of ``params`` with ||delta||_2 <= radius that makes some
    entry of ``signed_output()`` (y - 1/2) F per input, computed by the model with its current parameters) <= 0.

    Minimises a soft minimum over the inputs, normalised steps, projection onto the ball; starts from ``start`` or a
    random point on the sphere. Returns the first delta whose run flips an input (that run *is* the check: the model
    was evaluated with theta + delta), or None. ``params`` are restored exactly and stay frozen."""
    radius = validate.real("radius", radius, low=0, low_open=True)
    params = list(params)
    originals = [p.detach().clone() for p in params]
    if start is None:
        gen = torch.Generator().manual_seed(validate.positive_int("seed", seed, 0))
        start = [torch.randn(p.shape, generator=gen, dtype=DTYPE).to(p.device) for p in params]
        start = [d * (radius / _norm(start)) for d in start]
    delta = [d.detach().clone() for d in start]
    for p in params:
        p.requires_grad_(True)
    try:
        for step in range(steps):
            with torch.no_grad():
                for p, o, d in zip(params, originals, delta):
                    p.copy_(o + d)
            out = signed_output()
            if float(out.detach().min()) <= 0:
                return delta
            loss = -torch.logsumexp(-20 * out, 0) / 20  # soft minimum of (y - 1/2) F over the inputs
            grads = [torch.zeros_like(p) if g is None else g  # a parameter the run does not read
                     for p, g in zip(params, torch.autograd.grad(loss, params, allow_unused=True))]
            length = radius * (0.2 * (1 - step / steps) + 0.02) / (_norm(grads) or 1.0)
            delta = [d - length * g for d, g in zip(delta, grads)]
            n = _norm(delta)
            if n > radius:
                delta = [d * (radius / n) for d in delta]
        return None
    finally:
        with torch.no_grad():
            for p, o in zip(params, originals):
                p.copy_(o)
        for p in params:
            p.requires_grad_(False)


def attacked_radius(params: Sequence[torch.Tensor], signed_output: Callable[[], torch.Tensor], start_radius: float,
                    seeds: Sequence[int] = (0, 1, 2), steps: int = 40, shrink: float = 0.85) -> float:
    """An upper bound on min_x rho(theta, x, y): per seed, `pgd_flip` at ``start_radius``, then again at ``shrink``
    times the norm of each flip found (warm-started from it) until an attack fails; the smallest norm that flipped
    an input, over the seeds (inf if none did; 0 when an input is already on the wrong side or on the boundary,
    so that no perturbation is needed)."""
    validate.real("shrink", shrink, low=0, low_open=True, high=1, high_open=True)
    best = math.inf
    for seed in seeds:
        radius, start = validate.real("start_radius", start_radius, low=0, low_open=True), None
        while True:
            found = pgd_flip(params, signed_output, radius, steps, start, seed)
            if found is None:
                break
            best = min(best, _norm(found))
            if best == 0:  # flipped without moving: the margin is 0 and no smaller radius exists
                return 0.0
            radius, start = shrink * _norm(found), [shrink * d for d in found]
    return best


def circuit_parameter_attack(net: CircuitNetwork, X: torch.Tensor, inputs: int = 256, seeds: Sequence[int] = (0, 1, 2),
                             start_radius: float = 0.2) -> float:
    """`attacked_radius` over all of `CircuitNetwork.theta`, targeting ``inputs`` inputs of X drawn at random (seed 1):
    an upper bound on min_x rho(theta, x, G(x)) over X."""
    X = torch.as_tensor(X, dtype=DTYPE)
    pick = torch.randperm(len(X), generator=torch.Generator().manual_seed(1))[:validate.positive_int("inputs", inputs)]
    X = X[pick.to(X.device)]  # drawn on the CPU: the same inputs on every device
    sign = torch.sign(net(X))
    return attacked_radius([p for _, p in net.theta()], lambda: sign * net(X), start_radius, seeds)


def tm_parameter_attack(model: TMTransformer, xs: Sequence[str], seeds: Sequence[int] = (0, 1, 2),
                        start_radius: float = 0.2, steps: int = 40, **run) -> float:
    """`attacked_radius` over all of `TMTransformer.theta` (the hard-attention run of ``xs``): an upper bound on
    min_x rho(theta, x, G(x)). Hard attention and exact corrections pass no gradient through a score or a
    saturated bit, so it mostly moves the last layers (on small machines it flips at 0.55-0.65 times the
    radius of `correction_row_attack`)."""
    xs = list(xs)
    sign = torch.sign(model.forward_trace(xs, **run).F)
    return attacked_radius([p for _, p in model.theta()], lambda: sign * model.forward_trace(xs, **run).F,
                           start_radius, seeds, steps)


def _affine(lo: torch.Tensor, hi: torch.Tensor, W: torch.Tensor, b, r: float, perturbed: bool):
    """Bounds on W' h + b' over h in [lo, hi] and, when ``perturbed``, every (W', b') within r of (W, b) in l2."""
    c, d = (lo + hi) / 2, (hi - lo) / 2  # (batch, n)
    mid = c @ W.T + (0 if b is None else b)
    rad = d @ W.abs().T
    if perturbed:
        norm = torch.sqrt((torch.maximum(lo.abs(), hi.abs()) ** 2).sum(1, keepdim=True) + 1)  # max sqrt(|h|^2 + 1)
        rad = rad + r * norm
    return mid - rad, mid + rad


def _round_bounds(lo: torch.Tensor, hi: torch.Tensor, r: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds on relu(C2' relu(C1' z + c1')) for z in [lo, hi] (n coordinates), every C1', c1', C2' within r of
    C1 = [I; I], c1 = [-1/3; -2/3], C2 = [3I, -3I]."""
    e = r * torch.sqrt((torch.maximum(lo.abs(), hi.abs()) ** 2).sum(1, keepdim=True) + 1)  # row error of C1', c1'
    a_lo, a_hi = torch.relu(lo - 1 / 3 - e), torch.relu(hi - 1 / 3 + e)
    b_lo, b_hi = torch.relu(lo - 2 / 3 - e), torch.relu(hi - 2 / 3 + e)
    out_lo, out_hi = 3 * a_lo - 3 * b_hi, 3 * a_hi - 3 * b_lo  # plain interval arithmetic
    off = hi + e < 1 / 3  # both units inactive: exactly 0
    on = lo - e > 2 / 3  # both active: 3 (z - 1/3 + e1) - 3 (z - 2/3 + e2) = 1 + 3 (e1 - e2)
    out_lo = torch.where(off, torch.zeros_like(lo), torch.where(on, 1 - 6 * e, out_lo))
    out_hi = torch.where(off, torch.zeros_like(hi), torch.where(on, 1 + 6 * e, out_hi))
    vnorm = torch.sqrt((a_hi**2 + b_hi**2).sum(1, keepdim=True))  # max |v| for the C2' row error
    return torch.relu(out_lo - r * vnorm), torch.relu(out_hi + r * vnorm)


def output_bounds(net: CircuitNetwork, X: torch.Tensor, r: float, correct: bool = True):
    """Sound bounds (lo, hi) on F(x, theta + delta) over every ||delta||_2 <= r (theta = `CircuitNetwork.theta`)."""
    lo = hi = torch.as_tensor(X, dtype=DTYPE)
    last = net.layer_names[-1]
    names = net.layer_names
    i = 0
    while i < len(names):
        name, layer = names[i], net.layer(names[i])
        if name.endswith(".round1"):
            if correct:
                second = net.layer(names[i + 1])
                _check_correction(name, layer.W_1, layer.b_1, second.W_1)
                lo, hi = _round_bounds(lo, hi, r)
            i += 2
            continue
        lo, hi = _affine(lo, hi, layer.W_1, layer.b_1, r, True)
        lo, hi = torch.relu(lo), torch.relu(hi)
        lo, hi = _affine(lo, hi, layer.W_2, layer.b_2, r, name == last)  # W_2 = I (wiring) except the read-out
        i += 1
    return lo[:, 0], hi[:, 0]


def _bisect(below: Callable[[float], bool], hi: float, iters: int) -> tuple[float, float]:
    """(a, b) around the threshold of a predicate that holds below it: below(a) (or a = 0), not below(b),
    b - a = hi / 2^iters; (hi, hi) when below(hi)."""
    hi = validate.real("hi", hi, low=0, low_open=True)
    if below(hi):
        return hi, hi
    a, b = 0.0, hi
    for _ in range(validate.positive_int("iters", iters)):
        mid = (a + b) / 2
        a, b = (mid, b) if below(mid) else (a, mid)
    return a, b


def _largest_certified(F: torch.Tensor, bounds: Callable[[float], tuple[torch.Tensor, torch.Tensor]], hi: float,
                       iters: int) -> float:
    """The largest r (bisection on [0, hi]) at which ``bounds(r)`` = (lo, hi) proves the sign of every entry of F
    (0 when some F is 0)."""
    sign = torch.sign(F)
    if bool((sign == 0).any()):
        return 0.0

    def certified(r: float) -> bool:
        lo_, hi_ = bounds(r)
        return bool(torch.where(sign > 0, lo_ > 0, hi_ < 0).all())

    return _bisect(certified, hi, iters)[0]


def certified_radius(net: CircuitNetwork, X: torch.Tensor, correct: bool = True, hi: float = 1.0,
                     iters: int = 30) -> float:
    """The largest r (bisection on [0, hi]) for which `output_bounds` proves the sign of F on every input of X:
    a lower bound on min_x rho(theta, x, G(x))."""
    validate.real("hi", hi, low=0, low_open=True)
    return _largest_certified(net(X, correct=correct), lambda r: output_bounds(net, X, r, correct), hi, iters)


def _check_correction(name: str, W_1: torch.Tensor, b_1: torch.Tensor, W_2: torch.Tensor) -> None:
    """The certificate's case analysis holds for round(z) = 3 relu(z - 1/3) - 3 relu(z - 2/3) exactly (checked on
    the weights' values; on the meta device, which has none, only the shapes are checked)."""
    n = W_2.shape[0]
    if not validate.has_values(W_1):
        if W_1.shape != (2 * n, n) or b_1 is None or W_2.shape != (n, 2 * n):
            raise ValueError(f"layer {name!r} does not have the shapes of a correction")
        return
    eye = torch.eye(n, dtype=DTYPE, device=W_1.device)
    third = torch.full((n,), 1 / 3, dtype=DTYPE, device=W_1.device)
    if not (W_1.shape == (2 * n, n) and torch.equal(W_1, torch.cat([eye, eye])) and b_1 is not None
            and torch.equal(b_1, torch.cat([-third, -2 * third])) and torch.equal(W_2, torch.cat([3 * eye, -3 * eye], 1))):
        raise ValueError(f"layer {name!r} is not the correction round(z) = 3 relu(z - 1/3) - 3 relu(z - 2/3); "
                         "the certificate holds only for it")


def _affine_heads(lo: torch.Tensor, hi: torch.Tensor, W: torch.Tensor, b, r: float):
    """Bounds (B, h, m) on W' h + b' per head for h in [lo, hi] (B, D) and every row of (W', b') within r of (W, b)."""
    c, d = (lo + hi) / 2, (hi - lo) / 2
    mid = torch.einsum("bd,hmd->bhm", c, W) + (0 if b is None else b)
    norm = torch.sqrt((torch.maximum(lo.abs(), hi.abs()) ** 2).sum(1) + 1)[:, None, None]
    rad = torch.einsum("bd,hmd->bhm", d, W.abs()) + r * norm
    return mid - rad, mid + rad


def _hard_attention_bounds(layer, lo, hi, keys, values, present, r: float):
    """Bounds on the residual hard-attention output for a query in [lo, hi] (B, D); ``keys`` and ``values`` are
    interval pairs (B, h, m, n) of the keys and values, ``present`` (B, n) which keys exist. The null key and its
    value (each within r) come first. Any key whose score can reach the winner's lowest score may be averaged in."""
    ql, qh = _affine_heads(lo, hi, layer.W_Q, layer.b_Q, r)  # (B, h, m_qk)
    B = lo.shape[0]
    null = lambda t: t[None, :, :, None].expand(B, -1, -1, 1)  # noqa: E731  (h, m) -> (B, h, m, 1)
    kl = torch.cat([null(layer.null_key) - r, keys[0]], -1)
    kh = torch.cat([null(layer.null_key) + r, keys[1]], -1)
    vl = torch.cat([null(layer.null_value) - r, values[0]], -1)
    vh = torch.cat([null(layer.null_value) + r, values[1]], -1)
    q_l, q_h = ql[..., None], qh[..., None]
    products = torch.stack([q_l * kl, q_l * kh, q_h * kl, q_h * kh])
    s_lo, s_hi = products.amin(0).sum(2), products.amax(0).sum(2)  # (B, h, 1 + n)
    here = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=lo.device), present], 1)[:, None, :]  # (B, 1, 1 + n)
    floor = s_lo.masked_fill(~here, -math.inf).amax(-1, keepdim=True)  # the winner scores at least this
    can_win = (here & (s_hi >= floor))[:, :, None, :]  # (B, h, 1, 1 + n)
    v_lo = vl.masked_fill(~can_win, math.inf).amin(-1)  # (B, h, m_v): any average of the keys that can win
    v_hi = vh.masked_fill(~can_win, -math.inf).amax(-1)
    W_O = layer.W_O  # (h, D, m_v), fixed wiring
    c, d = (v_lo + v_hi) / 2, (v_hi - v_lo) / 2
    mid = torch.einsum("bhv,hdv->bd", c, W_O)
    rad = torch.einsum("bhv,hdv->bd", d, W_O.abs())
    return lo + mid - rad, hi + mid + rad


def tm_output_bounds(model: TMTransformer, xs: Sequence[str], r: float, horizon: Optional[int] = None):
    """Sound bounds (lo, hi) (B,) on F(x, theta + delta) over every ||delta||_2 <= r, theta = `TMTransformer.theta`
    (every core layer's weights but the fixed wiring, the encoder embedding E, h0 and theta_cls), with hard attention,
    by interval propagation through every position t = 0..T exactly as `TMTransformer.forward_trace` runs."""
    r = validate.real("r", r, low=0)
    T = model.T if horizon is None else horizon
    device = model.E.device
    enc, mask = model.encode(list(xs), device, T)
    pad = r * mask[..., None].to(DTYPE)
    B = len(xs)
    lo, hi = model.h0.expand(B, -1) - r, model.h0.expand(B, -1) + r  # (B, w)
    cache: dict = {}
    for t in range(T + 1):
        if t > 0:
            lo, hi = out_lo + model.beta(t, device), out_hi + model.beta(t, device)
        for name, layer in model.named_layers():
            if layer.kind == "attn":
                k, v = _affine_heads(lo, hi, layer.W_K, layer.b_K, r), _affine_heads(lo, hi, layer.W_V, layer.b_V, r)
                old = cache.get(name)
                cache[name] = tuple(e[..., None] if old is None else torch.cat([o, e[..., None]], -1)
                                    for o, e in zip(old or (None,) * 4, (*k, *v)))
                kl, kh, vl, vh = cache[name]
                lo, hi = _hard_attention_bounds(layer, lo, hi, (kl, kh), (vl, vh),
                                                torch.ones(B, t + 1, dtype=torch.bool, device=device), r)
            elif layer.kind == "xattn":
                if name not in cache:
                    M = enc.shape[1]
                    flat_lo, flat_hi = (enc - pad).reshape(B * M, -1), (enc + pad).reshape(B * M, -1)
                    parts = [_affine_heads(flat_lo, flat_hi, W, b_, r) for W, b_ in ((layer.W_K, layer.b_K),
                                                                                    (layer.W_V, layer.b_V))]
                    cache[name] = tuple(e.reshape(B, M, *e.shape[1:]).permute(0, 2, 3, 1) for pair in parts for e in pair)
                kl, kh, vl, vh = cache[name]
                lo, hi = _hard_attention_bounds(layer, lo, hi, (kl, kh), (vl, vh), mask, r)
            elif name.endswith(".round"):
                _check_correction(name, layer.W_1, layer.b_1, layer.W_2)
                lo, hi = _round_bounds(lo, hi, r)
            else:  # a work layer relu(W_1 h + b_1), written through the fixed identity W_2
                lo, hi = _affine(lo, hi, layer.W_1, layer.b_1, r, True)
                lo, hi = _affine(torch.relu(lo), torch.relu(hi), layer.W_2, layer.b_2, r, False)
        out_lo, out_hi = lo, hi
    theta = model.theta_cls
    c, d = (out_lo + out_hi) / 2, (out_hi - out_lo) / 2
    norm = torch.sqrt((torch.maximum(out_lo.abs(), out_hi.abs()) ** 2).sum(1))
    mid, rad = c @ theta, d @ theta.abs() + r * norm
    return (mid - rad).cpu(), (mid + rad).cpu()


def tm_certified_radius(model: TMTransformer, xs: Sequence[str], hi: float = 0.1, iters: int = 12,
                        horizon: Optional[int] = None) -> float:
    """The largest r (bisection on [0, hi]) for which `tm_output_bounds` proves the sign of F on every input of xs:
    a lower bound on min_x rho(theta, x, G(x)) for the hard-attention transformer."""
    validate.real("hi", hi, low=0, low_open=True)
    return _largest_certified(model.forward_trace(list(xs), horizon=horizon).F,
                              lambda r: tm_output_bounds(model, xs, r, horizon), hi, iters)


def smallest_breaking_push(changed: Callable[[], bool], names: Sequence[str], hi: float = 1 / 3, iters: int = 12) -> float:
    """The smallest eta (bisection on [0, hi], to hi / 2^iters) at which pushing every coordinate of the selected core
    layers' outputs a distance eta towards 1/2 (the worst direction for a bit), wherever they run, makes ``changed()``
    true; ``hi`` if it is false at hi."""
    def breaks(eta: float) -> bool:
        push = lambda layer, U: U + eta * (1 - 2 * U.round())  # noqa: E731
        with perturb(fn=push, names=list(names)):
            return bool(changed())

    return _bisect(lambda eta: not breaks(eta), hi, iters)[1]


def push_tolerance(model: TMTransformer, xs: Sequence[str], references: Sequence, names: Sequence[str] = ("*.round",),
                   hi: float = 1 / 3, iters: int = 12, **run) -> float:
    """`smallest_breaking_push` for the Turing-machine transformer: the push (after every correction, by default)
    at which some run of ``xs`` differs from its reference run (`RunResult.same_as`)."""
    references = list(references)
    if len(references) != len(xs):
        raise ValueError(f"references must hold one run per input ({len(xs)}), got {len(references)}")
    return smallest_breaking_push(
        lambda: any(not got.same_as(ref) for got, ref in zip(model.run_batch(list(xs), **run), references)),
        names, hi, iters)


def circuit_push_tolerance(net: CircuitNetwork, X: torch.Tensor, names: Sequence[str] = ("*.round2",),
                           hi: float = 1 / 3, iters: int = 12) -> float:
    """`smallest_breaking_push` for a circuit network: the push (after every correction, by default) at which the
    prediction (sign of F) of some input of X changes."""
    clean = torch.sign(net(X))
    return smallest_breaking_push(lambda: bool((torch.sign(net(X)) != clean).any()), names, hi, iters)


def noise_flip_fraction(net: CircuitNetwork, X: torch.Tensor, eta: float, names: Optional[Sequence[str]] = None,
                        correct: bool = True, seeds: Sequence[int] = (1, 2, 3)) -> float:
    """Fraction of the inputs X whose prediction (sign of F) flips when uniform noise in [-eta, eta] is added
    to the outputs of the layers `names` (every layer when None), averaged over one draw per seed."""
    if not seeds:
        raise ValueError("seeds must name at least one noise draw")
    clean = torch.sign(net(X, correct=correct))
    total = 0.0
    for seed in seeds:
        with perturb(add=eta, names=names, seed=seed):
            total += float((torch.sign(net(X, correct=correct)) != clean).double().mean())
    return total / len(seeds)


def identity_chain(num_inputs: int, depth: int):
    """A layered circuit of ``depth`` ID gates on input bit 0 (the deep chain of Lemma 3.3's comparison)."""
    from tfbook.turing.circuits import Circuit
    return Circuit(num_inputs, [[("ID", (0,))] for _ in range(depth)])


def chain_attack_radius(depth_relu: int) -> float:
    """Smallest l2 norm of a uniform rescaling of the depth_relu unit weights of an uncorrected ID chain that turns
    F = 2 prod(w) - 1 from 1 to 0: sqrt(k) (1 - 2^(-1/k)) with k = depth_relu (the toy product of Section 3.1)."""
    k = validate.positive_int("depth_relu", depth_relu)
    return math.sqrt(k) * (1 - 2 ** (-1 / k))
