"""Argument checks shared by every builder: each raises `ValueError` naming the argument and what is allowed.

>>> positive_int("n", 3)
3
>>> real("eta", 0.5, low=0, low_open=True)
0.5
>>> choice("activation", "relu", ("relu", "tanh"))
'relu'
"""
from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Optional, Sequence

import numpy as np
import torch

from tfbook.device import DTYPE


def positive_int(name: str, value, minimum: int = 1) -> int:
    """``value`` as a Python int >= ``minimum`` (ints and NumPy integers; never bool or float)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def real(name: str, value, low: Optional[float] = None, high: Optional[float] = None,
         low_open: bool = False, high_open: bool = False) -> float:
    """``value`` as a finite float within the given bounds (open or closed); any real type but bool."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, Fraction, np.floating, np.integer)):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    if low is not None and (x < low or (low_open and x == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and (x > high or (high_open and x == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {value!r}")
    return x


def choice(name: str, value, options: Sequence):
    """``value`` if it is one of ``options``."""
    if not any(value == o and type(value) is type(o) for o in options):
        raise ValueError(f"{name} must be one of {tuple(options)}, got {value!r}")
    return value


def has_values(value: torch.Tensor) -> bool:
    """False on the ``meta`` device (shapes only), where a value check has nothing to read and is skipped."""
    return value.device.type != "meta"


def tensor(name: str, value, shape: Optional[Sequence[Optional[int]]] = None, low: Optional[float] = None,
           high: Optional[float] = None, dtype: torch.dtype = DTYPE) -> torch.Tensor:
    """``value`` as a finite tensor of ``dtype``; ``shape`` entries of None match any size. On the
    ``meta`` device (shapes without values) only dtype and shape are checked."""
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(np.asarray(value, dtype=float), dtype=dtype)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be a real tensor, got {type(value).__name__}") from exc
    if value.is_complex():
        raise ValueError(f"{name} must be a real tensor, got dtype {value.dtype}")
    value = value.to(dtype)
    if shape is not None:
        ok = value.ndim == len(shape) and all(s is None or s == t for s, t in zip(shape, value.shape))
        if not ok:
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name} must have shape {want}, got {tuple(value.shape)}")
    if not has_values(value):
        return value
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} must contain only finite values")
    if low is not None and value.numel() and bool((value < low).any()):
        raise ValueError(f"{name} must have every entry >= {low}, got a minimum of {float(value.min()):.6g}")
    if high is not None and value.numel() and bool((value > high).any()):
        raise ValueError(f"{name} must have every entry <= {high}, got a maximum of {float(value.max()):.6g}")
    return value
