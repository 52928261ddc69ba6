"""`make full`'s report: JSON and table from per-notebook results; failures make it not ok."""
import json

import nbformat
import pytest

from tfbook.build import claims_audit, full


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
    assert result.code_hash == claims_audit.code_hash(nb) and result.library_hash == claims_audit.library_hash(root)
    ran = nbformat.read(tmp_path / "scratch" / "book" / "n.ipynb", as_version=4)
    assert ran.cells[0].outputs[0]["text"].strip() == "full" and len(ran.cells) == 1


def _ran(name, device, holds, status="ok", code="c1", library="l1"):
    """A run that used its device (a GPU run allocated 64 MiB) of notebook code ``code`` and library ``library``."""
    claims = [{"title": "T", "ref": "Lemma 1", "statement": "s", "measured": "1", "relation": "<=", "bound": "2",
               "holds": h, "kind": "construction"} for h in holds]
    gpu_mib = 64.0 if device.startswith("cuda") else None
    return full.Result(name, status, device, 1.0, 10.0, gpu_mib, sum(holds), len(holds) - sum(holds), [], None,
                       claims=claims, code_hash=code, library_hash=library)


def test_merge_keeps_the_newest_run_per_notebook_and_lists_the_rest():
    every = ["book/a/01.ipynb", "book/a/02.ipynb", "book/b/01.ipynb"]
    first = full.merge_report(None, [_ran("book/a/01.ipynb", "cpu (X, 1 threads)", [True, False])], every)
    assert (first["run"], first["not_run"], first["held"], first["failed"], first["ok"]) == (1, 2, 1, 1, True)
    assert [n["status"] for n in first["notebooks"]] == ["ok", "not run", "not run"]
    second = full.merge_report(first, [_ran("book/a/01.ipynb", "cpu (X, 1 threads)", [True, True]),
                                       _ran("book/b/01.ipynb", "cpu (X, 1 threads)", [True], "error")], every)
    assert (second["run"], second["held"], second["failed"], second["ok"]) == (2, 3, 0, False)
    assert [n["notebook"] for n in second["notebooks"]] == every


def test_store_report_writes_one_file_per_device(tmp_path):
    root = tmp_path / "repo"
    (root / "book").mkdir(parents=True)
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/n\n")
    nbformat.write(nbformat.v4.new_notebook(), root / "book" / "n.ipynb")
    results = [_ran("book/n.ipynb", "cuda:0 (NVIDIA H200)", [True]), _ran("book/n.ipynb", "cpu (AMD EPYC, 2 threads)", [False])]
    written = full.store_report(results, tmp_path / "reports", root=root)
    assert sorted(p.name for p in written) == ["cpu-amd-epyc.json", "nvidia-h200.json"]
    gpu = json.loads((tmp_path / "reports" / "nvidia-h200.json").read_text())
    assert gpu["device"] == "cuda:0 (NVIDIA H200)" and gpu["held"] == 1 and gpu["not_run"] == 0


def test_compare_finds_a_claim_that_holds_on_one_device_only():
    every = ["book/a/01.ipynb", "book/a/02.ipynb"]
    gpu = full.merge_report(None, [_ran("book/a/01.ipynb", "cuda:0 (G)", [True, True]),
                                   _ran("book/a/02.ipynb", "cuda:0 (G)", [True])], every)
    cpu = full.merge_report(None, [_ran("book/a/01.ipynb", "cpu (C, 1 threads)", [True, False])], every)
    lines = full.compare_reports(gpu, cpu)
    assert len(lines) == 1 and "book/a/01.ipynb: Lemma 1: s: holds on cuda:0 (G), fails on cpu" in lines[0]
    assert full.compare_reports(gpu, gpu) == []
    page = full.render_page({"g": gpu, "c": cpu})
    assert "1 notebook run on both with the same code; 1 disagreement" in page and "Not run on this device: [book/a/02.ipynb](a/02.ipynb)" in page


def test_stored_page_is_up_to_date():
    assert full.main(["--page", "--check"]) == 0, \
        "run `python -m tfbook.build.full --page` and commit book/full_results.md"


def test_a_concurrent_gpu_run_is_marked_and_set_against_the_estimate():
    ops = {"launches": 3, "flops": 1e9, "bytes": 2e9, "host_s": 0.5, "peak_live_bytes": 2**20, "h100_s": 40.0}
    counted = full.Result("book/x.ipynb", status="ok", device="cpu (C, 1 threads)", wall_s=900.0,
                          date="2026-11-26 00:00 UTC", commit="abc", ops=ops)
    alone = full.Result("book/x.ipynb", status="ok", device="cuda:0 (G)", wall_s=20.0, date="2026-11-26 01:00 UTC",
                        commit="abc", peak_cuda_mib=8.0)
    shared = full.Result("book/x.ipynb", status="ok", device="cuda:0 (G)", wall_s=60.0, date="2026-11-27 01:00 UTC",
                         commit="abc", concurrent=4, peak_cuda_mib=8.0)
    every = ["book/x.ipynb"]
    cpu = full.merge_report(None, [counted], every)
    page = full.render_page({"c": cpu, "g": full.merge_report(None, [alone], every)})
    assert "| 40.0 | 20 | 0.5 |" in page and "20‡" not in page and "at a time" not in page
    page = full.render_page({"c": cpu, "g": full.merge_report(None, [shared], every)})
    assert "| 40.0 | 60‡ | 1.5 |" in page and "‡ 4 notebooks at a time on this machine." in page
    assert "| ok | abc | 900* |" in page  # the counted CPU run is not a GPU measurement


def test_a_notebook_that_dies_without_a_message_is_reported_not_raised(tmp_path, monkeypatch):
    """A kernel killed mid-run ends in an AssertionError with no text inside nbclient's cleanup."""
    import tfbook.build.notebooks

    def die(*args, **kwargs):
        raise AssertionError()

    monkeypatch.setattr(tfbook.build.notebooks, "execute_notebook", die)
    root = tmp_path / "repo"
    (root / "book").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), root / "book" / "n.ipynb")
    result = full.run_one(root / "book" / "n.ipynb", tmp_path / "scratch", root=root)
    assert (result.status, result.error, result.held) == ("error", "AssertionError", 0)


def test_a_statement_that_names_its_device_is_compared_across_devices():
    every = ["book/a/01.ipynb"]

    def ran(device, word, holds):
        result = _ran("book/a/01.ipynb", device, [holds])
        result.claims[0]["statement"] = f"test accuracy (float32, {word})"
        return full.merge_report(None, [result], every)

    gpu, cpu = ran("cuda:0 (G)", "CUDA", True), ran("cpu (C, 1 threads)", "CPU", True)
    assert full.compare_reports(gpu, cpu) == []
    lines = full.compare_reports(gpu, ran("cpu (C, 1 threads)", "CPU", False))
    assert lines == ["book/a/01.ipynb: Lemma 1: test accuracy (float32, <device>): holds on cuda:0 (G), fails on "
                     "cpu (C, 1 threads)"]


def test_concurrent_must_count_at_least_the_run_itself(capsys):
    with pytest.raises(SystemExit):
        full.main(["--concurrent", "0", "--estimate"])
    assert "--concurrent must be a positive number of notebooks, got 0" in capsys.readouterr().err


def test_a_gpu_run_without_gpu_memory_ran_on_the_host_and_is_no_gpu_run():
    every = ["book/a/01.ipynb"]
    host = _ran("book/a/01.ipynb", "cuda:0 (G)", [True])
    host.peak_cuda_mib = 0.0
    gpu = full.merge_report(None, [host], every)
    cpu = full.merge_report(None, [_ran(every[0], "cpu (C)", [False])], every)
    assert full.on_host(gpu["notebooks"][0]) and not full.on_host(cpu["notebooks"][0])
    assert full.compare_reports(gpu, cpu) == []  # a host run is not compared as a GPU run, though its claim differs
    page = full.render_page({"c": cpu, "g": gpu}, now=({every[0]: "c1"}, "l1"))
    assert "| ok, on the host CPU |" in page and "| a/01 | - current | - current, host CPU |" in page
    assert "g: 0 of 1 runs used the GPU" in page and "no notebook run on both with the same code" in page
    host.peak_cuda_mib = 3.0
    assert len(full.compare_reports(full.merge_report(None, [host], every), cpu)) == 1


def test_runs_are_compared_only_with_the_same_notebook_code_and_library():
    every = ["book/a/01.ipynb"]
    cpu = full.merge_report(None, [_ran(every[0], "cpu (C)", [False])], every)
    for code, library in (("c2", "l1"), ("c1", "l2"), ("", "")):
        gpu = full.merge_report(None, [_ran(every[0], "cuda:0 (G)", [True], code=code, library=library)], every)
        assert full.compare_reports(gpu, cpu) == [] and full._both_ran(gpu, cpu) == []
        assert full._both_ran(gpu, cpu, same_code=False) == every
    gpu = full.merge_report(None, [_ran(every[0], "cuda:0 (G)", [True])], every)
    assert len(full.compare_reports(gpu, cpu)) == 1 and full._both_ran(gpu, cpu) == every


def test_each_run_is_current_changed_or_unknown_against_the_tree_now():
    run = full.asdict(_ran("book/a/01.ipynb", "cuda:0 (G)", [True]))
    assert full.code_state(run, ({"book/a/01.ipynb": "c1"}, "l1")) == "current"
    assert full.code_state(run, ({"book/a/01.ipynb": "c9"}, "l1")) == "changed"
    assert full.code_state(run, ({"book/a/01.ipynb": "c1"}, "l9")) == "changed"
    assert full.code_state(run, None) == "unknown"
    assert full.code_state({**run, "code_hash": ""}, ({"book/a/01.ipynb": "c1"}, "l1")) == "unknown"
    now = full.current_hashes()
    assert set(now[0]) == {str(p.relative_to(full.ROOT)) for p in full.notebooks()} and now[1] == \
        claims_audit.library_hash()
