"""Diagram of multi-head attention: split into heads, attend per head, concatenate, project (chapter 3)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from .style import INK, arrow, dark, light, matrix_block, new_diagram, text

#: depth of colour of the columns of head h = 1, 2, 3, ... (alternating, so neighbouring heads differ)
HEAD_SHADES = (0.2, 0.75)


def _head_shade(rows: int, cols: int, d_head: int, *, along: str = "cols") -> np.ndarray:
    """Shade matrix in which the block of head h (columns, or rows) gets HEAD_SHADES[(h - 1) % 2]."""
    index = np.arange(cols if along == "cols" else rows) // d_head  # head h - 1 of each column (row)
    shades = np.array(HEAD_SHADES)[index % len(HEAD_SHADES)]
    return np.tile(shades, (rows, 1)) if along == "cols" else np.tile(shades[:, None], (1, cols))


def _divide(ax, block, d_head: int, heads: int, *, along: str = "cols") -> None:
    """Thick lines between the heads' column (or row) blocks of ``block``."""
    for h in range(1, heads):
        if along == "cols":
            x = block.x + h * d_head * block.cell
            ax.plot([x, x], [block.y, block.y + block.height], color=INK, linewidth=1.6, zorder=4)
        else:
            y = block.y + block.height - h * d_head * block.cell
            ax.plot([block.x, block.x + block.width], [y, y], color=INK, linewidth=1.6, zorder=4)


def _alt(n: int, d_model: int, num_heads: int) -> str:
    d_head = d_model // num_heads
    return (
        f"A flow from left to right. X, {n} rows by {d_model} columns, is projected to Q, K and V, "
        f"each {n} by {d_model} and split into {num_heads} column blocks of {d_head}, one per head. "
        f"For each head h its blocks Q^h, K^h and V^h enter an attention box that returns O^h, "
        f"{n} by {d_head}. The outputs are placed side by side as a concatenation, {n} by {d_model}, "
        f"which is multiplied by W_o, {d_model} by {d_model} with {num_heads} row blocks, one per "
        f"head, giving the output, {n} by {d_model}."
    )


def draw_multi_head(n: int = 5, d_model: int = 8, num_heads: int = 2) -> Figure:
    """Draw multi-head attention with every matrix a grid of its true shape.

    Q, K, V = X W_q, X W_k, X W_v (fused, one product each); head h = 1..H owns columns
    (h-1) d_head .. h d_head - 1 of each; O^h = Attention(Q^h, K^h, V^h);
    output = [O^1 | ... | O^H] W_o, where rows (h-1) d_head .. h d_head - 1 of W_o meet head h.

    X, Q, K, V, the concatenation and the output are (n, d_model); O^h is (n, d_head) with
    d_head = d_model / H; W_o is (H d_head, d_model), drawn above the output as in a matrix
    product. Alternate heads are shaded light and dark. Chapter 3.
    """
    for name, size, most in (("n", n, 8), ("d_model", d_model, 12), ("num_heads", num_heads, 4)):
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= most:
            raise ValueError(f"{name} = {size!r}: draw between 1 and {most}")
    if d_model % num_heads:
        raise ValueError(f"d_model = {d_model} is not divisible by num_heads = {num_heads}")
    d_head = d_model // num_heads
    cell = 0.14
    w, h = d_model * cell, n * cell  # width and height of an (n, d_model) block
    box_w, box_h = 1.35, 0.6  # a head's attention box
    stack_step = h + 0.3  # vertical distance between Q, K and V
    x_x, x_qkv = 0.35 + w / 2, 0.35 + w + 0.95 + w / 2
    x_box = x_qkv + w / 2 + 0.9 + box_w / 2
    x_cat = x_box + box_w / 2 + 0.8 + w / 2
    x_out = x_cat + w / 2 + 0.8 + w / 2
    width = x_out + w / 2 + 0.95
    box_step = box_h + 0.45  # vertical distance between the heads' boxes
    below = max(stack_step + h / 2 + 0.4, h / 2 + 0.75, (num_heads - 1) * box_step / 2 + box_h / 2 + 0.2)
    above = max(stack_step + h / 2 + 0.45, h / 2 + 0.3 + w + 0.4, (num_heads - 1) * box_step / 2 + box_h / 2 + 0.2)
    y_mid, height = below + 0.1, below + above + 0.2
    fig, ax = new_diagram(width, height, alt=_alt(n, d_model, num_heads))
    shade = _head_shade(n, d_model, d_head)

    x_block = matrix_block(
        ax, (x_x, y_mid), n, d_model, role="neutral", label="$X$", shape="$n \\times d_\\mathrm{model}$", cell=cell
    )
    fused = {}
    for i, (key, role) in enumerate((("Q", "query"), ("K", "key"), ("V", "value"))):
        y = y_mid + (1 - i) * stack_step
        fused[key] = matrix_block(
            ax,
            (x_qkv, y),
            n,
            d_model,
            role=role,
            label=f"${key}$",
            cell=cell,
            shade=shade,
            label_side="left",
            shape_side=None,
        )
        _divide(ax, fused[key], d_head, num_heads)
        arrow(ax, x_block.right, (fused[key].x - 0.2, fused[key].left[1]))
    text(
        ax, ((x_block.right[0] + fused["Q"].x) / 2 - 0.1, fused["Q"].y + h + 0.1), "$XW_q,\\ XW_k,\\ XW_v$", va="bottom"
    )
    text(ax, (x_qkv, fused["V"].y - 0.08), "each $n \\times H d_\\mathrm{head}$", va="top")
    for head in range(1, num_heads + 1):  # column labels over Q: head 1, head 2, ...
        x_head = fused["Q"].x + (head - 0.5) * d_head * cell
        text(ax, (x_head, fused["Q"].y + h + 0.04), f"head {head}", va="bottom", size=7.5)

    concat = matrix_block(
        ax,
        (x_cat, y_mid),
        n,
        d_model,
        role="output",
        label=None,
        shape="$n \\times H d_\\mathrm{head}$",
        cell=cell,
        shade=shade,
    )
    _divide(ax, concat, d_head, num_heads)
    text(ax, (x_cat, concat.y - 0.36), "$[O^1 | \\cdots | O^H]$", va="top", role="output")
    for head in range(1, num_heads + 1):
        y = y_mid + ((num_heads + 1) / 2 - head) * box_step
        ax.add_patch(
            FancyBboxPatch(
                (x_box - box_w / 2, y - box_h / 2),
                box_w,
                box_h,
                boxstyle="round,pad=0,rounding_size=0.08",
                facecolor=light("weight", 0.8),
                edgecolor=dark("weight"),
                linewidth=1.2,
                zorder=1,
            )
        )
        text(ax, (x_box, y + 0.12), f"head {head}", role="weight", size=9.5)
        text(ax, (x_box, y - 0.13), f"Attention$(Q^{head}, K^{head}, V^{head})$", size=8.5)
        arrow(ax, (fused["K"].right[0] + 0.05, fused["K"].right[1]), (x_box - box_w / 2, y))
        x_slot = concat.x + (head - 0.5) * d_head * cell  # head h's columns of the concatenation
        if num_heads == 1:
            arrow(ax, (x_box + box_w / 2, y), concat.left)
        elif y > y_mid + 1e-9:  # boxes above the middle enter their columns from the top ...
            arrow(ax, (x_box + box_w / 2, y), (x_slot, concat.y + concat.height))
        else:  # ... the others from below, the middle one along a curve under the block
            arrow(ax, (x_box + box_w / 2, y), (x_slot, concat.y), bend=0.45 if abs(y - y_mid) < 1e-9 else 0.0)
        text(ax, (x_box + box_w / 2 + 0.12, y + 0.04), f"$O^{head}$", role="output", ha="left", va="bottom")

    out = matrix_block(
        ax, (x_out, y_mid), n, d_model, role="output", label=None, shape="$n \\times d_\\mathrm{model}$", cell=cell
    )
    text(ax, (x_out, out.y - 0.36), "output $= [O^1 | \\cdots | O^H]\\, W_o$", va="top", role="output")
    wo = matrix_block(
        ax,
        (x_out, y_mid + h / 2 + 0.3 + w / 2),
        d_model,
        d_model,
        role="neutral",
        label="$W_o$",
        shape=None,
        cell=cell,
        shade=_head_shade(d_model, d_model, d_head, along="rows"),
    )
    _divide(ax, wo, d_head, num_heads, along="rows")
    for head in range(1, num_heads + 1):  # row labels of W_o: the block W_o^h meets head h
        y_head = wo.y + wo.height - (head - 0.5) * d_head * cell
        text(ax, (wo.x - 0.05, y_head), f"$W_o^{head}$", ha="right", size=8.5)
    text(
        ax,
        (wo.right[0] + 0.06, wo.center[1]),
        "$H d_\\mathrm{head}$\n$\\times d_\\mathrm{model}$",
        ha="left",
        size=8.5,
        role="neutral",
    )
    arrow(ax, concat.right, out.left)
    return fig
