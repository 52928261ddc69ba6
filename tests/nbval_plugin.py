"""pytest plugin for the nbval runs (``-p tests.nbval_plugin``): an xfail is a failure, and nbval's runs
can serve as the claims audit's runs without a sabotage.

After a cell times out, nbval marks every later cell of that notebook ``xfail`` ("Previous cell
timed out"), so a stalled notebook would otherwise end with one failure and a row of expected
failures; a rerun of single cells could even turn it green. Here every xfail (and xpass) is
reported as a failure, so the notebook fails as a whole and `tests/run_nbval.py` reruns it.
When ``TFBOOK_NBVAL_FAILED`` names a file, the path of every notebook with a failed cell is appended
to it (one line per failed cell; from every xdist worker).

When ``TFBOOK_NBVAL_BASELINE`` names a folder (``make nbval``), each notebook's kernel writes its claims
there and its run is recorded (`tfbook.build.nbval_baseline`): ``make test-claims`` then need not execute
the notebook once more without a sabotage.

When ``TFBOOK_NBVAL_WIDGETS`` is set (``make nbval``), each notebook with widgets gets one more item after its
last cell, ``widget controls``: `tests/widget_harness.py` run in the notebook's kernel sets every control as a
reader would, after the whole notebook ran, and fails on a callback that raises, is slow or changes nothing.
"""
import os
import pathlib
import queue
import time

import nbformat
import pytest

from tests import widget_harness

FAILED_ENV = "TFBOOK_NBVAL_FAILED"
WIDGETS_ENV = "TFBOOK_NBVAL_WIDGETS"
ROOT = pathlib.Path(__file__).resolve().parent.parent


def run_in_kernel(kernel, code: str, timeout: float) -> tuple[str, str]:
    """Run ``code`` in nbval's ``kernel``: (what it printed, its error as "Name: value" or ""); TimeoutError
    when it is not done within ``timeout`` s."""
    msg_id = kernel.execute_cell_input(code, allow_stdin=False)
    deadline = time.monotonic() + timeout
    text, error = "", ""
    try:
        kernel.await_reply(msg_id, timeout=timeout)
        while True:
            msg = kernel.get_message("iopub", timeout=max(1.0, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                return text, error
            if kind == "stream":
                text += content["text"]
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
    except queue.Empty:
        raise TimeoutError(f"not done within {timeout} s") from None


class WidgetError(Exception):
    """A widget control that fails `widget_harness.problems`, or a harness that could not run."""


class WidgetControls(pytest.Item):
    """Every widget control of a notebook set from code in nbval's kernel, after the notebook's last cell."""

    def runtest(self) -> None:
        kernel = getattr(self.parent, "kernel", None)
        if kernel is None or not kernel.is_alive():
            raise WidgetError("the notebook's kernel is not running (an earlier cell failed or timed out)")
        try:
            text, error = run_in_kernel(kernel, widget_harness.HARNESS, widget_harness.TIMEOUT_S)
        except TimeoutError:
            raise WidgetError(f"the harness did not finish within {widget_harness.TIMEOUT_S} s") from None
        if error:
            raise WidgetError(f"the harness raised {error}")
        found = widget_harness.problems(widget_harness.report(text))
        if found:
            raise WidgetError("\n".join(found))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (WidgetError, ValueError)):
            return f"{self.path}: widget controls: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, 0, f"{self.path}::widget controls"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Under ``TFBOOK_NBVAL_WIDGETS``, a `WidgetControls` item after the last cell of a notebook with widgets."""
    outcome = yield
    if not os.environ.get(WIDGETS_ENV) or type(collector).__name__ != "IPyNbFile":
        return
    report = outcome.get_result()
    if report.passed and widget_harness.has_widgets(nbformat.read(collector.path, as_version=4)):
        report.result.append(WidgetControls.from_parent(collector, name="widget controls"))


def _is_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell"


class _Baseline:
    """The notebook being run under ``TFBOOK_NBVAL_BASELINE``: its cells run, failures and start time."""

    def __init__(self) -> None:
        self.path, self.cells, self.failed, self.started = None, 0, False, 0.0
        self.core_layers: int | None = None

    def begin(self, item) -> None:
        from tfbook.build import nbval_baseline
        from tfbook.build.claims_audit import library_hash

        folder = pathlib.Path(os.environ[nbval_baseline.FOLDER_ENV])
        self.path, self.cells, self.failed, self.started = item.path, 0, False, time.perf_counter()
        self.core_layers = None
        os.environ[nbval_baseline.SINK_ENV] = nbval_baseline.start(folder, item.path, ROOT, library_hash(ROOT))

    def count_core_layers(self, item) -> None:
        """After the notebook's last item, before nbval stops its kernel: the core layers the kernel built."""
        from tfbook.build import nbval_baseline

        kernel = getattr(item.parent, "kernel", None)
        if kernel is None or not kernel.is_alive():
            return
        try:
            text, error = run_in_kernel(kernel, nbval_baseline.CORE_LAYERS_CODE, 30)
        except TimeoutError:
            return
        self.core_layers = None if error else nbval_baseline.core_layers(text)

    def end(self) -> None:
        from tfbook.build import nbval_baseline

        folder = pathlib.Path(os.environ[nbval_baseline.FOLDER_ENV])
        nbval_baseline.finish(folder, self.path, ROOT, self.cells, not self.failed,
                              time.perf_counter() - self.started, self.core_layers)
        os.environ.pop(nbval_baseline.SINK_ENV, None)
        self.path = None


_BASELINE = _Baseline()


def _recording() -> bool:
    from tfbook.build.nbval_baseline import FOLDER_ENV

    return bool(os.environ.get(FOLDER_ENV))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the first cell of a notebook (whose setup starts the kernel): point the sink at its file."""
    if _recording() and item.path.suffix == ".ipynb" and item.path != _BASELINE.path \
            and item.path.resolve().is_relative_to(ROOT):
        _BASELINE.begin(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Count the notebook's cells; after its last item, while its kernel still runs (nbval's teardown stops
    it), count the core layers the kernel built, and record the run."""
    recorded = _recording() and item.path == _BASELINE.path
    last = recorded and (nextitem is None or nextitem.path != item.path)
    if recorded:
        _BASELINE.cells += _is_cell(item)
    if last:
        _BASELINE.count_core_layers(item)
    try:
        return (yield)
    finally:
        if last:
            _BASELINE.end()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if hasattr(report, "wasxfail"):
        reason = report.wasxfail or "xfail"
        del report.wasxfail
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid}: counted as a failure (nbval marked it xfail: {reason})"
    if report.failed and item.path == _BASELINE.path and _is_cell(item):
        _BASELINE.failed = True
    if report.failed and os.environ.get(FAILED_ENV):
        with open(os.environ[FAILED_ENV], "a") as out:
            out.write(f"{item.path}\n")
