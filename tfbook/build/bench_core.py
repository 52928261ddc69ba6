"""Benchmark cases and core benchmarks: `Benchmark` (one case), the core's cases (`bench_cases`: a 1,000-head
attention layer, batched over heads against a per-head loop, and sparse storage of large, sparse weights), and
the dense-against-sparse storage comparison of every case.

The ICGD chapter's layers have about 1,000 heads on a (64, 21, 135) token matrix; `tfbook.layers`
computes heads as stacked tensors in head chunks. The loop builds one single-head layer per head
and adds their updates, which is what a per-head implementation does.

`storage_table` (``python -m tfbook.build.bench --storage``) builds every benchmarked construction that has core
layers with weights, and the chapters' full-profile sizes that the benchmarks lack (`EXTRA_CASES`), twice on
the CPU: every weight dense, and every weight sparse whose CSR arrays take at most a quarter of its dense
storage. Both forwards run on the same input; it reports their largest relative gap (at most
`STORAGE_TOLERANCE`, else the case FAILs, as one that raises does), stored scalars and non-zeros, the
median forward time of `STORAGE_REPEATS` runs after a warm-up on one thread, and the peak resident set of
each build and forward;
``--store`` writes the rows to ``book/full_reports/storage.json`` (rendered by ``python -m tfbook.build.full --page``).

`sparse_scale` (``python -m tfbook.build.bench --sparse-scale``) measures the Besov transformer of Theorem 1
(l = 4, d = 1, m = 1, m_q = 8, gamma = 30, k <= 3) under the core's storage rule, all dense, and with
every sparse weight stored sparse: stored scalars against non-zeros, build and forward time over 200
sentences on one thread (wall and CPU seconds), and peak memory, each case in its own process
(``python -m tfbook.build.bench_core N storage``) with a cap on its address space.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import torch
from torch import nn

from tfbook import layers
from tfbook.device import DTYPE
from tfbook.layers import Attention, FeedForward


@dataclass(frozen=True)
class Benchmark:
    """``build(device)`` returns a state that ``forward(state)`` runs; ``units`` counts work per forward."""

    name: str
    build: Callable[[torch.device], Any]
    forward: Callable[[Any], Any]
    units: str = ""
    count: int = 0


def as_benchmarks(cases: dict[str, dict[str, Any]]) -> dict[str, Benchmark]:
    """A module's ``bench_cases()`` (name -> `Benchmark`'s other fields) as `Benchmark`s."""
    if not all(cases):
        raise ValueError("every case needs a non-empty name")
    return {name: Benchmark(name, **fields) for name, fields in cases.items()}


HEADS, BATCH, TOKENS, DIM = 1000, 64, 21, 135


def _weights(head_dim: int, device: torch.device) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = [(HEADS, head_dim, DIM)] * 3 + [(HEADS, DIM, head_dim)]
    return [(0.1 * torch.randn(*s, generator=g, dtype=DTYPE)).to(device) for s in shapes]


def _build(head_dim: int, batched: bool):
    def build(device: torch.device):
        W = _weights(head_dim, device)
        H = torch.randn(BATCH, TOKENS, DIM, generator=torch.Generator().manual_seed(1), dtype=DTYPE).to(device)
        if batched:
            return [Attention.stacked(*W, normalization="relu").to(device)], H
        return [Attention.stacked(*(w[i:i + 1] for w in W), normalization="relu").to(device) for i in range(HEADS)], H
    return build


def _forward(state) -> torch.Tensor:
    layers, H = state
    if len(layers) == 1:
        return layers[0](H)
    out = H
    for layer in layers:
        out = out + (layer(H) - H)
    return out



# --- sparse storage --------------------------------------------------------------------------------

SPARSE_D, SPARSE_PER_ROW = 2048, 4  # 2**22 scalars per weight, 0.2 % non-zero: stored sparse


def _sparse_build(device: torch.device):
    g = torch.Generator().manual_seed(2)
    W = []
    for _ in range(2):
        w = torch.zeros(SPARSE_D, SPARSE_D, dtype=DTYPE)
        w.scatter_(1, torch.randint(0, SPARSE_D, (SPARSE_D, SPARSE_PER_ROW), generator=g),
                   torch.randn(SPARSE_D, SPARSE_PER_ROW, generator=g, dtype=DTYPE))
        W.append(w)
    H = torch.randn(16, 32, SPARSE_D, generator=g, dtype=DTYPE).to(device)
    return FeedForward(W[0], None, W[1], None).to(device), H


def bench_cases() -> dict[str, dict[str, Any]]:
    """The core's cases: the 1,000-head layer (head dim 1 and 8, batched and looped) and a sparse feed-forward."""
    cases = {f"core: {HEADS} relu heads, head dim {dim}, {'batched' if batched else 'per-head loop'}":
             {"build": _build(dim, batched), "forward": _forward, "units": "heads", "count": HEADS}
             for dim in (1, 8) for batched in (True, False)}
    cases[f"core: sparse feed-forward, D = m = {SPARSE_D}"] = {
        "build": _sparse_build, "forward": lambda state: state[0](state[1]), "units": "tokens", "count": 16 * 32}
    return cases

SCALE_SENTENCES = 200
SCALE_SIZES = (200, 10**4)
SCALE_MEMORY_CAP = 8 * 2**30  # bytes of address space a case may take before it fails
# One thread; glibc keeps freed blocks below 1 GiB instead of unmapping them: every layer allocates
# states and intermediates of up to D x tokens doubles, and fresh pages cost a page fault each
# (at N = 2000 the forward spent 10.5 s in the kernel and 4 s computing without these settings).
SCALE_ENV = {"OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": str(2**30), "MALLOC_TRIM_THRESHOLD_": str(2**36)}


# (SPARSE_MIN_NUMEL, MODEL_SPARSE_MIN) of each storage
STORAGES = {"core": (layers.sparse.SPARSE_MIN_NUMEL, layers.sparse.MODEL_SPARSE_MIN), "dense": (2**62, 2**62),
            "sparse": (1, 2**62)}


def besov_case(N: int, storage: str, out: str = "") -> dict:
    """Build the Besov transformer with N atoms and run one forward over `SCALE_SENTENCES` sentences on one
    thread. ``storage``: "core" (the core's rules), "dense" (every weight dense) or "sparse" (every weight
    whose CSR arrays take at most a quarter of its dense storage sparse, whatever its size)."""
    import tfbook.besov as bv

    torch.set_num_threads(1)
    layers.sparse.SPARSE_MIN_NUMEL, layers.sparse.MODEL_SPARSE_MIN = STORAGES[storage]
    k, j, c = bv.random_atoms(N, 4, 1, 1, 3, seed=0)
    start = time.perf_counter()
    model = bv.build_transformer(k, j, c, 1, 8, 30.0)
    build_s = time.perf_counter() - start
    sizes = model.counted_sizes()
    X = torch.rand(SCALE_SENTENCES, 4, 1, dtype=DTYPE, generator=torch.Generator().manual_seed(0))
    start, cpu = time.perf_counter(), time.process_time()
    y = model(X)
    forward_s, forward_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    if out:
        torch.save(y.clone(), out)
    return {"N": N, "storage": storage, "stored": sizes.stored, "nonzero": sizes.nonzero, "build_s": build_s,
            "forward_s": forward_s, "forward_cpu_s": forward_cpu_s,
            "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def _run_case(N: int, storage: str, out: str) -> dict:
    cmd = [sys.executable, "-m", "tfbook.build.bench_core", str(N), storage, out]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **SCALE_ENV})
    if done.returncode != 0:
        return {"N": N, "storage": storage, "error": done.stderr.strip().splitlines()[-1][:80]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def sparse_scale(sizes=SCALE_SIZES, all_up_to: int = 200) -> list[dict]:
    """`besov_case` for every size: "core" storage, and "dense" and "sparse" too up to ``all_up_to`` atoms,
    with the relative gap of each output to the dense one; prints one line per case."""
    print(f"{'Besov transformer':18s} {'storage':7s} {'stored':>11s} {'nonzero':>9s} {'ratio':>7s} {'build s':>8s} "
          f"{'fwd s':>7s} {'fwd cpu s':>9s} {'peak GiB':>8s}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for N in sizes:
            for storage in STORAGES if N <= all_up_to else ("core",):
                r = _run_case(N, storage, str(Path(tmp) / f"{N}_{storage}.pt"))
                rows.append(r)
                if "error" in r:
                    print(f"N = {N:<14d} {storage:7s} failed: {r['error']}")
                    continue
                ratio = r["stored"] / r["nonzero"]
                print(f"N = {N:<14d} {storage:7s} {r['stored']:11d} {r['nonzero']:9d} {ratio:7.2f} "
                      f"{r['build_s']:8.2f} {r['forward_s']:7.2f} {r['forward_cpu_s']:9.2f} {r['peak_gib']:8.2f}")
            dense = Path(tmp) / f"{N}_dense.pt"
            for storage in ("core", "sparse"):
                path = Path(tmp) / f"{N}_{storage}.pt"
                if dense.exists() and path.exists():
                    a, b = torch.load(path), torch.load(dense)
                    gap = float((a - b).abs().max() / b.abs().max())
                    print(f"N = {N}: max |{storage} - dense| / max |dense| = {gap:.2e} ({SCALE_SENTENCES} sentences)")
                    rows.append({"N": N, "storage": storage, "relative_gap": gap})
    return rows


# --- dense against sparse storage of every bench ---------------------------------------------------

STORAGE_TOLERANCE = 1e-12  # largest relative gap allowed between the sparse and the dense forward
STORAGE_REPEATS = 3  # timed forwards per storage, after one warm-up (the median is reported)


@contextmanager
def storage(name: str) -> Iterator[None]:
    """Build and run under storage ``name`` of `STORAGES`: the sparse thresholds of `tfbook.layers.sparse`
    patched, restored on exit."""
    if name not in STORAGES:
        raise ValueError(f"storage must be one of {sorted(STORAGES)}, got {name!r}")
    saved = layers.sparse.SPARSE_MIN_NUMEL, layers.sparse.MODEL_SPARSE_MIN
    layers.sparse.SPARSE_MIN_NUMEL, layers.sparse.MODEL_SPARSE_MIN = STORAGES[name]
    try:
        yield
    finally:
        layers.sparse.SPARSE_MIN_NUMEL, layers.sparse.MODEL_SPARSE_MIN = saved


def _modules(state: Any) -> list[nn.Module]:
    """Every module in a built state (modules, and tuples, lists and dicts of them), submodules included."""
    if isinstance(state, nn.Module):
        return list(state.modules())
    if isinstance(state, dict):
        state = list(state.values())
    if isinstance(state, (tuple, list)):
        return [m for item in state for m in _modules(item)]
    return []


def core_layers(state: Any) -> list[nn.Module]:
    """The core layers with weights in a built state, each once."""
    found = {id(m): m for m in _modules(state) if isinstance(m, layers.sparse._SparseWeights) and m._weights}
    return list(found.values())


def stored_counts(state: Any) -> tuple[int, int]:
    """(stored scalars, non-zeros) of a built state: its parameters, each once, plus the index entries of
    its sparse weights, each index tensor once (as `tfbook.model.Construction.counted_sizes` counts)."""
    modules = _modules(state)
    params = {id(p): p for m in modules for p in m.parameters(recurse=False)}.values()
    stored = sum(p.numel() for p in params) + layers.shared_index_entries(modules)
    return stored, sum(int(torch.count_nonzero(p)) for p in params)


def _tensors(out: Any) -> list[torch.Tensor]:
    """The tensors of a forward's result (a tensor, or tuples, lists, dicts and dataclasses of them)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        out = [getattr(out, f.name) for f in dataclasses.fields(out)]
    if isinstance(out, dict):
        out = [out[k] for k in sorted(out, key=str)]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _tensors(item)]
    return []


def relative_gap(a: Any, b: Any) -> float:
    """max |a - b| / max |b| over every tensor of two forwards' results (b the reference; equal entries,
    infinities and NaNs included, differ by 0); inf if their tensors differ in number or shape."""
    xs, ys = _tensors(a), _tensors(b)
    if len(xs) != len(ys) or any(x.shape != y.shape for x, y in zip(xs, ys)):
        return math.inf
    gap = scale = 0.0
    for x, y in zip(xs, ys):
        if not y.numel():
            continue
        x, y = x.detach().double().cpu(), y.detach().double().cpu()
        same = (x == y) | (x.isnan() & y.isnan())
        diff = torch.where(same, torch.zeros_like(x), (x - y).abs()).nan_to_num(nan=math.inf)
        gap = max(gap, float(diff.max()))
        finite = y[y.isfinite()].abs()
        scale = max(scale, float(finite.max()) if finite.numel() else 0.0)
    return gap / scale if scale > 0 else gap


def _reset_peak() -> None:
    """Reset the process's peak resident set (Linux: ``/proc/self/clear_refs``; elsewhere a no-op)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_mib() -> Optional[float]:
    """The process's peak resident set since `_reset_peak`, in MiB (None where /proc is missing)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    kib = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")), None)
    return None if kib is None else int(kib) / 1024


def storage_run(case: Benchmark, name: str, repeats: int = STORAGE_REPEATS) -> Optional[dict]:
    """Build ``case`` on the CPU under storage ``name`` (the global seed fixed first, so every build draws
    the same input) and run its forward once (the result compared) and ``repeats`` times more (timed);
    None if the built state has no core layer with weights."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    torch.manual_seed(0)
    _reset_peak()
    with storage(name):
        state = case.build(torch.device("cpu"))
        if not core_layers(state):
            return None
        stored, nonzero = stored_counts(state)
        output = case.forward(state)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            case.forward(state)
            times.append(time.perf_counter() - start)
    return {"stored": stored, "nonzero": nonzero, "forward_s": statistics.median(times), "peak_mib": _peak_mib(),
            "output": output}


def compare_storage(case: Benchmark, size: str = "registered bench", repeats: int = STORAGE_REPEATS,
                    sabotage: Optional[Callable[[list[nn.Module]], None]] = None) -> Optional[dict]:
    """One row: ``case`` built dense and sparse (`storage_run`), the relative gap of the sparse forward to
    the dense one and ``ok`` (gap <= `STORAGE_TOLERANCE`); None if it has no core layer with weights.
    ``sabotage`` (a test's) is called on the sparse build's core layers before it runs."""
    dense = storage_run(case, "dense", repeats)
    if dense is None:
        return None
    if sabotage is not None:
        case = dataclasses.replace(case, build=_then(case.build, sabotage))
    sparse = storage_run(case, "sparse", repeats)
    gap = relative_gap(sparse["output"], dense["output"])
    return {"name": case.name, "size": size, "stored_dense": dense["stored"], "stored_sparse": sparse["stored"],
            "nonzero": dense["nonzero"], "max_rel_diff": gap, "forward_s_dense": dense["forward_s"],
            "forward_s_sparse": sparse["forward_s"], "peak_mib_dense": dense["peak_mib"],
            "peak_mib_sparse": sparse["peak_mib"], "repeats": repeats, "ok": gap <= STORAGE_TOLERANCE}


def _then(build: Callable[[torch.device], Any],
          after: Callable[[list[nn.Module]], None]) -> Callable[[torch.device], Any]:
    """``build`` followed by ``after`` on the built state's core layers."""
    def wrapped(device: torch.device) -> Any:
        state = build(device)
        after(core_layers(state))
        return state
    return wrapped


COLSYM_BATCH = 64  # colsym/03's full profile runs 256 inputs: 14 s per dense forward on one thread


def _colsym_full(device: torch.device):
    import tfbook.colsym as cs

    model = cs.build_transformer(cs.example1_coeffs(3, 4), 3, 32, 9, 4).to(device)
    g = torch.Generator().manual_seed(0)
    X = torch.rand(COLSYM_BATCH, 3, 32, dtype=DTYPE, generator=g).to(device)  # (batch, d, n)
    return model, X


def _besov_full(device: torch.device):
    import tfbook.besov as bv

    k, j, c = bv.random_atoms(SCALE_SIZES[0], 4, 1, 1, 3, seed=0)
    model = bv.build_transformer(k, j, c, 1, 8, 30.0).to(device)
    g = torch.Generator().manual_seed(0)
    X = torch.rand(SCALE_SENTENCES, 4, 1, dtype=DTYPE, generator=g).to(device)  # (batch, l, d)
    return model, X


# Constructions the benchmark cases lack, with their size: the chapters' full-profile sizes that fit this
# comparison on a CPU (the ICGD chapter's GPU size, 2.8 G scalars dense, does not: its dense build alone
# would take 22 GB).
EXTRA_CASES = [
    (Benchmark("colsym: Theorem 1, d=3 s=4 N=9 L=4, n=32, batch "
                     f"{COLSYM_BATCH}", _colsym_full, lambda state: state[0](state[1]), "inputs", COLSYM_BATCH),
     "full profile (colsym/03)"),
    (Benchmark(f"besov: Theorem 1 transformer (N={SCALE_SIZES[0]}, l=4, m=1, m_q=8), {SCALE_SENTENCES} "
                     "sentences", _besov_full, lambda state: state[0](state[1]), "sentences", SCALE_SENTENCES),
     "full profile"),
]


def _cpu() -> str:
    """The CPU's model name and the threads torch uses."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")
    return f"{model}, {torch.get_num_threads()} threads"


def _format_row(row: dict) -> str:
    status = "ok" if row["ok"] else "FAIL"
    return (f"{row['name'][:70]:70s} {row['stored_dense']:12d} {row['stored_sparse']:11d} "
            f"{row['stored_dense'] / row['stored_sparse']:7.1f} {row['nonzero']:10d} {row['forward_s_dense']:8.3f} "
            f"{row['forward_s_sparse']:8.3f} {row['forward_s_dense'] / row['forward_s_sparse']:6.2f} "
            f"{row['max_rel_diff']:9.1e} {row['peak_mib_dense'] or 0:8.0f} {row['peak_mib_sparse'] or 0:8.0f}"
            f"  {status}")


def storage_table(cases: dict[str, Benchmark], only: str = "", store: bool = False,
                  repeats: int = STORAGE_REPEATS) -> list[dict]:
    """`compare_storage` for every case of ``cases`` (`tfbook.build.bench.load_cases`) and every `EXTRA_CASES`
    entry whose name contains ``only``, on one thread; prints one line per case, and with ``store`` writes the rows
    (with date, commit, torch version and CPU) to ``book/full_reports/storage.json``. Returns the rows."""
    from tfbook.build import full

    torch.set_num_threads(1)
    sized = [(case, "registered bench") for case in cases.values()] + EXTRA_CASES
    print(f"{'construction':70s} {'dense':>12s} {'sparse':>11s} {'ratio':>7s} {'nonzero':>10s} {'dense s':>8s} "
          f"{'sparse s':>8s} {'ratio':>6s} {'rel. gap':>9s} {'MiB d':>8s} {'MiB s':>8s}")
    rows = []
    for case, size in sized:
        if only not in case.name:
            continue
        try:
            row = compare_storage(case, size, repeats)
        except Exception as error:  # a construction that fails to build or run is a FAIL row, not the end
            row = {"name": case.name, "size": size, "error": f"{type(error).__name__}: {error}"[:300], "ok": False}
            print(f"{case.name[:70]:70s} FAIL: {row['error']}", flush=True)
            rows.append(row)
            continue
        if row is None:
            print(f"{case.name[:70]:70s} skipped: no core layer with weights")
            continue
        rows.append(row)
        print(_format_row(row), flush=True)
    failed = [row["name"] for row in rows if not row["ok"]]
    print(f"{len(rows)} constructions, {len(failed)} FAIL (a relative gap over {STORAGE_TOLERANCE:g}, or an error)"
          + "".join(f"\nFAIL {name}" for name in failed))
    if store:
        stamp = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "commit": full._commit(full.ROOT), "torch": torch.__version__, "cpu": _cpu()}
        full.STORAGE.write_text(json.dumps([{**row, **stamp} for row in rows], indent=1) + "\n")
        print(f"stored {full.STORAGE}")
    return rows


def _limit_memory() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = SCALE_MEMORY_CAP if hard == resource.RLIM_INFINITY else min(SCALE_MEMORY_CAP, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


if __name__ == "__main__":
    _limit_memory()
    print(json.dumps(besov_case(int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")))
