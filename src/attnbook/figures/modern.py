"""The diagram of chapter 9: query heads sharing key-value heads, and the window and the linear bias
that decide how much a query sees of the keys behind it.

Drawn from the package's own functions, so it stays in step with the code: which key-value head each
query head reads comes from running :func:`attnbook.heads.grouped_query.grouped_query_attention`
(each value head holds its own index, so each query head's output is the index of the head it
read), the window from :func:`attnbook.efficient.sliding_window.sliding_window_mask`, the bias from
:func:`attnbook.positions.alibi.alibi_bias` with slope 1 (the bias of a head in units of its slope).
Narrow enough (4.7 inches at the default sizes) to be read on a phone without scrolling.
"""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..core.masks import causal_mask
from ..efficient.sliding_window import sliding_window_mask
from ..heads.grouped_query import grouped_query_attention
from ..positions.alibi import alibi_bias
from ..validators import check_sizes
from .style import INK, NOTE_SIZE, PANEL_EDGE, dark, highlight, light, matrix_block, new_diagram, text

#: the three ways of sharing, top to bottom: the name and the number of key-value heads (None: as given)
SCHEMES = ("multi-head", "grouped-query", "multi-query")

#: size of the text inside the head boxes and of the grids' numbers (points)
BOX_SIZE = 10.0
#: depth of the fills of neighbouring groups (alternating, so that neighbouring groups differ)
GROUP_TINTS = (0.72, 0.45)


def _check(num_heads: int, kv_heads: int, n: int, window: int) -> None:
    check_sizes(num_heads=num_heads, kv_heads=kv_heads, n=n, window=window)
    if not 4 <= num_heads <= 8:
        raise ValueError(f"num_heads = {num_heads}: the diagram draws between 4 and 8 query heads")
    if not 1 < kv_heads < num_heads or num_heads % kv_heads:
        raise ValueError(
            f"kv_heads = {kv_heads} must divide num_heads = {num_heads} and lie strictly between 1 and "
            f"{num_heads}: the grouped-query row must differ from the multi-query and multi-head rows"
        )
    if not 2 <= n <= 8:
        raise ValueError(f"n = {n}: the grids draw between 2 and 8 queries and keys")
    if window > n:
        raise ValueError(f"window = {window} is larger than n = {n}: it would be the causal mask")


def head_sharing(num_heads: int, kv_heads: int) -> list[int]:
    """The key-value head (from 0) that each of ``num_heads`` query heads reads under grouped-query
    attention with ``kv_heads`` key-value heads, read off :func:`grouped_query_attention` itself:
    value head c holds the number c, so query head h's output is the index of the head it read."""
    check_sizes(num_heads=num_heads, kv_heads=kv_heads)
    if num_heads % kv_heads:
        raise ValueError(f"kv_heads = {kv_heads} must divide num_heads = {num_heads}")
    query = torch.zeros(num_heads, 1, 1, dtype=torch.float64)  # (H_q, n = 1, d_k = 1)
    key = torch.zeros(kv_heads, 1, 1, dtype=torch.float64)  # (H_kv, m = 1, d_k = 1)
    value = torch.arange(kv_heads, dtype=torch.float64).reshape(kv_heads, 1, 1)  # (H_kv, m = 1, d_v = 1)
    out, _ = grouped_query_attention(query, key, value)  # (H_q, 1, 1): one key, weight 1
    read = out.reshape(num_heads)  # (H_q,)
    return [int(round(c)) for c in read.tolist()]


def modern_layout(num_heads: int = 8, kv_heads: int = 2, n: int = 6, window: int = 3) -> dict[str, object]:
    """What :func:`draw_modern_attention` draws: ``"sharing"``, for each scheme of :data:`SCHEMES`
    the key-value head of each query head (:func:`head_sharing`); ``"window"``, the (n, n) causal
    sliding-window keep-mask; ``"causal"``, the (n, n) causal keep-mask; ``"alibi"``, the (n, n)
    ALiBi bias with slope 1 (``-(i - j)`` where kept by the causal mask, NaN elsewhere)."""
    _check(num_heads, kv_heads, n, window)
    causal = causal_mask(n).numpy()  # (n, n), True where j <= i
    bias = alibi_bias(n, n, torch.ones(1, dtype=torch.float64))[0].numpy()  # (n, n): -|i - j|
    return {
        "sharing": {
            "multi-head": head_sharing(num_heads, num_heads),
            "grouped-query": head_sharing(num_heads, kv_heads),
            "multi-query": head_sharing(num_heads, 1),
        },
        "window": sliding_window_mask(n, window).numpy(),  # (n, n), True where 0 <= i - j < window
        "causal": causal,
        "alibi": np.where(causal, bias, np.nan),  # (n, n)
    }


def _keys(first: int, last: int) -> str:
    """'keys 3, 4 and 5', 'key 5', 'keys 0 to 6'."""
    if first == last:
        return f"key {last}"
    if last - first <= 3:
        names = [str(j) for j in range(first, last + 1)]
        return "keys " + ", ".join(names[:-1]) + " and " + names[-1]
    return f"keys {first} to {last}"


def _group_words(sharing: list[int]) -> str:
    """'q1 to q4 read k1 v1, q5 to q8 read k2 v2'."""
    parts = []
    for c in sorted(set(sharing)):
        heads = [h + 1 for h, kv in enumerate(sharing) if kv == c]
        parts.append(f"q{heads[0]} to q{heads[-1]} read k{c + 1} v{c + 1}")
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


def _alt(layout: dict[str, object], num_heads: int, kv_heads: int, n: int, window: int) -> str:
    g = num_heads // kv_heads
    kept = int(layout["window"].sum())
    return (
        f"Top, three rows of {num_heads} query heads, boxes q1 to q{num_heads}, each joined by a line to "
        f"the key-value head it reads, drawn as a key box k beside a value box v. Multi-head attention: "
        f"{num_heads} key-value heads, k1 v1 to k{num_heads} v{num_heads}, one under each query head. "
        f"Grouped-query attention: {kv_heads} key-value heads, each shared by {g} consecutive query heads "
        f"({_group_words(layout['sharing']['grouped-query'])}). Multi-query attention: one key-value head, "
        f"k1 v1, shared by all {num_heads}. Bottom, two {n} by {n} grids with queries i = 0 to {n - 1} down "
        f"the side and keys j across the top. Left, a causal sliding window of w = {window}: each query keeps "
        f"itself and the {window - 1} key{'s' if window != 2 else ''} before it, {kept} cells in a band "
        f"along the diagonal, and the other {n * n - kept} are hatched as blocked; the row of query {n - 1} "
        f"is framed, keeping {_keys(n - window, n - 1)}. Right, the ALiBi bias added to one head's scores in "
        f"units of its slope mu: 0 on the diagonal, -1 one key back, down to -{n - 1} in the bottom left "
        f"corner, darker the further back the key; the {n * (n - 1) // 2} cells above the diagonal are "
        f"hatched as masked."
    )


def draw_modern_attention(num_heads: int = 8, kv_heads: int = 2, n: int = 6, window: int = 3) -> Figure:
    """Query heads sharing key-value heads, a sliding window and ALiBi's linear bias (chapter 9).

    Top, three rows: multi-head attention (``num_heads`` key-value heads), grouped-query attention
    (``kv_heads`` key-value heads, each shared by ``num_heads / kv_heads`` consecutive query heads)
    and multi-query attention (one), each query head joined by a line to the key-value head it
    reads. Bottom, two ``n`` × ``n`` grids of scores (query i down, key j across): the causal
    sliding-window keep-mask of width ``window``, with the last query's row framed, and the ALiBi
    bias ``-(i - j)`` of a head in units of its slope, the keys after the query masked.
    """
    layout = modern_layout(num_heads, kv_heads, n, window)
    box, gap = 0.44, 0.06  # a query head's box and the space between two
    heads_width = num_heads * box + (num_heads - 1) * gap
    cell, grid_gap, index_w = 0.26, 0.4, 0.22  # the grids' cells, the space between them, their row numbers
    grid = n * cell
    grids_width = 2 * (index_w + grid) + grid_gap
    width = max(heads_width, grids_width) + 0.6
    row_h = 1.3  # one scheme: title, query boxes, lines, key-value boxes
    grids_h = 0.35 + 0.25 + grid + 0.55  # titles, column numbers, the grid, the notes below
    height = 0.2 + 3 * row_h + 0.15 + grids_h + 0.1
    fig, ax = new_diagram(width, height, alt=_alt(layout, num_heads, kv_heads, n, window))

    x_heads = (width - heads_width) / 2
    counts = {"multi-head": num_heads, "grouped-query": kv_heads, "multi-query": 1}
    for r, scheme in enumerate(SCHEMES):
        sharing = layout["sharing"][scheme]
        kv = counts[scheme]
        top = height - 0.2 - r * row_h
        title = f"{scheme}: {num_heads} query heads, {kv} key-value head{'s' if kv > 1 else ''}"
        text(ax, (x_heads, top - 0.12), title, size=BOX_SIZE, ha="left", weight="bold")
        y_q = top - 0.3 - 0.14  # centre of the query boxes
        y_kv = y_q - 0.14 - 0.36 - 0.14  # centre of the key-value boxes
        centres = {}
        for c in range(kv):  # each key-value head under the middle of the query heads that read it
            readers = [h for h, read in enumerate(sharing) if read == c]
            x_c = x_heads + (readers[0] + readers[-1]) / 2 * (box + gap) + box / 2
            centres[c] = x_c
            tint = GROUP_TINTS[c % 2]
            for k, (role, name) in enumerate((("key", "k"), ("value", "v"))):
                x0 = x_c - box / 2 + k * box / 2
                ax.add_patch(
                    Rectangle(
                        (x0, y_kv - 0.14),
                        box / 2,
                        0.28,
                        facecolor=light(role, tint),
                        edgecolor=dark(role),
                        linewidth=1.1,
                        zorder=2,
                        gid=f"{role}:{scheme}:{c + 1}",
                    )
                )
                text(ax, (x0 + box / 4, y_kv), f"{name}{c + 1}", role=role, size=BOX_SIZE, zorder=3)
        for h, c in enumerate(sharing):
            x_h = x_heads + h * (box + gap) + box / 2
            ax.add_patch(
                Rectangle(
                    (x_h - box / 2, y_q - 0.14),
                    box,
                    0.28,
                    facecolor=light("query", GROUP_TINTS[c % 2]),
                    edgecolor=dark("query"),
                    linewidth=1.1,
                    zorder=2,
                    gid=f"query:{scheme}:{h + 1}",
                )
            )
            text(ax, (x_h, y_q), f"q{h + 1}", role="query", size=BOX_SIZE, zorder=3)
            (line,) = ax.plot([x_h, centres[c]], [y_q - 0.14, y_kv + 0.14], color=INK, linewidth=1.1, zorder=1)
            line.set_gid(f"reads:{scheme}:{h + 1}:{c + 1}")

    y_sep = height - 0.2 - 3 * row_h - 0.02
    ax.plot([0.3, width - 0.3], [y_sep, y_sep], color=PANEL_EDGE, linewidth=1.0)
    x_grids = (width - grids_width) / 2
    top = y_sep - 0.15  # upper edge of the grids' titles
    y_grid = top - 0.35 - 0.25 - grid / 2  # centre of the grids
    window_mask, causal, bias = layout["window"], layout["causal"], layout["alibi"]
    distance = np.where(causal, -np.nan_to_num(bias), 0.0)  # (n, n): i - j where kept
    panels = (
        ("window", f"sliding window, w = {window}", window_mask, None),
        ("alibi", "ALiBi bias, in units of \u03bc", causal, distance / max(n - 1, 1)),
    )
    for p, (name, title, keep, shade) in enumerate(panels):
        x0 = x_grids + index_w + p * (index_w + grid + grid_gap)  # the grid's left edge
        block = matrix_block(
            ax,
            (x0 + grid / 2, y_grid),
            n,
            n,
            role="score",
            cell=cell,
            blocked=~keep,
            shade=np.zeros((n, n)) + 0.25 if shade is None else 0.1 + 0.7 * shade,
            label=name,
            label_side=None,
            shape_side=None,
        )
        text(ax, (x0 + grid / 2, top - 0.17), title, size=BOX_SIZE, weight="bold")
        for i in range(n):  # query numbers down the left, key numbers across the top
            text(ax, (x0 - 0.06, block.cell_center(i, 0)[1]), str(i), size=NOTE_SIZE, ha="right")
            text(ax, (block.cell_center(0, i)[0], block.y + grid + 0.1), str(i), size=NOTE_SIZE, va="bottom")
        if name == "alibi":
            for i in range(n):
                for j in range(i + 1):
                    value = int(round(bias[i, j]))
                    words = "0" if value == 0 else f"\u2212{-value}"
                    text(ax, block.cell_center(i, j), words, size=NOTE_SIZE, zorder=3)
            text(ax, (x0 + grid / 2, block.y - 0.12), "added: \u2212\u03bc (i \u2212 j)", size=NOTE_SIZE, va="top")
        else:
            highlight(ax, block, rows=(n - 1, n), cols=(n - window, n))
            text(ax, (x0 + grid / 2, block.y - 0.12), f"query {n - 1} sees {_keys(n - window, n - 1)}", va="top")
    text(ax, (width / 2, block.y - 0.36), "rows: query i, columns: key j; hatched: blocked", va="top")
    return fig


__all__ = ["GROUP_TINTS", "SCHEMES", "draw_modern_attention", "head_sharing", "modern_layout"]
