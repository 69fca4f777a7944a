"""Diagram of the positional-encoding rotation: a (sin, cos) pair turning with the position (chapter 5)."""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch

from ..positions.sinusoidal import pair_rotation, sinusoid_frequencies, sinusoidal_encoding
from .style import dark, highlight, light, matrix_block, new_diagram, text

#: the position rows whose shift by delta the diagram draws as arcs
SHIFTED_FROM = (0, 3)
#: sign of matplotlib's arc3 ``rad`` that bends an arrow outwards on a counter-clockwise turn
#: (an arc3 with rad tan(phi / 4) follows a circle through an angle phi closely)
ARC_SIGN = 1.0


def _alt(d_model: int, pair: int, positions: int, delta: int, omega: float) -> str:
    return (
        f"Left, the sinusoidal encoding P of {positions} positions in {d_model} dimensions as a grid "
        f"shaded by value, with columns {2 * pair} and {2 * pair + 1}, pair j = {pair}, framed: they "
        f"hold sin(i omega_j) and cos(i omega_j). Right, the unit circle with cos(i omega_j) across "
        f"and sin(i omega_j) up: the points of positions 0 to {positions - 1} lie on it, one step of "
        f"{omega:.2f} radians apart. Two curved arrows, from position {SHIFTED_FROM[0]} to "
        f"{SHIFTED_FROM[0] + delta} and from {SHIFTED_FROM[1]} to {SHIFTED_FROM[1] + delta}, turn by "
        f"the same angle delta omega_j. Beside the circle, the 2 by 2 matrix R(delta omega_j), with entries "
        f"cos, sin in its first row and minus sin, cos in its second, maps every (sin, cos) pair of "
        f"position i to the pair of position i + {delta}."
    )


def draw_rotation(d_model: int = 8, pair: int = 0, positions: int = 6, delta: int = 2) -> Figure:
    """Draw pair j of the sinusoidal encoding as a point turning around the unit circle.

    p[i, 2j] = sin(i w_j), p[i, 2j+1] = cos(i w_j), w_j = 1 / 10000^(2j / d_model);
    (p[i+delta, 2j], p[i+delta, 2j+1]) = R(delta w_j) (p[i, 2j], p[i, 2j+1]) for every i, with
    R(phi) = [[cos phi, sin phi], [-sin phi, cos phi]].

    The grid is P of shape (positions, d_model), from :func:`attnbook.sinusoidal_encoding`, with
    pair ``pair`` framed; the points, arcs and the matrix come from the package's own functions,
    so the picture is the formula. Chapter 5.
    """
    for name, size, low, high in (("d_model", d_model, 2, 16), ("positions", positions, 2, 10)):
        if isinstance(size, bool) or not isinstance(size, int) or not low <= size <= high:
            raise ValueError(f"{name} = {size!r}: draw between {low} and {high}")
    if d_model % 2:
        raise ValueError(f"d_model = {d_model} must be even: the encoding fills pairs of columns")
    if isinstance(pair, bool) or not isinstance(pair, int) or not 0 <= pair < d_model // 2:
        raise ValueError(f"pair = {pair!r} is not a pair index of d_model = {d_model} (0 to {d_model // 2 - 1})")
    if isinstance(delta, bool) or not isinstance(delta, int) or not 1 <= delta <= positions - 1 - SHIFTED_FROM[1]:
        raise ValueError(
            f"delta = {delta!r}: shifts from position {SHIFTED_FROM[1]} must stay below positions = {positions}"
        )
    P = sinusoidal_encoding(positions, d_model, dtype=torch.float64).numpy()  # (positions, d_model)
    omega = float(sinusoid_frequencies(d_model, dtype=torch.float64)[pair])
    R = pair_rotation(delta, omega).to(torch.float64).numpy()  # (2, 2)

    cell, radius = 0.26, 1.25
    grid_w, grid_h = d_model * cell, positions * cell
    x_grid = 0.75 + grid_w / 2
    cx = x_grid + grid_w / 2 + 1.1 + radius
    width = cx + radius + 1.5
    height = max(grid_h + 1.9, 2 * radius + 1.65)
    cy = height - 0.55 - radius - 0.2
    fig, ax = new_diagram(width, height, alt=_alt(d_model, pair, positions, delta, omega))

    grid = matrix_block(
        ax,
        (x_grid, cy),
        positions,
        d_model,
        role="neutral",
        label="$P$",
        shape=f"{positions} positions $\\times$ {d_model} dimensions",
        cell=cell,
        shade=(P + 1) / 2,
    )
    x_pair = grid.x + (2 * pair + 1) * cell  # centre of the pair's two columns
    matrix_block(
        ax,
        (x_pair, cy),
        positions,
        2,
        role="weight",
        cell=cell,
        shade=(P[:, 2 * pair : 2 * pair + 2] + 1) / 2,
        label=None,
        shape=None,
    )
    highlight(ax, grid, cols=(2 * pair, 2 * pair + 2))
    text(
        ax,
        (x_grid, grid.y - 0.35),
        f"framed: pair $j = {pair}$, columns {2 * pair} and {2 * pair + 1}",
        size=8.5,
        va="top",
        role="weight",
    )
    for i in range(positions):
        text(ax, (grid.x - 0.08, grid.cell_center(i, 0)[1]), f"{i}", ha="right", size=8)
    text(ax, (grid.x - 0.35, cy), "$i$", ha="right", size=10)
    top = grid.y + grid.height + 0.12
    text(ax, (grid.cell_center(0, 2 * pair)[0], top), "sin", size=8, va="bottom", role="weight")
    text(ax, (grid.cell_center(0, 2 * pair + 1)[0], top + 0.2), "cos", size=8, va="bottom", role="weight")

    ax.add_patch(Circle((cx, cy), radius, facecolor="none", edgecolor=dark("neutral", 0.1), linewidth=1.0))
    ax.plot([cx - radius - 0.2, cx + radius + 0.2], [cy, cy], color=dark("neutral", 0.1), linewidth=0.7)
    ax.plot([cx, cx], [cy - radius - 0.2, cy + radius + 0.2], color=dark("neutral", 0.1), linewidth=0.7)
    text(ax, (cx + radius + 0.2, cy - 0.08), f"$\\cos(i\\omega_{pair})$", ha="center", va="top", size=9)
    text(ax, (cx + 0.08, cy + radius + 0.2), f"$\\sin(i\\omega_{pair})$", ha="left", va="bottom", size=9)

    def point(i: int) -> tuple[float, float]:  # (cos, sin) of position i, from the encoding itself
        return (cx + radius * P[i, 2 * pair + 1], cy + radius * P[i, 2 * pair])

    for i in range(positions):
        x, y = point(i)
        ax.plot([x], [y], "o", color=dark("neutral"), markersize=6, zorder=5)
        angle = math.atan2(y - cy, x - cx)
        text(ax, (cx + (radius + 0.2) * math.cos(angle), cy + (radius + 0.2) * math.sin(angle)), f"{i}", size=9)
    for start in SHIFTED_FROM:
        # the image of p_start under R, drawn from the matrix, lands on the point of start + delta
        s_new, c_new = R @ np.array([P[start, 2 * pair], P[start, 2 * pair + 1]])
        inner = 0.78
        ax.add_patch(
            FancyArrowPatch(
                (cx + inner * radius * P[start, 2 * pair + 1], cy + inner * radius * P[start, 2 * pair]),
                (cx + inner * radius * c_new, cy + inner * radius * s_new),
                connectionstyle=f"arc3,rad={ARC_SIGN * math.tan(delta * omega / 4):.4f}",
                arrowstyle="-|>",
                mutation_scale=11,
                color=dark("weight", 0.1),
                linewidth=1.4,
                zorder=4,
            )
        )
        for i in (start, start + delta):
            x, y = point(i)
            ax.plot([cx, x], [cy, y], color=light("weight", 0.4), linewidth=0.8, zorder=3)
    text(
        ax,
        (cx, cy - radius - 0.45),
        f"from $i$ to $i + \\delta$: a turn by $\\delta\\omega_{pair}$ = {delta * omega:.2f} rad",
        size=9,
        role="weight",
        va="top",
    )

    x_r = cx + radius + 0.75
    matrix_block(
        ax,
        (x_r, cy - radius + 0.2),
        2,
        2,
        role="weight",
        label=f"$R(\\delta\\omega_{pair})$",
        shape=f"$\\delta = {delta}$",
        cell=0.42,
        values=R,
        fmt="{:+.2f}",
    )
    text(ax, (x_r, cy - radius - 0.55), "same for every $i$", size=8.5, va="top")
    return fig
