"""The bench discovers the library's ``bench_cases()`` by itself and times a construction."""
import pkgutil

import pytest
import torch

import tfbook
from tfbook.build import bench, bench_core


def test_every_library_module_is_discovered():
    names = {m.name for m in pkgutil.iter_modules(tfbook.__path__)}
    assert set(bench.chapter_modules()) == {f"tfbook.{n}" for n in names if not n.startswith("_") and n != "build"}


def test_every_chapter_brings_its_cases():
    cases = bench.load_cases()
    prefixes = {name.split(":")[0].split(".")[0] for name in cases}
    assert {"core", "foundation", "colsym", "turing", "icgd", "seq2seq", "besov"} <= prefixes
    assert all(isinstance(case, bench_core.Benchmark) and case.name == name for name, case in cases.items())
    assert list(cases)[:5] == list(bench_core.bench_cases())  # the core's first, as before


def test_a_case_without_a_name_is_refused():
    with pytest.raises(ValueError, match="non-empty name"):
        bench_core.as_benchmarks({"": {"build": lambda dev: None, "forward": lambda state: state}})


def test_run_one_times_a_benchmark():
    case = bench_core.as_benchmarks({"toy: 8x8 matmul": {"build": lambda dev: torch.eye(8, device=dev),
                                                         "forward": lambda m: m @ m, "units": "matmuls", "count": 1}})
    r = bench.run_one(case["toy: 8x8 matmul"], torch.device("cpu"), repeats=2)
    assert r["build_s"] >= 0 and r["forward_s"] > 0 and r["peak_mib"] > 0 and r["rate"] > 0
