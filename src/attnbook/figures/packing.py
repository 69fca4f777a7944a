"""Diagram of a packed row (chapter 12): documents one after the other, their ids, positions that
restart, ``cu_seqlens``, and the block-diagonal causal mask they give."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.colors as mcolors
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .style import INK, NOTE_SIZE, dark, matrix_block, new_diagram, text

#: one colour per document (Okabe-Ito colours), drawn as light tints; cycled when there are more documents
DOCUMENT_COLORS = ("#56B4E9", "#E69F00", "#CC79A7", "#009E73", "#F0E442", "#0072B2")

#: what the three kinds of cell of the mask mean, as the legend writes them
LEGEND = {
    "kept": "kept: the same document and j ≤ i",
    "across": "blocked: an earlier document (the plain causal mask would keep it)",
    "future": "blocked: a later key (j > i)",
}


def _tint(hex_color: str, amount: float = 0.55) -> str:
    rgb = np.array(mcolors.to_rgb(hex_color))
    return mcolors.to_hex(rgb + (1.0 - rgb) * amount)


def _check_lengths(lengths: Sequence[int]) -> list[int]:
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
        raise TypeError(f"lengths must be a sequence of ints, got {type(lengths).__name__}")
    values = list(lengths)
    for d, x in enumerate(values):
        if isinstance(x, bool) or not isinstance(x, int):
            raise TypeError(f"lengths must be ints, got lengths[{d}] = {x!r} ({type(x).__name__})")
    if not values or min(values) < 1:
        raise ValueError(f"lengths must be one or more positive document lengths, got {values}")
    if sum(values) > 20:
        raise ValueError(f"the diagram draws at most 20 tokens, got lengths {values} summing to {sum(values)}")
    return values


def packed_layout(lengths: Sequence[int]) -> dict[str, np.ndarray]:
    """What :func:`draw_packed_row` draws for documents of these ``lengths``: document ids (n,),
    restarted positions (n,), ``cu_seqlens`` (D + 1,), the document mask (n, n) and the plain causal
    mask (n, n), as numpy arrays (keep-masks indexed [query, key])."""
    values = _check_lengths(lengths)
    ids = np.repeat(np.arange(len(values)), values)  # (n,)
    cu_seqlens = np.concatenate([[0], np.cumsum(values)])  # (D + 1,)
    positions = np.arange(len(ids)) - cu_seqlens[ids]  # (n,): the offset inside each document
    causal = np.tril(np.ones((len(ids), len(ids)), dtype=bool))  # (n, n)
    document = causal & (ids[:, None] == ids[None, :])  # (n, n)
    return {"ids": ids, "positions": positions, "cu_seqlens": cu_seqlens, "document": document, "causal": causal}


def draw_packed_row(lengths: Sequence[int] = (4, 5, 3)) -> Figure:
    """Draw documents packed into one row and the block-diagonal causal mask they give (chapter 12).

    Along the top, the row of tokens (one colour per document) with each token's document id and its
    position restarted at each document; along the left, the same tokens as queries. The grid is the
    keep-mask, query i (row) and key j (column): a cell is kept, in its document's colour, when j <= i
    in the same document; the cells the plain causal mask would keep across documents are hatched
    dark; the later keys light. ``lengths`` are the documents' lengths (at most 20 tokens in all).
    """
    layout = packed_layout(lengths)
    ids, positions, cu = layout["ids"], layout["positions"], layout["cu_seqlens"]
    document, causal = layout["document"], layout["causal"]
    n, D = len(ids), len(cu) - 1
    cell = 0.3 if n <= 14 else 0.22
    left, top_band, legend_width = 1.75, 1.55, 3.1
    grid = n * cell
    width = left + grid + 0.35 + legend_width
    height = top_band + grid + 0.75
    across = causal & ~document
    names = [chr(ord("A") + d) for d in range(D)]
    alt = (
        f"A row of {n} tokens packed from {D} documents "
        + ", ".join(f"{name} ({L} tokens)" for name, L in zip(names, np.diff(cu).tolist()))
        + f", drawn along the top and again down the left side, one colour per document. Above the row, "
        f"the document ids {' '.join(map(str, ids.tolist()))} and the positions restarted at each document "
        f"{' '.join(map(str, positions.tolist()))}; beside it cu_seqlens = {cu.tolist()}. The grid is the "
        f"{n} by {n} keep-mask, queries as rows and keys as columns: {int(document.sum())} cells are kept, "
        f"in {D} triangular blocks along the diagonal, one per document; the {int(across.sum())} cells below "
        f"the diagonal but outside the blocks, which the plain causal mask would keep, are hatched dark as "
        f"blocked; the {int((~causal).sum())} cells above the diagonal are blocked as later keys."
    )
    fig, ax = new_diagram(width, height, alt=alt)
    x0, y_top = left, 0.45 + grid  # the grid's left edge and top edge
    block = matrix_block(
        ax, (x0 + grid / 2, 0.45 + grid / 2), n, n, role="score", cell=cell, blocked=~document, label=None
    )
    for i in range(n):
        for j in range(n):
            cx, cy = block.cell_center(i, j)
            corner = (cx - cell / 2, cy - cell / 2)
            if document[i, j]:
                face = _tint(DOCUMENT_COLORS[ids[i] % len(DOCUMENT_COLORS)])
                ax.add_patch(Rectangle(corner, cell, cell, facecolor=face, edgecolor="white", lw=0.8, zorder=1.5))
            elif across[i, j]:
                ax.add_patch(
                    Rectangle(
                        corner, cell, cell, facecolor="#9A9A9A", edgecolor="white", hatch="xxx", lw=0.8, zorder=1.5
                    )
                )
    for d in range(D):  # frame each document's block
        a, b = int(cu[d]), int(cu[d + 1])
        ax.add_patch(
            Rectangle(
                (x0 + a * cell, y_top - b * cell),
                (b - a) * cell,
                (b - a) * cell,
                facecolor="none",
                edgecolor=dark("neutral", 0.5),
                lw=1.3,
                zorder=2.5,
                gid=f"document:{names[d]}",
            )
        )
    # the row of tokens along the top (keys) and down the left (queries)
    strip = y_top + 0.12
    for j in range(n):
        color = DOCUMENT_COLORS[ids[j] % len(DOCUMENT_COLORS)]
        label = f"{names[ids[j]]}{positions[j] + 1}"
        ax.add_patch(
            Rectangle((x0 + j * cell, strip), cell, cell, facecolor=_tint(color, 0.3), edgecolor="white", lw=0.8)
        )
        text(ax, (x0 + (j + 0.5) * cell, strip + cell / 2), label, size=7.5 if cell >= 0.3 else 6.5)
        text(ax, (x0 + (j + 0.5) * cell, strip + cell + 0.12), str(ids[j]), size=NOTE_SIZE, va="center")
        text(ax, (x0 + (j + 0.5) * cell, strip + cell + 0.42), str(positions[j]), size=NOTE_SIZE, va="center")
        ax.add_patch(
            Rectangle(
                (x0 - 0.12 - cell, y_top - (j + 1) * cell),
                cell,
                cell,
                facecolor=_tint(color, 0.3),
                edgecolor="white",
                lw=0.8,
            )
        )
        text(ax, (x0 - 0.12 - cell / 2, y_top - (j + 0.5) * cell), label, size=7.5 if cell >= 0.3 else 6.5)
    text(ax, (x0 - 0.1, strip + cell + 0.12), "document id", size=NOTE_SIZE, ha="right")
    text(ax, (x0 - 0.1, strip + cell + 0.42), "position", size=NOTE_SIZE, ha="right")
    text(ax, (x0 - 0.1, strip + cell / 2), "keys j →", size=NOTE_SIZE, ha="right")
    text(ax, (x0 - 0.24 - cell, y_top - grid / 2), "queries i →", size=NOTE_SIZE, rotation=90, ha="center")
    # the legend and the variable-length layout, right of the grid
    lx = x0 + grid + 0.35
    text(ax, (lx, y_top + 0.6), "cu_seqlens = [" + ", ".join(map(str, cu.tolist())) + "]", size=10, ha="left")
    text(ax, (lx, y_top + 0.3), "one row, no padding", size=NOTE_SIZE, ha="left")
    keys = [
        (_tint(DOCUMENT_COLORS[0]), None, LEGEND["kept"]),
        ("#9A9A9A", "xxx", LEGEND["across"]),
        (_tint("#8A8A8A", 0.55), "////", LEGEND["future"]),
    ]
    y = y_top - 0.25
    for face, hatch, words in keys:
        ax.add_patch(Rectangle((lx, y - 0.1), 0.2, 0.2, facecolor=face, edgecolor=INK, lw=0.6, hatch=hatch))
        lines = _wrap(words, 34)
        for k, line in enumerate(lines):
            text(ax, (lx + 0.3, y - 0.2 * k), line, size=NOTE_SIZE, ha="left")
        y -= 0.2 * len(lines) + 0.3
    return fig


def _wrap(words: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in words.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + [line]


__all__ = ["DOCUMENT_COLORS", "LEGEND", "draw_packed_row", "packed_layout"]
