"""The diagrams of chapter 14 (linear attention): one computation in three forms, and the decay mask.

:func:`draw_three_forms` draws causal linear attention computed three ways that give the same
output: the **quadratic** form (the n × n matrix of query-key products, masked, times the values),
the **recurrent** form (one d_k × d_v state updated token by token) and the **chunkwise** form
(quadratic inside each chunk of C tokens, the state carried across chunks). :func:`chunk_layout`
is what it draws: which cells of the n × n matrix are blocked, computed inside a chunk, or reached
through the state.

:func:`draw_decay_mask` draws the 1-semiseparable mask of a decayed (gated) recurrence,
L_ij = a_{j+1} ⋯ a_i for j <= i, with one block below the diagonal framed: it has rank 1.
:func:`decay_mask_entries` is what it writes in the cells.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..validators import check_sizes
from .style import NOTE_SIZE, arrow, dark, highlight, light, matrix_block, new_diagram, text

#: the kinds of cell of the n × n matrix in :func:`chunk_layout`
BLOCKED, INSIDE, THROUGH_STATE = 0, 1, 2

#: what the three panels of :func:`draw_three_forms` are called, left to right
PANELS = ("quadratic", "recurrent", "chunkwise")

#: the cost lines under each panel (time; memory beyond the inputs and the output)
COSTS = {
    "quadratic": ("time ∝ n² d", "memory ∝ n²"),
    "recurrent": ("time ∝ n $d_k d_v$, n steps in order", "memory: one $d_k \\times d_v$ state"),
    "chunkwise": ("time ∝ n (C d + $d_k d_v$)", "memory ∝ C² + $d_k d_v$"),
}


def chunk_layout(n: int, chunk_size: int) -> dict[str, object]:
    """What the chunkwise panel of :func:`draw_three_forms` draws for ``n`` tokens in chunks of
    ``chunk_size`` (the last chunk shorter when it does not divide ``n``).

    Returns ``chunks``, the list of (start, stop) of each chunk, and ``kind``, an (n, n) int array
    indexed [query i, key j]: :data:`BLOCKED` where j > i, :data:`INSIDE` where j <= i in the same
    chunk (computed by the masked quadratic form of the chunk), :data:`THROUGH_STATE` where key j
    lies in an earlier chunk (its contribution reaches query i through the state).
    """
    check_sizes(n=n, chunk_size=chunk_size)
    starts = list(range(0, n, chunk_size))
    chunks = [(a, min(a + chunk_size, n)) for a in starts]
    chunk_of = np.arange(n) // chunk_size  # (n,)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    kind = np.where(j > i, BLOCKED, np.where(chunk_of[:, None] == chunk_of[None, :], INSIDE, THROUGH_STATE))
    return {"chunks": chunks, "kind": kind.astype(int)}


def _alt_three_forms(n: int, chunk_size: int, d_k: int, d_v: int, step: int, layout: dict) -> str:
    kind, chunks = layout["kind"], layout["chunks"]
    sizes = ", ".join(str(b - a) for a, b in chunks)
    return (
        f"Three panels, one computation: causal linear attention of {n} tokens. Left, the quadratic "
        f"form: an {n} by {n} grid of query-key products, queries as rows and keys as columns; the "
        f"{int((kind != BLOCKED).sum())} cells on and below the diagonal are kept and the "
        f"{int((kind == BLOCKED).sum())} above it are hatched as masked; below it, O = (Q K transposed, "
        f"times the mask M entrywise) V, time growing as n squared times d and memory as n squared. "
        f"Middle, the recurrent form: a column of the {n} tokens' keys and values, an arrow from token "
        f"{step + 1} into one {d_k} by {d_v} state S with a loop arrow for S_t = S_(t-1) + k_t transposed "
        f"v_t, and an arrow from the state to row {step + 1} of the output column, o_t = q_t S_t; "
        f"below it, time growing as n d_k d_v in n steps taken in order, and memory of one d_k by d_v "
        f"state. Right, the chunkwise form: the same {n} by {n} grid cut into {len(chunks)} chunks of "
        f"{sizes} tokens; the {int((kind == INSIDE).sum())} kept cells inside the triangles on the "
        f"diagonal are computed by the masked quadratic form of each chunk, the "
        f"{int((kind == THROUGH_STATE).sum())} cells in the blocks below them are shaded as reached "
        f"through the state, and beside the grid the states S after chunks 1 to {len(chunks) - 1} are "
        f"passed down from chunk to chunk; below it, time growing as n (C d + d_k d_v) and memory as "
        f"C squared plus d_k d_v."
    )


def draw_three_forms(n: int = 8, chunk_size: int = 3, *, d_k: int = 3, d_v: int = 3, step: int = 2) -> Figure:
    """Draw causal linear attention in its three forms (chapter 14's opening picture).

    Left, the quadratic form: the n × n matrix (Q Kᵀ) ⊙ M with the causal mask M, times V. Middle,
    the recurrent form: the tokens' keys and values enter one d_k × d_v state S one at a time
    (token ``step``, 0-based, is highlighted), and each output row is q_t S_t. Right, the chunkwise
    form: the same matrix cut into chunks of ``chunk_size`` tokens (the last one shorter when the
    size does not divide ``n``); the triangles inside the chunks are computed quadratically, the
    blocks below them through the state carried from chunk to chunk. At most 12 tokens.
    """
    check_sizes(n=n, chunk_size=chunk_size, d_k=d_k, d_v=d_v)
    if n > 12:
        raise ValueError(f"the diagram draws at most 12 tokens, got n = {n}")
    if d_k > 5 or d_v > 5:
        raise ValueError(f"the diagram draws a state of at most 5 x 5 cells, got d_k = {d_k}, d_v = {d_v}")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < n:
        raise ValueError(f"step must be a token index in [0, {n}), got {step!r}")
    layout = chunk_layout(n, chunk_size)
    kind, chunks = layout["kind"], layout["chunks"]
    cell = 0.26
    grid = n * cell
    width, height = 11.4, grid + 2.35
    fig, ax = new_diagram(width, height, alt=_alt_three_forms(n, chunk_size, d_k, d_v, step, layout))
    title_y, grid_y = height - 0.3, 1.25 + grid / 2  # the panels' titles; the grids' centre line
    titles = {
        "quadratic": "quadratic: all pairs at once",
        "recurrent": "recurrent: one token at a time",
        "chunkwise": f"chunkwise: chunks of C = {chunk_size}",
    }
    centres = {"quadratic": 1.85, "recurrent": 5.65, "chunkwise": 9.45}
    for name in PANELS:
        text(ax, (centres[name], title_y), titles[name], size=11, va="center")
        for k, line in enumerate(COSTS[name]):
            text(ax, (centres[name], 0.55 - 0.24 * k), line, size=NOTE_SIZE)
    for x in (3.75, 7.55):  # thin separators between the panels
        ax.plot([x, x], [0.2, height - 0.2], color=dark("neutral", 0.1), linewidth=0.6, linestyle=(0, (2, 3)))

    # left: the quadratic form
    quad = matrix_block(
        ax,
        (centres["quadratic"], grid_y),
        n,
        n,
        role="score",
        cell=cell,
        blocked=kind == BLOCKED,
        label=r"$QK^{\top} \odot M$",
        shape="n × n",
        label_side="top",
        shape_side="left",
    )
    text(ax, (centres["quadratic"], quad.y - 0.3), r"$O = (QK^{\top} \odot M)\,V$", size=10.5)

    # middle: the recurrent form
    tokens = matrix_block(
        ax,
        (4.35, grid_y),
        n,
        1,
        role="key",
        cell=cell,
        label=r"$k_t, v_t$",
        shape=None,
    )
    for t in range(n):
        text(ax, tokens.cell_center(t, 0), str(t + 1), size=7.5)
    state_cell = 0.3
    state = matrix_block(
        ax,
        (5.65, grid_y - 0.1),
        d_k,
        d_v,
        role="value",
        cell=state_cell,
        label="$S$",
        shape="$d_k \\times d_v$",
        label_side="bottom",
        shape_side="bottom",
    )
    outputs = matrix_block(ax, (6.95, grid_y), n, 1, role="output", cell=cell, label="$O$", shape=None)
    highlight(ax, tokens, rows=(step, step + 1))
    highlight(ax, outputs, rows=(step, step + 1))
    token_xy = (tokens.x + cell, tokens.cell_center(step, 0)[1])
    arrow(ax, token_xy, state.left, label=r"$+\,k_t^{\top} v_t$", label_offset=(0.1, 0.12))
    arrow(ax, state.right, (outputs.x, outputs.cell_center(step, 0)[1]), label=r"$q_t S_t$", label_offset=(0, 0.1))
    loop_y = state.y + state.height
    arrow(ax, (state.x + 0.1, loop_y), (state.x + state.width - 0.1, loop_y), bend=-1.1, label=None)
    text(ax, (5.65, loop_y + 0.62), r"$S_t = S_{t-1} + k_t^{\top} v_t$", size=10)
    text(ax, (6.95, outputs.y - 0.3), r"$o_t = q_t S_t$", size=10)

    # right: the chunkwise form
    chunked = matrix_block(
        ax,
        (centres["chunkwise"] - 0.35, grid_y),
        n,
        n,
        role="score",
        cell=cell,
        blocked=kind == BLOCKED,
        label=None,
    )
    for i in range(n):
        for j in range(n):
            if kind[i, j] == THROUGH_STATE:
                cx, cy = chunked.cell_center(i, j)
                ax.add_patch(
                    Rectangle(
                        (cx - cell / 2, cy - cell / 2),
                        cell,
                        cell,
                        facecolor=light("value", 0.55),
                        edgecolor="white",
                        linewidth=0.8,
                        zorder=1.5,
                        gid="through-state",
                    )
                )
    top = chunked.y + chunked.height
    for c, (a, b) in enumerate(chunks):  # frame each chunk's triangle block
        ax.add_patch(
            Rectangle(
                (chunked.x + a * cell, top - b * cell),
                (b - a) * cell,
                (b - a) * cell,
                facecolor="none",
                edgecolor=dark("score", 0.45),
                linewidth=1.5,
                zorder=2.5,
                gid=f"chunk:{c + 1}",
            )
        )
    state_x = chunked.x + chunked.width + 0.45
    previous = None
    for c, (_, b) in enumerate(chunks[:-1]):  # the state after chunk c + 1, passed to chunk c + 2
        y = top - b * cell
        box = matrix_block(ax, (state_x, y), 2, 2, role="value", cell=0.13, label=None)
        text(ax, (state_x + 0.2, y), f"$S_{{[{c + 1}]}}$", size=NOTE_SIZE, ha="left")
        if previous is not None:
            arrow(ax, previous.bottom, box.top, gap=0.02)
        previous = box
    text(ax, (chunked.x + chunked.width / 2, top + 0.12), "C × C triangles: quadratic", size=NOTE_SIZE, va="bottom")
    text(
        ax,
        (chunked.x + chunked.width / 2, chunked.y - 0.12),
        "shaded: earlier chunks, via the state",
        size=NOTE_SIZE,
        va="top",
        role="value",
    )
    return fig


def decay_mask_entries(n: int) -> list[list[str]]:
    """The text :func:`draw_decay_mask` writes in each cell of the n × n decay mask (1-based tokens):
    ``"1"`` on the diagonal, the product ``a_{j+1} ⋯ a_i`` below it (as mathtext), ``""`` above."""
    check_sizes(n=n)
    rows = []
    for i in range(1, n + 1):
        row = []
        for j in range(1, n + 1):
            if j > i:
                row.append("")
            elif j == i:
                row.append("1")
            else:
                row.append("$" + "".join(f"a_{{{t}}}" for t in range(j + 1, i + 1)) + "$")
        rows.append(row)
    return rows


def draw_decay_mask(n: int = 5, split: int = 3) -> Figure:
    """Draw the decay mask of a gated recurrence S_t = a_t S_{t-1} + k_tᵀ v_t (chapter 14).

    The n × n mask L with L_ij = a_{j+1} ⋯ a_i for j <= i (1 on the diagonal) and 0 above it (hatched),
    tokens numbered from 1; the block of rows ``split``..n and columns 1..``split`` - 1 is framed: every
    entry of it is (a_1 ⋯ a_i) / (a_1 ⋯ a_j), so it has rank 1, which is what 1-semiseparable means.
    Beside it, the same entries in log space. At most 6 tokens.
    """
    check_sizes(n=n, split=split)
    if n > 6:
        raise ValueError(f"the diagram draws at most 6 tokens, got n = {n}")
    if not 2 <= split <= n:
        raise ValueError(f"split must lie in [2, n] = [2, {n}] (the framed block's first row), got {split}")
    entries = decay_mask_entries(n)
    cell = 0.7
    grid = n * cell
    width, height = grid + 5.4, grid + 0.95
    alt = (
        f"An {n} by {n} matrix L, queries i = 1 to {n} as rows and keys j = 1 to {n} as columns. The "
        f"diagonal holds 1; each cell below it holds the product of the decays a between the key and the "
        f"query, a_(j+1) up to a_i, from single factors next to the diagonal to the {n - 1} factors "
        f"{' '.join(f'a{t}' for t in range(2, n + 1))} in the bottom-left corner; the cells above the "
        f"diagonal are hatched as zero. A dashed frame marks the block of rows {split} to {n} and columns "
        f"1 to {split - 1}. Text beside the matrix: L_ij = a_(j+1) ... a_i for j at most i and 0 above; the "
        f"same in log space, exp(G_i - G_j) with the cumulative sum G_i = log a_1 + ... + log a_i; and "
        f"the framed block has rank 1, each of its entries being (a_1 ... a_i) / (a_1 ... a_j): every "
        f"block below the diagonal does, which is what 1-semiseparable means."
    )
    fig, ax = new_diagram(width, height, alt=alt)
    x_centre, y_centre = 0.75 + grid / 2, 0.45 + grid / 2
    blocked = np.triu(np.ones((n, n), dtype=bool), k=1)
    shade = np.tril(np.ones((n, n)), k=0) * 0.0
    mask = matrix_block(
        ax, (x_centre, y_centre), n, n, role="weight", cell=cell, blocked=blocked, shade=shade, label=None
    )
    for i in range(n):
        for j in range(n):
            if entries[i][j]:
                factors = max(i - j, 1)
                text(ax, mask.cell_center(i, j), entries[i][j], size=10 if factors <= 2 else (9 if factors == 3 else 8))
        text(ax, (mask.x - 0.12, mask.cell_center(i, 0)[1]), f"i = {i + 1}", size=NOTE_SIZE, ha="right")
        text(ax, (mask.cell_center(0, i)[0], mask.y + mask.height + 0.12), f"j = {i + 1}", size=NOTE_SIZE, va="bottom")
    highlight(ax, mask, rows=(split - 1, n), cols=(0, split - 1))
    lx = mask.x + mask.width + 0.35
    top = mask.y + mask.height
    lines = [
        (r"$L_{ij} = a_{j+1} \cdots a_i$  for $j \leq i$,  $0$ above", 11),
        (r"$\quad\;\; = \exp(G_i - G_j)$,  $G_i = \log a_1 + \cdots + \log a_i$", 11),
        ("", 0),
        ("dashed frame: rows " + f"{split}–{n}, columns 1–{split - 1}", NOTE_SIZE),
        (r"entries $(a_1 \cdots a_i)\,/\,(a_1 \cdots a_j)$: rank 1", NOTE_SIZE + 1),
        ("every block below the diagonal has rank 1:", NOTE_SIZE),
        ("L is 1-semiseparable", NOTE_SIZE),
    ]
    y = top - 0.25
    for line, size in lines:
        if line:
            text(ax, (lx, y), line, size=size, ha="left")
        y -= 0.45 if size >= 10 else 0.32
    return fig


__all__ = [
    "BLOCKED",
    "COSTS",
    "INSIDE",
    "PANELS",
    "THROUGH_STATE",
    "chunk_layout",
    "decay_mask_entries",
    "draw_decay_mask",
    "draw_three_forms",
]
