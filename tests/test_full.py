"""`make full`'s report: JSON and table from per-notebook results; failures make it not ok."""
import json

import nbformat

from tfbook import full


def results():
    return [
        full.Result("book/a/01.ipynb", "ok", "cpu", 12.34, 512.0, None, 5, 0, [], 10.0),
        full.Result("book/a/02.ipynb", "claims failed", "cuda:0 (H100)", 61.0, 2048.0, 900.5, 3, 1,
                    ["Lemma 2: sup error: measured 0.3 is not <= 0.25"], None),
        full.Result("book/b/01.ipynb", "error", "", 1.0, None, None, 0, 0, [], None, "RuntimeError: out of memory"),
    ]


def test_report_json_counts_and_status(tmp_path):
    path = tmp_path / "sub" / "report.json"
    report = full.write_report(results(), path)
    stored = json.loads(path.read_text())
    assert stored == report and not report["ok"] and report["held"] == 8 and report["failed"] == 1
    assert [n["status"] for n in stored["notebooks"]] == ["ok", "claims failed", "error"]
    assert full.write_report(results()[:1], path)["ok"]


def test_table_lists_every_notebook_and_failure():
    table = full.format_table(results())
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["notebook", "status", "device"]
    assert sum(line.startswith("book/") for line in lines) == 3
    assert "FAILED book/a/02.ipynb: Lemma 2" in table and "ERROR book/b/01.ipynb: RuntimeError" in table
    estimate = full.format_table(results(), estimate_only=True)
    assert "unknown" in estimate and "total (known)" in estimate


def test_expected_seconds_from_metadata(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["tfbook"] = {"full_seconds_cpu": 600, "full_seconds_gpu": 45}
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    assert full.expected_seconds(path, gpu=False) == 600 and full.expected_seconds(path, gpu=True) == 45
    nbformat.write(nbformat.v4.new_notebook(), path)
    assert full.expected_seconds(path, gpu=False) is None


def test_run_one_records_failures_into_a_scratch_copy(tmp_path):
    root = tmp_path / "repo"
    (root / "book").mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        "from tfbook import claims as cl, device\n"
        "c = cl.Claims('T')\n"
        "c.check('Lemma 1', 'holds', 1.0, 2.0)\n"
        "c.check('Lemma 2', 'fails, recorded', 3.0, 2.0)\n"
        "print(device.current().name)")]
    source = root / "book" / "n.ipynb"
    nbformat.write(nb, source)
    before = source.read_text()
    result = full.run_one(source, tmp_path / "scratch", root=root)
    assert source.read_text() == before  # the stored notebook is never written
    assert (result.status, result.held, result.failed) == ("claims failed", 1, 1)
    assert result.device.startswith(("cpu", "cuda")) and result.peak_rss_mib > 0 and result.wall_s > 0
    assert "Lemma 2: fails, recorded: measured 3.0 is not <= 2" in result.failures[0]
    ran = nbformat.read(tmp_path / "scratch" / "book" / "n.ipynb", as_version=4)
    assert ran.cells[0].outputs[0]["text"].strip() == "full" and len(ran.cells) == 1
