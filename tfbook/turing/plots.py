"""Figures for the Turing-machine chapter: space-time tape diagrams and one step of the transformer."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from tfbook import plotting
from tfbook.turing.machine import TuringMachine
from tfbook.turing.transformer import TMTransformer


def spacetime(ax, tm: TuringMachine, x: str, T: int, title: str = "", legend: bool = True) -> None:
    """Time (down) against cell (across), one colour per symbol (the blank light grey), the head's path in black."""
    run = tm.run(x, T)
    history = tm.tape_history(x, T)
    cells = range(min(run.heads + [1]) - 1, max(run.heads + [len(x)]) + 2)
    index = {a: i for i, a in enumerate(tm.alphabet)}
    colours = ["#eeeeee"] + [plt.get_cmap("tab10")(i) for i in range(len(tm.alphabet) - 1)]
    grid = np.array([[index[tape.get(c, tm.blank)] for c in cells] for tape in history])
    ax.imshow(grid, aspect="auto", cmap=ListedColormap(colours), vmin=-0.5, vmax=len(colours) - 0.5,
              interpolation="nearest", extent=(cells[0] - 0.5, cells[-1] + 0.5, T + 0.5, -0.5))
    ax.plot(run.heads, range(T + 1), "k.-", lw=0.8, ms=3)
    ax.set(xlabel="cell", ylabel="step t", title=title or f"{x!r}")
    ax.grid(False)
    if legend:
        handles = [Patch(facecolor=c, edgecolor="0.5", label=f"'{a}'" if a != tm.blank else "blank")
                   for a, c in zip(tm.alphabet, colours)]
        handles.append(Line2D([], [], color="k", marker=".", lw=0.8, label="head"))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1, 1), fontsize=9)


def step_figure(model: TMTransformer, x: str, t: int, layer: str = "CD"):
    """Tape and head after t steps (the written cells and the head's neighbourhood, one symbol per cell,
    blank cells empty), the self-attention scores of ``layer`` and CD's encoder scores at position t, all
    decoded from the transformer (never from a machine)."""
    attention = [name[:-5] for name in model.layer_names if name.endswith(".attn")]
    if layer not in attention:
        raise ValueError(f"layer must be one of {attention}, got {layer!r}")
    trace = model.forward_trace([x], record=True)
    run = model.decode([x], trace)[0]
    t = min(max(t, 0), model.T)
    head = run.heads[t]
    tape = model.tape_after(x, trace, 0, t)  # {cell: symbol}, from the transformer's write log
    fig, axes = plotting.subplots(1, 3, height=2.8)
    cells = range(min([*tape, head]) - 1, max([*tape, head]) + 2)
    axes[0].bar(cells, 1, width=0.9, color=["orange" if c == head else "lightgray" for c in cells])
    for c in cells:
        if tape.get(c, model.blank) != model.blank:
            axes[0].text(c, 0.5, tape[c], ha="center", va="center")
    axes[0].set(title=f"t = {t}: state {run.states[t]}, head at {head}", xlabel="cell", yticks=[], ylim=(0, 2))
    axes[0].xaxis.get_major_locator().set_params(integer=True)
    axes[0].legend(handles=[Patch(color="orange", label="head"), Patch(color="lightgray", label="tape cell")],
                   loc="upper left")
    for ax, key, offset, label in ((axes[1], f"{layer}.attn", -1, "past position t' (-1 = null)"),
                                   (axes[2], "CD.xattn", 0, "input cell j (0 = null)")):
        scores = trace.scores[key][t][0]
        shown = np.where(np.isfinite(scores.numpy()), scores.numpy(), 0.0)
        ax.bar(np.arange(len(shown)) + offset, shown, color=["C3" if v == scores.max() else "C0" for v in scores])
        kind = "self" if key.endswith(".attn") else "encoder"
        ax.set(title=f"{key.split('.')[0]} {kind}-attention scores", xlabel=label, ylabel="score")
    return fig
