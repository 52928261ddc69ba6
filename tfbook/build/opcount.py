"""Operation counts of a run, and the time they predict on one NVIDIA H100 (``make full --count``).

`OpCounter` is a `TorchDispatchMode`. Every aten operation that reaches a kernel (views and other
aliasing operations excluded: they move no data) is counted:

* **launches**: one per operation; on a GPU each is a kernel launch plus eager PyTorch's dispatch;
* **flops**: torch's own formulas (`torch.utils.flop_counter`) for matrix products, convolutions and
  attention; two per stored value and output column for a product with a sparse matrix; ``10 n³`` per
  matrix for a dense factorisation (eigh, svd, solve, inverse, ...); one per output element for
  everything else;
* **bytes**: every tensor argument read and every result written (sparse tensors: their values and
  indices);
* **live bytes**: the storages the operations allocated and that are still referenced; their peak is
  what a GPU's allocator would hold at least;
* **kernel seconds**: CPU time spent inside the operations on this machine. The rest of the process's
  CPU time (Python, NumPy, plotting), less the counter's own, is host work that a GPU machine does
  alike. CPU time, not wall time: the estimate does not depend on what else the machine runs.

`h100_seconds` turns the counts into a time with the model stated in `H100`: host seconds, plus per
operation a launch cost and the larger of its compute time and its memory time (a roofline), plus a
latency per dense factorisation (cuSOLVER's small-matrix calls are latency-bound).
"""
from __future__ import annotations

import time
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

# NVIDIA H100 PCIe datasheet peaks (the smaller H100; SXM is faster), at half efficiency.
H100 = {
    "name": "NVIDIA H100 PCIe (datasheet peaks at 50 % efficiency)",
    "efficiency": 0.5,
    "fp64_matmul_flops": 51e12,  # FP64 tensor cores
    "fp64_flops": 26e12,
    "fp32_flops": 51e12,  # TF32 off, as the book runs
    "other_flops": 26e12,  # integers, booleans, half precision without tensor cores
    "bytes_per_s": 2.0e12,  # HBM2e
    "launch_s": 10e-6,  # kernel launch and eager dispatch, per operation
    "factorisation_s": 1e-3,  # latency of one cuSOLVER call on small matrices
}
MATMUL = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "convolution", "_scaled_dot_product_efficient_attention",
          "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention", "_sparse_mm", "addmv", "mv"}
FACTORISATIONS = {"linalg_eigh", "_linalg_eigh", "linalg_eig", "linalg_svd", "_linalg_svd", "linalg_solve",
                  "_linalg_solve_ex", "linalg_inv_ex", "linalg_cholesky_ex", "linalg_qr", "linalg_lstsq",
                  "_linalg_det", "_linalg_slogdet", "linalg_lu_factor_ex", "linalg_lu", "triangular_solve",
                  "linalg_solve_triangular", "cholesky_solve", "lu_unpack", "linalg_householder_product"}


@dataclass
class Counts:
    """What one run did, op by op, summed (see the module docstring)."""

    launches: int = 0
    factorisations: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    kernel_s: float = 0.0  # CPU seconds inside the operations on this machine
    roofline_s: float = 0.0  # sum over operations of max(compute, memory) time on the H100 model
    peak_live_bytes: float = 0.0
    cpu_s: float = 0.0  # the process's CPU seconds while counting
    overhead_s: float = 0.0  # the counter's own cost (calibrated per operation), not part of the run
    by_op: dict[str, int] = field(default_factory=dict)

    @property
    def host_s(self) -> float:
        """CPU time spent outside the counted operations and outside the counter."""
        return max(0.0, self.cpu_s - self.kernel_s - self.overhead_s)


def _tensor_values(t: torch.Tensor) -> int:
    """Stored values of a sparse tensor."""
    return t._values().numel() if t.layout == torch.sparse_coo else t.values().numel()


def _tensor_bytes(t: torch.Tensor) -> int:
    if t.layout == torch.strided:
        return t.numel() * t.element_size()
    if t.layout == torch.sparse_coo:
        return t._values().numel() * t.element_size() + t._indices().numel() * 8
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return (t.values().numel() * t.element_size() + t.col_indices().numel() * t.col_indices().element_size()
                + t.crow_indices().numel() * t.crow_indices().element_size())
    return 0


def _flops(func: Any, name: str, args: tuple, kwargs: dict, out: Any, outputs: list[torch.Tensor]) -> float:
    tensors = [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)]
    sparse = next((t for t in tensors if t.layout != torch.strided), None)
    if sparse is not None and name in MATMUL and outputs:  # two flops per stored value and output column
        width = sparse.shape[0] if tensors[0] is sparse else sparse.shape[-1]
        return 2.0 * _tensor_values(sparse) * outputs[0].numel() / max(1, width)
    if sparse is not None or any(o.layout != torch.strided for o in outputs):  # conversions: one per value
        return float(sum(_tensor_values(t) if t.layout != torch.strided else t.numel() for t in outputs))
    if func._overloadpacket in flop_registry:
        try:
            return float(flop_registry[func._overloadpacket](*args, **kwargs, out_val=out))
        except Exception:  # a formula that does not take this overload's arguments: fall through
            pass
    if name in FACTORISATIONS:
        first = next((a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)), None)
        if first is not None and first.dim() >= 2:
            n = first.shape[-1]
            return 10.0 * n ** 3 * (first.numel() // max(1, first.shape[-1] * first.shape[-2]))
    return float(sum(o.numel() for o in outputs if o.layout == torch.strided))


def _peak_flops(name: str, dtype: torch.dtype | None) -> float:
    if dtype == torch.float64:
        return H100["fp64_matmul_flops"] if name in MATMUL else H100["fp64_flops"]
    if dtype == torch.float32:
        return H100["fp32_flops"]
    return H100["other_flops"]


class OpCounter(TorchDispatchMode):
    """Counts every kernel-reaching aten operation run while it is active (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts = Counts()
        self._live: dict[int, int] = {}
        self._live_bytes = 0
        self._start = 0.0
        self._per_op_overhead = 0.0

    def __enter__(self) -> "OpCounter":
        self._per_op_overhead = _calibrate()
        self._start = time.process_time()
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        begin = time.process_time()
        out = func(*args, **kwargs)
        inside = time.process_time() - begin
        schema = func._schema
        if schema.returns and all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
            self.counts.overhead_s += self._per_op_overhead
            self.counts.kernel_s += inside
            return out  # a view: no kernel, no data moved
        name = func._overloadpacket.__name__
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        flops = _flops(func, name, args, kwargs, out, outputs)
        moved = sum(_tensor_bytes(t) for t in inputs + outputs)
        dtype = next((t.dtype for t in outputs + inputs if t.is_floating_point()), None)
        c = self.counts
        c.launches += 1
        c.flops += flops
        c.bytes += moved
        c.kernel_s += inside
        c.roofline_s += max(flops / (_peak_flops(name, dtype) * H100["efficiency"]),
                            moved / (H100["bytes_per_s"] * H100["efficiency"]))
        c.factorisations += name in FACTORISATIONS
        c.by_op[name] = c.by_op.get(name, 0) + 1
        for o in outputs:
            self._track(o)
        c.overhead_s += self._per_op_overhead + (time.process_time() - begin - inside)
        return out

    def _track(self, t: torch.Tensor) -> None:
        if t.layout != torch.strided or t.device.type == "meta":
            return
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in self._live or storage.nbytes() == 0:
            return
        self._live[key] = storage.nbytes()
        self._live_bytes += storage.nbytes()
        self.counts.peak_live_bytes = max(self.counts.peak_live_bytes, self._live_bytes)
        weakref.finalize(storage, self._release, key)

    def _release(self, key: int) -> None:
        self._live_bytes -= self._live.pop(key, 0)

    def report(self) -> dict:
        """The counts so far, with the H100 estimate (JSON-ready)."""
        self.counts.cpu_s = time.process_time() - self._start
        record = {k: v for k, v in asdict(self.counts).items() if k != "by_op"}
        record["host_s"] = self.counts.host_s
        record["h100_s"] = h100_seconds(self.counts)
        record["top_ops"] = dict(sorted(self.counts.by_op.items(), key=lambda kv: -kv[1])[:8])
        record["model"] = dict(H100)
        return record


def h100_seconds(counts: Counts) -> float:
    """Predicted wall time on one H100: host work + launches + roofline + factorisation latency."""
    return (counts.host_s + counts.launches * H100["launch_s"] + counts.roofline_s
            + counts.factorisations * H100["factorisation_s"])


def _calibrate(n: int = 2000, repeats: int = 5) -> float:
    """Seconds the counter adds per operation on this machine: a tiny addition with and without a
    Python dispatch mode, the fastest of ``repeats`` tries after a warm-up."""
    x = torch.zeros(1)

    def seconds(mode: TorchDispatchMode | None) -> float:
        best = float("inf")
        for _ in range(repeats + 1):  # the first try warms up
            with mode or _NoMode():
                begin = time.process_time()
                for _ in range(n):
                    torch.add(x, x)
                best = min(best, time.process_time() - begin)
        return best

    return max(0.0, (seconds(_Probe()) - seconds(None)) / n)


class _NoMode:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class _Probe(TorchDispatchMode):
    """The cost of entering Python for each operation (used by `_calibrate`)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        begin = time.process_time()
        out = func(*args, **(kwargs or {}))
        time.process_time() - begin
        return out
