"""Executed checks of Theorem 1's transformer, shared by the notebooks and the tests.

Each ``check_*`` measures on the built model and records claims in a `tfbook.claims.Claims`
(which raises `ClaimError` when one fails). The references (explicit Lemma 1, autograd GD) come
from `tfbook.icgd.nets`; the model never calls them.
"""
from __future__ import annotations

import copy
import math
from typing import Optional

import torch

from tfbook.claims import Claims
from tfbook.device import DTYPE
from tfbook.icgd import bounds
from tfbook.icgd.construct import ICGDTransformer, scratch_slots
from tfbook.icgd.nets import autograd_gradient, explicit_gradient, projected_gd

ROUNDOFF = 1e-10
"""Bound for quantities that are rounding noise (the ReLU ramp amplifies rounding by 1/delta)."""


def random_prompt(model: ICGDTransformer, B: int = 2, n_prime: Optional[int] = None, seed: int = 0,
                  w_scale: float = 1.0, live: bool = False):
    """(X, Y, x_query, w0): X, x_query uniform in [-x_bound, x_bound], Y in [-y_bound, y_bound], w0 in w_scale*box,
    drawn on the CPU (the same on every machine) and moved to the model's device.

    ``live=True`` takes the first seed from ``seed`` on whose prompts all have a gradient with norm >= 1e-3
    at w0 (a random ReLU network is often dead: zero output and zero gradient).
    """
    s, n = model.spec, model.n if n_prime is None else n_prime
    for trial in range(seed, seed + 1000):
        g = torch.Generator().manual_seed(trial)

        def u(*shape):
            return 2 * torch.rand(*shape, generator=g, dtype=DTYPE) - 1

        prompt = (u(B, n, s.dx) * model.x_bound, u(B, n, s.dy) * model.y_bound, u(B, s.dx) * model.x_bound,
                  u(B, s.D_N) * model.box * w_scale)
        X, Y, _, w0 = prompt
        grad = explicit_gradient(s, w0, X, Y, model.activation, model.loss).grad if live else None
        if grad is None or float(grad.norm(dim=-1).min()) >= 1e-3:
            return tuple(t.to(model.device) for t in prompt)
    raise ValueError(f"no live prompt found from seed {seed}")


def reference_gd(model: ICGDTransformer, X, Y, w0, eta: Optional[float] = None, box: Optional[float] = -1.0,
                 steps: Optional[int] = None) -> torch.Tensor:
    """Autograd projected GD with the model's step, box and L (box=None: unprojected)."""
    return projected_gd(model.spec, w0, X, Y, model.activation, model.loss, model.eta if eta is None else eta,
                        model.L if steps is None else steps, model.box if box == -1.0 else box)


def contract(model: ICGDTransformer, H0: torch.Tensor, H: torch.Tensor) -> dict[str, float]:
    """Deviations from [x; y; w; 0; 1; t] of a block-boundary state H (input H0)."""
    lay = model.layout
    w = lay.read(H, "w")
    scratch = torch.cat([lay.read(H, s) for s in scratch_slots(model.spec)], dim=-1)
    fixed = [lay.read(H, s) - lay.read(H0, s) for s in ("x", "y", "one", "t")]
    return {"w_spread": float((w - w[:, -1:]).abs().max()),
            "w_max": float(w.abs().max()),
            "io_change": float(max(f.abs().max() for f in fixed)),
            "scratch": float(scratch.abs().max())}


def _relative(value: float, scale: float) -> float:
    """value / scale; inf when the scale is 0 (a model that does nothing has no scale to be exact against)."""
    return value / scale if scale > 0 else math.inf


def w_movement(model: ICGDTransformer, X, Y, x_query, w0) -> float:
    """max |w_hat^(l) - w0| over the blocks, the query token's w: how far the model moves w."""
    return float((model.run(X, Y, x_query, w0) - w0[:, None]).abs().max())


def check_state_contract(claims: Claims, model: ICGDTransformer, X, Y, x_query, w0) -> None:
    """After every block: one w in all tokens; x, y, one, t unchanged; scratch exactly 0.

    Each deviation is divided by what a working block changes (the largest change of w, the largest
    scratch entry before the projection layer), so a model that does nothing fails instead of holding.
    """
    H0 = model.embed(X, Y, x_query, w0)
    trace = model.trace(H0)
    states = [H0] + [trace.state(f"b{l}.proj") for l in range(model.L)]
    devs = [contract(model, H0, H) for H in states[1:]]
    worst = {k: max(d[k] for d in devs) for k in devs[0]}
    lay = model.layout
    moved = max(float((lay.read(S, "w") - lay.read(H0, "w")).abs().max()) for S in states[1:])
    scratch = max(float(torch.cat([lay.read(trace.state(f"b{l}.update"), s) for s in scratch_slots(model.spec)],
                                  dim=-1).abs().max()) for l in range(model.L))
    blocks = "the block" if model.L == 1 else f"each of the {model.L} blocks"
    claims.check("Thm 1", f"w identical in all tokens after {blocks}, relative to the largest change of w",
                 _relative(worst["w_spread"], moved), ROUNDOFF, "<=", roundoff=True)
    claims.check("Thm 1", "x, y, 1, t unchanged, relative to the largest change of w",
                 _relative(worst["io_change"], moved), 0.0, "==")
    claims.check("Thm 1", "every scratch coordinate after the block, relative to the largest scratch entry "
                 "before the projection", _relative(worst["scratch"], scratch), 0.0, "==")


def query_leak(model: ICGDTransformer, X, Y, x_query, w0, seed: int = 1) -> tuple[float, float]:
    """(query's largest |g|, |s| / the examples' largest, change of w when x_query changes / largest change of w).

    Both are 0 for the construction (Lemma 4's gate) and inf for a model that writes nothing.
    """
    H = model.embed(X, Y, x_query, w0)
    trace = model.trace(H)
    lay, N = model.layout, model.spec.N
    worst, examples = 0.0, 0.0
    for l in range(model.L):
        S = trace.state(f"b{l}.ewml1")
        for slot in ["g"] + [f"s{j}" for j in range(1, N + 1)]:
            worst = max(worst, float(lay.read(S[:, -1], slot).abs().max()))
            examples = max(examples, float(lay.read(S[:, :-1], slot).abs().max()))
    g = torch.Generator().manual_seed(seed)
    other = ((2 * torch.rand(x_query.shape, generator=g, dtype=DTYPE) - 1) * model.x_bound).to(x_query.device)
    ws = model.run(X, Y, x_query, w0)
    diff = float((model.run(X, Y, other, w0) - ws).abs().max())
    return _relative(worst, examples), _relative(diff, float((ws - w0[:, None]).abs().max()))


def check_query(claims: Claims, model: ICGDTransformer, X, Y, x_query, w0, seed: int = 1) -> None:
    """The query's g and s are exactly 0, so changing x_query changes no w (Lemma 4's gate).

    Both are divided by what a working model produces (the examples' largest |g|, |s|; the largest
    change of w), so a model that does nothing fails instead of holding (`query_leak`).
    """
    slots, w_change = query_leak(model, X, Y, x_query, w0, seed)
    claims.check("Lemma 4", "query token's g and s slots, relative to the examples' largest |g|, |s|", slots, 0.0,
                 "==")
    claims.check("Thm 1", "change in w when x_query changes, relative to the largest change of w", w_change, 0.0, "==")


def check_permutation(claims: Claims, model: ICGDTransformer, X, Y, x_query, w0, seed: int = 2) -> None:
    """Permuting the examples changes w only by rounding.

    Attention without positions is permutation-equivariant for any weights, so this is a property of
    the architecture (kind ``paper``), not evidence about the construction's weights.
    """
    perm = torch.randperm(X.shape[1], generator=torch.Generator().manual_seed(seed))
    diff = float((model.run(X[:, perm], Y[:, perm], x_query, w0) - model.run(X, Y, x_query, w0)).abs().max())
    # rounding grows with the largest weight (1/delta for the ReLU ramp): 1e-10 up to weights of 1e3, then in proportion
    tol = ROUNDOFF * max(1.0, float(model.counted_sizes().max_abs_weight) / 1e3)
    claims.check("Thm 1", "change in w when the examples are permuted (any weights: no positions)", diff, tol,
                 "<=", roundoff=True, kind="paper")


def drop_query_gate(model: ICGDTransformer) -> ICGDTransformer:
    """A copy whose loss MLPs have no gate -R_g (1 - t): the query then enters the gradient (a mutation)."""
    bad = copy.deepcopy(model)
    lay = model.layout
    for layer in bad.layers:
        if layer.name.endswith(".loss"):
            with torch.no_grad():
                W1 = layer.W_1
                W1[:, lay.index("one")] += W1[:, lay.index("t")]
                W1[:, lay.index("t")] = 0.0
    return bad


def _exact_steps(model: ICGDTransformer, ws: torch.Tensor, X, Y, eta: Optional[float]) -> torch.Tensor:
    """Proj(w_hat^l - eta grad L_n(w_hat^l)) for l < L, (B, L, D_N): one exact step from each iterate."""
    eta = model.eta if eta is None else eta
    return torch.stack([(ws[:, l] - eta * autograd_gradient(model.spec, ws[:, l], X, Y, model.activation,
                                                            model.loss)).clamp(-model.box, model.box)
                        for l in range(ws.shape[1] - 1)], dim=1)


def per_step_errors(model: ICGDTransformer, ws: torch.Tensor, X, Y, eta: Optional[float] = None) -> torch.Tensor:
    """||w_hat^(l+1) - Proj(w_hat^l - eta grad L_n(w_hat^l))||_2, (B, L): the error of each step alone.

    ``eta`` (default the model's) is the step of the reference: a copy built with a wrong step is
    measured against the intended one.
    """
    return (ws[:, 1:] - _exact_steps(model, ws, X, Y, eta)).norm(dim=-1)


def step_relative_errors(model: ICGDTransformer, ws: torch.Tensor, X, Y, eta: Optional[float] = None) -> torch.Tensor:
    """`per_step_errors` divided by the length of the exact step from the same iterate, (B, L).

    A model that leaves w in place scores 1; GD run with step (1 + a) eta scores about |a|.
    """
    exact = _exact_steps(model, ws, X, Y, eta)
    return (ws[:, 1:] - exact).norm(dim=-1) / (exact - ws[:, :-1]).norm(dim=-1)


GD_RELATIVE = 0.05
"""The relative part of the accuracy criterion of `gd_criterion`: 5% of the distance GD travels."""


def gd_tolerance(model: ICGDTransformer, X, Y, w0, gd: Optional[torch.Tensor] = None,
                 eps: Optional[tuple[float, float, float]] = None) -> torch.Tensor:
    """The absolute part tol_l of the accuracy criterion, (B, L + 1): the tables' errors carried to w.

    tol_0 = 0 and tol_l = (1 + eta L_f) tol_(l-1) + eta eps_(l-1), the recursion of Corollary 1.1 with
    eps_l = `bounds.running_gradient_error` at the exact GD iterate w_GD^(l) (Lemmas 2-6 entry by entry,
    from the tables' closed-form sup errors) and L_f = `lipschitz_estimate` of grad L_n on the GD
    trajectory and on a copy moved by 1e-3 box (where the transformer's iterates lie). Nothing comes from
    the transformer's run. Smooth activations only (see `running_gradient_error`).
    """
    gd = reference_gd(model, X, Y, w0) if gd is None else gd
    if eps is None:
        eps = bounds.table_errors(model.activation, model.loss, model.R, model.r_hat, model.dr_hat,
                                  model.u_hat, model.R_g - 1.0)
    g = torch.Generator().manual_seed(0)
    jitter = (2 * torch.rand(gd.shape, generator=g, dtype=DTYPE) - 1).to(gd.device) * 1e-3 * model.box
    L_f = lipschitz_estimate(model, torch.cat([gd, (gd + jitter).clamp(-model.box, model.box)], 1), X, Y)
    tol = [torch.zeros(gd.shape[0], dtype=gd.dtype, device=gd.device)]
    for l in range(gd.shape[1] - 1):
        step = bounds.running_gradient_error(model, gd[:, l], X, Y, eps)
        tol.append((1 + model.eta * L_f) * tol[-1] + model.eta * step)
    return torch.stack(tol, dim=1)


def gd_criterion(model: ICGDTransformer, X, Y, x_query, w0, rel: float = GD_RELATIVE,
                 eps: Optional[tuple[float, float, float]] = None) -> dict[str, float]:
    """The accuracy criterion for every admissible prompt: for each step l and prompt,

        ||w_hat^(l) - w_GD^(l)||_2 <= rel ||w_GD^(l) - w0||_2 + tol_l     (`gd_tolerance`),

    relative where GD travels, absolute (the tables' errors carried through Lemmas 2-6 and Corollary
    1.1's recursion) where it does not: a prompt whose network is dead or already near a stationary
    point has a GD displacement near 0, and a relative criterion alone fails there on the tables'
    errors. Returns the worst ratio ``ratio`` = max error / (rel displacement + tol) (<= 1: the
    criterion holds), with ``error``, ``displacement`` and ``tol`` at the worst (l, prompt).
    """
    gd = reference_gd(model, X, Y, w0)
    err = (model.run(X, Y, x_query, w0) - gd).norm(dim=-1)
    disp = (gd - w0[:, None]).norm(dim=-1)
    tol = gd_tolerance(model, X, Y, w0, gd, eps)
    ratio = err[:, 1:] / (rel * disp[:, 1:] + tol[:, 1:])
    k = int(ratio.argmax())
    b, l = divmod(k, ratio.shape[1])
    return {"ratio": float(ratio.max()), "error": float(err[b, l + 1]),
            "displacement": float(disp[b, l + 1]), "tol": float(tol[b, l + 1])}


def theta_norms(model: ICGDTransformer) -> list[float]:
    """B_theta of (C.1) for each layer: max_m max(|Q_m|, |K_m|) + sum_m |V_m| for attention and EWML
    layers, |W_1| + |W_2| for MLPs, with |A| the largest absolute entry of A.

    The paper calls (C.1)'s norm ||.||_1; its proofs' bounds (e.g. ||W_1||_1 <= R_3 + 1 for a W_1 with
    M_3 rows holding -R_3 in the same column) hold for the largest entry, so that is the norm used here.
    """
    seen: dict[tuple[int, ...], float] = {}  # the L blocks share their weight tensors: one norm each
    out = []
    for layer in model.layers:
        key = tuple(p.data_ptr() for p in layer.parameters())
        if key not in seen:
            if layer.kind == "mlp":
                W1, W2 = layer.dense()
                seen[key] = float(W1.abs().max()) + float(W2.abs().max())
            else:
                Q, K, Vm = layer.dense()
                qk = torch.maximum(Q.abs().amax(dim=(1, 2)), K.abs().amax(dim=(1, 2)))
                seen[key] = float(qk.max()) + float(Vm.abs().amax(dim=(1, 2)).sum())
        out.append(seen[key])
    return out


def lipschitz_estimate(model: ICGDTransformer, points: torch.Tensor, X, Y) -> float:
    """max ||grad(a) - grad(b)|| / ||a - b|| over pairs of points (B, P, D_N) of one prompt each."""
    B, P, _ = points.shape
    grads = torch.stack([autograd_gradient(model.spec, points[:, p], X, Y, model.activation, model.loss)
                         for p in range(P)], dim=1)
    best = 0.0
    for a in range(P):
        for b in range(a + 1, P):
            dw = (points[:, a] - points[:, b]).norm(dim=-1)
            dg = (grads[:, a] - grads[:, b]).norm(dim=-1)
            ok = dw > 1e-9
            if ok.any():
                best = max(best, float((dg[ok] / dw[ok]).max()))
    return best


def slot_errors(model: ICGDTransformer, X, Y, x_query, w0) -> dict[str, float]:
    """Max |slot - Lemma 1 ground truth| over the examples after one block's EWML layers (block 0)."""
    trace = model.trace(model.embed(X, Y, x_query, w0))
    S = trace.state("b0.ewml1")[:, :-1]
    parts = explicit_gradient(model.spec, w0, X, Y, model.activation, model.loss)
    lay, N = model.layout, model.spec.N
    out = {}
    for j in range(1, N + 1):
        out[f"p{j}"] = float((lay.read(S, f"p{j}") - parts.p[j]).abs().max())
        out[f"r{j - 1}"] = float((lay.read(S, f"r{j - 1}") - parts.dr[j - 1]).abs().max())
        out[f"s{j}"] = float((lay.read(S, f"s{j}") - parts.s[j - 1]).abs().max())
    out["g"] = float((lay.read(S, "g") - parts.u).abs().max())
    return out
