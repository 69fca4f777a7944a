"""Diagrams of chapter 13: the cache of one token under each attention scheme, drawn to scale, and
StreamingLLM's cache of sink tokens and a rolling window.

Both are drawn from the package's own functions, so they stay in step with the code: the sizes from
:func:`attnbook.heads.cache_accounting.cache_numbers_per_token`, the kept keys and their positions
from :func:`attnbook.efficient.streaming.streaming_mask` and
:func:`attnbook.efficient.streaming.streaming_positions`.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..efficient.streaming import streaming_mask, streaming_positions
from ..heads.cache_accounting import cache_numbers_per_token
from ..validators import check_sink_window, check_sizes
from .style import INK, NOTE_SIZE, dark, light, new_diagram, text

#: the fill role of each kind of cached number
PARTS = {"key": "key", "value": "value", "latent": "output", "rotary key": "weight"}

#: what each part means, as the legend writes it
PART_LEGEND = {
    "key": "key",
    "value": "value",
    "latent": "latent ($d_c$ numbers)",
    "rotary key": "rotary key ($d_R$ numbers)",
}


def cache_layout(
    num_heads: int = 128, kv_heads: int = 8, d_head: int = 128, d_latent: int = 512, d_rope: int = 64, unit: int = 64
) -> dict[str, dict[str, object]]:
    """What :func:`draw_cache_per_token` draws: for each scheme, its numbers per token and layer
    (:func:`~attnbook.heads.cache_accounting.cache_numbers_per_token`, keys and values of width
    ``d_head``), the heads it stores and, per head, the squares of ``unit`` numbers of each part.

    Returns ``{scheme: {"numbers": int, "heads": int, "parts": [(part, squares), ...]}}`` for
    ``"multi-head"``, ``"grouped-query"``, ``"multi-query"`` and ``"latent"``.
    """
    check_sizes(num_heads=num_heads, kv_heads=kv_heads, d_head=d_head, d_latent=d_latent, d_rope=d_rope, unit=unit)
    if num_heads % kv_heads:
        raise ValueError(f"kv_heads = {kv_heads} must divide num_heads = {num_heads}")
    for name, width in (("d_head", d_head), ("d_latent", d_latent), ("d_rope", d_rope)):
        if width % unit:
            raise ValueError(f"{name} = {width} must be a multiple of unit = {unit}: each square is {unit} numbers")
    pair = [("key", d_head // unit), ("value", d_head // unit)]
    layout = {
        "multi-head": {"heads": num_heads, "parts": pair},
        "grouped-query": {"heads": kv_heads, "parts": pair},
        "multi-query": {"heads": 1, "parts": pair},
        "latent": {"heads": 1, "parts": [("latent", d_latent // unit), ("rotary key", d_rope // unit)]},
    }
    numbers = {
        "multi-head": cache_numbers_per_token("multi_head", num_heads=num_heads, d_head=d_head),
        "grouped-query": cache_numbers_per_token("grouped_query", kv_heads=kv_heads, d_head=d_head),
        "multi-query": cache_numbers_per_token("multi_query", d_head=d_head),
        "latent": cache_numbers_per_token("latent", d_latent=d_latent, d_rope=d_rope),
    }
    for scheme, entry in layout.items():
        entry["numbers"] = numbers[scheme]
        squares = entry["heads"] * sum(count for _, count in entry["parts"])
        assert squares * unit == numbers[scheme], scheme  # drawn to scale: one square is `unit` numbers
    return layout


def draw_cache_per_token(
    num_heads: int = 128,
    kv_heads: int = 8,
    d_head: int = 128,
    d_latent: int = 512,
    d_rope: int = 64,
    *,
    unit: int = 64,
    cell: float = 0.1,
) -> Figure:
    """What one token leaves in one layer's cache under four schemes, drawn to scale (chapter 13).

    One square is ``unit`` numbers; each stored head is a column of squares, its key above its
    value. Multi-head attention stores ``num_heads`` heads, grouped-query attention ``kv_heads``,
    multi-query attention one; latent attention stores the latent (``d_latent``) and the rotary key
    (``d_rope``). The defaults are DeepSeek-V3's latent (512 + 64) against heads of width 128 with
    its 128 query heads, and 8 key-value heads for the grouped scheme (as in Llama 3.1 405B).
    """
    layout = cache_layout(num_heads, kv_heads, d_head, d_latent, d_rope, unit)
    per_row = {"multi-head": min(32, num_heads), "grouped-query": kv_heads, "multi-query": 1, "latent": 1}
    gap_col, gap_head = 0.02, 0.06  # between the columns of one row of heads, between rows of heads
    shapes = {}
    for scheme, entry in layout.items():
        column = sum(count for _, count in entry["parts"])  # squares per head
        rows_of_heads = math.ceil(entry["heads"] / per_row[scheme])
        shapes[scheme] = (
            per_row[scheme] * cell + (per_row[scheme] - 1) * gap_col,
            rows_of_heads * column * cell + (rows_of_heads - 1) * gap_head,
        )
    margin, between, bottom, top = 0.35, 0.55, 1.05, 0.7
    width = 2 * margin + sum(max(w, 1.25) for w, _ in shapes.values()) + 3 * between
    height = bottom + max(h for _, h in shapes.values()) + top
    latent = layout["latent"]["numbers"]
    alt = (
        f"The numbers one token leaves in one layer's cache under four schemes, drawn to scale, one small "
        f"square for every {unit} numbers, each stored head a column of squares with its key above its value. "
        f"Multi-head attention: a block of {num_heads} columns in rows of {per_row['multi-head']}, "
        f"{layout['multi-head']['numbers']:,} numbers. "
        f"Grouped-query attention with {kv_heads} key-value heads: {kv_heads} columns, "
        f"{layout['grouped-query']['numbers']:,} numbers. Multi-query attention: one column, "
        f"{layout['multi-query']['numbers']:,} numbers. Latent attention: one column of {d_latent // unit} "
        f"squares of latent and {d_rope // unit} of rotary key, {latent:,} numbers, "
        f"1/{layout['multi-head']['numbers'] / latent:.0f} of the multi-head block."
    )
    fig, ax = new_diagram(width, height, alt=alt)
    text(
        ax,
        (width / 2, height - 0.3),
        f"cached per token and layer, to scale: one square = {unit} numbers",
        size=11,
    )
    x = margin
    names = {
        "multi-head": f"multi-head\n{num_heads} heads × ({d_head} + {d_head})",
        "grouped-query": f"grouped-query\n{kv_heads} heads × ({d_head} + {d_head})",
        "multi-query": f"multi-query\n1 head: {d_head} + {d_head}",
        "latent": f"latent\n{d_latent} + {d_rope}",
    }
    for scheme, entry in layout.items():
        w, h = shapes[scheme]
        slot = max(w, 1.25)
        x0 = x + (slot - w) / 2
        column = sum(count for _, count in entry["parts"])
        for head in range(entry["heads"]):
            r, c = divmod(head, per_row[scheme])
            cx = x0 + c * (cell + gap_col)
            cy = bottom + h - r * (column * cell + gap_head)  # the top of this head's column
            squares = [part for part, count in entry["parts"] for _ in range(count)]
            for k, part in enumerate(squares):
                role = PARTS[part]
                ax.add_patch(
                    Rectangle(
                        (cx, cy - (k + 1) * cell),
                        cell,
                        cell,
                        facecolor=light(role, 0.35),
                        edgecolor=dark(role),
                        linewidth=0.4,
                        gid=f"square:{scheme}:{part}",
                    )
                )
        text(ax, (x + slot / 2, bottom - 0.12), names[scheme], size=NOTE_SIZE, va="top")
        text(
            ax,
            (x + slot / 2, bottom - 0.62),
            f"{entry['numbers']:,} numbers",
            size=NOTE_SIZE,
            va="top",
            fontweight="bold",
        )
        x += slot + between
    # the legend, top right, under the title
    lx, ly = width - margin - 2.0, height - 0.65
    for k, part in enumerate(PART_LEGEND):
        role = PARTS[part]
        y = ly - 0.22 * k
        ax.add_patch(Rectangle((lx, y - 0.06), 0.12, 0.12, facecolor=light(role, 0.35), edgecolor=dark(role), lw=0.6))
        text(ax, (lx + 0.2, y), PART_LEGEND[part], size=NOTE_SIZE, ha="left")
    return fig


#: the kinds of cell of the streaming diagram, as its legend writes them
STREAM_LEGEND = {
    "sink": "sink token: kept for ever",
    "window": "rolling window: the most recent tokens",
    "evicted": "evicted: left the window",
    "future": "later token (j > i)",
}
_STREAM_FILL = {"sink": light("weight", 0.45), "window": light("key", 0.55)}


def draw_streaming_cache(n: int = 12, num_sinks: int = 2, window: int = 6, *, cell: float = 0.34) -> Figure:
    """StreamingLLM's cache over a stream of n tokens, decoded one at a time (chapter 13).

    Row i is the step that decodes token i, column j a token of the stream. A kept cell holds the
    position the key carries inside the cache at that step (:func:`streaming_positions`): the
    ``num_sinks`` first tokens (their columns in the sink colour) and the most recent
    ``window - num_sinks`` (the window colour), positions 0 to L - 1 in the order of the stream.
    Cells of tokens that have left the window are hatched dark; later tokens are blank.
    """
    check_sink_window(window, num_sinks)
    check_sizes(n=n)
    if n > 24:
        raise ValueError(f"the diagram draws at most 24 tokens, got n = {n}")
    keep = streaming_mask(n, num_sinks, window).numpy()  # (n, n)
    positions = streaming_positions(n, num_sinks, window).numpy()  # (n, n)
    left, top_band, legend_width = 1.0, 0.95, 3.0
    grid = n * cell
    width = left + grid + 0.4 + legend_width
    height = top_band + grid + 0.45
    x0, y_top = left, 0.45 + grid
    below = np.tril(np.ones((n, n), dtype=bool), -1)  # (n, n): j < i
    evicted = int((below & ~keep).sum())  # earlier tokens no longer in the cache
    sinks = (
        f"The first {num_sinks} columns are kept in every row as sink tokens, and their positions stay 0 to "
        f"{num_sinks - 1} while their distance in the stream grows; the other kept cells"
        if num_sinks
        else "With no sink tokens, the kept cells"
    )
    alt = (
        f"A grid of {n} rows, the steps that decode tokens 0 to {n - 1}, by {n} columns, the tokens of the stream, "
        f"for a cache of {window} tokens with {num_sinks} sink tokens. In each row the kept tokens hold the "
        f"position they carry inside the cache, 0 to at most {window - 1} in stream order. {sinks} form a band "
        f"of the {window - num_sinks} most recent tokens along the diagonal. From row {window} on, the {evicted} "
        f"cells of tokens that have left the window are hatched as evicted; cells above the diagonal are blank."
    )
    fig, ax = new_diagram(width, height, alt=alt)
    for i in range(n):
        for j in range(n):
            corner = (x0 + j * cell, y_top - (i + 1) * cell)
            if keep[i, j]:
                kind = "sink" if j < num_sinks else "window"
                ax.add_patch(
                    Rectangle(
                        corner, cell, cell, facecolor=_STREAM_FILL[kind], edgecolor="white", lw=0.8, gid=f"cell:{kind}"
                    )
                )
                text(ax, (corner[0] + cell / 2, corner[1] + cell / 2), str(int(positions[i, j])), size=8.5)
            elif j < i:
                ax.add_patch(
                    Rectangle(
                        corner,
                        cell,
                        cell,
                        facecolor="#9A9A9A",
                        edgecolor="white",
                        hatch="xxx",
                        lw=0.8,
                        gid="cell:evicted",
                    )
                )
            elif j > i:
                ax.add_patch(
                    Rectangle(corner, cell, cell, facecolor="#EDECE8", edgecolor="white", lw=0.8, gid="cell:future")
                )
    ax.add_patch(Rectangle((x0, y_top - grid), grid, grid, facecolor="none", edgecolor=INK, lw=1.0))
    for j in range(n):  # the stream along the top
        text(ax, (x0 + (j + 0.5) * cell, y_top + 0.15), str(j), size=NOTE_SIZE)
    for i in range(n):
        text(ax, (x0 - 0.1, y_top - (i + 0.5) * cell), str(i), size=NOTE_SIZE, ha="right")
    text(ax, (x0 + grid / 2, y_top + 0.45), "token j of the stream →", size=NOTE_SIZE)
    text(ax, (x0 - 0.55, y_top - grid / 2), "decoding token i →", size=NOTE_SIZE, rotation=270)
    lx = x0 + grid + 0.4
    text(ax, (lx, y_top + 0.3), f"{num_sinks} sink tokens + window, {window} tokens in all", size=10, ha="left")
    text(ax, (lx, y_top + 0.05), "numbers: the position inside the cache", size=NOTE_SIZE, ha="left")
    faces = {"sink": (_STREAM_FILL["sink"], None), "window": (_STREAM_FILL["window"], None)}
    faces.update({"evicted": ("#9A9A9A", "xxx"), "future": ("#EDECE8", None)})
    y = y_top - 0.35
    for kind, words in STREAM_LEGEND.items():
        face, hatch = faces[kind]
        ax.add_patch(Rectangle((lx, y - 0.1), 0.2, 0.2, facecolor=face, edgecolor=INK, lw=0.6, hatch=hatch))
        text(ax, (lx + 0.3, y), words, size=NOTE_SIZE, ha="left")
        y -= 0.4
    return fig


__all__ = ["PARTS", "PART_LEGEND", "STREAM_LEGEND", "cache_layout", "draw_cache_per_token", "draw_streaming_cache"]
