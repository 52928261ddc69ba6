"""``python -m tfbook.build.bench``: time the build and forward pass of each benchmarked construction.

Every library module (the core's and the chapters', never this subpackage) may define ``bench_cases()``,
which returns its heaviest constructions as ``{name: {"build": ..., "forward": ..., "units": ..., "count": ...}}``
(the fields of `tfbook.build.bench_core.Benchmark` other than the name) and imports nothing from
`tfbook.build`. The bench imports every top-level module and subpackage of ``tfbook`` and reads their
cases (so a new chapter needs no change here), adds the core's own (`tfbook.build.bench_core.bench_cases`),
then runs each construction on the CPU and (when present) on CUDA, and prints build time, forward time
and peak memory (CUDA: allocator peak; CPU: the process's peak resident set, a coarse upper bound).
``--storage`` builds every construction with core layers twice on the CPU, all dense and sparse, and
compares their forwards, stored scalars and times (`tfbook.build.bench_core.storage_table`; ``--store`` writes
``book/full_reports/storage.json``). ``--sparse-scale`` runs only the scale targets of sparse storage
(`tfbook.build.bench_core.sparse_scale`).
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import resource
import time

import torch

from tfbook.build import bench_core
from tfbook.build.bench_core import Benchmark


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_one(bench: Benchmark, device: torch.device, repeats: int = 3) -> dict[str, float]:
    """Build once, run the forward ``repeats`` times; return seconds and peak MiB."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    state = bench.build(device)
    _sync(device)
    build_s = time.perf_counter() - start
    bench.forward(state)  # warm-up
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        bench.forward(state)
    _sync(device)
    forward_s = (time.perf_counter() - start) / repeats
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rate = bench.count / forward_s if bench.count else float("nan")
    return {"build_s": build_s, "forward_s": forward_s, "peak_mib": peak, "rate": rate}


def chapter_modules() -> list[str]:
    """Every top-level module and subpackage of ``tfbook`` outside `tfbook.build` (the library)."""
    import tfbook

    return sorted(f"tfbook.{m.name}" for m in pkgutil.iter_modules(tfbook.__path__)
                  if not m.name.startswith("_") and m.name != "build")


def chapter_cases() -> dict[str, Benchmark]:
    """The cases of every library module that defines ``bench_cases()``, in module order."""
    cases: dict[str, Benchmark] = {}
    for name in chapter_modules():
        module = importlib.import_module(name)
        if hasattr(module, "bench_cases"):
            cases.update(bench_core.as_benchmarks(module.bench_cases()))
    return cases


def load_cases() -> dict[str, Benchmark]:
    """Every benchmarked construction: the core's (`tfbook.build.bench_core.bench_cases`), then the chapters'."""
    return {**bench_core.as_benchmarks(bench_core.bench_cases()), **chapter_cases()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only benchmarks whose name contains this text")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sparse-scale", action="store_true",
                        help="only the Besov transformer at N = 200 and 10^4 atoms, sparse and dense storage "
                             "(tfbook.build.bench_core.sparse_scale; minutes)")
    parser.add_argument("--storage", action="store_true",
                        help="dense against sparse storage of every construction, and of the chapters' full sizes "
                             "(tfbook.build.bench_core.storage_table; one thread, minutes)")
    parser.add_argument("--store", action="store_true", help="with --storage: write book/full_reports/storage.json")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    if args.store and not args.storage:
        parser.error("--store goes with --storage")
    if args.storage:
        bench_core.storage_table(load_cases(), args.only, args.store, args.repeats)
        return
    if args.sparse_scale:
        bench_core.sparse_scale()
        return
    devices = [torch.device("cpu")] + ([torch.device("cuda:0")] if torch.cuda.is_available() else [])
    header = f"{'benchmark':44s} {'device':6s} {'build s':>9s} {'forward s':>10s} {'peak MiB':>9s}  throughput"
    print(header)
    print("-" * len(header))
    for bench in load_cases().values():
        if args.only not in bench.name:
            continue
        for device in devices:
            r = run_one(bench, device, args.repeats)
            rate = f"{r['rate']:.3g} {bench.units}/s" if bench.count else ""
            print(f"{bench.name:44s} {device.type:6s} {r['build_s']:9.3f} {r['forward_s']:10.4f} {r['peak_mib']:9.1f}  {rate}")


if __name__ == "__main__":
    main()
