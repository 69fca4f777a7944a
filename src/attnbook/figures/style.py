"""The course's one figure style: the matplotlib settings of every plot and the look of the diagrams.

Data plots (:mod:`attnbook.figures.plotting`) are drawn after :func:`use_style` applies :data:`STYLE`,
which also makes every PNG record its text (:func:`record_figure_text`) for the website's legibility
checks. Diagrams of the mechanism use the role colours below.

Every diagram is drawn on a light rounded panel on a transparent figure, so that it reads the same
on the website's light and dark themes and in JupyterLab. Each role in attention has one colour,
used in every chapter:

==========  =========================================================
role        what it colours
==========  =========================================================
``query``   q, Q, W_q
``key``     k, K, W_k
``value``   v, V, W_v
``score``   s, S (query-key dot products, before the softmax)
``weight``  a, A (attention weights, after the softmax)
``output``  o, O (weighted sums of the values)
``mask``    blocked cells of a mask
``neutral`` anything else (inputs X, Z, projections W_o)
==========  =========================================================

A diagram is built in data coordinates where one unit is one inch::

    fig, ax = new_diagram(6, 3, alt="Q times K transposed gives S.")
    q = matrix_block(ax, (1, 1.5), 4, 2, role="query", label="Q", shape="n × d_k")
    s = matrix_block(ax, (4, 1.5), 4, 3, role="score", label="S", shape="n × m")
    arrow(ax, q.right, s.left, label="Q Kᵀ / √d_k")

:func:`matrix_block` returns a :class:`Block` whose edge midpoints (``left``, ``right``, ``top``,
``bottom``) are where arrows attach. :func:`alt_text` returns the description a diagram was made
with; the chapter repeats it in the cell's ``mystnb: image: alt:`` metadata.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib as mpl
import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

#: the course's matplotlib settings, applied by :func:`use_style`
STYLE: dict[str, object] = {
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "figure.figsize": (6.0, 4.0),
    "figure.constrained_layout.use": True,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "image.cmap": "viridis",
    "legend.frameon": False,
    "figure.facecolor": "white",
    # every pyplot figure records its text in the PNG it is saved as (see record_figure_text)
    "figure.hooks": ["attnbook.figures.style:record_figure_text"],
}

#: PNG text chunks written by :func:`record_figure_text`
MIN_TEXT_PX_KEY = "attnbook:min-text-px"
TEXTS_KEY = "attnbook:texts"

#: colour map for probabilities (sequential, 0 to 1) and for signed values (diverging, centred at 0)
WEIGHTS_CMAP = "viridis"
SIGNED_CMAP = "RdBu_r"


def use_style() -> None:
    """Apply the course's figure style (:data:`STYLE`) to matplotlib."""
    mpl.rcParams.update(STYLE)


def _text_record(fig, dpi: float) -> dict[str, str]:
    """The text chunks of :func:`record_figure_text` for ``fig`` as it has just been drawn."""
    texts = [t for t in fig.findobj(mpl.text.Text) if t.get_visible() and t.get_text().strip()]
    record = {TEXTS_KEY: json.dumps(list(dict.fromkeys(t.get_text() for t in texts)), ensure_ascii=True)}
    if texts:  # PNG tEXt chunks are Latin-1: the strings go as ASCII JSON
        record[MIN_TEXT_PX_KEY] = f"{min(t.get_fontsize() for t in texts) * dpi / 72.0:.2f}"
    return record


def record_figure_text(fig) -> None:
    """Make every PNG that ``fig`` is saved as (``savefig``, or the notebook's inline display)
    record its text, in two text chunks: :data:`MIN_TEXT_PX_KEY`, the size of its smallest text in
    pixels of that PNG (font size in points times dpi / 72), and :data:`TEXTS_KEY`, every string it
    shows (a JSON list). A matplotlib figure hook (``figure.hooks`` in :data:`STYLE`); the image
    itself is unchanged, and nothing is drawn twice: the text is read when the PNG's own drawing
    ends (its ``draw_event``), before the file is written."""
    canvas = fig.canvas
    print_figure = canvas.print_figure

    def print_figure_with_text(filename, *args, **kwargs):
        fmt = kwargs.get("format") or (filename.rsplit(".", 1)[-1] if isinstance(filename, str) else None)
        if fmt != "png" or canvas is not fig.canvas:
            return print_figure(filename, *args, **kwargs)
        dpi = kwargs.get("dpi") or mpl.rcParams["savefig.dpi"]
        dpi = fig.dpi if dpi == "figure" else float(dpi)
        metadata = dict(kwargs.get("metadata") or {})  # handed to the PNG writer after the last draw
        drawn = fig.canvas.mpl_connect("draw_event", lambda event: metadata.update(_text_record(fig, dpi)))
        try:
            return print_figure(filename, *args, **{**kwargs, "metadata": metadata})
        finally:
            fig.canvas.mpl_disconnect(drawn)

    canvas.print_figure = print_figure_with_text


#: one mid-tone colour per role (Okabe-Ito, safe for colour-blind readers)
COLORS: dict[str, str] = {
    "query": "#E69F00",
    "key": "#0072B2",
    "value": "#009E73",
    "score": "#CC79A7",
    "weight": "#D55E00",
    "output": "#7B5EA7",
    "mask": "#8A8A8A",
    "neutral": "#8A8A8A",
}

#: ink for text and arrows, and the panel behind the drawing (light in both page themes)
INK = "#222222"
PANEL = "#F6F5F1"
PANEL_EDGE = "#C9C6BD"

#: font sizes (points) of labels, shapes and small annotations
LABEL_SIZE = 13
SHAPE_SIZE = 9.5
NOTE_SIZE = 9

#: the attribute of a Figure that holds its alt text
ALT_ATTRIBUTE = "attnbook_alt_text"


def color(role: str) -> str:
    """The mid-tone colour of a role (see :data:`COLORS`), for fills and lines."""
    if role not in COLORS:
        raise ValueError(f"unknown role {role!r}; expected one of {sorted(COLORS)}")
    return COLORS[role]


def dark(role: str, amount: float = 0.35) -> str:
    """A darker shade of a role's colour, for text and edges on the light panel."""
    rgb = np.array(mcolors.to_rgb(color(role)))
    return mcolors.to_hex(rgb * (1.0 - amount))


def light(role: str, amount: float = 0.7) -> str:
    """A lighter tint of a role's colour, for cell fills."""
    rgb = np.array(mcolors.to_rgb(color(role)))
    return mcolors.to_hex(rgb + (1.0 - rgb) * amount)


@dataclass(frozen=True)
class Block:
    """A drawn matrix: its lower-left corner, size (inches) and label; edge midpoints for arrows."""

    x: float
    y: float
    width: float
    height: float
    label: str
    rows: int
    cols: int
    cell: float

    @property
    def left(self) -> tuple[float, float]:
        return (self.x, self.y + self.height / 2)

    @property
    def right(self) -> tuple[float, float]:
        return (self.x + self.width, self.y + self.height / 2)

    @property
    def top(self) -> tuple[float, float]:
        return (self.x + self.width / 2, self.y + self.height)

    @property
    def bottom(self) -> tuple[float, float]:
        return (self.x + self.width / 2, self.y)

    @property
    def center(self) -> tuple[float, float]:
        return (self.x + self.width / 2, self.y + self.height / 2)

    def cell_center(self, row: int, col: int) -> tuple[float, float]:
        """The centre of cell (row, col), row 0 at the top."""
        return (self.x + (col + 0.5) * self.cell, self.y + self.height - (row + 0.5) * self.cell)


def new_diagram(width: float, height: float, *, alt: str) -> tuple[Figure, plt.Axes]:
    """A transparent figure of ``width`` × ``height`` inches holding one light rounded panel.

    The axes span the figure, with data coordinates in inches ((0, 0) bottom left) and no ticks.
    ``alt`` is the diagram's text alternative (see :func:`alt_text`).
    """
    if not alt or not alt.strip():
        raise ValueError("a diagram needs alt text describing what it shows")
    fig = plt.figure(figsize=(width, height), layout="none")
    fig.patch.set_alpha(0.0)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0.0, width)
    ax.set_ylim(0.0, height)
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.patch.set_alpha(0.0)
    pad = 0.04
    ax.add_patch(
        FancyBboxPatch(
            (pad, pad),
            width - 2 * pad,
            height - 2 * pad,
            boxstyle="round,pad=0,rounding_size=0.15",
            facecolor=PANEL,
            edgecolor=PANEL_EDGE,
            linewidth=1.0,
            zorder=-10,
            gid="panel",
        )
    )
    set_alt_text(fig, alt)
    return fig, ax


def set_alt_text(fig: Figure, alt: str) -> Figure:
    """Attach ``alt`` (a sentence or two saying what the diagram shows) to ``fig``; return it."""
    setattr(fig, ALT_ATTRIBUTE, " ".join(alt.split()))
    return fig


def alt_text(fig: Figure) -> str:
    """The alt text a diagram was drawn with (:func:`new_diagram`, :func:`set_alt_text`)."""
    text = getattr(fig, ALT_ATTRIBUTE, None)
    if not text:
        raise ValueError("this figure has no alt text; draw it with new_diagram(..., alt=...)")
    return text


def text(
    ax,
    xy: tuple[float, float],
    s: str,
    *,
    role: str | None = None,
    size: float = NOTE_SIZE,
    ha: str = "center",
    va: str = "center",
    **kwargs,
):
    """Write ``s`` at ``xy`` in ink (or in the dark shade of ``role``); return the Text."""
    return ax.text(*xy, s, color=INK if role is None else dark(role), fontsize=size, ha=ha, va=va, **kwargs)


def arrow(
    ax,
    start: tuple[float, float],
    end: tuple[float, float],
    *,
    label: str | None = None,
    role: str | None = None,
    bend: float = 0.0,
    label_offset: tuple[float, float] = (0.0, 0.14),
    gap: float = 0.06,
    linestyle: str = "-",
):
    """An arrow from ``start`` to ``end`` (inches), optionally bent and labelled at its middle."""
    line = INK if role is None else dark(role, 0.15)
    shift = gap * 72  # points
    patch = FancyArrowPatch(
        start,
        end,
        arrowstyle="-|>",
        mutation_scale=12,
        color=line,
        linewidth=1.3,
        connectionstyle=f"arc3,rad={bend}",
        shrinkA=shift,
        shrinkB=shift,
        linestyle=linestyle,
        zorder=3,
    )
    ax.add_patch(patch)
    if label:
        mid = ((start[0] + end[0]) / 2 + label_offset[0], (start[1] + end[1]) / 2 + label_offset[1])
        text(ax, mid, label, size=NOTE_SIZE, va="bottom" if label_offset[1] >= 0 else "top")
    return patch


def matrix_block(
    ax,
    xy: tuple[float, float],
    rows: int,
    cols: int,
    *,
    role: str,
    label: str | None = None,
    shape: str | None = None,
    cell: float = 0.3,
    values: Sequence[Sequence[float]] | np.ndarray | None = None,
    fmt: str = "{:.1f}",
    shade: Sequence[Sequence[float]] | np.ndarray | None = None,
    blocked: Sequence[Sequence[bool]] | np.ndarray | None = None,
    label_side: str = "top",
    shape_side: str = "bottom",
) -> Block:
    """Draw a ``rows`` × ``cols`` matrix of cells centred at ``xy`` and return its :class:`Block`.

    ``label`` (e.g. ``"$Q$"``) goes on ``label_side`` and ``shape`` (e.g. ``"n × d_k"``) on
    ``shape_side`` (``"top"``, ``"bottom"``, ``"left"``, ``"right"`` or ``None``; on the same side,
    the shape goes beyond the label, or below it on the left and right). ``values``
    prints a number in each cell; ``shade`` (in [0, 1]) sets each cell's depth of colour, e.g. a
    weight; ``blocked`` (True = masked out) draws those cells grey and hatched.
    """
    fill = light(role)
    width, height = cols * cell, rows * cell
    x0, y0 = xy[0] - width / 2, xy[1] - height / 2
    block = Block(x0, y0, width, height, label or "", rows, cols, cell)
    shade_arr = None if shade is None else np.clip(np.asarray(shade, dtype=float), 0.0, 1.0)
    blocked_arr = None if blocked is None else np.asarray(blocked, dtype=bool)
    values_arr = None if values is None else np.asarray(values, dtype=float)
    for name, arr in (("values", values_arr), ("shade", shade_arr), ("blocked", blocked_arr)):
        if arr is not None and arr.shape != (rows, cols):
            raise ValueError(f"{name} has shape {arr.shape}, expected ({rows}, {cols})")
    for r in range(rows):
        for c in range(cols):
            cx, cy = block.cell_center(r, c)
            face, hatch = fill, None
            if blocked_arr is not None and blocked_arr[r, c]:
                face, hatch = light("mask", 0.55), "////"
            elif shade_arr is not None:
                face = mcolors.to_hex(
                    np.array(mcolors.to_rgb(light(role, 0.92))) * (1 - shade_arr[r, c])
                    + np.array(mcolors.to_rgb(color(role))) * shade_arr[r, c]
                )
            ax.add_patch(
                Rectangle(
                    (cx - cell / 2, cy - cell / 2),
                    cell,
                    cell,
                    facecolor=face,
                    edgecolor="white",
                    linewidth=0.8,
                    hatch=hatch,
                    zorder=1,
                )
            )
            if values_arr is not None and not (blocked_arr is not None and blocked_arr[r, c]):
                text(ax, (cx, cy), fmt.format(values_arr[r, c]), size=min(NOTE_SIZE, 26 * cell), zorder=2)
    ax.add_patch(
        Rectangle(
            (x0, y0),
            width,
            height,
            facecolor="none",
            edgecolor=dark(role),
            linewidth=1.4,
            zorder=2,
            gid=f"block:{label or role}",
        )
    )
    offset = 0.08
    anchors = {
        "top": ((x0 + width / 2, y0 + height + offset), "center", "bottom"),
        "bottom": ((x0 + width / 2, y0 - offset), "center", "top"),
        "left": ((x0 - offset, y0 + height / 2), "right", "center"),
        "right": ((x0 + width + offset, y0 + height / 2), "left", "center"),
    }
    for side in (label_side, shape_side):
        if side is not None and side not in anchors:
            raise ValueError(f"side must be one of {sorted(anchors)} or None, got {side!r}")
    stacked = bool(label and shape and label_side == shape_side)
    for content, side, size, outer in (
        (label, label_side, LABEL_SIZE, False),
        (shape, shape_side, SHAPE_SIZE, stacked),
    ):
        if content and side:
            (px, py), ha, va = anchors[side]
            if outer and side in ("top", "bottom"):  # the shape goes beyond the label
                py += 0.3 if side == "top" else -0.33
            elif stacked and side in ("left", "right"):  # label above the middle, shape below it
                py, va = (py - 0.03, "top") if outer else (py + 0.03, "bottom")
            text(ax, (px, py), content, role=role, size=size, ha=ha, va=va)
    return block


def highlight(
    ax, block: Block, *, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None, pad: float = 0.04
):
    """Outline rows ``rows[0]`` to ``rows[1] - 1`` (or columns) of ``block`` with a dashed frame."""
    r0, r1 = rows if rows is not None else (0, block.rows)
    c0, c1 = cols if cols is not None else (0, block.cols)
    if not (0 <= r0 < r1 <= block.rows and 0 <= c0 < c1 <= block.cols):
        raise ValueError(f"rows {rows} / cols {cols} outside a block of {block.rows} x {block.cols}")
    x = block.x + c0 * block.cell - pad
    y = block.y + block.height - r1 * block.cell - pad
    frame = Rectangle(
        (x, y),
        (c1 - c0) * block.cell + 2 * pad,
        (r1 - r0) * block.cell + 2 * pad,
        facecolor="none",
        edgecolor=INK,
        linewidth=1.3,
        linestyle=(0, (3, 2)),
        zorder=4,
    )
    ax.add_patch(frame)
    return frame


def bracket_label(
    ax, start: tuple[float, float], end: tuple[float, float], s: str, *, side: str = "left", role: str | None = None
):
    """A thin bracket along the segment ``start``–``end`` with ``s`` beside it (rows or columns)."""
    line = INK if role is None else dark(role)
    ax.plot([start[0], end[0]], [start[1], end[1]], color=line, linewidth=0.9)
    mid = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
    d = 0.08
    pos = {
        "left": (mid[0] - d, mid[1]),
        "right": (mid[0] + d, mid[1]),
        "top": (mid[0], mid[1] + d),
        "bottom": (mid[0], mid[1] - d),
    }[side]
    ha = {"left": "right", "right": "left"}.get(side, "center")
    va = {"top": "bottom", "bottom": "top"}.get(side, "center")
    return text(ax, pos, s, role=role, size=NOTE_SIZE, ha=ha, va=va)


def legend(
    ax, xy: tuple[float, float], roles: Sequence[str], *, labels: dict[str, str] | None = None, step: float = 1.0
):
    """A one-line key of coloured squares and role names starting at ``xy``."""
    x, y = xy
    for role in roles:
        ax.add_patch(Rectangle((x, y - 0.07), 0.14, 0.14, facecolor=light(role), edgecolor=dark(role), linewidth=1.0))
        text(ax, (x + 0.2, y), (labels or {}).get(role, role), role=role, ha="left")
        x += step


def labels_in(fig: Figure) -> list[str]:
    """Every text drawn in ``fig`` (for tests: which labels a diagram shows)."""
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_text()]


def blocks_in(fig: Figure) -> list[str]:
    """The labels of the matrix blocks drawn in ``fig`` (for tests)."""
    return [p.get_gid()[len("block:") :] for p in fig.findobj(Rectangle) if (p.get_gid() or "").startswith("block:")]


__all__ = [
    "ALT_ATTRIBUTE",
    "Block",
    "COLORS",
    "INK",
    "LABEL_SIZE",
    "NOTE_SIZE",
    "PANEL",
    "PANEL_EDGE",
    "SHAPE_SIZE",
    "alt_text",
    "arrow",
    "blocks_in",
    "bracket_label",
    "color",
    "dark",
    "highlight",
    "labels_in",
    "legend",
    "light",
    "matrix_block",
    "new_diagram",
    "set_alt_text",
    "text",
]
