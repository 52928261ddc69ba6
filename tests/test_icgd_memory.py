"""Theorem 1's transformer written from its non-zero entries: large stacked heads are never dense.

Exempt from the core-sabotage check: it tests storage (sparse against dense entries, bytes, devices); tests/test_icgd.py checks the values.
"""
import json
import subprocess
import sys

import pytest
import torch

from tfbook import layers
from tfbook.icgd import build_transformer
from tfbook.icgd import verify as V

SIZE = dict(dx=8, dy=1, K=8, N=4, n=20, eta=0.2, activation="sigmoid", box=0.5)  # D = 287
GPU_SIZE = dict(dx=20, dy=1, K=16, N=6, n=20, L=5, eta=0.2, activation="sigmoid", box=0.5, M=256)  # D = 1627


def dense_scalars(model) -> int:
    """Scalars of one block's weights if all were stored dense (the L blocks share theirs)."""
    names = ("W_Q", "W_K", "W_V", "W_O", "W_1", "W_2")
    return sum(int(torch.tensor(layer._shape(name)).prod()) for layer in model.layers[:model.block_size]
               for name in names if name in layer._sparse or name in layer._parameters)


def built(threshold: int, **kwargs):
    """The model built with weights of at least ``threshold`` scalars stored sparse (when their CSR
    arrays take at most a quarter); ``threshold`` 2^62 stores every weight dense."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(layers.sparse, "SPARSE_MIN_NUMEL", threshold)
        mp.setattr(layers.sparse, "MODEL_SPARSE_MIN", max(threshold, layers.sparse.MODEL_SPARSE_MIN))
        return build_transformer(**SIZE, **kwargs)


@pytest.fixture(scope="module")
def models():
    """At a moderate size, the model with every sparse-enough weight stored sparse (a threshold of
    2^12 scalars instead of 2^21: what the GPU size gets with the real one) and the same stored dense."""
    return built(2**12, M=64, L=2), built(2**62, M=64, L=2)


def test_stored_size_is_far_below_the_dense_size(models):
    sparse, dense = models
    assert not any(layer._sparse for layer in dense.layers)
    assert all(layer._sparse for layer in sparse.layers if layer.kind == "attn")
    assert dense.counted_sizes().stored == dense_scalars(sparse)  # one block: the L blocks share tensors
    sizes = sparse.counted_sizes()
    assert sizes.nonzero == dense.counted_sizes().nonzero
    assert sizes.stored < 4 * sizes.nonzero and sizes.stored < dense_scalars(sparse) / 50


def test_the_real_threshold_stores_the_derivative_layer_sparse(monkeypatch):
    model = build_transformer(**SIZE, M=128, L=1)  # 3225 heads: W_Q and W_K hold 8.3 M scalars each
    assert sorted(model.layer("b0.deriv")._sparse) == ["W_K", "W_O", "W_Q", "W_V"]  # the model is large: all
    monkeypatch.setattr(layers.sparse, "MODEL_SPARSE_MIN", 2**62)  # the per-weight rule alone
    model = build_transformer(**SIZE, M=128, L=1)
    assert sorted(model.layer("b0.deriv")._sparse) == ["W_K", "W_Q"]
    assert not model.layer("b0.ewml1")._sparse  # small weights stay dense


def test_shared_blocks_store_their_index_entries_once():
    one, three = (built(2**12, M=64, L=L).counted_sizes() for L in (1, 3))
    assert one.stored == three.stored and one.nonzero == three.nonzero


def test_dense_accessors_and_outputs_equal_the_dense_construction(models):
    sparse, dense = models
    want, got = dense.state_dict(), sparse.state_dict()
    # no index written twice: the same values
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    a, b = sparse.layer("b1.deriv"), dense.layer("b1.deriv")
    assert torch.equal(a.heads[5].W_Q, b.heads[5].W_Q) and torch.equal(a.W_O, b.W_O)
    update = sparse.layer("b0.update"), dense.layer("b0.update")
    assert all(torch.equal(x, y) for x, y in zip(update[0].dense(), update[1].dense()))
    X, Y, x_query, w0 = V.random_prompt(dense, B=2, seed=3)
    ws, ws_dense = sparse.run(X, Y, x_query, w0), dense.run(X, Y, x_query, w0)
    assert float((ws - ws_dense).abs().max() / ws_dense.abs().max()) < 1e-12
    H = sparse.embed(X, Y, x_query, w0)
    for layer, twin in zip(sparse.layers[:sparse.block_size], dense.layers):
        out = twin(H)
        assert float((layer(H) - out).abs().max() / out.abs().max()) < 1e-12, layer.name
        H = out


def test_builds_on_the_requested_device():
    model = build_transformer(**SIZE, M=128, L=1, device="meta")
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert model.layer("b0.deriv").W_Q.shape == (3225, 9, 287)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="address-space limits are Linux's")
def test_the_gpu_size_builds_within_8_gib():
    """Dense, the GPU size's stacked heads need 22 GB (the derivative layer's W_Q alone 5.7 GB): built in a
    process limited to 8 GiB of address space, from entries, it stays far below."""
    code = ("import json, resource; resource.setrlimit(resource.RLIMIT_AS, (2**33, 2**33))\n"
            "from tfbook.icgd import build_transformer\n"
            f"m = build_transformer(**{GPU_SIZE!r})\n"
            "s = m.counted_sizes()\n"
            "peak = int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])\n"  # KiB, this program's own
            "print(json.dumps([s.stored, s.nonzero, peak,\n"
            "                  [[layer._shape(n) for n in ('W_Q', 'W_K', 'W_V', 'W_O', 'W_1', 'W_2')\n"
            "                    if n in layer._sparse or n in layer._parameters] for layer in m.layers]]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    stored, nonzero, peak_kib, shapes = json.loads(done.stdout.splitlines()[-1])
    dense = sum(int(torch.tensor(shape).prod()) for block in shapes[:16] for shape in block)  # one block
    assert dense > 2.5e9 and nonzero < stored < dense / 100 and peak_kib < 2**20  # under 1 GiB resident
