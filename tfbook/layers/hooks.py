"""The perturbation hooks of the core layers: `perturb` (a context that changes selected layers'
updates) and the two process-wide sabotages of the claims audit, read from the environment at import
(``TFBOOK_PERTURB_CORE``, ``TFBOOK_PERTURB_WEIGHTS``; `sabotage_hits`). `_frozen` is the one function
through which core layers store tensors, so the place of the weight noise. `core_layers_built` counts the
core layers a process has constructed, sabotage or not: where it stays 0, no sabotage can change anything.

The layers read `_ACTIVE` and `_WEIGHTS` through this module (``hooks._ACTIVE``), so a test may
replace them.
"""
from __future__ import annotations

import contextlib
import fnmatch
import os
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import torch
from torch import nn

from tfbook import validate
from tfbook.device import DTYPE
from tfbook.layers.common import KINDS



@dataclass
class Perturbation:
    """One active `perturb` context; ``hits`` counts the layer calls it changed."""

    scale: Optional[float]
    add: Optional[float]
    names: Optional[tuple[str, ...]]
    kinds: Optional[tuple[str, ...]]
    heads: Optional[tuple[int, ...]]
    fn: Optional[Callable[[nn.Module, torch.Tensor], torch.Tensor]]
    generator: torch.Generator
    hits: int = 0

    def selects(self, layer: nn.Module) -> bool:
        if self.kinds is not None and layer.kind not in self.kinds:
            return False
        return self.names is None or any(fnmatch.fnmatchcase(layer.name, p) for p in self.names)


@dataclass
class WeightNoise:
    """The ``TFBOOK_PERTURB_WEIGHTS=eps`` sabotage; ``hits`` counts the stored tensors it changed."""

    eps: float
    generator: torch.Generator
    hits: int = 0

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` plus noise uniform on [-eps max|t|, eps max|t|] in every entry, zeros included.

        A tensor without a non-zero entry (max|t| = 0) is returned unchanged and is not a hit.
        """
        amplitude = self.eps * float(t.abs().max()) if t.numel() else 0.0
        if amplitude == 0:
            return t
        self.hits += 1
        noise = (torch.rand(t.shape, generator=self.generator, dtype=DTYPE) * 2 - 1) * amplitude
        return t + noise.to(t.device)


_ACTIVE: list[Perturbation] = []
PERTURB_ENV = "TFBOOK_PERTURB_CORE"  # e.g. 1e-3: every core layer's update is scaled by 1 + 1e-3 in this process
WEIGHTS_ENV = "TFBOOK_PERTURB_WEIGHTS"  # e.g. 1e-3: noise of 1e-3 * max|w| on every stored entry in this process
_CORE: Optional[Perturbation] = None  # the TFBOOK_PERTURB_CORE sabotage, when set
_WEIGHTS: Optional[WeightNoise] = None  # the TFBOOK_PERTURB_WEIGHTS sabotage, when set
_BUILT = 0  # core layers constructed in this process (`core_layers_built`)


@contextlib.contextmanager
def perturb(scale: Optional[float] = None, add: Optional[float] = None, *, names: Optional[Sequence[str]] = None,
            kinds: Optional[Sequence[str]] = None, heads: Optional[Sequence[int]] = None,
            fn: Optional[Callable[[nn.Module, torch.Tensor], torch.Tensor]] = None,
            seed: int = 0) -> Iterator[Perturbation]:
    """Change the update U of every selected core layer while the context is active.

    A layer is selected when its ``name`` matches one of ``names`` (fnmatch patterns; None = every
    layer) and its ``kind`` is in ``kinds`` (None = every kind). U (output minus input for residual
    layers, the output otherwise) becomes ``scale * U + noise`` with noise uniform on [-add, add]
    (drawn from ``seed``), then ``fn(layer, U)`` if given. With ``heads``, the scale applies only to
    those heads of an attention or EWML layer (the other heads and the noise are unchanged).

    >>> with perturb(scale=0.0, names=["block0.*"]) as p:
    ...     pass
    """
    if scale is not None:
        scale = validate.real("scale", scale)
    if add is not None:
        add = validate.real("add", add, low=0.0)
    if kinds is not None:
        for k in kinds:
            validate.choice("kinds", k, KINDS)
    if heads is not None:
        heads = tuple(validate.positive_int("heads", h, 0) for h in heads)
        if scale is None:
            raise ValueError("heads needs a scale (the factor applied to those heads)")
    if names is not None and isinstance(names, str):
        names = [names]
    gen = torch.Generator().manual_seed(validate.positive_int("seed", seed, 0))
    p = Perturbation(scale, add, None if names is None else tuple(names), None if kinds is None else tuple(kinds),
                     heads, fn, gen)
    _ACTIVE.append(p)
    try:
        yield p
    finally:
        _ACTIVE.remove(p)


def _eps_from_environment(name: str, low: Optional[float] = None) -> Optional[float]:
    """The number in the environment variable ``name`` (None when unset or empty); ValueError on junk."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        return validate.real(name, float(value), low=low)
    except ValueError:
        raise ValueError(f"{name} must be a finite real number{'' if low is None else f' >= {low}'} such as 1e-3, "
                         f"got {value!r}") from None


def _sabotage_from_environment() -> None:
    """Activate the process-wide sabotages set in the environment (read once, at import).

    ``TFBOOK_PERTURB_CORE=eps``: a ``perturb(scale=1 + eps)`` of every core layer.
    ``TFBOOK_PERTURB_WEIGHTS=eps`` (eps >= 0): `WeightNoise` on every tensor `_frozen` stores, drawn
    from a generator seeded with 0, so the noise is the same in every process that builds the same
    layers in the same order. The claims audit (`tfbook.build.claims_audit`, ``make test-claims``) runs every
    notebook under these and expects every construction claim to fail under at least one.
    """
    global _CORE, _WEIGHTS
    eps = _eps_from_environment(PERTURB_ENV)
    if eps is not None:
        _CORE = Perturbation(1.0 + eps, None, None, None, None, None, torch.Generator().manual_seed(0))
        _ACTIVE.append(_CORE)
    eps = _eps_from_environment(WEIGHTS_ENV, low=0.0)
    if eps is not None:
        _WEIGHTS = WeightNoise(eps, torch.Generator().manual_seed(0))


def sabotage_hits() -> dict[str, int]:
    """What the process-wide sabotages have changed so far, by environment variable: layer calls for
    ``TFBOOK_PERTURB_CORE``, stored tensors for ``TFBOOK_PERTURB_WEIGHTS`` (0 for a sabotage not set).

    A sabotage that is set and hits nothing tests nothing: an audit checks these counts.

    >>> sorted(sabotage_hits())
    ['TFBOOK_PERTURB_CORE', 'TFBOOK_PERTURB_WEIGHTS']
    """
    return {PERTURB_ENV: 0 if _CORE is None else _CORE.hits, WEIGHTS_ENV: 0 if _WEIGHTS is None else _WEIGHTS.hits}


def core_layers_built() -> int:
    """How many core layers (`tfbook.layers.sparse._SparseWeights`, the base of every one) this process has
    constructed, whatever the sabotages.

    Both sabotages act inside core layers only: ``TFBOOK_PERTURB_CORE`` in their forward passes (`_perturb_update`,
    `_head_scale`), ``TFBOOK_PERTURB_WEIGHTS`` in what their constructors store (`_frozen`). A run that built none
    therefore computes exactly what it would compute under either, so one run without a sabotage can stand for
    the claims audit's sabotaged runs (`tfbook.build.claims_audit`, with ``make nbval``'s records).
    """
    return _BUILT


def _head_scale(layer: nn.Module, num_heads: int, device) -> Optional[torch.Tensor]:
    """(heads,) factors for the head-restricted perturbations that select ``layer``, or None."""
    factors = None
    for p in _ACTIVE:
        if p.heads is not None and p.selects(layer):
            factors = torch.ones(num_heads, dtype=DTYPE, device=device) if factors is None else factors
            for h in p.heads:
                if h < num_heads:
                    factors[h] *= p.scale
            p.hits += 1
    return factors


def _perturb_update(layer: nn.Module, update: torch.Tensor) -> torch.Tensor:
    for p in _ACTIVE:
        if not p.selects(layer) or (p.heads is not None and p.add is None and p.fn is None):
            continue
        if p.scale is not None and p.heads is None:
            update = update * p.scale
        if p.add is not None:
            noise = (torch.rand(update.shape, generator=p.generator, dtype=DTYPE) * 2 - 1) * p.add
            update = update + noise.to(update.device, update.dtype)
        if p.fn is not None:
            update = p.fn(layer, update)
        p.hits += 1
    return update


def _frozen(t: Optional[torch.Tensor]) -> Optional[nn.Parameter]:
    """``t`` stored as a frozen float64 parameter: the one function through which core layers store tensors
    (weights, biases, null keys and values), and so the place of the ``TFBOOK_PERTURB_WEIGHTS`` sabotage."""
    if t is None:
        return None
    t = t.detach().clone().to(DTYPE)
    return nn.Parameter(t if _WEIGHTS is None else _WEIGHTS(t), requires_grad=False)


_sabotage_from_environment()
