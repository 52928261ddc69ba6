"""The operation counter behind the H100 estimates (`tfbook.build.opcount`, `make full --count`)."""
import math

import torch

from tfbook.build import full, opcount


def test_counts_a_matrix_product_and_skips_views():
    a = torch.ones(30, 40, dtype=torch.float64)
    b = torch.ones(40, 50, dtype=torch.float64)
    with opcount.OpCounter() as counter:
        c = (a @ b).t()  # one product; the transpose is a view
        d = c + 1.0  # one element-wise operation: one flop per element
    counts = counter.counts
    assert counts.launches == 2, counts.by_op
    assert counts.flops == 2 * 30 * 40 * 50 + 50 * 30
    # bytes: the product reads a and b and writes c; the addition reads c and writes d
    assert counts.bytes == 8 * (30 * 40 + 40 * 50 + 30 * 50) + 8 * 2 * 30 * 50
    assert counts.peak_live_bytes == 8 * 2 * 30 * 50  # c and d alive together, a and b made before
    del c, d
    report = counter.report()
    assert report["h100_s"] == opcount.h100_seconds(counts)
    roofline = (8 * (30 * 40 + 40 * 50 + 30 * 50) / (2.0e12 * 0.5)  # the product is memory-bound here
                + 8 * 2 * 30 * 50 / (2.0e12 * 0.5))
    assert abs(counts.roofline_s - roofline) < 1e-15
    assert report["h100_s"] >= counts.launches * opcount.H100["launch_s"] + counts.roofline_s


def test_a_sparse_product_counts_two_flops_per_stored_value_and_column():
    A = torch.eye(100, dtype=torch.float64)[:, :40].contiguous().to_sparse_csr()  # 40 stored values
    B = torch.ones(40, 7, dtype=torch.float64)
    with opcount.OpCounter() as counter:
        A @ B
    assert counter.counts.flops == 2 * 40 * 7
    with opcount.OpCounter() as counter:  # a conversion is no product: one flop per stored value
        A.to_sparse_coo().coalesce()
    assert counter.counts.flops <= 3 * 40


def test_factorisations_are_charged_their_latency():
    x = torch.eye(20, dtype=torch.float64).expand(3, 20, 20).contiguous()
    with opcount.OpCounter() as counter:
        torch.linalg.eigh(x)
    assert counter.counts.factorisations >= 1
    assert counter.counts.flops >= 3 * 10 * 20 ** 3
    assert opcount.h100_seconds(counter.counts) >= opcount.H100["factorisation_s"]


def test_a_counted_run_is_recorded_in_the_notebook_metadata(tmp_path):
    import nbformat

    book = tmp_path / "book"
    book.mkdir()
    nbformat.write(nbformat.v4.new_notebook(), book / "x.ipynb")
    with opcount.OpCounter() as counter:
        torch.ones(4, 4) @ torch.ones(4, 4)  # two fills and a product
    result = full.Result("book/x.ipynb", status="ok", device="cpu (test, 1 threads)", date="2026-11-26 00:00 UTC",
                         commit="abc", ops=counter.report())
    assert full.record_estimates([result, full.Result("book/x.ipynb")], root=tmp_path) == [book / "x.ipynb"]
    estimate = nbformat.read(book / "x.ipynb", as_version=4).metadata["tfbook"]["h100_estimate"]
    assert estimate["launches"] == 3 and estimate["seconds"] == round(result.ops["h100_s"], 1)
    assert estimate["counted"] == "2026-11-26 00:00 UTC, commit abc, cpu (test, 1 threads)"
    assert full.expected_seconds(book / "x.ipynb", gpu=True) == estimate["seconds"]
    page = full.render_page({"cpu-test": full.merge_report(None, [result], ["book/x.ipynb"])})
    assert "## Estimated time on one H100" in page and "[book/x.ipynb](x.ipynb) | 3 |" in page


def test_every_full_profile_fits_five_minutes_on_an_h100():
    """Issue budget: each notebook's full profile runs within 5 minutes on one H100: by its estimate from
    counted operations, or, where the estimate is over, by its newest plain run alone on a GPU (an H200's wall
    time scaled up by the bandwidth ratio to an H100 SXM, `full.h100_bounds`). The fallback is for launch-bound notebooks,
    whose estimate carries this CPU's host time: turing/03 was estimated at 312 s at 52018d5 and measured at 168 s
    alone on an H200, before the core layers launched fewer operations."""
    import nbformat

    bounds = full.h100_bounds(full.stored_reports())
    over = {}
    for path in full.notebooks():
        estimate = nbformat.read(path, as_version=4).metadata.get("tfbook", {}).get("h100_estimate")
        assert estimate is not None, f"{path}: not estimated (`python -m tfbook.build.full --count`)"
        assert set(estimate) >= {"seconds", "launches", "gflop", "gbyte", "host_seconds", "counted"}
        name = str(path.relative_to(full.ROOT))
        if estimate["seconds"] > 300 and bounds.get(name, math.inf) > 300:
            over[name] = (estimate["seconds"], bounds.get(name))
    assert not over, over


def test_a_measured_h200_run_bounds_the_h100_time_only_when_it_ran_alone():
    def run(device, wall, concurrent=1, date="2026-11-27 00:00 UTC", gpu_mib=64.0):
        return full.Result("book/x.ipynb", status="ok", device=device, wall_s=wall, date=date, commit="abc",
                           concurrent=concurrent, peak_cuda_mib=gpu_mib if device.startswith("cuda") else None)

    every = ["book/x.ipynb"]
    h200 = full.merge_report(None, [run("cuda:0 (NVIDIA H200)", 100.0)], every)
    assert full.h100_bounds({"g": h200}) == {"book/x.ipynb": 100.0 * 4.8 / 3.35}
    h100 = full.merge_report(None, [run("cuda:0 (NVIDIA H100 80GB HBM3)", 100.0)], every)
    assert full.h100_bounds({"g": h100}) == {"book/x.ipynb": 100.0}
    shared = full.merge_report(None, [run("cuda:0 (NVIDIA H200)", 50.0, concurrent=4)], every)
    assert full.h100_bounds({"g": shared}) == {}
    cpu = full.merge_report(None, [run("cpu (C, 1 threads)", 10.0)], every)
    assert full.h100_bounds({"c": cpu}) == {}
    host = full.merge_report(None, [run("cuda:0 (NVIDIA H200)", 100.0, gpu_mib=0.0)], every)
    assert full.h100_bounds({"g": host}) == {}  # it computed on the host CPU: no GPU measurement


def test_an_extrapolated_estimate_is_shown_marked_with_its_method():
    with opcount.OpCounter() as counter:
        torch.ones(4, 4) @ torch.ones(4, 4)
    result = full.Result("book/x.ipynb", status="ok", device="cpu (test, 1 threads)", date="2026-11-26 00:00 UTC",
                         commit="abc", ops=counter.report())
    report = full.merge_report(None, [result], ["book/x.ipynb", "book/y.ipynb", "book/z.ipynb"])
    y = {"seconds": 350.0, "launches": 7, "gflop": 1.5, "gbyte": 2.0, "host_seconds": 4.0, "peak_live_mib": 1,
         "counted": "2026-11-27, commit def", "method": "parts counted, training extended to 150 epochs"}
    z = {**y, "seconds": 20.0, "launches": 9}
    del z["method"]
    page = full.render_page({"cpu-test": report}, recorded={"book/y.ipynb": y, "book/w.ipynb": z})
    assert "[book/w.ipynb](w.ipynb) | 9 |" in page and "† `book/w.ipynb`" not in page  # counted, its run since replaced
    assert "[book/y.ipynb](y.ipynb) † | 7 | 1.5 | 2.0 | 4.0 | 1 | 350.0 |" in page
    assert "† `book/y.ipynb`: parts counted, training extended to 150 epochs (2026-11-27, commit def)." in page
    assert "Estimated over 5 minutes on one H100: [book/y.ipynb](y.ipynb)." in page
    assert "Not counted yet: [book/z.ipynb](z.ipynb)." in page and "[book/x.ipynb](x.ipynb) | 3 |" in page
