"""Diagrams of chapter 8: the tiles tiled attention visits, and a KV cache filling up step by step.

Both are drawn from the package's own objects, so they stay in step with the code: the tiles and
their kinds come from :func:`attnbook.efficient.tiled_attention.attention_tiles`, the cache's rows from the
way :class:`attnbook.KVCache` fills its preallocated buffers.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from ..efficient.tiled_attention import attention_tiles
from ..validators import check_sizes
from .style import NOTE_SIZE, PANEL, arrow, matrix_block, new_diagram, text


def _tiles_alt(n: int, block_size: int) -> str:
    t = -(-n // block_size)
    computed = t * (t + 1) // 2
    return (
        f"Two grids of {t} by {t} square tiles, each tile made of {block_size} by {block_size} cells, with "
        f"blocks labelled Q1 to Q{t} down the left side and K1 to K{t} across the top. In the left grid "
        f"every tile is coloured and numbered 1 to {t * t}, row after row. In the right grid the "
        f"{t * t - computed} tiles above the diagonal are grey, hatched and marked skipped, the other "
        f"{computed} are numbered 1 to {computed} row after row, and the diagonal tiles have their cells "
        f"above the diagonal hatched. Arrows mark the outer loop down the query blocks and the inner "
        f"loop across the key blocks."
    )


def draw_tiles(n: int = 12, block_size: int = 3, *, cell: float = 0.17) -> Figure:
    """The tiles of an (n, n) score matrix in the order tiled attention computes them (chapter 8).

    Two panels: without a mask (every tile computed) and under a causal mask (the tiles above the
    diagonal skipped, the masked entries of the diagonal tiles hatched). Query blocks Q_i run down
    the left (the outer loop), transposed key blocks K_j^T across the top (the inner loop); each
    computed tile carries its place in the visiting order.
    """
    check_sizes(n=n, block_size=block_size)
    t = -(-n // block_size)  # blocks per side
    gap, strip = 0.07, 2  # between tiles; width of a Q or K block, in cells
    side = n * cell + (t - 1) * gap  # one grid, in inches
    before = 0.3 + 0.3 + 0.4 + strip * cell + 0.15  # margin, loop arrow, labels, Q blocks, gap
    panel = before + side + 0.45
    above = 0.45 + 0.3 + 0.35 + strip * cell + 0.15  # title, loop arrow, labels, K blocks, gap
    width, height = 2 * panel, above + side + 0.6
    fig, ax = new_diagram(width, height, alt=_tiles_alt(n, block_size))
    top = height - above  # upper edge of the grids
    for p, causal in enumerate((False, True)):
        left = p * panel + before  # left edge of this panel's grid
        tiles = attention_tiles(n, n, block_size, causal=causal)
        computed = sum(tile.kind != "skipped" for tile in tiles)
        name = "causal mask" if causal else "no mask"
        text(ax, (left + side / 2, height - 0.25), f"{name}: {computed} of {t * t} tiles computed", size=10.5)
        _loop_arrows(ax, left, top, side, strip * cell)
        for b in range(t):  # the blocks Q_i down the left and K_j^T across the top
            offset, size = b * (block_size * cell + gap), min(block_size, n - b * block_size)
            matrix_block(
                ax,
                (left - 0.15 - strip * cell / 2, top - offset - size * cell / 2),
                size,
                strip,
                role="query",
                cell=cell,
                label=f"$Q_{{{b + 1}}}$",
                label_side="left",
            )
            matrix_block(
                ax,
                (left + offset + size * cell / 2, top + 0.15 + strip * cell / 2),
                strip,
                size,
                role="key",
                cell=cell,
                label=f"$K_{{{b + 1}}}^\\top$",
                label_side="top",
            )
        for order, tile in enumerate((tile for tile in tiles if tile.kind != "skipped"), start=1):
            _draw_tile(ax, tile, left, top, block_size, gap, cell, causal, order)
        skipped = [tile for tile in tiles if tile.kind == "skipped"]
        for tile in skipped:
            _draw_tile(ax, tile, left, top, block_size, gap, cell, causal, None)
        if skipped:  # one word on the skipped region, at the middle of its tiles
            pitch = block_size * cell + gap
            a = sum(tile.queries.start // block_size + 0.5 for tile in skipped) / len(skipped)
            b = sum(tile.keys.start // block_size + 0.5 for tile in skipped) / len(skipped)
            text(
                ax,
                (left + b * pitch, top - a * pitch),
                "skipped",
                size=NOTE_SIZE + 0.5,
                zorder=4,
                bbox={"boxstyle": "round,pad=0.15", "facecolor": PANEL, "edgecolor": "none", "alpha": 0.9},
            )
    _tiles_legend(ax, (0.45, 0.3), cell)
    return fig


def _draw_tile(ax, tile, left, top, block_size, gap, cell, causal, order) -> None:
    """One tile: its cells (masked ones hatched) and, if computed, its number in the loops' order."""
    a, b = tile.queries.start // block_size, tile.keys.start // block_size
    rows, cols = tile.queries.stop - tile.queries.start, tile.keys.stop - tile.keys.start
    x0, y0 = left + tile.keys.start * cell + b * gap, top - tile.queries.start * cell - a * gap
    center = (x0 + cols * cell / 2, y0 - rows * cell / 2)
    hidden = [
        [causal and j > i for j in range(tile.keys.start, tile.keys.stop)]
        for i in range(tile.queries.start, tile.queries.stop)
    ]  # (rows, cols), True = masked
    if order is None:
        matrix_block(
            ax,
            center,
            rows,
            cols,
            role="mask",
            cell=cell,
            blocked=hidden,
            label="skipped",
            label_side=None,
            shape_side=None,
        )
        return
    matrix_block(
        ax,
        center,
        rows,
        cols,
        role="score",
        cell=cell,
        blocked=hidden,
        label=f"tile {order}",
        label_side=None,
        shape_side=None,
    )
    text(
        ax,
        center,
        str(order),
        size=NOTE_SIZE + 0.5,
        zorder=4,
        bbox={"boxstyle": "round,pad=0.12", "facecolor": PANEL, "edgecolor": "none", "alpha": 0.85},
    )


def _loop_arrows(ax, left, top, side, strip) -> None:
    """An arrow down the left for the outer loop (query blocks), one across the top for the inner loop."""
    x = left - 0.15 - strip - 0.4 - 0.15  # left of the Q labels
    arrow(ax, (x, top), (x, top - side), role="query")
    text(ax, (x - 0.08, top - side / 2), "outer loop", role="query", rotation=90, ha="right")
    y = top + 0.15 + strip + 0.35 + 0.12  # above the K labels
    arrow(ax, (left, y), (left + side, y), role="key")
    text(ax, (left + side / 2, y + 0.08), "inner loop", role="key", va="bottom")


def _tiles_legend(ax, xy, cell) -> None:
    x, y = xy
    matrix_block(ax, (x, y), 1, 1, role="score", cell=cell, label="computed", label_side=None)
    text(ax, (x + 0.17, y), "a computed tile, numbered in the order of the loops", ha="left")
    x += 3.9
    matrix_block(ax, (x, y), 1, 1, role="mask", cell=cell, blocked=[[True]], label="masked", label_side=None)
    text(ax, (x + 0.17, y), "a masked entry (a skipped tile is all masked)", ha="left")


def _kv_cache_alt(steps: int, max_len: int) -> str:
    return (
        f"{steps} columns, one per decoding step t = 0 to {steps - 1}. Each column shows a query row "
        f"q_t above two buffers of {max_len} rows, K and V, and an output row o_t below them. At step t "
        f"the first t rows of both buffers are mid-tone (stored earlier), row t is dark (appended now) "
        f"and the rows below it are pale (free); arrows go from q_t to K and from V to o_t."
    )


def draw_kv_cache(steps: int = 4, max_len: int | None = None, d: int = 3, *, cell: float = 0.2) -> Figure:
    """A KV cache over ``steps`` decoding steps, one column per step (chapter 8).

    At step t the new key k_t and value v_t fill row t of the K and V buffers (allocated once for
    ``max_len`` rows, as :class:`attnbook.KVCache` does), the rows of earlier steps are reused as
    they are, and the query q_t attends over the t + 1 stored rows to give o_t.
    """
    max_len = steps if max_len is None else max_len
    check_sizes(steps=steps, max_len=max_len, d=d)
    if max_len < steps:
        raise ValueError(f"max_len = {max_len} cannot hold the {steps} steps drawn")
    pair = 2 * d * cell + 0.3  # K and V side by side
    column = pair + 0.75  # room for the k_t and v_t labels on either side
    buffer = max_len * cell
    width, height = 0.3 + steps * column + 0.2, 0.45 + cell + 0.45 + 0.3 + buffer + 0.4 + cell + 0.35 + 0.55
    fig, ax = new_diagram(width, height, alt=_kv_cache_alt(steps, max_len))
    for t in range(steps):
        cx = 0.3 + t * column + column / 2  # the column's centre
        text(ax, (cx, height - 0.27), f"step $t = {t}$", size=10.5)
        y_q = height - 0.45 - cell / 2 - 0.1
        q = matrix_block(ax, (cx, y_q), 1, d, role="query", cell=cell, label=f"$q_{{{t}}}$", label_side="left")
        y_buf = y_q - cell / 2 - 0.45 - 0.3 - buffer / 2  # the buffers' centre
        shade = [[1.0 if r == t else 0.45 if r < t else 0.0] * d for r in range(max_len)]  # new, stored, free
        keys = matrix_block(
            ax,
            (cx - pair / 2 + d * cell / 2, y_buf),
            max_len,
            d,
            role="key",
            cell=cell,
            shade=shade,
            label="$K$",
            label_side="top",
        )
        values = matrix_block(
            ax,
            (cx + pair / 2 - d * cell / 2, y_buf),
            max_len,
            d,
            role="value",
            cell=cell,
            shade=shade,
            label="$V$",
            label_side="top",
        )
        row_y = keys.cell_center(t, 0)[1]
        text(ax, (keys.x - 0.06, row_y), f"$k_{{{t}}}$", role="key", ha="right")
        text(ax, (values.x + values.width + 0.06, row_y), f"$v_{{{t}}}$", role="value", ha="left")
        o = matrix_block(
            ax, (cx, values.y - 0.4 - cell / 2), 1, d, role="output", cell=cell, label=f"$o_{{{t}}}$", label_side="left"
        )
        arrow(ax, q.bottom, (keys.top[0], keys.top[1] + 0.3), role="query", bend=0.15)
        arrow(ax, values.bottom, o.top, role="value", bend=-0.15)
        text(ax, (cx, o.y - 0.18), f"{t + 1} of {max_len} rows in use", size=NOTE_SIZE - 0.5)
    _kv_legend(ax, (0.5, 0.3), cell)
    return fig


def _kv_legend(ax, xy, cell) -> None:
    x, y = xy
    for shade, words in ((0.45, "stored at an earlier step"), (1.0, "appended at this step"), (0.0, "free")):
        matrix_block(ax, (x, y), 1, 1, role="key", cell=cell, shade=[[shade]], label=words, label_side=None)
        text(ax, (x + 0.18, y), words, ha="left")
        x += 0.45 + 0.075 * len(words)
