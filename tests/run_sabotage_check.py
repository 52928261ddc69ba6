"""Every chapter's unit tests must notice a broken core (``make test-sabotage``).

    python tests/run_sabotage_check.py [PYTEST_ARGS...]

Runs each ``tests/test_<chapter>*.py`` (chapters: `CHAPTERS`) in one pytest process started with
``TFBOOK_PERTURB_CORE=1e-3``, the core's own process-wide sabotage (every core layer's update scaled
by 1 + 1e-3), and reads the per-test results from a JUnit XML report. A file that passes in full under
the sabotage checks nothing about the constructions it builds, and the script exits 1 naming it. A
file that tests only data, devices, memory or timing says so in its module docstring with the line
``Exempt from the core-sabotage check: <reason>.`` and is skipped (the reason is printed).
"""
from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

CHAPTERS = ("foundation", "besov", "colsym", "icgd", "seq2seq", "turing")
EXEMPT_MARK = "Exempt from the core-sabotage check:"
SABOTAGE = {"TFBOOK_PERTURB_CORE": "1e-3"}
TESTS = pathlib.Path(__file__).resolve().parent


def chapter_test_files(tests_dir: pathlib.Path = TESTS) -> list[pathlib.Path]:
    """The ``test_<chapter>*.py`` files of ``tests_dir``, sorted."""
    return sorted(p for p in tests_dir.glob("test_*.py")
                  if any(p.name == f"test_{c}.py" or p.name.startswith(f"test_{c}_") for c in CHAPTERS))


def exemption(path: pathlib.Path) -> str | None:
    """The reason after `EXEMPT_MARK` in the module docstring of ``path`` (None when not exempt)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    for line in doc.splitlines():
        if line.strip().startswith(EXEMPT_MARK):
            reason = line.strip()[len(EXEMPT_MARK):].strip()
            if not reason:
                raise ValueError(f"{path.name}: '{EXEMPT_MARK}' must be followed by a reason")
            return reason
    return None


def outcomes_by_file(report: pathlib.Path) -> dict[str, dict[str, int]]:
    """Per test file (``test_x.py``): counts of passed, failed (failures and errors) and skipped tests."""
    counts: dict[str, dict[str, int]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        row = counts.setdefault(pathlib.Path(case.get("file", "")).name, {"passed": 0, "failed": 0, "skipped": 0})
        if case.find("failure") is not None or case.find("error") is not None:
            row["failed"] += 1
        elif case.find("skipped") is not None:
            row["skipped"] += 1
        else:
            row["passed"] += 1
    return counts


def unnoticed(files: list[pathlib.Path], counts: dict[str, dict[str, int]]) -> list[str]:
    """The files among ``files`` that no test of failed under the sabotage (a file that ran no test counts)."""
    return [p.name for p in files if counts.get(p.name, {}).get("failed", 0) == 0]


def main(argv: list[str]) -> int:
    files = chapter_test_files()
    checked = []
    for path in files:
        reason = exemption(path)
        if reason is None:
            checked.append(path)
        else:
            print(f"run_sabotage_check.py: {path.name} exempt: {reason}")
    with tempfile.TemporaryDirectory() as tmp:
        report = pathlib.Path(tmp) / "junit.xml"
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=no",
                              "-o", "junit_family=xunit1", f"--junitxml={report}", *argv,
                              *map(str, checked)], env={**os.environ, **SABOTAGE}, stdout=subprocess.DEVNULL)
        if not report.exists():
            print(f"run_sabotage_check.py: pytest wrote no report (exit {run.returncode})", file=sys.stderr)
            return 2
        counts = outcomes_by_file(report)
    for path in checked:
        row = counts.get(path.name, {"passed": 0, "failed": 0, "skipped": 0})
        print(f"run_sabotage_check.py: {path.name}: {row['failed']} failed, {row['passed']} passed, "
              f"{row['skipped']} skipped under TFBOOK_PERTURB_CORE=1e-3")
    missed = unnoticed(checked, counts)
    if missed:
        print("run_sabotage_check.py: these files pass in full with a sabotaged core: " + ", ".join(missed),
              file=sys.stderr)
        return 1
    print(f"run_sabotage_check.py: all {len(checked)} chapter test files notice the sabotage")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
