"""One plotting style for the book, plus helpers for weight heat maps and log-scale fits."""
from __future__ import annotations

from typing import Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

STYLE = {
    "figure.figsize": (6.4, 4.0),
    "figure.dpi": 100,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 10,
    "legend.frameon": False,
    "image.cmap": "RdBu_r",
}


def use_style() -> None:
    """Apply the book's matplotlib style."""
    plt.rcParams.update(STYLE)


def _numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def heatmap(ax, W, title: str = "", xlabel: str = "input coordinate", ylabel: str = "output coordinate",
            xticklabels: Optional[Sequence[str]] = None, yticklabels: Optional[Sequence[str]] = None):
    """Show a weight matrix with a symmetric diverging colour scale (zero is white)."""
    W = _numpy(W)
    if W.ndim != 2:
        raise ValueError(f"W must be a matrix, got shape {W.shape}")
    vmax = float(np.abs(W).max()) or 1.0
    im = ax.imshow(W, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(False)
    if xticklabels is not None:
        ax.set_xticks(range(len(xticklabels)), xticklabels, rotation=90, fontsize=7)
    if yticklabels is not None:
        ax.set_yticks(range(len(yticklabels)), yticklabels, fontsize=7)
    plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return im


def fit_slope(x, y, log_x: bool = True) -> tuple[float, float]:
    """Least-squares slope and intercept of log10(y) against log10(x) (or x if ``log_x=False``)."""
    x, y = _numpy(x).astype(float), _numpy(y).astype(float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError("x and y must have the same shape and at least two points")
    if np.any(y <= 0) or (log_x and np.any(x <= 0)):
        raise ValueError("log fits need positive values")
    slope, intercept = np.polyfit(np.log10(x) if log_x else x, np.log10(y), 1)
    return float(slope), float(intercept)


def log_fit(ax, x, y, label: str, log_x: bool = True, marker: str = "o", **kwargs) -> float:
    """Plot y on a log scale (log-log, or semilog-y with ``log_x=False``) with its fitted line; return the slope."""
    slope, intercept = fit_slope(x, y, log_x)
    x_np = _numpy(x).astype(float)
    line = ax.plot(x_np, _numpy(y), marker, label=f"{label} (slope {slope:.2f})", **kwargs)[0]
    ax.plot(x_np, 10 ** (intercept + slope * (np.log10(x_np) if log_x else x_np)), "--", color=line.get_color(), lw=1)
    ax.set_yscale("log")
    if log_x:
        ax.set_xscale("log")
    return slope
