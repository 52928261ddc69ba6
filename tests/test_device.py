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
