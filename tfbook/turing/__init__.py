"""Chapter: statistically meaningful approximation, Boolean circuits and Turing machines (Wei, Chen & Ma, 2022).

Public API (the issue's contract):

* `TuringMachine(delta, initial, accept, reject=(), blank="_")`, ``tm.run(x, T)`` -> `RunResult`
* `build_transformer(tm, T)` -> `TMTransformer` with ``run(x)``, ``run_batch(xs)``, ``width``, ``num_layers``,
  ``num_parameters()``, ``l1_norm()``
* `Circuit(num_inputs, layers)`, `build_circuit_network(circuit)`
* `build_fleet(tms, T)` -> `TMFleet`: the transformers of G machines over one alphabet as one direct sum,
  run in lockstep; ``run_batch(xs)`` gives every machine's runs

Both models are `tfbook.model.Construction`s whose arithmetic runs in core layers of `tfbook.layers`
(hard attention with a null key, feed-forward layers for the work and for the corrections), so
`tfbook.layers.perturb` reaches them; sizes come from ``counted_sizes()`` and ``paper_sizes()``.

Submodules: `machine` (simulator, catalog), `transformer` (Appendix C construction), `fleet` (many
machines in lockstep), `circuits`
(Lemma B.1, Prop 3.4), `margin` (all-layer margins), `robustness` (margin upper and lower bounds),
`formulas` (the paper's size formulas, for size claims), `sizes` (per-lemma bounds, l1 by layer), `learning` (Section 3's illustration).
"""
from __future__ import annotations

import torch

from tfbook.turing.circuits import (Circuit, CircuitNetwork, all_inputs, build_circuit_network, gate_counts,
                                    l1_formula, random_circuit)
from tfbook.turing.fleet import TMFleet, build_fleet
from tfbook.turing.machine import (CATALOG, CATALOG_SYMBOLS, RunResult, TuringMachine, all_strings, balanced, copy,
                                   counter, increment, palindrome, parity, random_tm, residue,
                                   step_back)
from tfbook.turing.margin import (flip_radius, random_direction, toy_margin_closed_form, toy_margin_numeric,
                                  toy_output)
from tfbook.turing.transformer import TMTransformer, binary, build_transformer, position_bits, score_gaps, tm_layout


def _bench_build(device: torch.device):
    tm = palindrome()
    model = build_transformer(tm, 64, device=device)
    return model, all_strings("01", 5)[:32]


def bench_cases() -> dict[str, dict]:
    """The chapter's benchmarked construction (read by `tfbook.build.bench`)."""
    return {"turing: palindrome transformer, T=64, batch 32":
            {"build": _bench_build, "forward": lambda state: state[0].forward_trace(state[1]),
             "units": "steps x inputs", "count": 64 * 32}}

__all__ = [
    "CATALOG", "CATALOG_SYMBOLS", "Circuit", "CircuitNetwork", "RunResult", "TMFleet", "TMTransformer",
    "TuringMachine", "all_inputs", "all_strings", "balanced", "binary", "build_circuit_network", "build_fleet",
    "build_transformer", "copy", "counter",
    "flip_radius", "gate_counts", "increment", "l1_formula", "palindrome", "parity", "position_bits", "random_circuit",
    "random_direction", "random_tm", "residue", "score_gaps", "step_back", "tm_layout",
    "toy_margin_closed_form", "toy_margin_numeric", "toy_output",
]
