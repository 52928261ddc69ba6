"""The paper's definition of the model class T (Section 3), run naively on paper-form weights.

`paper_forward(weights, X, boundary)` is what every construction of this chapter is checked
against; it uses no core layer. ``weights = {"E", "pe", "layers"}`` as returned by
``model.paper_weights()``:

    Z = E X + P,   z_i <- z_i + Σ_h V_h Z[i−U:i+U] softmax((K_h Z[i−U:i+U])ᵀ Q_h z_i),
    Z <- A_L η(... η(A_1 Z + b_1) ...) + b_L   (column-wise, no skip connection).

``boundary="circular"``: X is one period of a periodic sequence; ``"zero"``: X continued by zero
tokens on both sides (enough of them that no output depends on where the padding stops).
Also here: the ground truths Γ∘Σ_i X (fixed offsets) and Γ∘Π∘Σ_i X (sorted by importance).
"""
from __future__ import annotations

from typing import Sequence

import torch

from tfbook import validate
from tfbook.device import DTYPE


def _refuse_complex(name: str, value):
    """Raise ValueError naming the argument when ``value`` is complex (never silently drop the imaginary part)."""
    dtype = value.dtype if isinstance(value, torch.Tensor) else torch.as_tensor(value).dtype
    if dtype.is_complex:
        raise ValueError(f"{name} must be a real tensor, got dtype {dtype}")
    return value


def _real_tensor(name: str, value) -> torch.Tensor:
    """``value`` as a float64 tensor; complex input raises ValueError naming the argument."""
    return torch.as_tensor(_refuse_complex(name, value)).to(DTYPE)


def _on(A: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A dense float64 copy of a weight on the device of ``like`` (the reference follows its input)."""
    return (A.to_dense() if A.is_sparse else A).to(device=like.device, dtype=DTYPE)


def paper_forward(weights: dict, X: torch.Tensor, boundary: str = "circular") -> torch.Tensor:
    """(batch, out, N) outputs of the paper's model on (batch, d, N) inputs."""
    X = _refuse_complex("X", X).to(DTYPE)
    B, d, N = X.shape
    P = sum(layer["U"] for layer in weights["layers"]) if boundary == "zero" else 0
    if P:
        X = torch.cat([X.new_zeros(B, d, P), X, X.new_zeros(B, d, P)], dim=-1)
    n = X.shape[-1]
    positions = torch.arange(-P, N + P, device=X.device)
    Z = _on(weights["E"], X) @ X + _on(weights["pe"](positions), X)  # (B, D, n)
    for layer in weights["layers"]:
        U = layer["U"]
        offsets = torch.arange(-U, U + 1, device=X.device)
        idx = torch.arange(n, device=X.device)[:, None] + offsets[None, :]  # (n, 2U+1) key positions of each query
        present = torch.ones_like(idx, dtype=torch.bool)
        if boundary == "circular":
            idx = torch.remainder(idx, n)
        else:
            present = (idx >= 0) & (idx < n)
            idx = idx.clamp(0, n - 1)
        update = torch.zeros_like(Z)
        for K, Q, V in layer["heads"]:
            keys = (_on(K, Z) @ Z)[:, :, idx]  # (B, D', n, 2U+1)
            q = _on(Q, Z) @ Z  # (B, D', n)
            s = (keys * q[:, :, :, None]).sum(1)  # (B, n, 2U+1)
            s = s.masked_fill(~present, float("-inf"))
            a = torch.softmax(s, dim=-1)
            values = (_on(V, Z) @ Z)[:, :, idx]  # (B, D, n, 2U+1)
            update = update + (values * a[:, None]).sum(-1)
        Z = Z + update
        ffn = layer["ffn"]
        for ell, (A, b) in enumerate(ffn):
            Z = torch.einsum("od,bdn->bon", _on(A, Z), Z) + _on(b, Z)[None, :, None]
            if ell < len(ffn) - 1:
                Z = torch.relu(Z)
    return Z[..., P:P + N] if P else Z


def extract_reference(X: torch.Tensor, offsets: Sequence[tuple[int, int]], boundary: str = "circular") -> torch.Tensor:
    """Γ∘Σ_i X: (batch, H, N) with entry [h, i] = X[c_h, i + j_h] (zero outside the sequence if boundary="zero")."""
    _refuse_complex("X", X)
    B, d, N = X.shape
    out = torch.zeros(B, len(offsets), N, dtype=X.dtype, device=X.device)
    i = torch.arange(N, device=X.device)
    for h, (c, o) in enumerate(offsets):
        j = i + o
        if boundary == "circular":
            out[:, h] = X[:, c, torch.remainder(j, N)]
        else:
            ok = (j >= 0) & (j < N)  # (N,): zero outside the sequence
            out[:, h] = torch.where(ok, X[:, c, j.clamp(0, N - 1)], out[:, h])
    return out


def importance_values(importance: dict, X: torch.Tensor) -> torch.Tensor:
    """μ_i(X) = w_() + Σ w_{c,o} X[c, i+o] on one period (batch, N)."""
    _refuse_complex("X", X)
    mu = torch.full((X.shape[0], X.shape[-1]), float(importance.get((), 0.0)), dtype=X.dtype, device=X.device)
    for key, w in importance.items():
        if key != ():
            c, o = key
            mu = mu + float(w) * torch.roll(X[:, c], shifts=-o, dims=-1)
    return mu


def selection_reference(importance: dict, channels: Sequence[Sequence[int]], V: int,
                        X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Γ∘Π∘Σ_i X on one period: features (batch, out, N) in rank order and the selected offsets (batch, r_max, N)."""
    _refuse_complex("X", X)
    B, d, N = X.shape
    mu = importance_values(importance, X)  # (B, N)
    offsets = torch.arange(-V, V + 1, device=X.device)
    window = torch.remainder(torch.arange(N, device=X.device)[:, None] + offsets[None, :], N)  # (N, 2V+1)
    order = torch.argsort(mu[:, window], dim=-1, descending=True, stable=True)  # (B, N, 2V+1)
    chosen = offsets[order[..., : len(channels)]].permute(0, 2, 1)  # (B, r_max, N)
    feats = []
    for m, chans in enumerate(channels):
        pos = torch.remainder(torch.arange(N, device=X.device)[None, :] + chosen[:, m], N)  # (B, N)
        for c in chans:
            feats.append(torch.gather(X[:, c], 1, pos))
    out = torch.stack(feats, 1) if feats else X.new_zeros(B, 0, N)
    return out, chosen


def static_baselines(X: torch.Tensor, target: torch.Tensor, V: int) -> dict:
    """RMSEs of three static predictors of ``target`` (batch, N) from X (batch, d, N) on one period.

    ``"constant"``: the mean of the target (the best constant); ``"best_offset"``: the best single
    input X[c, i+o] over channels c and offsets |o| <= V (Theorem 4.2's fixed-offset mechanism, no
    fitting); ``"window_lsq"``: least squares of the target on every input of the window [i−V, i+V]
    plus a constant, fitted and evaluated on the same tokens (in-sample, so the most favourable
    number for any linear static read-out of the window). Each is shift-invariant by construction.
    """
    X = _real_tensor("X", X)
    target = _real_tensor("target", target)
    if X.ndim != 3 or target.shape != (X.shape[0], X.shape[-1]):
        raise ValueError(f"X must be (batch, d, N) and target (batch, N) with the same batch and N, "
                         f"got {tuple(X.shape)} and {tuple(target.shape)}")
    V = validate.positive_int("V", V, 0)
    y = target.reshape(-1)
    rmse = lambda e: float(e.pow(2).mean().sqrt())  # noqa: E731
    windows = torch.stack([torch.roll(X, shifts=-o, dims=-1) for o in range(-V, V + 1)], 2)  # (B, d, 2V+1, N)
    feats = windows.permute(0, 3, 1, 2).reshape(-1, X.shape[1] * (2 * V + 1))  # (B·N, d(2V+1))
    best = min(rmse(feats[:, k] - y) for k in range(feats.shape[1]))
    A = torch.cat([feats, torch.ones_like(y)[:, None]], 1)
    coef = torch.linalg.lstsq(A.cpu(), y.cpu()[:, None], driver="gelsd").solution.to(A.device)
    return {"constant": rmse(y - y.mean()), "best_offset": best, "window_lsq": rmse(A @ coef[:, 0] - y)}
