"""tfbook: explicit transformer constructions from approximation-theory papers.

The library: the core (`device`, `validate`, `layers`, `layout`, `model`, `gadgets`, `claims`, `training`,
`plotting`) is shared by every chapter; each chapter has its own module (`tfbook.foundation`,
`tfbook.colsym`, `tfbook.turing`, ...). The book's machinery (executor, claims audit, pages, full-profile runs,
benchmarks) lives in `tfbook.build`, which imports the library; the library never imports it.
"""
from tfbook.device import DTYPE, default_device, profile, seed_everything

__all__ = ["DTYPE", "default_device", "profile", "seed_everything"]
__version__ = "0.1.0"
