"""The diagram of chapter 11: the loop orders of FlashAttention-2's forward and backward kernels.

Two panels over the same grid of tiles of the score matrix under a causal mask. Left, the forward:
query blocks outside, key blocks inside; one query block's running numbers stay on chip until its
output and log-sum-exp are written, once. Right, the backward: key blocks outside, query blocks
inside; one key block's gradients dK_j, dV_j stay on chip, while each dQ_i is accumulated in the
slow memory. Beside each grid, what lives in fast on-chip memory (SRAM) and what goes to and from
the slow memory (HBM). A tile is skipped when its
first key comes after its last query: with one block per row and column of the grid, block column
b > block row a (chapter 8 proves it and counts them, T(T - 1)/2).
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ..validators import check_index, check_sizes
from .style import NOTE_SIZE, arrow, dark, highlight, light, matrix_block, new_diagram, text

#: the lines of each panel's two memory boxes: (heading, lines); "fast" is on chip, "slow" is HBM
MEMORY = {
    "forward": {
        "fast": (
            "on chip (fast, SRAM)",
            (
                "$Q_i$, $K_j$, $V_j$",
                "$S_{ij}$, $P_{ij}$: one $B \\times B$ tile",
                "$m_i$, $\\ell_i$, acc$_i$ (running)",
            ),
        ),
        "slow": ("HBM (slow)", ("reads $Q$, $K$, $V$", "writes $O_i$, $L_i$ once")),
    },
    "backward": {
        "fast": (
            "on chip (fast, SRAM)",
            (
                "$K_j$, $V_j$; $dK_j$, $dV_j$ (running)",
                "$Q_i$, $dO_i$, $L_i$, $D_i$",
                "$P_{ij} = e^{S_{ij} - L_i}$, $dS_{ij}$",
            ),
        ),
        "slow": (
            "HBM (slow)",
            ("reads $Q$, $K$, $V$, $dO$, $L$, $D$", "$dQ_i$ += scale $dS_{ij} K_j$", "(accumulated over $j$)"),
        ),
    },
}


def _alt(blocks: int, outer: int, inner: int) -> str:
    skipped = blocks * (blocks - 1) // 2
    return (
        f"Two panels, each a grid of {blocks} by {blocks} tiles of the score matrix under a causal mask, "
        f"with the {skipped} tiles above the diagonal hatched as skipped. Left, the forward pass: query "
        f"blocks Q1 to Q{blocks} down the left side, key blocks across the top; the outer loop runs down "
        f"the query blocks and the inner loop across the key blocks; the row of query block "
        f"{outer + 1} is shaded, its tile with key block {inner + 1} framed as the current one. A box "
        "says what is on chip: the blocks Q_i, K_j and V_j, one tile of scores S and weights P, and the "
        "running maximum m_i, sum l_i and accumulator; another says the slow memory is read for Q, K "
        "and V and written once per query block with O_i and the log-sum-exp L_i. Right, the backward "
        "pass: the outer loop runs across the key blocks and the inner loop down the query blocks; the "
        f"column of key block {outer + 1} is shaded, its tile with query block "
        f"{max(inner, outer) + 1} framed. On chip: K_j and V_j with their running gradients dK_j and "
        "dV_j, the blocks Q_i, dO_i, L_i and D_i, and the tile P rebuilt as exp(S minus L) with its "
        "gradient dS; the slow memory is read for Q, K, V, dO, L and D, and dQ_i is accumulated there."
    )


def draw_kernel_loops(blocks: int = 4, outer: int = 2, inner: int = 1, *, cell: float = 0.42) -> Figure:
    """The loop orders of FlashAttention-2's forward and backward passes, and what each keeps on chip (chapter 11).

    Both panels show the ``blocks`` × ``blocks`` tiles of a causal score matrix (the tiles above the
    diagonal skipped). Left, the forward: the outer loop over query blocks, the current one
    (``outer``, 0-based) shaded, at its tile with key block ``inner``. Right, the backward: the outer
    loop over key blocks, key block ``outer`` shaded, at its tile with query block
    ``max(inner, outer)`` (the first query block that sees it, when ``inner < outer``). Beside each,
    a box of what lives in fast memory and one of what moves to and from the slow memory.
    """
    check_sizes(blocks=blocks)
    check_index("outer", outer, blocks, "a block index")
    check_index("inner", inner, blocks, "a block index")
    if inner > outer:
        raise ValueError(f"inner = {inner} > outer = {outer}: under the causal mask that tile is skipped")
    panel_width, height = 6.0, 4.6
    fig, ax = new_diagram(2 * panel_width, height, alt=_alt(blocks, outer, inner))
    hidden = [[b > a for b in range(blocks)] for a in range(blocks)]  # (blocks, blocks), True = skipped tile
    for p, name in enumerate(("forward", "backward")):
        left = p * panel_width + 1.15  # left edge of the grid
        top = height - 1.25  # upper edge of the grid
        side = blocks * cell
        if name == "forward":  # the row of query block `outer`, at key block `inner`
            shade = [[0.55 if a == outer else 0.12 for _ in range(blocks)] for a in range(blocks)]
            current = (outer, inner)
        else:  # the column of key block `outer`, at query block max(inner, outer)
            shade = [[0.55 if b == outer else 0.12 for b in range(blocks)] for _ in range(blocks)]
            current = (max(inner, outer), outer)
        shade[current[0]][current[1]] = 1.0
        grid = matrix_block(
            ax,
            (left + side / 2, top - side / 2),
            blocks,
            blocks,
            role="score",
            cell=cell,
            shade=shade,
            blocked=hidden,
            label=f"{name} tiles",
            label_side=None,
            shape_side=None,
        )
        highlight(ax, grid, rows=(current[0], current[0] + 1), cols=(current[1], current[1] + 1))
        q_blocks = matrix_block(
            ax,
            (left - 0.2 - cell / 4, top - side / 2),
            blocks,
            1,
            role="query",
            cell=cell,
            label="$Q$",
            label_side="bottom",
            shape_side=None,
        )
        k_blocks = matrix_block(
            ax,
            (left + side / 2, top + 0.2 + cell / 4),
            1,
            blocks,
            role="key",
            cell=cell,
            label="$K^\\top$",
            label_side="right",
            shape_side=None,
        )
        for b in range(blocks):
            text(ax, q_blocks.cell_center(b, 0), f"$Q_{{{b + 1}}}$", size=NOTE_SIZE - 1, zorder=3)
            text(ax, k_blocks.cell_center(0, b), f"$K_{{{b + 1}}}$", size=NOTE_SIZE - 1, zorder=3)
        highlight(ax, q_blocks, rows=(current[0], current[0] + 1))
        highlight(ax, k_blocks, cols=(current[1], current[1] + 1))
        x_down = q_blocks.x - 0.22  # the arrow down the query blocks
        y_across = k_blocks.y + k_blocks.height + 0.22  # the arrow across the key blocks
        down, across = ("outer", "inner") if name == "forward" else ("inner", "outer")
        arrow(ax, (x_down, top), (x_down, top - side), role="query")
        text(ax, (x_down - 0.08, top - side / 2), f"{down} loop", role="query", rotation=90, ha="right")
        arrow(ax, (left, y_across), (left + side, y_across), role="key")
        text(ax, (left + side / 2, y_across + 0.06), f"{across} loop", role="key", va="bottom")
        title = "forward: query blocks outside" if name == "forward" else "backward: key blocks outside"
        text(ax, (p * panel_width + panel_width / 2, height - 0.22), title, size=11)
        text(ax, (left + side / 2, top - side - 0.5), "hatched: skipped (causal)", size=NOTE_SIZE - 1)
        x_box = left + side + 0.35
        _memory_box(ax, (x_box, top + 0.55), panel_width - (x_box - p * panel_width) - 0.15, 1.75, name, "fast")
        _memory_box(ax, (x_box, top - 1.4), panel_width - (x_box - p * panel_width) - 0.15, 1.5, name, "slow")
    return fig


def _memory_box(ax, xy_top_left, width, height, name, speed) -> None:
    """A rounded box, its heading and its lines: what the pass ``name`` keeps in ``speed`` memory."""
    role = "output" if speed == "fast" else "neutral"
    x, y = xy_top_left
    ax.add_patch(
        FancyBboxPatch(
            (x, y - height),
            width,
            height,
            boxstyle="round,pad=0,rounding_size=0.08",
            facecolor=light(role, 0.85),
            edgecolor=dark(role),
            linewidth=1.2,
            zorder=1,
            gid=f"memory:{name}:{speed}",
        )
    )
    heading, lines = MEMORY[name][speed]
    text(ax, (x + 0.12, y - 0.2), heading, role=role, size=NOTE_SIZE + 0.5, ha="left", weight="bold")
    for i, line in enumerate(lines):
        text(ax, (x + 0.12, y - 0.55 - 0.36 * i), line, size=NOTE_SIZE, ha="left")
