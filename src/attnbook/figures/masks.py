"""Diagram of masks on the score grid: causal, padding, and both (chapter 2)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from matplotlib.figure import Figure

from ..core.masks import causal_mask, padding_mask
from .style import matrix_block, new_diagram, text


def default_masks(n: int = 5, length: int = 3) -> dict[str, np.ndarray]:
    """The three keep-masks of :func:`draw_masks`: causal, padding (``length`` real keys), both."""
    if not 1 <= length <= n:
        raise ValueError(f"length = {length} must lie between 1 and n = {n}")
    causal = causal_mask(n).numpy()  # (n, n), True where j <= i
    padding = padding_mask([length], n)[0].expand(n, n).numpy()  # (n, n), True where j < length
    return {"causal": causal, "padding": padding, "causal and padding": causal & padding}


_RULES = {
    "causal": r"$M_{ij} = [\,j \leq i\,]$",
    "padding": r"$M_{ij} = [\,j < L\,]$",
    "causal and padding": r"$M_{ij} = [\,j \leq i\,] \wedge [\,j < L\,]$",
}


def _keep(mask) -> np.ndarray:
    arr = mask.detach().to("cpu").numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    if arr.ndim != 2 or arr.dtype != bool:
        raise ValueError(f"each mask must be a boolean 2-D keep-mask, got {arr.dtype} {arr.shape}")
    return arr


def _blocked_region(keep: np.ndarray) -> str:
    """Where a keep-mask's blocked cells lie, in words, when they form a shape with a name: above the
    diagonal, the last columns, or both; otherwise nothing (the counts say the rest)."""
    n, m = keep.shape
    above = np.triu(np.ones((n, m), dtype=bool), 1)  # (n, m): True where j > i
    regions = {" (those above the diagonal)": above}
    for c in range(1, m):
        last = np.zeros((n, m), dtype=bool)
        last[:, m - c :] = True  # (n, m): the last c columns
        columns = "the last column" if c == 1 else f"the last {c} columns"
        regions[f" ({columns})"] = last
        regions[f" ({columns} and those above the diagonal)"] = last | above
    return next((words for words, blocked in regions.items() if np.array_equal(~keep, blocked)), "")


def draw_masks(
    masks: Mapping[str, np.ndarray | torch.Tensor] | None = None,
    *,
    n: int = 5,
    length: int = 3,
    rules: Mapping[str, str] | None = None,
) -> Figure:
    """Draw keep-masks on the score grid: allowed scores stay, blocked ones become -inf.

    mask_M(S)_ij = S_ij if M_ij else -inf

    ``masks`` maps a title to a boolean (n, m) keep-mask indexed [query, key] (row convention); by
    default :func:`default_masks` (causal, padding with ``length`` real keys, both). ``rules``
    maps a title to the formula written under its grid. Chapter 2, "The masked softmax".
    """
    if masks is None:
        masks = default_masks(n, length)
        rules = {
            **{title: rule + (f", $L = {length}$" if "L" in rule else "") for title, rule in _RULES.items()},
            **(rules or {}),
        }
    rules = dict(rules or {})
    panels = [(title, _keep(mask)) for title, mask in masks.items()]
    if not panels:
        raise ValueError("draw_masks needs at least one mask")
    cell, gap, left = 0.38, 0.85, 0.75
    rows = max(mask.shape[0] for _, mask in panels)
    widths = [mask.shape[1] * cell for _, mask in panels]
    width = left + sum(widths) + gap * (len(panels) - 1) + 0.45
    height = rows * cell + 1.75
    alt = "Score grids, one row per query i and one column per key j. " + " ".join(
        f"{title.capitalize()} mask: {int(mask.sum())} of {mask.size} scores kept, the other "
        f"{int((~mask).sum())}{_blocked_region(mask)} hatched and set to minus infinity."
        for title, mask in panels
    )
    fig, ax = new_diagram(width, height, alt=alt)
    x = left
    y_mid = 0.85 + rows * cell / 2
    for title, mask in panels:
        n_rows, n_cols = mask.shape
        block = matrix_block(
            ax, (x + n_cols * cell / 2, y_mid), n_rows, n_cols, role="score", cell=cell, blocked=~mask, label=None
        )
        for i in range(n_rows):
            for j in range(n_cols):
                cx, cy = block.cell_center(i, j)
                text(
                    ax,
                    (cx, cy),
                    r"$-\infty$"
                    if not mask[i, j]
                    else (rf"$s_{{{i}{j}}}$" if max(mask.shape) <= 10 else rf"$s_{{{i},{j}}}$"),
                    size=8,
                    role="score" if mask[i, j] else None,
                    zorder=3,
                )
        for i in range(n_rows):
            text(ax, (block.x - 0.1, block.cell_center(i, 0)[1]), str(i), size=8, ha="right")
        for j in range(n_cols):
            text(ax, (block.cell_center(0, j)[0], block.y + block.height + 0.08), str(j), size=8, va="bottom")
        text(ax, (block.center[0], block.y + block.height + 0.4), title, size=11, va="bottom")
        if title in rules:
            text(ax, (block.center[0], block.y - 0.12), rules[title], size=9.5, va="top")
        x += n_cols * cell + gap
    text(ax, (0.22, y_mid), "query $i$", rotation=90, size=9)
    text(ax, (left - 0.05, 0.85 + rows * cell + 0.12), "key $j$", size=9, ha="right", va="bottom")
    return fig
