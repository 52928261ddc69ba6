"""Devices, profiles and numerics shared by every chapter.

* `default_device()` is CUDA when available, else CPU (d2l's ``try_gpu``).
* `profile()` is ``"quick"`` (small sizes, CPU, what the tests use) or ``"full"``
  (larger sizes); read from ``TFBOOK_PROFILE``, default ``"full"`` on CUDA.
* `DTYPE` (float64) is the verification dtype; TF32 is switched off on import so
  that CUDA matmuls are true float32/float64.
"""
from __future__ import annotations

import os
import random

import numpy as np
import torch

DTYPE = torch.float64
PROFILES = ("quick", "full")

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def default_device() -> torch.device:
    """CUDA device 0 when a GPU is present, otherwise the CPU."""
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def profile() -> str:
    """The active profile: ``TFBOOK_PROFILE`` if set, else ``"full"`` on CUDA and ``"quick"`` on CPU."""
    value = os.environ.get("TFBOOK_PROFILE", "").strip().lower()
    if not value:
        return "full" if torch.cuda.is_available() else "quick"
    if value not in PROFILES:
        raise ValueError(f"TFBOOK_PROFILE must be one of {PROFILES}, got {value!r}")
    return value


def pick(quick, full):
    """Return ``quick`` or ``full`` according to `profile()` (sizes for notebooks)."""
    return full if profile() == "full" else quick


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices) for reproducible runs."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(int(seed))
    np.random.seed(int(seed) % 2**32)
    torch.manual_seed(int(seed))


def describe() -> str:
    """One line naming the device and profile, printed at the top of each notebook."""
    dev = default_device()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    return f"device: {dev.type} ({name}), profile: {profile()}, dtype: float64"
