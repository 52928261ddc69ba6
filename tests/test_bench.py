"""The bench discovers chapters by itself and times a registered construction."""
import pkgutil

import torch

import tfbook
from tfbook import bench


def test_every_module_is_discovered():
    names = {m.name for m in pkgutil.iter_modules(tfbook.__path__)}
    assert set(bench.chapter_modules()) == {f"tfbook.{n}" for n in names if not n.startswith("_")}


def test_run_one_times_a_registered_benchmark(monkeypatch):
    monkeypatch.setattr(bench, "REGISTRY", {})
    bench.register("toy: 8x8 matmul", lambda dev: torch.eye(8, device=dev), lambda m: m @ m, "matmuls", 1)
    r = bench.run_one(bench.REGISTRY["toy: 8x8 matmul"], torch.device("cpu"), repeats=2)
    assert r["build_s"] >= 0 and r["forward_s"] > 0 and r["peak_mib"] > 0 and r["rate"] > 0
