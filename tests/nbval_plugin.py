"""pytest plugin for the nbval runs (``-p tests.nbval_plugin``): an xfail is a failure.

After a cell times out, nbval marks every later cell of that notebook ``xfail`` ("Previous cell
timed out"), so a stalled notebook would otherwise end with one failure and a row of expected
failures; a rerun of single cells could even turn it green. Here every xfail (and xpass) is
reported as a failure, so the notebook fails as a whole and `tests/run_nbval.py` reruns it.
When ``TFBOOK_NBVAL_FAILED`` names a file, the path of every notebook with a failed cell is appended
to it (one line per failed cell; from every xdist worker).
"""
import os

import pytest

FAILED_ENV = "TFBOOK_NBVAL_FAILED"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if hasattr(report, "wasxfail"):
        reason = report.wasxfail or "xfail"
        del report.wasxfail
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid}: counted as a failure (nbval marked it xfail: {reason})"
    if report.failed and os.environ.get(FAILED_ENV):
        with open(os.environ[FAILED_ENV], "a") as out:
            out.write(f"{item.path}\n")
