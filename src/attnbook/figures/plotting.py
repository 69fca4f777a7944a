"""Data plots shared by every chapter, in the course's one style (:mod:`attnbook.figures.style`).

Call :func:`use_style` once at the top of a chapter; then draw with :func:`attention_heatmap`
(weights with token labels), :func:`matrix_heatmap` (any matrix: masks, scores, encodings) and
:func:`mask_heatmap` (a boolean mask as 0/1 cells).
Each takes an optional ``ax`` and returns it, so figures with several panels are easy to compose.

Every figure drawn after :func:`use_style` carries, in the PNG it is saved as (the chapters'
outputs), the smallest size of its text in pixels of that PNG and every string it shows
(:func:`record_figure_text`): the website's tests check from them that figure text stays legible
on a phone and that no label shows raw TeX.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from .style import (  # noqa: F401  (the chapters call plotting.use_style() and read its colour maps)
    MIN_TEXT_PX_KEY,
    SIGNED_CMAP,
    STYLE,
    TEXTS_KEY,
    WEIGHTS_CMAP,
    record_figure_text,
    use_style,
)


def _to_numpy(matrix: torch.Tensor | np.ndarray, name: str) -> np.ndarray:
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().to("cpu")
        if matrix.dtype == torch.bool:
            matrix = matrix.to(torch.int64)
        elif matrix.dtype in (torch.float16, torch.bfloat16):
            matrix = matrix.float()
        matrix = matrix.numpy()
    matrix = np.asarray(matrix)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {matrix.shape}")
    return matrix


def _label_ticks(ax, labels: Sequence[str] | None, axis: str, size: int) -> None:
    if labels is None:
        return
    if len(labels) != size:
        raise ValueError(f"got {len(labels)} {axis} labels for a matrix with {size} {axis}s")
    if axis == "row":
        ax.set_yticks(range(size), labels)
    else:
        ax.set_xticks(range(size), labels, rotation=45 if max(map(len, labels), default=0) > 2 else 0)


def matrix_heatmap(
    matrix: torch.Tensor | np.ndarray,
    *,
    ax=None,
    title: str | None = None,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    cmap: str | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = False,
    colorbar: bool = True,
    fmt: str = "{:.2f}",
):
    """Draw a 2-D matrix as a heatmap, row 0 at the top, and return the axes.

    Signed data get the diverging map :data:`SIGNED_CMAP` centred at 0; non-negative data the
    sequential :data:`WEIGHTS_CMAP`. Boolean masks are drawn as 0/1. ``-inf`` entries (masked
    scores) are left blank.
    """
    data = _to_numpy(matrix, "matrix").astype(float)
    finite = data[np.isfinite(data)]
    if cmap is None:
        cmap = SIGNED_CMAP if finite.size and finite.min() < 0 else WEIGHTS_CMAP
    if cmap == SIGNED_CMAP and vmin is None and vmax is None and finite.size:
        bound = float(np.abs(finite).max()) or 1.0
        vmin, vmax = -bound, bound
    if ax is None:
        _, ax = plt.subplots()
    image = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    _label_ticks(ax, row_labels, "row", data.shape[0])
    _label_ticks(ax, col_labels, "column", data.shape[1])
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if annotate:
        lo, hi = image.get_clim()
        for (r, c), value in np.ndenumerate(data):
            if np.isfinite(value):
                dark = (value - lo) / ((hi - lo) or 1.0) < 0.5
                ax.text(
                    c,
                    r,
                    fmt.format(value),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if dark and cmap == WEIGHTS_CMAP else "black",
                )
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.85)
    return ax


def attention_heatmap(
    weights: torch.Tensor | np.ndarray,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax=None,
    title: str | None = None,
    annotate: bool = False,
    colorbar: bool = True,
):
    """Draw attention weights (n, m): one row per query, one column per key; return the axes.

    The colour scale is fixed to [0, 1] so that heatmaps of different examples are comparable.
    """
    return matrix_heatmap(
        weights,
        ax=ax,
        title=title,
        row_labels=query_labels,
        col_labels=key_labels,
        xlabel="key (attended to)",
        ylabel="query (attending)",
        cmap=WEIGHTS_CMAP,
        vmin=0.0,
        vmax=1.0,
        annotate=annotate,
        colorbar=colorbar,
    )


def mask_heatmap(
    mask: torch.Tensor | np.ndarray,
    *,
    ax=None,
    title: str | None = None,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    xlabel: str = "key",
    ylabel: str = "query",
):
    """Draw a boolean keep-mask (n, m) as cells marked 1 (may attend) or 0, without a colour bar;
    return the axes. Rows are queries and columns keys unless the labels say otherwise (chapter 2).
    """
    return matrix_heatmap(
        mask,
        ax=ax,
        title=title,
        row_labels=row_labels,
        col_labels=col_labels,
        xlabel=xlabel,
        ylabel=ylabel,
        cmap=WEIGHTS_CMAP,
        vmin=0.0,
        vmax=1.0,
        annotate=True,
        fmt="{:.0f}",
        colorbar=False,
    )


def distribution_bar(
    weights: torch.Tensor | np.ndarray,
    labels: Sequence[str] | None = None,
    *,
    ax=None,
    title: str | None = None,
    ylabel: str = "weight",
    color: str = "C0",
):
    """Draw one probability distribution (e.g. the weights of a single query) as bars; return the axes.

    The y-axis runs from 0 to 1 so that bar charts of different distributions are comparable.
    """
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().to("cpu", torch.float64).numpy()
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 1:
        raise ValueError(f"weights must be a 1-D vector, got shape {weights.shape}")
    if labels is not None and len(labels) != weights.shape[0]:
        raise ValueError(f"got {len(labels)} labels for {weights.shape[0]} weights")
    if ax is None:
        _, ax = plt.subplots()
    positions = np.arange(weights.shape[0])
    ax.bar(positions, weights, color=color)
    ax.set_xticks(positions, labels if labels is not None else [str(p) for p in positions])
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    return ax


def encoding_heatmap(
    encoding: torch.Tensor | np.ndarray,
    *,
    ax=None,
    title: str | None = None,
    colorbar: bool = True,
):
    """Draw a positional encoding (n_positions, d_model): one row per position, one column per
    dimension, on the fixed signed scale [-1, 1] of sines and cosines (chapter 5); return the axes."""
    return matrix_heatmap(
        encoding,
        ax=ax,
        title=title,
        xlabel="dimension",
        ylabel="position",
        cmap=SIGNED_CMAP,
        vmin=-1.0,
        vmax=1.0,
        colorbar=colorbar,
    )


def encoding_curves(
    encoding: torch.Tensor | np.ndarray,
    dims: Sequence[int],
    *,
    ax=None,
    title: str | None = None,
):
    """Plot columns ``dims`` of a positional encoding (n_positions, d_model) against the position
    (chapter 5), one labelled curve per dimension; return the axes."""
    data = _to_numpy(encoding, "encoding")
    for d in dims:
        if not 0 <= d < data.shape[1]:
            raise ValueError(f"dimension {d} is out of range for an encoding of shape {data.shape}")
    if ax is None:
        _, ax = plt.subplots()
    for d in dims:
        ax.plot(np.arange(data.shape[0]), data[:, d], label=f"dim {d}")
    ax.set_xlabel("position")
    ax.set_ylabel("value")
    ax.legend(loc="upper right", fontsize=8)
    if title:
        ax.set_title(title)
    return ax
