"""tests/run_sabotage_check.py: which files it checks, how it reads exemptions and results, when it fails."""
from __future__ import annotations

import pathlib

import pytest

from tests import run_sabotage_check as rs

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.test_besov" file="tests/test_besov.py" name="test_a"/>
<testcase classname="tests.test_besov" file="tests/test_besov.py" name="test_b"><failure message="x"/></testcase>
<testcase classname="tests.test_icgd" file="tests/test_icgd.py" name="test_c"><error message="y"/></testcase>
<testcase classname="tests.test_turing" file="tests/test_turing.py" name="test_d"/>
<testcase classname="tests.test_turing" file="tests/test_turing.py" name="test_e"><skipped message="z"/></testcase>
</testsuite></testsuites>
"""


def test_every_chapter_file_is_checked_and_nothing_else():
    names = [p.name for p in rs.chapter_test_files()]
    assert "test_turing_fleet.py" in names and "test_besov.py" in names and "test_icgd_experiments.py" in names
    assert {n.split("_")[1].removesuffix(".py") for n in names} == set(rs.CHAPTERS)
    assert "test_core.py" not in names and "test_run_sabotage_check.py" not in names
    assert not any(n.startswith("test_meta_") for n in names)


def test_exemption_is_read_from_the_module_docstring(tmp_path: pathlib.Path):
    exempt = tmp_path / "test_icgd_memory.py"
    exempt.write_text(f'"""Memory.\n\n{rs.EXEMPT_MARK} it measures bytes, not values.\n"""\nx = 1\n')
    plain = tmp_path / "test_icgd.py"
    plain.write_text('"""Values."""\n# ' + rs.EXEMPT_MARK + " a comment is not a docstring\n")
    bare = tmp_path / "test_turing.py"
    bare.write_text(f'"""{rs.EXEMPT_MARK}"""\n')
    assert rs.exemption(exempt) == "it measures bytes, not values."
    assert rs.exemption(plain) is None
    with pytest.raises(ValueError, match="reason"):
        rs.exemption(bare)


def test_results_are_counted_per_file_and_a_file_without_a_failure_is_named(tmp_path: pathlib.Path):
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT)
    counts = rs.outcomes_by_file(report)
    assert counts == {"test_besov.py": {"passed": 1, "failed": 1, "skipped": 0},
                      "test_icgd.py": {"passed": 0, "failed": 1, "skipped": 0},
                      "test_turing.py": {"passed": 1, "failed": 0, "skipped": 1}}
    files = [pathlib.Path(n) for n in ("test_besov.py", "test_icgd.py", "test_turing.py", "test_colsym.py")]
    assert rs.unnoticed(files, counts) == ["test_turing.py", "test_colsym.py"]  # a file that ran nothing counts
