"""Stress test of notebook execution under load (not part of ``make test``; takes tens of minutes).

Executes notebooks in a loop, ``--jobs`` at a time, beside ``--hogs`` busy-looping processes, and
counts stalls at execution (a request the kernel never answers) and at kernel shutdown:

    .venv/bin/python tests/stress_kernel.py --executor tfbook --executions 200 --jobs 2 --hogs 2

``--executor tfbook`` runs each execution through `tfbook.build.notebooks.execute_notebook` (the project's
executor: missed socket wake-ups delivered, stall detection, fresh-kernel restarts, bounded shutdown)
and reads its restarts, stall reports and delivered wake-ups. ``--executor plain`` is the executor the project had before it: `nbclient.NotebookClient` on
the ``python3`` kernelspec with the default shutdown. A cell that takes ``PLAIN_CELL_LIMIT_S`` or more
(these notebooks' cells take under 10 s alone, under 20 s under this load) counts as an execution stall:
nbclient's poll then times out and a last non-blocking poll finds the reply that was waiting, so such a
cell "succeeds" after the whole limit (after 30 minutes in ``make book``). A shutdown over
``SHUTDOWN_STALL_S`` (or one that never returns) counts as a shutdown stall.

Each execution runs in its own Python process (so a hung client can be killed and counted); its
result is one JSON line. The default notebooks are those where stalls were seen (colsym/01,
colsym/02, turing/02) and a minimal notebook written to a temporary folder. The report (counts,
per-notebook wall times, every stall) is printed and written to ``--report``.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_NOTEBOOKS = ["book/colsym/01_basis.ipynb", "book/colsym/02_squaring_product.ipynb",
                     "book/turing/02_machines_transformer.ipynb", "minimal"]
PLAIN_CELL_LIMIT_S = 30
SHUTDOWN_STALL_S = 10.0
EXECUTION_LIMIT_S = 900
MINIMAL_CELLS = ["import sys, time\nprint(sys.version_info[:2])", "x = sum(i * i for i in range(10**5))\nprint(x)",
                 "time.sleep(0.2)\nprint('done')"]


def minimal_notebook(folder: pathlib.Path) -> pathlib.Path:
    import nbformat

    path = folder / "minimal.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in MINIMAL_CELLS])
    nbformat.write(nb, path)
    return path


def run_plain(path: pathlib.Path) -> dict:
    """The pre-change executor, instrumented: returns the run's phases and times."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError

    class TimedClient(NotebookClient):
        cleanup_s = None
        slow_cells: list = []

        async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
            start = time.perf_counter()
            try:
                return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
            finally:  # nbclient's poll timeout ends in a poll(0) that finds a reply it missed: the cell
                seconds = time.perf_counter() - start  # then "succeeds" after the whole limit
                if seconds >= 0.95 * PLAIN_CELL_LIMIT_S:
                    self.slow_cells.append(f"cell {cell_index} took {seconds:.0f} s")

        async def _async_cleanup_kernel(self) -> None:
            print("CLEANUP_START", flush=True)
            start = time.perf_counter()
            await super()._async_cleanup_kernel()
            self.cleanup_s = time.perf_counter() - start

    nb = nbformat.read(path, as_version=4)
    client = TimedClient(nb, timeout=PLAIN_CELL_LIMIT_S, kernel_name="python3", store_widget_state=True,
                         record_timing=False, resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    result = {"restarts": 0, "stalls": []}
    try:
        client.execute()
        result["status"] = "ok"
    except CellTimeoutError as exc:
        result["status"] = "stall"
        result["stalls"].append({"phase": "execution", "detail": str(exc).strip().splitlines()[0][:200]})
    result["seconds"] = time.perf_counter() - start
    result["stalls"] += [{"phase": "execution", "detail": d} for d in client.slow_cells]
    result["shutdown_s"] = client.cleanup_s
    if client.cleanup_s is not None and client.cleanup_s > SHUTDOWN_STALL_S:
        result["stalls"].append({"phase": "shutdown", "detail": f"shutdown took {client.cleanup_s:.1f} s"})
    return result


def run_tfbook(path: pathlib.Path) -> dict:
    import nbformat

    from tfbook.build import notebooks

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    run = notebooks.execute_notebook(nb, path.parent, path=str(path))
    return {"status": "ok", "seconds": time.perf_counter() - start, "restarts": run.restarts,
            "shutdown_s": max(run.shutdown_seconds, default=None),
            "stalls": [{"phase": s.phase, "detail": s.detail} for s in run.stalls], "deliveries": run.deliveries}


def one(path: pathlib.Path, executor: str) -> None:
    """Child process: execute ``path`` once and print one JSON line."""
    os.environ.setdefault("TFBOOK_PROFILE", "quick")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        result = run_plain(path) if executor == "plain" else run_tfbook(path)
    except Exception as exc:  # a real failure is reported, not counted as a stall
        result = {"status": "error", "error": f"{type(exc).__name__}: {str(exc).strip()[-300:]}", "stalls": []}
    print("STRESS " + json.dumps(result), flush=True)


def execute_child(path: pathlib.Path, executor: str) -> dict:
    command = [sys.executable, __file__, "--one", str(path), "--executor", executor]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=EXECUTION_LIMIT_S, cwd=ROOT)
        lines = [l for l in done.stdout.splitlines() if l.startswith("STRESS ")]
        if lines:
            result = json.loads(lines[-1][len("STRESS "):])
        else:
            result = {"status": "error", "error": (done.stderr or done.stdout)[-500:], "stalls": []}
    except subprocess.TimeoutExpired as exc:  # a hang the child could not end itself
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        phase = "shutdown" if "CLEANUP_START" in out else "execution"
        result = {"status": "hung", "stalls": [{"phase": phase, "detail": f"killed after {EXECUTION_LIMIT_S} s"}]}
    result["wall_s"] = time.perf_counter() - start
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", default=DEFAULT_NOTEBOOKS,
                        help="notebook paths, or 'minimal' (default: %(default)s)")
    parser.add_argument("--executor", choices=["tfbook", "plain"], default="tfbook")
    parser.add_argument("--executions", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--hogs", type=int, default=2, help="busy-looping processes beside the executors")
    parser.add_argument("--report", type=pathlib.Path, default=ROOT / "_build" / "stress_kernel.json")
    parser.add_argument("--one", type=pathlib.Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        one(args.one, args.executor)
        return 0
    for name, value in (("executions", args.executions), ("jobs", args.jobs)):
        if value < 1:
            parser.error(f"--{name} must be >= 1, got {value}")
    if args.hogs < 0:
        parser.error(f"--hogs must be >= 0, got {args.hogs}")
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="stress_kernel_"))
    paths = [minimal_notebook(scratch) if n == "minimal" else (ROOT / n).resolve() for n in args.notebooks]
    for p in paths:
        if not p.exists():
            parser.error(f"no such notebook: {p}")
    order = list(itertools.islice(itertools.cycle(paths), args.executions))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the hogs are ended below
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    results = []
    start = time.perf_counter()
    try:
        with ThreadPoolExecutor(args.jobs) as pool:
            for i, (path, result) in enumerate(zip(order, pool.map(lambda p: execute_child(p, args.executor), order))):
                result["notebook"] = path.name
                results.append(result)
                marks = "".join(f" STALL[{s['phase']}]" for s in result["stalls"])
                marks += f" DELIVERED[{len(result['deliveries'])}]" if result.get("deliveries") else ""
                print(f"{i + 1:4d}/{args.executions} {path.name:40s} {result['status']:6s} "
                      f"{result['wall_s']:6.1f} s restarts {result.get('restarts', 0)}{marks}", flush=True)
    finally:
        for h in hogs:
            h.kill()
    report = summarise(results, args, time.perf_counter() - start)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps({"summary": report, "executions": results}, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0 if report["errors"] == 0 and report["failed_after_restarts"] == 0 else 1


def summarise(results: list[dict], args, seconds: float) -> dict:
    stalls = [s for r in results for s in r["stalls"]]
    per_notebook = {}
    for name in sorted({r["notebook"] for r in results}):
        walls = [r["wall_s"] for r in results if r["notebook"] == name]
        per_notebook[name] = {"executions": len(walls), "median_s": round(statistics.median(walls), 1),
                              "max_s": round(max(walls), 1)}
    return {
        "executor": args.executor, "executions": len(results), "jobs": args.jobs, "hogs": args.hogs,
        "wall_s": round(seconds, 1), "load_average": os.getloadavg(),
        "stalls_execution": sum(s["phase"] == "execution" for s in stalls),
        "stalls_shutdown": sum(s["phase"] == "shutdown" for s in stalls),
        "executions_with_restarts": sum(r.get("restarts", 0) > 0 for r in results),
        "missed_wakeups_delivered": sum(len(r.get("deliveries", [])) for r in results),
        "shutdown_max_s": max((r["shutdown_s"] for r in results if r.get("shutdown_s") is not None), default=None),
        "failed_after_restarts": sum(r["status"] in ("stall", "hung") for r in results),
        "errors": sum(r["status"] == "error" for r in results),
        "per_notebook": per_notebook,
    }


if __name__ == "__main__":
    raise SystemExit(main())
