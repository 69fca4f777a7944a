"""What the tests that draw share: every figure closed after each test, a figure as pixels."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    """Autouse in each module that imports it: no figure outlives its test."""
    yield
    plt.close("all")


def png(fig: Figure, **kwargs) -> np.ndarray:
    """The figure saved as a PNG at 40 dpi and read back: (height, width, 4) floats in [0, 1]."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=40, **kwargs)
    buffer.seek(0)
    return plt.imread(buffer)
