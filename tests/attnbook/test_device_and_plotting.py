"""default_device and the plotting helpers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import attnbook  # noqa: E402
from attnbook import default_device, plotting  # noqa: E402


def test_default_device_prefers_cuda_then_mps(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if hasattr(torch.backends, "mps"):
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert default_device() == torch.device("cpu")
    if hasattr(torch.backends, "mps"):
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
        assert default_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device() == torch.device("cuda")


def test_default_device_is_usable():
    assert torch.zeros(1, device=default_device()).device.type == default_device().type


def test_attention_heatmap_labels_and_scale():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    ax = plotting.attention_heatmap(weights, ["a", "b", "c"], ["w", "x", "y", "z"], title="t", annotate=True)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert ax.images[0].get_clim() == (0.0, 1.0)
    assert len(ax.texts) == 12  # one annotation per cell
    np.testing.assert_allclose(ax.images[0].get_array(), weights.numpy(), rtol=1e-6)
    plt.close("all")


def test_matrix_heatmap_signed_data_is_centred_and_masks_are_drawn():
    ax = plotting.matrix_heatmap(torch.tensor([[-1.0, 3.0], [0.5, -inf_value()]]))
    lo, hi = ax.images[0].get_clim()
    assert lo == -hi == -3.0
    assert ax.images[0].get_cmap().name == plotting.SIGNED_CMAP
    ax = plotting.matrix_heatmap(attnbook.causal_mask(3))
    assert ax.images[0].get_array().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    plt.close("all")


def inf_value():
    return float("inf")


def test_heatmap_errors():
    with pytest.raises(ValueError, match=r"2-D matrix, got shape \(2, 3, 4\)"):
        plotting.matrix_heatmap(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="got 2 row labels for a matrix with 3 rows"):
        plotting.attention_heatmap(torch.zeros(3, 3), ["a", "b"])
    plt.close("all")


def test_use_style_sets_the_course_style():
    with matplotlib.rc_context():  # the style is global: leave it to this test (other tests draw after it)
        plotting.use_style()
        assert matplotlib.rcParams["axes.spines.top"] is False


def test_distribution_bar():
    ax = plotting.distribution_bar(torch.tensor([0.2, 0.5, 0.3]), ["a", "b", "c"], title="p")
    assert [p.get_height() for p in ax.patches] == pytest.approx([0.2, 0.5, 0.3])
    assert ax.get_ylim() == (0.0, 1.0)
    with pytest.raises(ValueError, match=r"1-D vector, got shape \(2, 2\)"):
        plotting.distribution_bar(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="got 1 labels for 3 weights"):
        plotting.distribution_bar(torch.zeros(3), ["a"])
    plt.close("all")
