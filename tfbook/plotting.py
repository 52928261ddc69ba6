"""One figure style for the book, plus helpers for weight heat maps and log-scale fits.

`use_style()` (call it once per notebook, after the imports) sets the style and, inside IPython,
the inline backend's output format:

* figures are ``TEXT_WIDTH`` = 6.5 in wide (the width of the book's text column at 100 dpi,
  so they are shown at their natural size, never shrunk): make them with `subplots`, which keeps
  the width and chooses the height; do not pass wider ``figsize`` values;
* fonts: 11 pt text, 10 pt ticks and legends (at least 10 pt as displayed);
* output: retina PNG (twice the pixels, displayed at the natural size): sharp on high-density
  screens, a bounded size in the notebook file (SVG grows with the number of points), and ignored
  by nbval (plots are tagged ``nbval-ignore-output`` anyway);
* big heat maps label only every k-th tick (`heatmap` does it; `thin_ticks` for other axes).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

TEXT_WIDTH = 6.5
"""Figure width in inches (the book's text column at 100 dpi)."""
LABEL_SPACING = 0.25
"""Inches of axis length per tick label: a heat-map axis with more labels than fit is thinned."""

STYLE = {
    "figure.figsize": (TEXT_WIDTH, 4.0),
    "figure.dpi": 100,
    "savefig.bbox": "tight",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 11,
    "axes.titlesize": 11,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "legend.frameon": False,
    "image.cmap": "RdBu_r",
}


def use_style() -> None:
    """Apply the book's matplotlib style and, inside IPython, retina PNG output."""
    plt.rcParams.update(STYLE)
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is not None:
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("retina")


def subplots(nrows: int = 1, ncols: int = 1, height: Optional[float] = None, **kwargs):
    """``plt.subplots`` at the text width; ``height`` (inches) defaults to a readable panel height."""
    if not isinstance(nrows, int) or not isinstance(ncols, int) or nrows < 1 or ncols < 1:
        raise ValueError(f"nrows and ncols must be positive ints, got {nrows!r}, {ncols!r}")
    if "figsize" in kwargs:
        raise ValueError("figsize is set by subplots (the text width); pass height instead")
    if height is None:
        panel = min(4.0, max(2.4, 0.8 * TEXT_WIDTH / ncols + 0.6))
        height = panel * nrows
    kwargs.setdefault("layout", "tight")
    return plt.subplots(nrows, ncols, figsize=(TEXT_WIDTH, height), **kwargs)


def tick_step(count: int, limit: int) -> int:
    """The k such that labelling every k-th of ``count`` ticks leaves at most ``limit`` labels.

    >>> tick_step(10, 16), tick_step(40, 16), tick_step(100, 20)
    (1, 3, 5)
    """
    if count < 0 or limit < 1:
        raise ValueError(f"count must be >= 0 and limit >= 1, got {count}, {limit}")
    return max(1, math.ceil(count / limit))


def max_labels(ax, axis: str) -> int:
    """How many tick labels fit along ``axis`` of ``ax`` at `LABEL_SPACING` inches each."""
    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y', got {axis!r}")
    box = ax.get_position()
    width, height = ax.figure.get_size_inches()
    length = box.width * width if axis == "x" else box.height * height
    return max(2, int(length / LABEL_SPACING))


def thin_ticks(ax, labels: Sequence[str], axis: str = "x", every: Optional[int] = None, rotation: float = 90) -> int:
    """Put a tick at every position of ``axis`` but label only every k-th one (k chosen so the
    labels fit, unless ``every`` is given); return k."""
    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y', got {axis!r}")
    k = every if every is not None else tick_step(len(labels), max_labels(ax, axis))
    if k < 1:
        raise ValueError(f"every must be a positive int, got {every!r}")
    positions = list(range(0, len(labels), k))
    shown = [labels[i] for i in positions]
    if axis == "x":
        ax.set_xticks(positions, shown, rotation=rotation)
    else:
        ax.set_yticks(positions, shown)
    return k


def _numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def heatmap(ax, W, title: str = "", xlabel: str = "input coordinate", ylabel: str = "output coordinate",
            xticklabels: Optional[Sequence[str]] = None, yticklabels: Optional[Sequence[str]] = None,
            every: Optional[int] = None, colorbar: bool = True):
    """Show a weight matrix with a symmetric diverging colour scale (zero is white).

    Tick labels are thinned to every k-th tick so that they fit the axis (``every`` forces k);
    without labels, matplotlib's integer ticks are used.
    """
    W = _numpy(W)
    if W.ndim != 2:
        raise ValueError(f"W must be a matrix, got shape {W.shape}")
    for name, labels, size in (("xticklabels", xticklabels, W.shape[1]), ("yticklabels", yticklabels, W.shape[0])):
        if labels is not None and len(labels) != size:
            raise ValueError(f"{name} must have {size} entries, got {len(labels)}")
    vmax = float(np.abs(W).max()) or 1.0
    im = ax.imshow(W, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(False)
    if colorbar:
        plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04)  # first: it shrinks the axes the labels must fit
    if xticklabels is not None:
        thin_ticks(ax, list(xticklabels), "x", every)
    else:
        ax.xaxis.get_major_locator().set_params(integer=True)
    if yticklabels is not None:
        thin_ticks(ax, list(yticklabels), "y", every)
    else:
        ax.yaxis.get_major_locator().set_params(integer=True)
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
