"""``make full`` / ``python -m tfbook.build.full``: every notebook in the full profile, with a report.

Each notebook of ``_toc.yml`` is executed with ``TFBOOK_PROFILE=full`` into a scratch copy under
``_build/full/`` (the stored quick-profile outputs are never touched), with claims in record-only
mode (``TFBOOK_CLAIMS=record``): a failing claim is recorded instead of stopping the notebook.
The report gives, per notebook, the device, wall time, peak memory (the kernel's peak resident
set and, on CUDA, the allocator's peak) and the claims held / failed; it is written as JSON
(``_build/full/report.json``) and printed as a table. The exit status is 1 if any claim failed or
any notebook raised.

``--store`` merges the run into the stored report of its device, ``book/full_reports/<device>.json``
(per notebook: the newest run replaces the older one, so a full profile can be run in pieces, on
several days or machines of one kind); a stored report lists the notebooks never run as ``not run``.
``--merge REPORT...`` does the same for reports written on another machine.

``--count`` runs each notebook under `tfbook.build.opcount.OpCounter`: launches, FLOPs, bytes and the
peak of live tensors are counted, and the report gives the time they predict on one H100
(`tfbook.build.opcount.h100_seconds`, its model stated there). Storing or merging a counted run records
that estimate in the notebook's metadata (``"tfbook": {"h100_estimate": {...}}``), where
``--estimate`` and the expected GPU times read it. ``--page`` renders every stored report into ``book/full_results.md`` (``--check``: is it current?),
with a comparison of devices: every claim that holds on one device must hold on every other device
that ran its notebook, and the dense-against-sparse storage table of ``book/full_reports/storage.json``.
``--compare A B`` prints that comparison for two reports.

Before running, the expected time of each notebook is printed from its metadata
(``"tfbook": {"full_seconds_cpu": ..., "full_seconds_gpu": ...}``); ``--estimate`` prints only
that table (what a CPU-only machine can do in seconds).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRATCH = ROOT / "_build" / "full"
REPORTS = ROOT / "book" / "full_reports"
PAGE = ROOT / "book" / "full_results.md"
STORAGE = REPORTS / "storage.json"  # dense against sparse storage (`python -m tfbook.build.bench --storage --store`)
COUNT = """\
from tfbook.build.opcount import OpCounter as _OpCounter
_tfbook_counter = _OpCounter().__enter__()
"""
MEASURE = """\
import json as _json, resource as _resource, torch as _torch
from tfbook.device import current as _current
_p = _current()
print("TFBOOK_FULL " + _json.dumps({
    "device": str(_p.device) + " (" + (_torch.cuda.get_device_name(_p.device) if _p.device.type == "cuda" else
        next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
        + ", " + str(_torch.get_num_threads()) + " threads") + ")",
    "peak_rss_mib": _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss / 1024,
    "peak_cuda_mib": (_torch.cuda.max_memory_allocated() / 2**20) if _torch.cuda.is_initialized() else None,
    "ops": _tfbook_counter.report() if "_tfbook_counter" in globals() else None,
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
    date: str = ""
    commit: str = ""
    torch: str = ""
    # every claim as printed: title, ref, statement, measured, relation, bound, holds, kind
    claims: list[dict] = field(default_factory=list)
    ops: Optional[dict] = None  # a counted run's `tfbook.build.opcount.OpCounter.report`, else None
    concurrent: int = 1  # notebooks running at once on the machine (more than 1: a slower wall time)
    code_hash: str = ""  # `tfbook.build.audit_file.code_hash` of the notebook run ("" when not recorded)
    library_hash: str = ""  # `tfbook.build.claims_audit.library_hash` of the library it ran with ("" when not recorded)


def notebooks(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """The notebooks of ``_toc.yml`` in book order."""
    from tfbook.build.claims_page import toc_chapters

    return [root / f"{f}.ipynb" for chapter in toc_chapters(root) for f in chapter]


def expected_seconds(path: pathlib.Path, gpu: bool) -> Optional[float]:
    """The notebook's expected full-profile wall time from its metadata, if it states one (on a GPU,
    the counted H100 estimate first)."""
    meta = nbformat.read(path, as_version=4).metadata.get("tfbook", {})
    if gpu and isinstance(meta.get("h100_estimate"), dict):
        return float(meta["h100_estimate"]["seconds"])
    value = meta.get("full_seconds_gpu" if gpu else "full_seconds_cpu")
    return float(value) if isinstance(value, (int, float)) else None


def _cell_output(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def run_one(path: pathlib.Path, scratch: pathlib.Path, root: pathlib.Path = ROOT, timeout: int = 7200,
            count: bool = False) -> Result:
    """Execute one notebook in the full profile into ``scratch`` (under the operation counter if
    ``count``); never raises on claim failures."""
    from tfbook.build.audit_file import code_hash
    from tfbook.build.claims_audit import library_hash
    from tfbook.build.notebooks import execute_notebook

    rel = path.relative_to(root)
    result = Result(str(rel), date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                    commit=_commit(root), torch=_torch_version(), library_hash=library_hash(root))
    out = scratch / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    sink = out.with_suffix(".claims.jsonl")
    sink.unlink(missing_ok=True)
    nb = nbformat.read(path, as_version=4)
    result.code_hash = code_hash(nb)
    nb.cells.append(nbformat.v4.new_code_cell(MEASURE))
    if count:
        nb.cells.insert(0, nbformat.v4.new_code_cell(COUNT))
    env = {"TFBOOK_PROFILE": "full", "TFBOOK_CLAIMS": "record", "TFBOOK_CLAIMS_SINK": str(sink)}
    start = time.perf_counter()
    try:
        nb = execute_notebook(nb, path.parent, path=str(rel), env=env, timeout=timeout).nb
        result.status = "ok"
    except Exception as exc:  # a notebook error is reported, the run goes on
        last = (str(exc).strip().splitlines() or [""])[-1]  # an exception may carry no message
        result.status, result.error = "error", f"{type(exc).__name__}: {last[:300]}".rstrip(": ")
    finally:
        result.wall_s = time.perf_counter() - start
    for line in _cell_output(nb.cells[-1]).splitlines():
        if line.startswith("TFBOOK_FULL "):
            info = json.loads(line[len("TFBOOK_FULL "):])
            result.device, result.peak_rss_mib, result.peak_cuda_mib = info["device"], info["peak_rss_mib"], info["peak_cuda_mib"]
            result.ops = info.get("ops")
    nb.cells.pop()
    if count:
        nb.cells.pop(0)
    nbformat.write(nb, out)
    if sink.exists():
        for line in sink.read_text().splitlines():
            claim = json.loads(line)
            result.claims.append({key: claim.get(key) for key in CLAIM_KEYS})
            if claim["holds"]:
                result.held += 1
            else:
                result.failed += 1
                result.failures.append(f"{claim['ref']}: {claim['statement']}: measured {claim['raw_measured']} "
                                       f"is not {claim['relation']} {claim['bound']}")
    if result.status == "ok" and result.failed:
        result.status = "claims failed"
    return result


CLAIM_KEYS = ("title", "ref", "statement", "measured", "relation", "bound", "holds", "kind")


def _commit(root: pathlib.Path) -> str:
    """``$TFBOOK_COMMIT`` (for a copy without git, such as a GPU machine's), else the checked-out
    commit (short hash, ``+`` if the tree has changes), or "" outside git."""
    if os.environ.get("TFBOOK_COMMIT"):
        return os.environ["TFBOOK_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+" if dirty else "")


def _torch_version() -> str:
    import torch

    return torch.__version__


def device_slug(device: str) -> str:
    """The stored report's name for a device line: ``"cuda:0 (NVIDIA H200)"`` → ``nvidia-h200``,
    ``"cpu (AMD EPYC, 1 threads)"`` → ``cpu-amd-epyc``."""
    match = re.search(r"\(([^,)]*)", device)
    name = match.group(1) if match else platform.machine()
    name = name if device.startswith("cuda") else f"cpu-{name}"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def merge_report(stored: Optional[dict], results: list[Result], every: list[str]) -> dict:
    """``stored`` (a report of one device, or None) updated with ``results``: a notebook's newest run
    replaces its older one; notebooks of ``every`` never run are listed as ``not run``."""
    runs = {n["notebook"]: n for n in (stored or {}).get("notebooks", []) if n["status"] != "not run"}
    runs.update({r.notebook: asdict(r) for r in results if r.status != "not run"})
    order = every + sorted(set(runs) - set(every))
    notebooks = [runs.get(name) or asdict(Result(name)) for name in order]
    ran = [n for n in notebooks if n["status"] != "not run"]
    devices = sorted({n["device"] for n in ran})
    return {
        "profile": "full",
        "device": devices[0] if len(devices) == 1 else " / ".join(devices),
        "ok": all(n["status"] == "ok" for n in ran),
        "run": len(ran),
        "not_run": len(notebooks) - len(ran),
        "held": sum(n["held"] for n in ran),
        "failed": sum(n["failed"] for n in ran),
        "notebooks": notebooks,
    }


def store_report(results: list[Result], reports: pathlib.Path = REPORTS, root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Merge ``results`` into the stored report of each device they ran on; return the paths written."""
    every = [str(p.relative_to(root)) for p in notebooks(root)]
    written = []
    for slug in sorted({device_slug(r.device) for r in results if r.device}):
        path = reports / f"{slug}.json"
        stored = json.loads(path.read_text()) if path.exists() else None
        mine = [r for r in results if r.device and device_slug(r.device) == slug]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(merge_report(stored, mine, every), indent=1) + "\n")
        written.append(path)
    return written


def estimate_metadata(result: Result) -> dict:
    """A counted run's H100 estimate as recorded in the notebook's metadata: the time, the counts it
    comes from, and where they were counted."""
    ops = result.ops or {}
    return {
        "seconds": round(ops["h100_s"], 1),
        "host_seconds": round(ops["host_s"], 1),
        "launches": ops["launches"],
        "factorisations": ops["factorisations"],
        "gflop": round(ops["flops"] / 1e9, 3),
        "gbyte": round(ops["bytes"] / 1e9, 3),
        "peak_live_mib": round(ops["peak_live_bytes"] / 2**20),
        "model": ops["model"]["name"],
        "counted": f"{result.date}, commit {result.commit}, {result.device}",
    }


def record_estimates(results: list[Result], root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Write each counted run's `estimate_metadata` into its notebook; return the notebooks written."""
    written = []
    for result in results:
        path = root / result.notebook
        if result.ops is None or result.status == "error" or not path.exists():
            continue
        nb = nbformat.read(path, as_version=4)
        nb.metadata.setdefault("tfbook", {})["h100_estimate"] = estimate_metadata(result)
        nbformat.write(nb, path)
        written.append(path)
    return written


DEVICE_WORD = re.compile(r"\b(CPU|CUDA|GPU)\b")


def _claim_keys(notebook: dict) -> dict[tuple, bool]:
    """Each claim of a notebook's run under a key that is the same on every device: title, ref,
    statement (where it names the device it ran on, "CPU", "CUDA" or "GPU" read as "<device>") and its
    occurrence number (a notebook may check one statement several times)."""
    seen: dict[tuple, int] = {}
    keyed = {}
    for claim in notebook.get("claims", []):
        base = (claim["title"], claim["ref"], DEVICE_WORD.sub("<device>", claim["statement"]))
        seen[base] = seen.get(base, 0) + 1
        keyed[base + (seen[base],)] = bool(claim["holds"])
    return keyed


def on_host(run: dict) -> bool:
    """A run on a CUDA device that allocated no GPU memory: its full profile computed on the host's CPU, so it
    is not a GPU run."""
    return run.get("device", "").startswith("cuda") and not (run.get("peak_cuda_mib") or 0) > 0


def comparable(a: dict, b: dict) -> bool:
    """Two runs of one notebook with the same notebook code and library (both hashes recorded and equal)."""
    return bool(a.get("code_hash") and a.get("library_hash")) and (
        (a.get("code_hash"), a.get("library_hash")) == (b.get("code_hash"), b.get("library_hash")))


Hashes = tuple[dict[str, str], str]  # notebook → code hash, and the library hash: the code as it is now


def current_hashes(root: pathlib.Path = ROOT) -> Hashes:
    """The code hash of every notebook of ``_toc.yml`` and the library hash, as the tree is now."""
    from tfbook.build.audit_file import code_hash
    from tfbook.build.claims_audit import library_hash

    return ({str(p.relative_to(root)): code_hash(nbformat.read(p, as_version=4)) for p in notebooks(root)},
            library_hash(root))


def code_state(run: dict, now: Optional[Hashes]) -> str:
    """"current" when a run's notebook code and library are the tree's now, "changed" when either differs,
    "unknown" when the run recorded no hashes (or ``now`` is None)."""
    if now is None or not (run.get("code_hash") and run.get("library_hash")):
        return "unknown"
    same = run["code_hash"] == now[0].get(run["notebook"]) and run["library_hash"] == now[1]
    return "current" if same else "changed"


def _pairs(a: dict, b: dict) -> list[tuple[dict, dict]]:
    """The runs of the notebooks both reports ran, as (run in a, run in b), GPU runs on the host left out."""
    b_runs = {n["notebook"]: n for n in b["notebooks"] if n["status"] != "not run" and not on_host(n)}
    return [(na, b_runs[na["notebook"]]) for na in a["notebooks"]
            if na["status"] != "not run" and not on_host(na) and na["notebook"] in b_runs]


def compare_reports(a: dict, b: dict) -> list[str]:
    """The disagreements of two devices' reports on the notebooks both ran with the same code (`comparable`;
    a GPU run that computed on the host is not compared): a claim that holds on one and fails (or is missing)
    on the other, or a notebook that ran on one and raised on the other."""
    lines = []
    for na, nb in _pairs(a, b):
        if not comparable(na, nb):
            continue
        if (na["status"] == "error") != (nb["status"] == "error"):
            lines.append(f"{na['notebook']}: {na['status']} on {a['device']}, {nb['status']} on {b['device']}")
            continue
        ka, kb = _claim_keys(na), _claim_keys(nb)
        for key in sorted(set(ka) | set(kb), key=str):
            if ka.get(key) != kb.get(key):
                state = {None: "missing", True: "holds", False: "fails"}
                lines.append(f"{na['notebook']}: {key[1]}: {key[2]}: {state[ka.get(key)]} on {a['device']}, "
                             f"{state[kb.get(key)]} on {b['device']}")
    return lines


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
        rows = [("notebook", "status", "device", "wall s", "expected s", "peak RSS MiB", "peak CUDA MiB", "held",
                 "failed", "H100 est. s")]
        rows += [(r.notebook, r.status, r.device or "-", _num(r.wall_s, 1), _num(r.expected_s),
                  _num(r.peak_rss_mib), _num(r.peak_cuda_mib), str(r.held), str(r.failed),
                  _num(r.ops and r.ops["h100_s"], 1)) for r in results]
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


def _page(notebook: str) -> str:
    """A notebook (``book/x/y.ipynb``) as a link from the results page, named by its title."""
    path = ROOT / notebook
    title = notebook
    if path.is_file():
        for cell in nbformat.read(path, as_version=4).cells:
            heading = next((l[2:].strip() for l in cell.source.splitlines() if l.startswith("# ")), None)
            if cell.cell_type == "markdown" and heading:
                title = heading
                break
    target = notebook[len("book/"):] if notebook.startswith("book/") else notebook
    return f"[{title.replace('|', '/')}]({target})"


def _count(n: int, noun: str) -> str:
    """``1 notebook``, ``2 notebooks``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _device(name: str) -> str:
    """The device heading, singular where one thread ran."""
    return re.sub(r"\b1 threads\b", "1 thread", name)


def _md_table(rows: list[tuple[str, ...]]) -> list[str]:
    head, *body = rows
    return ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"] + \
        ["| " + " | ".join(row) + " |" for row in body]


def _short(commit: Optional[str]) -> str:
    """A commit as 7 hex digits (``+``: the run's tree had changes)."""
    c = commit or "-"
    return c.rstrip("+")[:7] + ("+" if c.endswith("+") else "")


def _status(run: dict) -> str:
    return run["status"] + (", on the host CPU" if on_host(run) else "")


def where_section(reports: dict[str, dict], now: Optional[Hashes]) -> list[str]:
    """Per notebook and device: the commit of its run there and whether the notebook's code and the library
    have changed since (a GPU run that allocated no GPU memory is marked as run on the host CPU)."""
    names = sorted(reports)
    order: list[str] = []
    for name in names:
        order += [n["notebook"] for n in reports[name]["notebooks"] if n["notebook"] not in order]

    def cell(run: Optional[dict]) -> str:
        if run is None or run["status"] == "not run":
            return "not run"
        return f"{_short(run.get('commit'))} {code_state(run, now)}" + (", host CPU" if on_host(run) else "")

    runs = {name: {n["notebook"]: n for n in reports[name]["notebooks"]} for name in names}
    rows = [("notebook",) + tuple(names)]
    rows += [(pathlib.PurePosixPath(nb).with_suffix("").as_posix().removeprefix("book/"),)
             + tuple(cell(runs[name].get(nb)) for name in names) for nb in order]
    gpu_names = [name for name in names if reports[name]["device"].startswith("cuda")]
    counts = []
    for name in gpu_names:
        ran = [n for n in reports[name]["notebooks"] if n["status"] != "not run"]
        on_gpu = [n for n in ran if not on_host(n)]
        fresh = [n for n in on_gpu if code_state(n, now) == "current"]
        counts.append(f"{name}: {len(on_gpu)} of {len(ran)} runs used the GPU (the others allocated no GPU memory "
                      f"and computed on the host CPU), {len(fresh)} of them at the notebook's and the library's "
                      "current code")
    return (["## What ran where", "",
             "Each cell gives the commit of a notebook's newest run on a device and whether its code cells and "
             "the library (`tfbook`, less the book's tooling) are still what that run executed: *current*, "
             "*changed* since, or *unknown* (an older run that recorded neither). A run on a GPU device that "
             "allocated no GPU memory is marked *host CPU*: it computed on the machine's processor and counts "
             "as no GPU run.", ""]
            + _md_table(rows) + [""] + [f"- {line}." for line in counts] + ([""] if counts else []))


def render_page(reports: dict[str, dict], storage: Optional[list[dict]] = None,
                recorded: Optional[dict[str, dict]] = None, now: Optional[Hashes] = None) -> str:
    """``book/full_results.md`` from the stored reports (name → report), the storage rows (None: not
    measured), the H100 estimates recorded in the notebooks' metadata (`recorded_estimates`) and the code as it
    is now (`current_hashes`; None: every run's state is unknown)."""
    out = ["# Full-profile results", "",
           "Every notebook of this book runs in two profiles. The pages show the *quick* profile: small sizes, "
           "on a CPU, so that the stored outputs can be checked on any machine. The *full* profile runs the same "
           "constructions and claims at larger sizes, on a GPU when there is one (`make full`, or "
           "`python -m tfbook.build.full --store NOTEBOOK...` for a part of the book). Each run is merged into the "
           "report of its device; this page renders those reports. A claim that fails in the full profile is "
           "recorded here, not hidden; a notebook that has not been run in the full profile on a device is "
           "listed as not run. A run on a GPU device with a peak GPU memory of 0 allocated nothing on the GPU: its "
           "full profile computed on the host's CPU, and it is marked so and not counted as a GPU run. Wall "
           "times marked ‡ come from runs of "
           "several notebooks at once on one machine: they share its cores and GPU, so each is slower than alone.",
           ""]
    if not reports:
        out += ["No full-profile report is stored yet.", ""]
    for name, report in sorted(reports.items()):
        ran = [n for n in report["notebooks"] if n["status"] != "not run"]
        out += [f"## {_device(report['device'] or name)}", ""]
        dates = sorted(n["date"][:10] for n in ran if n.get("date"))
        torches = sorted({n.get("torch", "") for n in ran} - {""})
        out += [f"{report['run']} notebooks run, {report['not_run']} not run; {report['held']} claims held, "
                f"{report['failed']} failed" + (f"; runs from {dates[0]} to {dates[-1]}" if dates else "")
                + (f", torch {', '.join(torches)}" if torches else "") + ".", ""]
        rows = [("notebook", "status", "commit", "wall s", "peak RSS MiB", "peak GPU MiB", "held", "failed")]
        rows += [(_page(n["notebook"]), _status(n), _short(n.get("commit")), _wall(n),
                  _num(n["peak_rss_mib"]), _num(n["peak_cuda_mib"]), str(n["held"]), str(n["failed"]))
                 for n in ran]
        out += (_md_table(rows) if ran else []) + [""]
        together = sorted({n.get("concurrent", 1) for n in ran} - {1})
        if together:
            out += [f"‡ {' or '.join(map(str, together))} notebooks at a time on this machine.", ""]
        missing = [n["notebook"] for n in report["notebooks"] if n["status"] == "not run"]
        if missing:
            out += ["Not run on this device: " + ", ".join(_page(m) for m in missing) + ".", ""]
        problems = [f"- {_page(n['notebook'])}: {f}" for n in ran for f in n["failures"]]
        problems += [f"- {_page(n['notebook'])} raised: `{n['error']}`" for n in ran if n["error"]]
        if problems:
            out += ["Failed claims and errors:", ""] + problems + [""]
    names = sorted(reports)
    if len(names) > 1:
        out += ["## Agreement between devices", "",
                "On every notebook that two devices both ran with the same code (the notebook's code cells and the "
                "library, as recorded by each run), each claim must hold on both or fail on both. Runs with "
                "different or unrecorded code are not compared, and neither is a GPU run that computed on the "
                "host CPU.", ""]
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                lines = compare_reports(reports[a], reports[b])
                both = _both_ran(reports[a], reports[b])
                other = len(_both_ran(reports[a], reports[b], same_code=False)) - len(both)
                verdict = "every claim agrees" if not lines else _count(len(lines), "disagreement")
                apart = f" ({other} more run on both with different or unrecorded code)" if other else ""
                pair = f"- {_device(reports[a]['device'])} and {_device(reports[b]['device'])}: "
                out += ([pair + f"no notebook run on both with the same code{apart}."] if not both else
                        [pair + f"{_count(len(both), 'notebook')} run on both with the same code{apart}; {verdict}."]
                        + [f"  - {line}" for line in lines])
        out += [""]
    if reports:
        out += where_section(reports, now)
    out += estimates_section(reports, recorded or {})
    out += storage_section(storage)
    return "\n".join(out).rstrip() + "\n"


def _wall(run: dict) -> str:
    """A run's wall time, marked * for a counted run (slower: it includes the counter's cost) and ‡ for a
    run beside other notebooks on the same machine (slower: they share its cores and GPU)."""
    if run["wall_s"] is None:
        return "-"
    return _num(run["wall_s"]) + ("*" if run.get("ops") else "") + ("‡" if run.get("concurrent", 1) > 1 else "")


# memory bandwidth, TB/s: the H100 SXM (80 GB HBM3, the kind lent here) has the H200's SMs and clocks, so it is at
# most this much slower; the PCIe card of `tfbook.build.opcount.H100` (fewer SMs, 2.0 TB/s) is not bounded by it
H200_OVER_H100 = 4.8 / 3.35


def h100_bounds(reports: dict[str, dict]) -> dict[str, float]:
    """Notebook → an upper bound, in seconds, on its full profile's time on one H100 SXM, from its newest plain
    run alone on an H100 (its wall time) or an H200 (its wall time times `H200_OVER_H100`)."""
    bounds: dict[str, float] = {}
    for name, run in _gpu_runs(reports, alone=True).items():
        factor = 1.0 if "H100" in run["device"] else H200_OVER_H100 if "H200" in run["device"] else None
        if factor is not None:
            bounds[name] = run["wall_s"] * factor
    return bounds


def _gpu_runs(reports: dict[str, dict], alone: bool = False) -> dict[str, dict]:
    """Notebook → its newest plain (not counted) run on a GPU that used it (`on_host`), from any stored report
    (``alone``: only runs that had the machine to themselves)."""
    runs: dict[str, dict] = {}
    for report in reports.values():
        for n in report["notebooks"]:
            if (n["status"] != "not run" and n.get("device", "").startswith("cuda") and not on_host(n) and not n.get("ops")
                    and n["wall_s"] is not None and not (alone and n.get("concurrent", 1) > 1)
                    and n["date"] > runs.get(n["notebook"], {"date": ""})["date"]):
                runs[n["notebook"]] = n
    return runs


def recorded_estimates(root: pathlib.Path = ROOT) -> dict[str, dict]:
    """Notebook → the H100 estimate recorded in its metadata: from a counted run (which a later plain run
    replaces in the device's report), or, with a ``method``, extrapolated from counted parts (a run too long
    to count whole on a CPU)."""
    out = {}
    for path in notebooks(root):
        estimate = nbformat.read(path, as_version=4).metadata.get("tfbook", {}).get("h100_estimate")
        if isinstance(estimate, dict):
            out[str(path.relative_to(root))] = estimate
    return out


def estimates_section(reports: dict[str, dict], recorded: Optional[dict[str, dict]] = None) -> list[str]:
    """The page's table of counted runs: the counts and the H100 time they predict; notebooks whose counted
    run is not in the reports but whose estimate is ``recorded`` in the metadata are added from it, marked †
    with their method where extrapolated."""
    counted = {}
    for report in reports.values():
        for n in report["notebooks"]:
            if n.get("ops") and (n["notebook"] not in counted or n["date"] > counted[n["notebook"]]["date"]):
                counted[n["notebook"]] = n
    if not counted and not recorded:
        return []
    from tfbook.build.opcount import H100

    out = ["## Estimated time on one H100", "",
           "A run with `--count` counts every tensor operation of a notebook's full profile: kernel launches, "
           "floating-point operations (torch's formulas for matrix products; two per stored value and column of a "
           "product with a sparse matrix; ten n³ per dense factorisation; one per element otherwise), bytes read "
           "and written, and the peak of the tensors alive at once. The estimate is "
           "the host work measured on the counting machine (the CPU time of everything outside tensor operations "
           "and outside the counter; it grows when the counting machine is busy, so counts are made on an idle "
           "one) plus, per operation, "
           f"{H100['launch_s'] * 1e6:.0f} µs of launch and dispatch and the larger of its compute and memory "
           f"times on {H100['name']}: FP64 {H100['fp64_flops'] / 1e12:.0f} TFLOP/s "
           f"({H100['fp64_matmul_flops'] / 1e12:.0f} on tensor cores), FP32 {H100['fp32_flops'] / 1e12:.0f} TFLOP/s, "
           f"{H100['bytes_per_s'] / 1e12:.1f} TB/s, plus {H100['factorisation_s'] * 1e3:.0f} ms per factorisation. "
           "Wall times marked * are counted runs, slower than plain ones by the counter's own cost. The last two "
           "columns set the estimate against the newest plain run on a GPU, of the kind its device's report names "
           "(an H200 has the H100's arithmetic and 1.4 times its memory bandwidth; ‡ as above). A wall time also "
           "holds the kernel's start and the imports, 5 to 10 s, which the count leaves out: small notebooks read "
           "high.", ""]
    gpu = _gpu_runs(reports)

    def measured(name: str, estimate: float) -> tuple[str, str]:
        run = gpu.get(name)
        return ("-", "-") if run is None else (_wall(run), _ratio(run["wall_s"], estimate))

    rows = [("notebook", "launches", "GFLOP", "GB moved", "host s", "peak tensors MiB", "H100 est. s",
             "GPU wall s", "wall / est.")]
    rows += [(_page(name), str(n["ops"]["launches"]), _num(n["ops"]["flops"] / 1e9, 1),
              _num(n["ops"]["bytes"] / 1e9, 1), _num(n["ops"]["host_s"], 1),
              _num(n["ops"]["peak_live_bytes"] / 2**20), _num(n["ops"]["h100_s"], 1),
              *measured(name, n["ops"]["h100_s"]))
             for name, n in sorted(counted.items())]
    every = sorted({n["notebook"] for report in reports.values() for n in report["notebooks"]})
    extra = {name: e for name, e in sorted((recorded or {}).items()) if name not in counted}
    rows += [(_page(name) + (" †" if e.get("method") else ""), str(e["launches"]), _num(e["gflop"], 1), _num(e["gbyte"], 1),
              _num(e["host_seconds"], 1), _num(e.get("peak_live_mib")), _num(e["seconds"], 1),
              *measured(name, e["seconds"]))
             for name, e in extra.items()]
    missing = [name for name in every if name not in counted and name not in extra]
    over = [name for name, n in sorted(counted.items()) if n["ops"]["h100_s"] > 300]
    over += [name for name, e in extra.items() if e["seconds"] > 300]
    bounds = h100_bounds(reports)

    alone = _gpu_runs(reports, alone=True)

    def measured_bound(name: str) -> str:
        if name not in bounds:
            return ""
        run = alone[name]
        return (f" (measured alone on {run['device']}: {run['wall_s']:.0f} s"
                + ("" if "H100" in run["device"] else f", so at most {bounds[name]:.0f} s on an H100 SXM") + ")")

    tail = ["Every counted notebook is estimated within 5 minutes on one H100." if not over else
            "Estimated over 5 minutes on one H100: " + ", ".join(f"{_page(m)}{measured_bound(m)}" for m in over) + "."]
    if missing:
        tail.append("Not counted yet: " + ", ".join(_page(m) for m in missing) + ".")
    notes = [f"† `{name}`: {e['method']} ({e['counted']})." for name, e in extra.items() if e.get("method")]
    return out + _md_table(rows) + [""] + [" ".join(tail), ""] + [line for n in notes for line in (n, "")]


def _ratio(a: float, b: float) -> str:
    """a / b to one decimal ("-" when b is 0)."""
    return f"{a / b:.1f}" if b else "-"


def _storage_cells(r: dict) -> tuple[str, ...]:
    """One row of the storage table; a construction that raised shows its error."""
    if "error" in r:
        return (r["name"], r["size"]) + ("-",) * 8 + ("FAIL: `" + r["error"].replace("|", "\\|") + "`",)
    return (r["name"], r["size"], str(r["stored_dense"]), str(r["stored_sparse"]),
            _ratio(r["stored_dense"], r["stored_sparse"]), str(r["nonzero"]), f"{r['forward_s_dense']:.3f}",
            f"{r['forward_s_sparse']:.3f}", _ratio(r["forward_s_dense"], r["forward_s_sparse"]),
            f"{r['max_rel_diff']:.1e}", "ok" if r["ok"] else "FAIL")


def storage_section(rows: Optional[list[dict]]) -> list[str]:
    """The page's table of `tfbook.build.bench_core.storage_table` rows: each construction stored dense and
    sparse, the ratios of stored scalars and forward times, and the relative gap of the forwards."""
    out = ["## Dense and sparse storage", "",
           "Each construction of the bench with weights, and the chapters' full-profile sizes the bench lacks, "
           "built twice on the CPU: every weight dense, and every weight sparse (CSR) whose arrays take at most "
           "a quarter of its dense storage. Both forwards run on the same input; the sparse one must agree with "
           "the dense one to a relative 1e-12 (max \\|sparse - dense\\| / max \\|dense\\|). Stored scalars count "
           "values and index entries; a forward's time is the median of several after a warm-up, on one thread. "
           "The quick profile keeps its storage rule (`tfbook.layers.sparse`).", ""]
    if not rows:
        return out + ["Not measured: `python -m tfbook.build.bench --storage --store` writes "
                      "`book/full_reports/storage.json`.", ""]
    table = [("construction", "size", "stored dense", "stored sparse", "dense / sparse", "non-zeros", "dense s",
              "sparse s", "time dense / sparse", "max rel. diff", "")]
    table += [_storage_cells(r) for r in rows]
    stamps = sorted({(r.get("cpu", ""), r.get("torch", ""), r.get("commit", ""), r.get("date", "")[:10])
                     for r in rows})
    where = "; ".join(f"{cpu}, torch {torch}, commit {commit or '-'}, {date}" for cpu, torch, commit, date in stamps)
    failed = sum(not r["ok"] for r in rows)
    verdict = "every one agrees to 1e-12" if not failed else f"{failed} FAIL (a gap over 1e-12, or an error)"
    repeats = sorted({str(r["repeats"]) for r in rows if "repeats" in r})
    median = f" Times: the median of {' or '.join(repeats)} forwards." if repeats else ""
    return out + _md_table(table) + ["", f"{len(rows)} constructions; {verdict}.{median} Measured on {where}.", ""]


def stored_storage(reports: pathlib.Path = REPORTS) -> Optional[list[dict]]:
    """The stored storage rows (`STORAGE` under ``reports``), or None if not measured."""
    path = reports / STORAGE.name
    return json.loads(path.read_text()) if path.exists() else None


def _both_ran(a: dict, b: dict, same_code: bool = True) -> list[str]:
    """The notebooks run on both devices, GPU runs on the host left out (with the same code, unless
    ``same_code`` is False)."""
    return [na["notebook"] for na, nb in _pairs(a, b) if not same_code or comparable(na, nb)]


def stored_reports(reports: pathlib.Path = REPORTS) -> dict[str, dict]:
    """Every stored report of a device, by file stem (the storage table is not one)."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(reports.glob("*.json")) if p.name != STORAGE.name}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path, help="default: every notebook in _toc.yml")
    parser.add_argument("--estimate", action="store_true", help="only print each notebook's expected time")
    parser.add_argument("--scratch", type=pathlib.Path, default=SCRATCH)
    parser.add_argument("--store", action="store_true", help="merge the run into book/full_reports/<device>.json")
    parser.add_argument("--reports", type=pathlib.Path, default=REPORTS, help="where stored reports live")
    parser.add_argument("--page", action="store_true", help="write book/full_results.md from the stored reports")
    parser.add_argument("--check", action="store_true", help="with --page: exit 1 if the page is not current")
    parser.add_argument("--merge", nargs="+", type=pathlib.Path, metavar="REPORT",
                        help="merge reports written elsewhere (e.g. on a GPU machine) into the stored ones")
    parser.add_argument("--count", action="store_true",
                        help="count operations and estimate the H100 time (see tfbook.build.opcount)")
    parser.add_argument("--compare", nargs=2, type=pathlib.Path, metavar="REPORT", help="two reports' disagreements")
    parser.add_argument("--concurrent", type=int, default=1, metavar="K",
                        help="notebooks this run shares the machine with, itself included (recorded in the report)")
    args = parser.parse_args(argv)
    if args.check and not args.page:
        parser.error("--check goes with --page")
    if args.concurrent < 1:
        parser.error(f"--concurrent must be a positive number of notebooks, got {args.concurrent}")
    if args.page:
        text = render_page(stored_reports(args.reports), stored_storage(args.reports), recorded_estimates(),
                           current_hashes())
        if args.check:
            return 0 if PAGE.exists() and PAGE.read_text() == text else 1
        PAGE.write_text(text)
        return 0
    if args.merge:
        for path in args.merge:
            runs = [Result(**n) for n in json.loads(path.read_text())["notebooks"] if n["status"] != "not run"]
            for written in store_report(runs, args.reports) + record_estimates(runs):
                print(f"merged {path} into {written}")
        return 0
    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        lines = compare_reports(a, b)
        print(f"{len(_both_ran(a, b))} notebooks run on both; {len(lines)} disagreements")
        print("\n".join(lines))
        return 1 if lines else 0
    import torch

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
        results[i] = run_one(path, args.scratch, count=args.count)
        results[i].expected_s, results[i].concurrent = expected, args.concurrent
        print(f"    {results[i].status}, {results[i].wall_s:.1f} s, {results[i].held} held, {results[i].failed} failed",
              flush=True)
        write_report(results, args.scratch / "report.json")
        if args.store:
            store_report(results[i:i + 1], args.reports)
            record_estimates(results[i:i + 1])
    report = write_report(results, args.scratch / "report.json")
    print(format_table(results))
    print(f"report: {args.scratch / 'report.json'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
