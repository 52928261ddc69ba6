"""The book's figure style: text-column width, readable fonts, thinned heat-map ticks."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from tfbook import plotting  # noqa: E402


def test_style_width_and_fonts():
    plotting.use_style()
    assert tuple(plt.rcParams["figure.figsize"]) == (plotting.TEXT_WIDTH, 4.0)
    assert min(plt.rcParams[k] for k in ("font.size", "xtick.labelsize", "ytick.labelsize", "legend.fontsize")) >= 10
    for ncols in (1, 2, 3):
        fig, _ = plotting.subplots(1, ncols)
        assert fig.get_size_inches()[0] == plotting.TEXT_WIDTH
        plt.close(fig)
    with pytest.raises(ValueError, match="figsize is set by subplots"):
        plotting.subplots(1, 2, figsize=(12, 3))


def test_big_heatmap_labels_every_kth_tick():
    plotting.use_style()
    fig, ax = plotting.subplots()
    labels = [f"slot{i}" for i in range(120)]
    plotting.heatmap(ax, torch.randn(120, 120), "W", xticklabels=labels, yticklabels=labels)
    shown = [t.get_text() for t in ax.get_xticklabels()]
    assert 2 <= len(shown) <= plotting.max_labels(ax, "x") and shown[0] == "slot0"
    assert len([t.get_text() for t in ax.get_yticklabels()]) <= plotting.max_labels(ax, "y")
    small, ax2 = plotting.subplots()
    plotting.heatmap(ax2, torch.randn(3, 4), xticklabels=list("abcd"))
    assert [t.get_text() for t in ax2.get_xticklabels()] == list("abcd")
    with pytest.raises(ValueError, match="xticklabels must have 4 entries"):
        plotting.heatmap(ax2, torch.randn(3, 4), xticklabels=list("abc"))
    plt.close("all")
