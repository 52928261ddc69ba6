"""Profiles, devices and numerics shared by every chapter: one object answers all three.

* `current()` returns the active `Profile`: its ``name`` (``"quick"`` or ``"full"``), its
  ``device`` and its ``dtype`` (float64, the verification dtype).
* The profile is read from ``TFBOOK_PROFILE``; when it is unset it is ``"full"`` on a machine with
  CUDA and ``"quick"`` otherwise. ``make test``, ``make notebooks`` and ``make book-stored`` set
  ``TFBOOK_PROFILE=quick``.
* **The profile decides the device:** ``quick`` always runs on the CPU, even when CUDA is present
  (the stored outputs and the tests are CPU results); ``full`` runs on CUDA when it is present.
* `default_device()`, `profile()` and `pick(quick, full)` are shortcuts for `current()`;
  `describe()` is the line every notebook prints in its first cell.
* TF32 is switched off on import so that CUDA matmuls are true float32/float64.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

DTYPE = torch.float64
PROFILES = ("quick", "full")
ENV = "TFBOOK_PROFILE"
T = TypeVar("T")

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


@dataclass(frozen=True)
class Profile:
    """Which profile, which device, which dtype."""

    name: str
    device: torch.device
    dtype: torch.dtype = DTYPE

    @property
    def quick(self) -> bool:
        return self.name == "quick"

    def pick(self, quick: T, full: T) -> T:
        """``quick`` in the quick profile, ``full`` in the full one (sizes for notebooks)."""
        return quick if self.quick else full

    def describe(self) -> str:
        """One line: profile, device (with the GPU's name), dtype and torch version."""
        name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "CPU"
        dtype = str(self.dtype).replace("torch.", "")
        return f"profile: {self.name}, device: {self.device} ({name}), dtype: {dtype}, torch {torch.__version__}"


def profile() -> str:
    """The active profile's name: ``TFBOOK_PROFILE`` if set, else ``"full"`` on CUDA and ``"quick"`` on CPU."""
    value = os.environ.get(ENV, "").strip().lower()
    if not value:
        return "full" if torch.cuda.is_available() else "quick"
    if value not in PROFILES:
        raise ValueError(f"{ENV} must be one of {PROFILES}, got {value!r}")
    return value


def current() -> Profile:
    """The active `Profile`: quick → CPU always; full → CUDA device 0 when present, else CPU."""
    name = profile()
    use_cuda = name == "full" and torch.cuda.is_available()
    return Profile(name, torch.device("cuda:0" if use_cuda else "cpu"))


def default_device() -> torch.device:
    """The device of the active profile (CPU in the quick profile, even on a GPU machine)."""
    return current().device


def pick(quick: T, full: T) -> T:
    """Return ``quick`` or ``full`` according to the active profile (sizes for notebooks)."""
    return current().pick(quick, full)


def describe() -> str:
    """The line each notebook prints in its first cell (tagged ``nbval-ignore-output``)."""
    return current().describe()


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices) for reproducible runs."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(int(seed))
    np.random.seed(int(seed) % 2**32)
    torch.manual_seed(int(seed))
