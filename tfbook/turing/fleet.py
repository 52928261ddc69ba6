"""`build_fleet`: G Turing-machine transformers of one horizon run in lockstep as one direct sum.

Every machine's transformer has the same P + 9 layers for a given T (`layer_names`), so the fleet's
layer k is the direct sum (`tfbook.layers.direct_sum`) of the machines' layers k: a block-diagonal
feed-forward layer, and an attention layer holding every machine's head, each reading and writing its
own block. One decoder step then runs all G machines in one call per layer, instead of G calls; the
arithmetic is the core layers' own, so each block computes exactly what the machine's transformer
computes alone (a unit test checks every run against the machines' own transformers).
"""
from __future__ import annotations

from typing import Sequence

import torch

from tfbook import validate
from tfbook.device import DTYPE, default_device
from tfbook.layers import direct_sum
from tfbook.layout import Layout
from tfbook.turing.machine import RunResult, TuringMachine
from tfbook.turing.transformer import TMDecoder, Trace, build_transformer


class TMFleet(TMDecoder):
    """Built by `build_fleet`; ``run_batch(xs)`` returns, per machine, its `RunResult` on every input."""

    def forward_trace(self, xs: Sequence[str], record: bool = False, **options) -> Trace:
        """`TMDecoder.forward_trace` of all machines at once; ``F`` is (B, machines). ``record`` is not
        offered: record a machine's scores on its own transformer."""
        if record:
            raise ValueError("record must be False for a fleet: record one machine on its own transformer")
        return super().forward_trace(xs, **options)

    @property
    def machines(self) -> int:
        return len(self.readers)

    def decode(self, xs: Sequence[str], trace: Trace) -> list[list[RunResult]]:
        """Per machine, its runs read from its own block of the hidden states."""
        out = []
        for g, reader in enumerate(self.readers):
            block = self.layout[f"m{g}"]
            member = Trace(trace.outputs[..., block], trace.writes[..., block], {}, trace.F[:, g])
            out.append(reader.decode(xs, member))
        return out

    def run(self, x: str, **kwargs) -> list[RunResult]:
        """Every machine's run on input ``x``."""
        return [runs[0] for runs in self.run_batch([x], **kwargs)]


def build_fleet(tms: Sequence[TuringMachine], T: int, device=None) -> TMFleet:
    """The direct sum of `build_transformer(tm, T)` over ``tms`` (machines over one alphabet), on ``device``.

    The machines' own transformers are built on the CPU, summed layer by layer and dropped: the fleet
    keeps no reference to them or to the machines.
    """
    tms = list(tms)
    if not tms or not all(isinstance(tm, TuringMachine) for tm in tms):
        raise ValueError(f"tms must be a non-empty sequence of TuringMachine, got {tms!r}")
    alphabets = {tuple(tm.alphabet) for tm in tms}
    if len(alphabets) != 1:
        raise ValueError(f"tms must share one alphabet (the encoder's), got {sorted(alphabets)}")
    T = validate.positive_int("T", T)
    members = [build_transformer(tm, T, device="cpu") for tm in tms]
    layout = Layout([(f"m{g}", m.w) for g, m in enumerate(members)])
    names = [name for name, _ in members[0].named_layers()]
    layers = [(name, direct_sum([m.layer(name) for m in members], name=name, device="cpu")) for name in names]
    theta = torch.zeros(layout.dim, len(members), dtype=DTYPE)  # (w, G): machine g's classifier on block g
    for g, m in enumerate(members):
        theta[layout[f"m{g}"], g] = m.theta_cls.detach()
    cat = lambda key: torch.cat([getattr(m, key).detach() for m in members])  # noqa: E731
    fleet = TMFleet(layout, layers, [m.reader for m in members], T, members[0].P, cat("E"), cat("h0"), theta)
    return fleet.to(torch.device(device or default_device()))
