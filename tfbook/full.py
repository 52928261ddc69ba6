"""``make full`` / ``python -m tfbook.full``: every notebook in the full profile, with a report.

Each notebook of ``_toc.yml`` is executed with ``TFBOOK_PROFILE=full`` into a scratch copy under
``_build/full/`` (the stored quick-profile outputs are never touched), with claims in record-only
mode (``TFBOOK_CLAIMS=record``): a failing claim is recorded instead of stopping the notebook.
The report gives, per notebook, the device, wall time, peak memory (the kernel's peak resident
set and, on CUDA, the allocator's peak) and the claims held / failed; it is written as JSON
(``_build/full/report.json``) and printed as a table. The exit status is 1 if any claim failed or
any notebook raised.

Before running, the expected time of each notebook is printed from its metadata
(``"tfbook": {"full_seconds_cpu": ..., "full_seconds_gpu": ...}``); ``--estimate`` prints only
that table (what a CPU-only machine can do in seconds).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRATCH = ROOT / "_build" / "full"
MEASURE = """\
import json as _json, resource as _resource, torch as _torch
from tfbook.device import current as _current
_p = _current()
print("TFBOOK_FULL " + _json.dumps({
    "device": str(_p.device) + (" (" + _torch.cuda.get_device_name(_p.device) + ")" if _p.device.type == "cuda" else ""),
    "peak_rss_mib": _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss / 1024,
    "peak_cuda_mib": (_torch.cuda.max_memory_allocated() / 2**20) if _torch.cuda.is_initialized() else None,
}))
"""


@dataclass
class Result:
    """One notebook's full-profile run."""

    notebook: str
    status: str = "not run"  # "ok", "claims failed", "error", "not run"
    device: str = ""
    wall_s: Optional[float] = None
    peak_rss_mib: Optional[float] = None
    peak_cuda_mib: Optional[float] = None
    held: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    expected_s: Optional[float] = None
    error: str = ""


def notebooks(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """The notebooks of ``_toc.yml`` in book order."""
    from tfbook.claims_page import toc_chapters

    return [root / f"{f}.ipynb" for chapter in toc_chapters(root) for f in chapter]


def expected_seconds(path: pathlib.Path, gpu: bool) -> Optional[float]:
    """The notebook's expected full-profile wall time from its metadata, if it states one."""
    meta = nbformat.read(path, as_version=4).metadata.get("tfbook", {})
    value = meta.get("full_seconds_gpu" if gpu else "full_seconds_cpu")
    return float(value) if isinstance(value, (int, float)) else None


def _cell_output(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def run_one(path: pathlib.Path, scratch: pathlib.Path, root: pathlib.Path = ROOT, timeout: int = 7200) -> Result:
    """Execute one notebook in the full profile into ``scratch``; never raises on claim failures."""
    from tfbook.notebooks import execute_notebook

    rel = path.relative_to(root)
    result = Result(str(rel))
    out = scratch / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    sink = out.with_suffix(".claims.jsonl")
    sink.unlink(missing_ok=True)
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(MEASURE))
    env = {"TFBOOK_PROFILE": "full", "TFBOOK_CLAIMS": "record", "TFBOOK_CLAIMS_SINK": str(sink)}
    start = time.perf_counter()
    try:
        nb = execute_notebook(nb, path.parent, path=str(rel), env=env, timeout=timeout).nb
        result.status = "ok"
    except Exception as exc:  # a notebook error is reported, the run goes on
        result.status, result.error = "error", f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
    finally:
        result.wall_s = time.perf_counter() - start
    for line in _cell_output(nb.cells[-1]).splitlines():
        if line.startswith("TFBOOK_FULL "):
            info = json.loads(line[len("TFBOOK_FULL "):])
            result.device, result.peak_rss_mib, result.peak_cuda_mib = info["device"], info["peak_rss_mib"], info["peak_cuda_mib"]
    nb.cells.pop()
    nbformat.write(nb, out)
    if sink.exists():
        for line in sink.read_text().splitlines():
            claim = json.loads(line)
            if claim["holds"]:
                result.held += 1
            else:
                result.failed += 1
                result.failures.append(f"{claim['ref']}: {claim['statement']}: measured {claim['raw_measured']} "
                                       f"is not {claim['relation']} {claim['bound']}")
    if result.status == "ok" and result.failed:
        result.status = "claims failed"
    return result


def _num(value: Optional[float], digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(results: list[Result], estimate_only: bool = False) -> str:
    """The report (or the estimate) as a plain-text table."""
    if estimate_only:
        rows = [("notebook", "expected s")] + [(r.notebook, _num(r.expected_s) if r.expected_s else "unknown")
                                               for r in results]
        known = [r.expected_s for r in results if r.expected_s]
        rows.append(("total (known)", _num(sum(known))))
    else:
        rows = [("notebook", "status", "device", "wall s", "expected s", "peak RSS MiB", "peak CUDA MiB", "held", "failed")]
        rows += [(r.notebook, r.status, r.device or "-", _num(r.wall_s, 1), _num(r.expected_s), _num(r.peak_rss_mib),
                  _num(r.peak_cuda_mib), str(r.held), str(r.failed)) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        lines += [f"FAILED {r.notebook}: {f}" for f in r.failures] + ([f"ERROR {r.notebook}: {r.error}"] if r.error else [])
    return "\n".join(lines)


def write_report(results: list[Result], path: pathlib.Path) -> dict:
    """Write the JSON report; return it. ``ok`` is false if any claim failed or any notebook raised."""
    report = {
        "profile": "full",
        "ok": all(r.status == "ok" for r in results),
        "held": sum(r.held for r in results),
        "failed": sum(r.failed for r in results),
        "notebooks": [asdict(r) for r in results],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv: Optional[list[str]] = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path, help="default: every notebook in _toc.yml")
    parser.add_argument("--estimate", action="store_true", help="only print each notebook's expected time")
    parser.add_argument("--scratch", type=pathlib.Path, default=SCRATCH)
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks] or notebooks()
    gpu = torch.cuda.is_available()
    results = [Result(str(p.relative_to(ROOT)), expected_s=expected_seconds(p, gpu)) for p in paths]
    print(f"full profile on {'CUDA (' + torch.cuda.get_device_name(0) + ')' if gpu else 'the CPU'}; expected times:")
    print(format_table(results, estimate_only=True), flush=True)
    if args.estimate:
        return 0
    for i, path in enumerate(paths):
        print(f"[{i + 1}/{len(paths)}] {results[i].notebook} ...", flush=True)
        expected = results[i].expected_s
        results[i] = run_one(path, args.scratch)
        results[i].expected_s = expected
        print(f"    {results[i].status}, {results[i].wall_s:.1f} s, {results[i].held} held, {results[i].failed} failed",
              flush=True)
        write_report(results, args.scratch / "report.json")
    report = write_report(results, args.scratch / "report.json")
    print(format_table(results))
    print(f"report: {args.scratch / 'report.json'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
