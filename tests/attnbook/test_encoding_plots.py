"""The positional-encoding figure helpers of attnbook.figures.plotting (chapter 5)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnbook import plotting, sinusoidal_encoding  # noqa: E402


def test_encoding_heatmap_uses_the_signed_unit_scale():
    P = sinusoidal_encoding(20, 8)
    ax = plotting.encoding_heatmap(P, title="P")
    image = ax.images[0]
    assert image.get_clim() == (-1.0, 1.0)
    assert image.get_cmap().name == plotting.SIGNED_CMAP
    assert ax.get_xlabel() == "dimension" and ax.get_ylabel() == "position" and ax.get_title() == "P"
    np.testing.assert_allclose(np.asarray(image.get_array()), P.numpy())
    plt.close("all")


def test_encoding_curves_draw_one_labelled_line_per_dimension():
    P = sinusoidal_encoding(30, 8)
    ax = plotting.encoding_curves(P, [0, 3, 7])
    assert len(ax.lines) == 3
    assert [line.get_label() for line in ax.lines] == ["dim 0", "dim 3", "dim 7"]
    np.testing.assert_allclose(ax.lines[1].get_ydata(), P[:, 3].numpy())
    np.testing.assert_allclose(ax.lines[1].get_xdata(), np.arange(30))
    plt.close("all")


@pytest.mark.parametrize("dims", [[8], [-1]])
def test_encoding_curves_reject_out_of_range_dimensions(dims):
    with pytest.raises(ValueError, match="out of range"):
        plotting.encoding_curves(sinusoidal_encoding(5, 8), dims)


def test_encoding_helpers_reject_non_matrices():
    with pytest.raises(ValueError, match="2-D"):
        plotting.encoding_heatmap(np.zeros(4))
