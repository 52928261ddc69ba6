"""Maintainers' tool for the book's notebooks.

``python -m tfbook.build.notebooks execute [--jobs 2] NB.ipynb ...``
    re-executes notebooks in place (run it under ``TFBOOK_PROFILE=quick``, as ``make notebooks``
    does), stores their outputs and widget state, then regenerates the every-claim page.
``python -m tfbook.build.notebooks build-copy [--jobs 2] [DEST]``
    ``make book``'s first step: copies the book's sources to ``DEST`` (default ``_build/book_src``),
    executes every notebook there and regenerates the claims page of the copy (`build_copy`).
``python -m tfbook.build.notebooks install-cell NB.ipynb ...``
    puts the install cell (`install_cell_source`) first in each notebook, or updates it.
``python -m tfbook.build.notebooks fold NB.ipynb ...``
    tags the cells that draw a figure, build a widget or only show claims tables ``hide-input``
    (`folds`): the book shows their output and folds their code behind a toggle.
``python -m tfbook.build.notebooks claims-page [--check]``
    regenerates ``book/claims.md`` from the stored outputs (``--check``: fail if it is stale).

The install cell makes a notebook run where tfbook is not installed (Colab, a bare kernel): once
``repository.public`` is true in ``_config.yml`` it installs the package from the repository named
there (the one place the URL lives); before that it installs nothing and says how to run the book.
It is tagged ``remove-cell`` (hidden in the book) and ``nbval-skip`` (not run by the tests).

Every notebook the project runs goes through one executor, `execute_notebook`: ``make book``,
``make notebooks``, ``make full``, the widget harness and the claims audit. It starts the kernel from
the running interpreter (``sys.executable -m ipykernel_launcher``, no kernelspec lookup), watches
each request for a *stall* (no message from the kernel for `STALL_SECONDS`, the kernel's process
tree idle, and the request never acknowledged as busy or already reported idle: a reply the kernel
lost, seen under load with ipykernel 6 and pyzmq 27), reruns a stalled notebook in a fresh kernel
(at most `MAX_RESTARTS` times, saying so), never waits more than `SHUTDOWN_SECONDS` on a kernel
shutdown, and prints one line per notebook:
``tfbook.build.notebooks: executed <path> in <seconds> s, restarts <k>``.
"""
from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import copy
import os
import pathlib
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import nbformat
import psutil
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from traitlets import Float

from tfbook import claims
from tfbook.build import repository

ROOT = pathlib.Path(__file__).resolve().parents[2]
INSTALL_TAGS = ("remove-cell", "nbval-skip")
INSTALL_MARK = "# Install tfbook when it is missing"


def install_cell_source(url: Optional[str] = None, public: Optional[bool] = None) -> str:
    """The source of the first cell of every notebook (installs tfbook when it is missing).

    ``url`` and ``public`` default to ``_config.yml``'s `tfbook.build.repository.settings`. While the
    repository is not public the cell installs nothing: it only says how to run the notebook where
    tfbook is missing. Once public, it installs tfbook from the repository; where torch is already
    installed (Colab), without its dependencies so the platform's torch build is kept, and the light
    dependencies if missing.
    """
    repo = repository.settings()
    url, public = (url or repo.url).rstrip("/"), repo.public if public is None else public
    if not public:
        return "\n".join([
            f"{INSTALL_MARK}: the repository is not public yet,",
            "# so nothing is installed here.",
            "import importlib.util",
            'if importlib.util.find_spec("tfbook") is None:',
            '    raise ModuleNotFoundError(',
            '        "tfbook is not installed: run this notebook from a clone of the book "',
            '        "(make lab), see the page Run this book"',
            "    )",
        ])
    return "\n".join([
        f"{INSTALL_MARK} (e.g. on Colab);",
        "# hidden in the book, skipped by the tests.",
        "import importlib.util, subprocess, sys",
        'if importlib.util.find_spec("tfbook") is None:',
        '    pip = [sys.executable, "-m", "pip", "install", "--quiet"]',
        f'    package = "tfbook @ git+{url}"',
        '    if importlib.util.find_spec("torch") is None:',
        "        subprocess.run(pip + [package], check=True)",
        "    else:  # keep the platform's torch build",
        '        subprocess.run(pip + ["--no-deps", package], check=True)',
        '        subprocess.run(pip + ["numpy", "scipy", "sympy", "matplotlib", "ipywidgets"], check=True)',
        "    importlib.invalidate_caches()",
    ])


def is_install_cell(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith(INSTALL_MARK)


def ensure_install_cell(nb, url: Optional[str] = None) -> bool:
    """Insert or update the install cell as the notebook's first cell; return whether it changed."""
    source = install_cell_source(url)
    existing = [i for i, c in enumerate(nb.cells) if is_install_cell(c)]
    if existing and existing[0] == 0 and len(existing) == 1:
        cell = nb.cells[0]
        tags = cell.metadata.get("tags", [])
        if cell.source == source and all(t in tags for t in INSTALL_TAGS):
            return False
        cell.source = source
        cell.metadata["tags"] = list(dict.fromkeys(list(tags) + list(INSTALL_TAGS)))
        return True
    for i in reversed(existing):
        del nb.cells[i]
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": list(INSTALL_TAGS)})
    cell.pop("id", None)
    if nb.nbformat_minor >= 5:
        cell["id"] = "install-tfbook"
    nb.cells.insert(0, cell)
    return True


FOLD_TAG = "hide-input"
_PLOTS = re.compile(r"\bplt\.show\(|\.savefig\(|\bsubplots\(|\bplt\.figure\(|\.imshow\(")
_WIDGETS = re.compile(r"\binteract(?:ive)?\(|\bwidgets\.\w+\(")  # building one, not importing
_TABLES_ONLY = re.compile(r"^(?:\s*\w+\.show\(\)[ \t]*(?:#[^\n]*)?\n?)+\s*$")


def checks_only(source: str) -> bool:
    """Whether a cell only records and shows claims: every top-level statement calls ``<x>.check...(...)`` or
    ``<x>.show()``, and at least one checks (the bookkeeping that follows a computation, folded out of the way)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    calls = [s.value.func.attr if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
             and isinstance(s.value.func, ast.Attribute) else "" for s in body]
    return bool(calls) and all(a.startswith("check") or a == "show" for a in calls) \
        and any(a.startswith("check") for a in calls)


def folds(cell) -> bool:
    """Whether a code cell is folded in the book (its input hidden behind a toggle, its output shown):
    a cell that draws a figure, builds a widget, only shows claims tables, or only checks claims."""
    if cell.cell_type != "code" or is_install_cell(cell):
        return False
    return bool(_PLOTS.search(cell.source) or _WIDGETS.search(cell.source) or _TABLES_ONLY.match(cell.source)
                or checks_only(cell.source))


def fold_cells(nb) -> int:
    """Tag the cells that `folds` with ``hide-input`` and untag the others; return how many changed."""
    changed = 0
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if folds(cell) != (FOLD_TAG in tags):
            cell.metadata["tags"] = list(tags) + [FOLD_TAG] if folds(cell) else [t for t in tags if t != FOLD_TAG]
            changed += 1
    return changed


# ---------------------------------------------------------------------------------------------------
# The executor: every notebook run of the project (make book, make notebooks, make full, the widget
# harness, the claims audit) goes through `execute_notebook`.
# ---------------------------------------------------------------------------------------------------
STALL_SECONDS = 10.0
"""T: a request is stalled after T seconds without a kernel message and with the kernel idle."""
STALL_CPU_FRACTION = 0.01
"""The kernel's process tree used less than this fraction of one core over those T seconds."""
MAX_RESTARTS = 2
SHUTDOWN_SECONDS = 3.0
"""Kernel shutdown (kill, channel and resource clean-up) is abandoned after this long."""
CELL_TIMEOUT = 1800
"""Hard limit for one cell: a cell that computes for longer fails (it is not a stall)."""
STARTUP_TIMEOUT = 60
_POLL_SECONDS = 0.5
_NUDGE_SECONDS = 1.0


@dataclass
class Stall:
    """One stall the executor detected (or a kernel shutdown it had to cut short)."""

    phase: str  # "startup", "execution" or "shutdown"
    detail: str


@dataclass
class Execution:
    """The executed notebook and how its execution went."""

    nb: nbformat.NotebookNode
    seconds: float
    restarts: int
    stalls: list[Stall] = field(default_factory=list)
    shutdown_seconds: list[float] = field(default_factory=list)
    deliveries: list[str] = field(default_factory=list)
    """Messages the watchdog handed over after a missed socket wake-up (see `WatchedClient`)."""


class KernelStall(RuntimeError):
    """The kernel stopped answering: raised when a notebook stalled on every allowed attempt."""


def interpreter_kernel_spec() -> KernelSpec:
    """An IPython kernel on the running interpreter (``sys.executable -m ipykernel_launcher``), so the
    kernel always has this environment's packages, whatever kernelspecs are installed."""
    return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                      display_name=f"Python {sys.version_info.major}.{sys.version_info.minor} (tfbook)",
                      language="python")


class InterpreterKernelManager(AsyncKernelManager):
    """A kernel manager that starts `interpreter_kernel_spec` instead of looking a kernelspec up."""

    @property
    def kernel_spec(self) -> KernelSpec:
        return interpreter_kernel_spec()


@dataclass
class _Request:
    """The request the client waits on: when the kernel last spoke, whether it said busy / idle."""

    label: str
    last_message: float = field(default_factory=time.monotonic)
    busy: bool = False
    idle: bool = False


def _tree_cpu_seconds(process: psutil.Process) -> Optional[float]:
    """User + system CPU seconds of a process and its live descendants (None once it is gone)."""
    try:
        tree = [process] + process.children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    total = 0.0
    for proc in tree:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def _kill_tree(pid: Optional[int]) -> None:
    if pid is None:
        return
    try:
        root = psutil.Process(pid)
        tree = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(tree, timeout=1.0)


class WatchedClient(NotebookClient):
    """`nbclient.NotebookClient` with a stall watchdog and a bounded kernel shutdown.

    A stall is a request (a cell, or the first ``kernel_info``) for which the kernel sent no message
    for ``stall_seconds`` while its process tree used under `STALL_CPU_FRACTION` of a core, and that
    the kernel either never acknowledged as busy or already reported idle. A cell that computes
    silently (busy, not idle) is never a stall, however long it takes; ``timeout`` bounds it.
    """

    stall_seconds = Float(STALL_SECONDS).tag(config=True)
    shutdown_seconds_limit = Float(SHUTDOWN_SECONDS).tag(config=True)

    def __init__(self, nb: nbformat.NotebookNode, **kw: Any) -> None:
        super().__init__(nb, **kw)
        self._request: Optional[_Request] = None
        self.stalls: list[Stall] = []
        self.deliveries: list[str] = []
        self.shutdown_seconds: list[float] = []

    def _kernel_pid(self) -> Optional[int]:
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        return getattr(process, "pid", None)

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        self._request = _Request("kernel_info")  # async_execute sends it next
        return kc

    async def async_execute_cell(self, cell, cell_index: int, execution_count=None, store_history: bool = True):
        runs = cell.cell_type == "code" and cell.source.strip() and \
            self.skip_cells_with_tag not in cell.metadata.get("tags", [])
        self._request = _Request(f"cell {cell_index}") if runs else None
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except CellTimeoutError as exc:
            if "IOPub" in str(exc):  # the reply came, the kernel's idle status never did
                raise KernelStall(f"cell {cell_index}: no idle status {self.iopub_timeout} s after the reply") from exc
            raise
        finally:
            self._request = None

    def process_message(self, msg: dict, cell, cell_index: int):
        request = self._request
        if request is not None:
            request.last_message = time.monotonic()
            if msg["msg_type"] == "status":
                state = msg["content"].get("execution_state")
                request.busy |= state == "busy"
                request.idle |= state == "idle"
        return super().process_message(msg, cell, cell_index)

    def _deliver_waiting_messages(self, request: _Request, now: float) -> None:
        """Hand the client's shell and iopub sockets their pending events, as the event loop does on a
        wake-up, and record each message delivered that way.

        pyzmq's asyncio sockets are woken through an edge-triggered file descriptor. Under load a
        wake-up is sometimes missed: the kernel's reply then sits in the client's socket while the
        client sleeps until its poll times out (the 30-minute `make book` stalls; found with
        ``tests/stress_kernel.py``). Handling the events by hand is harmless when nothing waits.
        """
        for name in ("shell", "iopub"):
            sock = getattr(getattr(self.kc, f"{name}_channel", None), "socket", None)
            waiting = getattr(sock, "_recv_futures", None)
            if waiting is None or not hasattr(sock, "_handle_events") or sock.closed:
                continue
            pending = [event[0] for event in waiting if not event[0].done()]
            sock._handle_events()
            if any(future.done() for future in pending):
                self.deliveries.append(f"{request.label}: {name} message delivered "
                                       f"{now - request.last_message:.1f} s after the last wake-up")

    async def _watchdog(self) -> None:
        """Return (ending the run) when the current request has stalled; see the class docstring."""
        samples: list[tuple[float, float]] = []
        process = None
        while True:
            await asyncio.sleep(_POLL_SECONDS)
            pid = self._kernel_pid()
            if pid is None:
                samples, process = [], None
                continue
            if process is None or process.pid != pid:
                samples, process = [], psutil.Process(pid)
            now, cpu = time.monotonic(), _tree_cpu_seconds(process)
            if cpu is None:  # the kernel died: nbclient reports that (DeadKernelError)
                continue
            samples.append((now, cpu))
            while len(samples) > 1 and samples[1][0] <= now - self.stall_seconds:
                samples.pop(0)
            request = self._request
            if request is not None and now - request.last_message >= _NUDGE_SECONDS:
                self._deliver_waiting_messages(request, now)
            if request is None or now - request.last_message < self.stall_seconds:
                continue
            if request.busy and not request.idle:  # computing silently: not a stall
                continue
            then, cpu_then = samples[0]
            if now - then < self.stall_seconds or cpu - cpu_then >= STALL_CPU_FRACTION * (now - then):
                continue
            state = "reported idle, no reply" if request.idle else "never acknowledged"
            self.stalls.append(Stall("execution", f"{request.label}: {state}, no message for "
                                                  f"{now - request.last_message:.0f} s, kernel idle"))
            return

    async def async_execute(self, reset_kc: bool = False, **kwargs: Any):
        before = asyncio.all_tasks()
        run = asyncio.ensure_future(super().async_execute(reset_kc=reset_kc, **kwargs))
        watch = asyncio.ensure_future(self._watchdog())
        try:
            await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
        if not run.done():  # the watchdog found a stall: abandon the run (its kernel is cleaned up)
            pollers = asyncio.all_tasks() - before - {run, watch, asyncio.current_task()}
            for task in [*pollers, run]:  # nbclient's pollers of the abandoned cell, then the run
                task.cancel()
            await asyncio.gather(run, *pollers, return_exceptions=True)
            raise KernelStall(self.stalls[-1].detail)
        return run.result()

    execute = run_sync(async_execute)

    async def _async_cleanup_kernel(self) -> None:
        """Kill the kernel and release the channels, never waiting more than a few seconds."""
        start, pid = time.monotonic(), self._kernel_pid()
        try:
            await asyncio.wait_for(super()._async_cleanup_kernel(), self.shutdown_seconds_limit)
        except asyncio.TimeoutError:
            self.stalls.append(Stall("shutdown", f"kernel clean-up cut short after {self.shutdown_seconds_limit:.0f} s"))
            self.kc = self.km = None
        finally:
            _kill_tree(pid)
            self.shutdown_seconds.append(time.monotonic() - start)


def execute_notebook(nb: nbformat.NotebookNode, folder: pathlib.Path, *, path: Optional[str] = None,
                     env: Optional[dict[str, str]] = None, timeout: int = CELL_TIMEOUT,
                     timeout_func: Optional[Callable[[Any], int]] = None, stall_seconds: float = STALL_SECONDS,
                     max_restarts: int = MAX_RESTARTS, store_widget_state: bool = True,
                     log: Callable[[str], None] = print, **client_options: Any) -> Execution:
    """Execute ``nb`` (left untouched) in a fresh kernel on this interpreter, working directory
    ``folder``; return the executed copy.

    ``env`` is added to this process's environment for the kernel. ``timeout`` (or ``timeout_func``,
    per cell) bounds each cell; a cell that raises fails the run at once (`CellExecutionError`). A
    stall (see `WatchedClient`), a kernel that dies or does not start, reruns the whole notebook in a
    fresh kernel, at most ``max_restarts`` times, each announced through ``log``; then `KernelStall`
    (or the last error) is raised. One line ``tfbook.build.notebooks: executed <path> in <s> s, restarts <k>``
    is logged per notebook.
    """
    if max_restarts < 0:
        raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
    if not stall_seconds > 0:
        raise ValueError(f"stall_seconds must be > 0, got {stall_seconds}")
    name = path or str(folder)
    kernel_env = {**os.environ, **(env or {})}
    stalls: list[Stall] = []
    shutdowns: list[float] = []
    deliveries: list[str] = []
    start = time.perf_counter()
    sink = kernel_env.get(claims.SINK_ENV)
    for attempt in range(max_restarts + 1):
        if attempt and sink and os.path.exists(sink):
            pathlib.Path(sink).write_text("", encoding="utf-8")  # a rerun records its claims afresh
        work = copy.deepcopy(nb)
        client = WatchedClient(work, kernel_manager_class=InterpreterKernelManager, kernel_name="python3",
                               timeout=STARTUP_TIMEOUT,
                               timeout_func=timeout_func or (lambda cell: timeout), startup_timeout=STARTUP_TIMEOUT,
                               iopub_timeout=int(stall_seconds), raise_on_iopub_timeout=True,
                               shutdown_kernel="immediate", stall_seconds=stall_seconds,
                               store_widget_state=store_widget_state, record_timing=False,
                               resources={"metadata": {"path": str(folder)}}, **client_options)
        try:
            client.execute(env=kernel_env)
            failure = None
        except (KernelStall, DeadKernelError) as exc:
            failure = exc
        except RuntimeError as exc:  # jupyter_client: the kernel did not start or answer in time
            if not str(exc).startswith(("Kernel didn't respond", "Kernel died before replying")):
                raise
            failure = exc
            client.stalls.append(Stall("startup", str(exc).strip().splitlines()[0][:200]))
        finally:
            stalls += client.stalls
            shutdowns += client.shutdown_seconds
            deliveries += client.deliveries
        if failure is None:
            seconds = time.perf_counter() - start
            log(f"tfbook.build.notebooks: executed {name} in {seconds:.1f} s, restarts {attempt}")
            return Execution(work, seconds, attempt, stalls, shutdowns, deliveries)
        if attempt == max_restarts:
            log(f"tfbook.build.notebooks: {name} stalled {attempt + 1} times; giving up ({failure})")
            raise failure if isinstance(failure, KernelStall) else KernelStall(str(failure)) from failure
        log(f"tfbook.build.notebooks: {name}: {type(failure).__name__}: {failure}; "
            f"restarting in a fresh kernel ({attempt + 1} of {max_restarts})")
    raise AssertionError("unreachable")


def execute(path: pathlib.Path, timeout: int = CELL_TIMEOUT, output: Optional[pathlib.Path] = None,
            env: Optional[dict[str, str]] = None) -> float:
    """Execute one notebook file in its own folder and write it (to ``output``, default in place) with
    outputs and widget state; return wall seconds. The kernel inherits this process's environment,
    except ``TFBOOK_CLAIMS_SINK``: it points to a private file from which the claims the notebook
    executed are counted (stored, in the quick profile, as ``metadata.tfbook.claims_executed``)."""
    path = pathlib.Path(path)
    if path.suffix != ".ipynb" or not path.exists():
        raise ValueError(f"path must be an existing .ipynb file, got {str(path)!r}")
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as tmp:
        sink = pathlib.Path(tmp) / "claims.jsonl"
        sink.touch()
        run = execute_notebook(nb, path.resolve().parent, path=_display(path), timeout=timeout,
                               env={**(env or {}), claims.SINK_ENV: str(sink)})
        executed = len(sink.read_text(encoding="utf-8").splitlines())
    if {**os.environ, **(env or {})}.get("TFBOOK_PROFILE") == "quick":
        record_quick_seconds(run.nb, run.seconds)
        # the claims page must show every one of them (a test compares it with the stored records)
        run.nb.metadata.setdefault("tfbook", {})["claims_executed"] = executed
    nbformat.write(run.nb, output or path)
    return run.seconds


def record_quick_seconds(nb: nbformat.NotebookNode, seconds: float) -> None:
    """Store a quick-profile wall time in ``nb.metadata.tfbook.quick_seconds`` (what the claims audit
    scales its timeouts from). Kept unless the new time is off by more than a factor 2, so re-running
    a notebook does not rewrite its metadata each time."""
    meta = nb.metadata.setdefault("tfbook", {})
    old = meta.get("quick_seconds")
    if not isinstance(old, (int, float)) or old <= 0 or not 0.5 <= seconds / old <= 2:
        meta["quick_seconds"] = max(1, round(seconds))


def _display(path: pathlib.Path) -> str:
    path = pathlib.Path(path).resolve()
    with contextlib.suppress(ValueError):
        return str(path.relative_to(pathlib.Path.cwd()))
    return str(path)


def execute_many(paths: list[pathlib.Path], jobs: int = 2, timeout: int = CELL_TIMEOUT,
                 env: Optional[dict[str, str]] = None) -> list[float]:
    """`execute` each notebook in place, ``jobs`` at a time; every notebook runs even if one fails,
    then the first failure is raised. With ``jobs > 1`` each kernel gets an equal share of the cores
    (``OMP_NUM_THREADS``, unless set): oversubscribed BLAS threads spin and slow every notebook."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if jobs > 1 and "OMP_NUM_THREADS" not in {**os.environ, **(env or {})}:
        env = {**(env or {}), "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // jobs))}
    with ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(execute, p, timeout, None, env) for p in paths]
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        raise errors[0]
    return [f.result() for f in futures]


BUILD_COPY = ROOT / "_build" / "book_src"


def build_copy(dest: pathlib.Path = BUILD_COPY, jobs: int = 2, root: pathlib.Path = ROOT) -> pathlib.Path:
    """``make book``: copy the book's sources to ``dest`` (config with execution off, TOC, ``book/``,
    ``_static/``), execute every notebook there with `execute_many` and regenerate the claims page
    from the executed copies. The stored notebooks are not touched; build ``dest`` with execution off."""
    import shutil

    import yaml

    from tfbook.build import claims_page

    if dest.resolve() == root.resolve():
        raise ValueError("dest must not be the repository itself")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    config = yaml.safe_load((root / "_config.yml").read_text())
    text = (root / "_config.yml").read_text()
    if config.get("execute", {}).get("execute_notebooks") != "off":
        text = re.sub(r"(?m)^(\s*execute_notebooks:).*$", r'\1 "off"', text)
    (dest / "_config.yml").write_text(text)
    shutil.copy2(root / "_toc.yml", dest / "_toc.yml")
    for folder in ("book", "_static"):
        shutil.copytree(root / folder, dest / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    paths = [dest / f"{name}.ipynb" for chapter in claims_page.toc_chapters(dest) for name in chapter]
    execute_many(paths, jobs=jobs)
    claims_page.main([], root=dest)
    return dest

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="maintain the book's notebooks")
    parser.add_argument("command", choices=["execute", "install-cell", "fold", "claims-page", "build-copy"])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path,
                        help="the notebooks (build-copy: at most one path, the destination folder)")
    parser.add_argument("--check", action="store_true", help="claims-page: fail if book/claims.md is stale")
    parser.add_argument("--jobs", type=int, default=2, help="execute, build-copy: notebooks run at a time")
    args = parser.parse_intermixed_args(argv)
    if args.command in ("execute", "install-cell", "fold") and not args.notebooks:
        parser.error(f"{args.command} needs at least one notebook")
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.command in ("install-cell", "fold"):
        for path in args.notebooks:
            nb = nbformat.read(path, as_version=4)
            if ensure_install_cell(nb) if args.command == "install-cell" else fold_cells(nb):
                nbformat.write(nb, path)
                print(f"{path}: {'install cell written' if args.command == 'install-cell' else 'cells folded'}")
        return
    if args.command == "build-copy":
        if len(args.notebooks) > 1:
            parser.error("build-copy takes at most one destination folder")
        start = time.perf_counter()
        dest = build_copy(args.notebooks[0].resolve() if args.notebooks else BUILD_COPY, jobs=args.jobs)
        print(f"tfbook.build.notebooks: executed the book into {_display(dest)} in {time.perf_counter() - start:.1f} s")
        return
    if args.command == "execute":
        execute_many(args.notebooks, jobs=args.jobs)
    from tfbook.build import claims_page

    raise SystemExit(claims_page.main(["--check"] if args.check else []))


if __name__ == "__main__":
    main()
