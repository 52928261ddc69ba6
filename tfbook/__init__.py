"""tfbook: explicit transformer constructions from approximation-theory papers.

The core (`device`, `layers`, `layout`, `claims`, `plotting`, `bench`) is shared by
every chapter; each chapter has its own module (`tfbook.colsym`, `tfbook.turing`, ...).
"""
from tfbook.device import DTYPE, default_device, profile, seed_everything

__all__ = ["DTYPE", "default_device", "profile", "seed_everything"]
__version__ = "0.1.0"
