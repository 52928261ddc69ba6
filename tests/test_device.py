"""The profile decides the device: quick → CPU always (even with CUDA available), full → CUDA when present."""
import pytest
import torch

from tfbook import device


def test_profile_from_environment(monkeypatch):
    monkeypatch.setenv("TFBOOK_PROFILE", "full")
    assert device.profile() == "full" and device.pick(1, 2) == 2
    monkeypatch.setenv("TFBOOK_PROFILE", "Quick ")
    assert device.profile() == "quick" and device.pick(1, 2) == 1
    monkeypatch.setenv("TFBOOK_PROFILE", "huge")
    with pytest.raises(ValueError, match="TFBOOK_PROFILE must be one of"):
        device.current()


@pytest.mark.parametrize("cuda", [False, True])
def test_quick_is_cpu_and_full_follows_cuda(monkeypatch, cuda):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setenv("TFBOOK_PROFILE", "quick")
    p = device.current()
    assert p.name == "quick" and p.device == torch.device("cpu") and p.dtype == torch.float64
    assert device.default_device().type == "cpu"
    monkeypatch.setenv("TFBOOK_PROFILE", "full")
    expected = "cuda" if cuda else "cpu"
    assert device.current().device.type == expected and device.default_device().type == expected
    monkeypatch.delenv("TFBOOK_PROFILE")
    assert device.current().name == ("full" if cuda else "quick")
    assert device.default_device().type == expected


def test_describe_names_profile_device_and_dtype(monkeypatch):
    monkeypatch.setenv("TFBOOK_PROFILE", "quick")
    line = device.describe()
    assert line.startswith("profile: quick, device: cpu (CPU), dtype: float64")


def test_numerics_and_seeding():
    assert not torch.backends.cuda.matmul.allow_tf32
    device.seed_everything(3)
    a = torch.rand(3)
    device.seed_everything(3)
    assert torch.equal(a, torch.rand(3))
    with pytest.raises(ValueError, match="seed must be"):
        device.seed_everything(-1)


# --- the meta device: shapes without values, so CPU/device mixing fails here without a GPU ---------------

META = torch.device("meta")
# Functions that must read values, so cannot run on meta (checked on CUDA when a GPU is lent), with the reason.
NEEDS_VALUES = {
    "turing: palindrome transformer, T=64, batch 32":
        "autoregressive: each step's written symbol is decoded from the output to build the next token",
}


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _tensors(o)]
    return [t for o in getattr(out, "__dict__", {}).values() for t in _tensors(o)]


def _bench_cases():
    from tfbook.build import bench

    return bench.load_cases()  # the core's cases and every chapter's bench_cases()


@pytest.mark.parametrize("name", sorted(_bench_cases()))
def test_every_chapter_construction_runs_on_the_meta_device(name):
    case = _bench_cases()[name]
    if name in NEEDS_VALUES:
        with pytest.raises((NotImplementedError, RuntimeError)):  # still true: else take it off the list
            case.forward(case.build(META))
        return
    out = _tensors(case.forward(case.build(META)))
    assert out and all(t.device.type == "meta" for t in out), f"{name}: a result left the input's device"


def test_reference_functions_follow_their_input_to_the_meta_device():
    from tfbook.besov.estimation import hat_features
    from tfbook.besov.grids import weierstrass
    from tfbook.seq2seq import build_extractor, extract_reference, paper_forward
    from tfbook.seq2seq.reference import selection_reference

    X = torch.empty(2, 3, 22, dtype=torch.float64, device=META)
    weights = build_extractor([(1, 3), (0, -5)], 3, 5).paper_weights()  # on the CPU: the reference moves them
    outs = [paper_forward(weights, X, b) for b in ("circular", "zero")]
    outs += [extract_reference(X, [(1, 3), (0, -5)], b) for b in ("circular", "zero")]
    outs += list(selection_reference({(): 0.0, (0, 0): 1.0}, [[1], [2]], 2, X))
    outs += [hat_features(torch.empty(5, 2, dtype=torch.float64, device=META), [1, 2]),
             weierstrass(torch.empty(7, dtype=torch.float64, device=META), 0.5)]
    assert [tuple(t.shape) for t in outs] == [(2, 2, 22)] * 6 + [(5, 15), (7,)]
    assert all(t.device.type == "meta" for t in outs)
