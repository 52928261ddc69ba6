"""Dense against sparse storage (`python -m tfbook.build.bench --storage`): the comparison and its page section."""
import json
import math

import pytest
import torch

from tfbook import layers
from tfbook.build import bench_core, full
from tfbook.device import DTYPE
from tfbook.layers import FeedForward

D = 64  # 4,096 scalars per weight, 2 non-zeros a row: sparse only under the "sparse" storage


def _sparse_matrix(seed: int) -> torch.Tensor:
    """A (D, D) matrix with 2 random non-zeros in each row."""
    g = torch.Generator().manual_seed(seed)
    W = torch.zeros(D, D, dtype=DTYPE)
    return W.scatter_(1, torch.randint(0, D, (D, 2), generator=g), torch.randn(D, 2, generator=g, dtype=DTYPE))


def _build(device: torch.device):
    H = torch.randn(4, 8, D, dtype=DTYPE, generator=torch.Generator().manual_seed(3)).to(device)  # (batch, n, D)
    return FeedForward(_sparse_matrix(1), None, _sparse_matrix(2), None).to(device), H


TOY = bench_core.Benchmark("toy: sparse feed-forward, D = 64", _build, lambda state: state[0](state[1]), "tokens", 32)


def _perturb(core: list) -> None:
    """Sabotage: the first stored value of every sparse weight moves by 1e-6."""
    for layer in core:
        for name in layer._sparse:
            getattr(layer, f"{name}_values").data[0] += 1e-6


def test_dense_and_sparse_agree_and_sparse_stores_less():
    row = bench_core.compare_storage(TOY, repeats=1)
    assert row["ok"] and row["max_rel_diff"] <= bench_core.STORAGE_TOLERANCE
    assert row["stored_sparse"] < row["stored_dense"] == 2 * D * D
    assert row["nonzero"] == int(torch.count_nonzero(_sparse_matrix(1))) + int(torch.count_nonzero(_sparse_matrix(2)))
    assert row["forward_s_dense"] > 0 and row["forward_s_sparse"] > 0


def test_a_perturbed_sparse_weight_fails():
    row = bench_core.compare_storage(TOY, repeats=1, sabotage=_perturb)
    assert not row["ok"] and row["max_rel_diff"] > bench_core.STORAGE_TOLERANCE


def test_storage_patches_the_thresholds_and_restores_them():
    before = layers.sparse.SPARSE_MIN_NUMEL, layers.sparse.MODEL_SPARSE_MIN
    with bench_core.storage("sparse"):
        assert (layers.sparse.SPARSE_MIN_NUMEL, layers.sparse.MODEL_SPARSE_MIN) == bench_core.STORAGES["sparse"]
        assert sorted(_build(torch.device("cpu"))[0]._sparse) == ["W_1", "W_2"]
    with bench_core.storage("dense"):
        assert not _build(torch.device("cpu"))[0]._sparse
    assert (layers.sparse.SPARSE_MIN_NUMEL, layers.sparse.MODEL_SPARSE_MIN) == before
    with pytest.raises(ValueError, match="storage"):
        with bench_core.storage("csr"):
            pass


def test_a_bench_without_core_layers_is_skipped():
    plain = bench_core.Benchmark("toy: 8x8 matmul", lambda dev: torch.eye(8, device=dev), lambda m: m @ m)
    assert bench_core.compare_storage(plain, repeats=1) is None


def test_relative_gap_of_nested_results():
    a = {"x": torch.tensor([1.0, float("inf"), float("nan")]), "y": [torch.tensor([4.0])]}
    assert bench_core.relative_gap(a, a) == 0
    b = {"x": torch.tensor([1.0, float("inf"), float("nan")]), "y": [torch.tensor([2.0])]}
    assert bench_core.relative_gap(a, b) == pytest.approx(2.0 / 2.0)
    assert bench_core.relative_gap(torch.zeros(2), torch.zeros(3)) == math.inf


def test_storage_table_stores_every_row(tmp_path, monkeypatch):
    broken = bench_core.Benchmark("toy: raises", lambda dev: 1 / 0, lambda state: state)
    monkeypatch.setattr(bench_core, "EXTRA_CASES", [])
    monkeypatch.setattr(full, "STORAGE", tmp_path / "storage.json")
    rows = bench_core.storage_table({TOY.name: TOY, broken.name: broken}, store=True, repeats=1)
    stored = json.loads((tmp_path / "storage.json").read_text())
    assert [r["name"] for r in stored] == [TOY.name, broken.name] == [r["name"] for r in rows]
    assert stored[0]["ok"] and not stored[1]["ok"] and "ZeroDivisionError" in stored[1]["error"]
    assert {"date", "commit", "torch", "cpu"} <= set(stored[0])


ROWS = [{"name": "toy: big", "size": "full profile", "stored_dense": 33327632, "stored_sparse": 161240,
         "nonzero": 61090, "max_rel_diff": 1.3e-16, "forward_s_dense": 10.074, "forward_s_sparse": 0.513,
         "peak_mib_dense": 827.0, "peak_mib_sparse": 729.0, "repeats": 3, "ok": True,
         "date": "2026-11-26T22:00:00+00:00", "commit": "abc1234", "torch": "2.9.0", "cpu": "AMD EPYC, 1 threads"},
        {"name": "toy: broken", "size": "registered bench", "error": "ValueError: out of range", "ok": False}]


def test_page_section_renders_the_rows():
    text = "\n".join(full.storage_section(ROWS))
    assert "## Dense and sparse storage" in text
    big = "| toy: big | full profile | 33327632 | 161240 | 206.7 | 61090 | 10.074 | 0.513 | 19.6 | 1.3e-16 | ok |"
    for value in (big, "FAIL: `ValueError: out of range`", "2 constructions; 1 FAIL", "median of 3 forwards",
                  "AMD EPYC, 1 threads", "abc1234"):
        assert value in text
    assert "## Dense and sparse storage" in full.render_page({}, ROWS)


def test_page_section_says_when_storage_was_not_measured(tmp_path):
    assert full.stored_storage(tmp_path) is None
    assert "Not measured" in "\n".join(full.storage_section(None)) and "Not measured" in full.render_page({})


def test_the_storage_file_is_no_device_report(tmp_path):
    (tmp_path / "storage.json").write_text(json.dumps(ROWS))
    assert full.stored_reports(tmp_path) == {} and full.stored_storage(tmp_path) == ROWS
