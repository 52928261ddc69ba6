"""Shared by the meta-device tests (`tests/test_meta_*.py`): results that stayed on ``meta``."""
import torch


def on_meta(*outs) -> bool:
    """Whether every result (tensors, or lists, tuples and dicts of them) is a tensor on ``meta``."""
    flat = []
    for o in outs:
        flat += list(o.values()) if isinstance(o, dict) else list(o) if isinstance(o, (list, tuple)) else [o]
    return bool(flat) and all(isinstance(t, torch.Tensor) and t.device.type == "meta" for t in flat)
