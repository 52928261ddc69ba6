"""Core benchmarks: a 1,000-head attention layer, batched over heads against a per-head loop, and
sparse storage of large, sparse weights.

The ICGD chapter's layers have about 1,000 heads on a (64, 21, 135) token matrix; `tfbook.layers`
computes heads as stacked tensors in head chunks. The loop builds one single-head layer per head
and adds their updates, which is what a per-head implementation does.

`sparse_scale` (``python -m tfbook.bench --sparse-scale``) measures the Besov transformer of Theorem 1
(l = 4, d = 1, m = 1, m_q = 8, gamma = 30, k <= 3) under the core's storage rule, all dense, and with
every sparse weight stored sparse: stored scalars against non-zeros, build and forward time over 200
sentences on one thread (wall and CPU seconds), and peak memory, each case in its own process
(``python -m tfbook.bench_core N storage``) with a cap on its address space.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tfbook import bench, layers
from tfbook.device import DTYPE
from tfbook.layers import Attention, FeedForward

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


for _dim in (1, 8):
    for _batched in (True, False):
        bench.register(f"core: {HEADS} relu heads, head dim {_dim}, {'batched' if _batched else 'per-head loop'}",
                       _build(_dim, _batched), _forward, units="heads", count=HEADS)


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


bench.register(f"core: sparse feed-forward, D = m = {SPARSE_D}", _sparse_build,
               lambda state: state[0](state[1]), units="tokens", count=16 * 32)

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
    cmd = [sys.executable, "-m", "tfbook.bench_core", str(N), storage, out]
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


def _limit_memory() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = SCALE_MEMORY_CAP if hard == resource.RLIM_INFINITY else min(SCALE_MEMORY_CAP, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


if __name__ == "__main__":
    _limit_memory()
    print(json.dumps(besov_case(int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")))
