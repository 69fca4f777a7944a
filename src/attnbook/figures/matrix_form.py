"""Diagram of attention in matrix form, with the shapes of Q, K, V, S, A, O (chapters 0 and 2)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from matplotlib.figure import Figure

from .style import arrow, highlight, matrix_block, new_diagram, text

#: symbol, shape and formula of each matrix in the two conventions (chapter 0's dictionary)
NAMES = {
    "row": {
        "Q": ("$Q$", "$n \\times d_k$"),
        "KT": ("$K^\\top$", "$d_k \\times m$"),
        "S": ("$S = QK^\\top/\\sqrt{d_k}$", "$n \\times m$"),
        "A": ("$A$", "$n \\times m$"),
        "V": ("$V$", "$m \\times d_v$"),
        "O": ("$O = AV$", "$n \\times d_v$"),
    },
    "column": {
        "Q": ("$Q$", "$d_\\mathrm{attn} \\times \\ell_x$"),
        "KT": ("$K^\\top$", "$\\ell_z \\times d_\\mathrm{attn}$"),
        "S": ("$S = K^\\top Q/\\sqrt{d_\\mathrm{attn}}$", "$\\ell_z \\times \\ell_x$"),
        "A": ("$A$", "$\\ell_z \\times \\ell_x$"),
        "V": ("$V$", "$d_\\mathrm{out} \\times \\ell_z$"),
        "O": ("$O = VA$", "$d_\\mathrm{out} \\times \\ell_x$"),
    },
}

# the column-convention picture is the row-convention one reflected in its anti-diagonal,
# (x, y) -> (-y, -x): rows become columns and each side of a block moves as below
_REFLECTED_SIDE = {"bottom": "right", "top": "left", "left": "top", "right": "bottom", None: None}


@dataclass
class _Spec:
    key: str
    role: str
    x: float
    y: float
    rows: int
    cols: int
    side: str  # where label and shape go, in the row-convention layout
    blocked: np.ndarray | None = None
    shade: np.ndarray | None = None
    extra: dict = field(default_factory=dict)


def _plain(math: str) -> str:
    """'$n \\times d_k$' -> 'n by d_k', for alt text."""
    for tex, word in (("$", ""), ("\\times", "by"), ("\\mathrm", ""), ("\\ell", "l"), ("{", ""), ("}", "")):
        math = math.replace(tex, word)
    return " ".join(math.split())


def _as_mask(mask, n: int, m: int) -> np.ndarray | None:
    if mask is None:
        return None
    arr = mask.detach().to("cpu").numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    if arr.shape != (n, m) or arr.dtype != bool:
        raise ValueError(f"mask must be a boolean (n, m) = ({n}, {m}) keep-mask, got {arr.dtype} {arr.shape}")
    return ~arr


def draw_matrix_form(
    convention: str = "row",
    *,
    n: int = 4,
    m: int = 6,
    d_k: int = 3,
    d_v: int = 2,
    mask: np.ndarray | torch.Tensor | None = None,
    highlight_query: int | None = 1,
) -> Figure:
    """Draw attention as matrix products, every matrix a grid of its true shape.

    row:    S = Q K^T / sqrt(d_k),  A = softmax(S) over each row,  O = A V
    column: S = K^T Q / sqrt(d_attn),  A = softmax(S) over each column,  O = V A

    Q (n, d_k), K^T (d_k, m), S and A (n, m), V (m, d_v), O (n, d_v) in the row convention; every
    one transposed in the column convention, with n = l_x, m = l_z, d_k = d_attn, d_v = d_out.
    ``mask`` (a boolean (n, m) keep-mask, row convention) hatches the blocked scores and weights;
    ``highlight_query`` frames one query's row (column) through Q, S, A and O. Chapters 0 and 2.
    """
    if convention not in NAMES:
        raise ValueError(f"convention must be 'row' or 'column', got {convention!r}")
    for name, size in (("n", n), ("m", m), ("d_k", d_k), ("d_v", d_v)):
        if not 1 <= size <= 12:
            raise ValueError(f"{name} = {size}: draw between 1 and 12 cells")
    if highlight_query is not None and not 0 <= highlight_query < n:
        raise ValueError(f"highlight_query = {highlight_query} is not a query index below n = {n}")
    blocked = _as_mask(mask, n, m)
    column = convention == "column"
    cell, gap = (0.27, 0.45) if column else (0.3, 0.5)
    # row-convention layout, centres in inches: Q | S -> A | O on one line, K^T above S, V above O
    x_q = d_k * cell / 2
    x_s = x_q + d_k * cell / 2 + gap + m * cell / 2
    x_a = x_s + m * cell + (1.0 if column else 1.3)
    x_o = x_a + m * cell / 2 + gap + d_v * cell / 2
    y_top = n * cell / 2 + gap
    specs = [
        _Spec("Q", "query", x_q, 0.0, n, d_k, "bottom"),
        _Spec("KT", "key", x_s, y_top + d_k * cell / 2, d_k, m, "left"),
        _Spec("S", "score", x_s, 0.0, n, m, "bottom", blocked=blocked),
        _Spec("A", "weight", x_a, 0.0, n, m, "bottom", blocked=blocked),
        _Spec("V", "value", x_o, y_top + m * cell / 2, m, d_v, "left"),
        _Spec("O", "output", x_o, 0.0, n, d_v, "bottom"),
    ]
    if column:  # reflect in the anti-diagonal
        for spec in specs:
            spec.x, spec.y = -spec.y, -spec.x
            spec.rows, spec.cols = spec.cols, spec.rows
            spec.side = _REFLECTED_SIDE[spec.side]
            spec.blocked = None if spec.blocked is None else spec.blocked.T
    xs = [s.x - s.cols * cell / 2 for s in specs] + [s.x + s.cols * cell / 2 for s in specs]
    ys = [s.y - s.rows * cell / 2 for s in specs] + [s.y + s.rows * cell / 2 for s in specs]
    margin = {
        "left": 0.5,
        "right": 2.1 if column else 0.5,
        "bottom": 0.35 if column else 0.95,
        "top": 0.75 if column else 0.4,
    }
    width = max(xs) - min(xs) + margin["left"] + margin["right"]
    height = max(ys) - min(ys) + margin["bottom"] + margin["top"]
    dx, dy = margin["left"] - min(xs), margin["bottom"] - min(ys)

    names = NAMES[convention]
    plain = {key: _plain(shape) for key, (_, shape) in names.items()}
    axis = "column" if column else "row"
    product = (
        f"K transposed ({plain['KT']}), drawn left of S, times Q ({plain['Q']}), drawn above S,"
        if column
        else f"Q ({plain['Q']}) times K transposed ({plain['KT']}), drawn above S,"
    )
    symbols = ("l_x", "l_z", "d_attn", "d_out") if column else ("n", "m", "d_k", "d_v")
    sizes = ", ".join(f"{name} = {size}" for name, size in zip(symbols, (n, m, d_k, d_v)))
    output = "V times A (V is {}, drawn left of O)" if column else "A times V (V is {}, drawn above O)"
    alt = (
        f"Attention in the {convention} convention drawn as matrix products, each matrix a grid of cells "
        f"in its true shape ({sizes}): {product} gives the scores S ({plain['S']}); "
        f"a softmax over each {axis} gives the weights A of the same shape, drawn "
        f"{'below' if column else 'right of'} S; {output.format(plain['V'])} gives the output O ({plain['O']})."
    )
    if blocked is not None:
        alt += f" Hatched cells of S and A are blocked by a mask: {int(blocked.sum())} of {n * m} pairs."
    if highlight_query is not None:
        alt += f" A dashed frame marks the {axis} of query {highlight_query} in Q, S, A and O."
    fig, ax = new_diagram(width, height, alt=alt)
    blocks = {}
    for spec in specs:
        label, shape = names[spec.key]
        blocks[spec.key] = matrix_block(
            ax,
            (spec.x + dx, spec.y + dy),
            spec.rows,
            spec.cols,
            role=spec.role,
            label=label,
            shape=shape,
            cell=cell,
            blocked=spec.blocked,
            label_side=spec.side,
            shape_side=spec.side,
        )
    s_block, a_block = blocks["S"], blocks["A"]
    if column:
        arrow(ax, s_block.bottom, a_block.top, label=None)
        text(
            ax,
            (s_block.right[0] + 0.15, (s_block.y + a_block.y + a_block.height) / 2),
            "softmax\nover each column",
            ha="left",
        )
    else:
        arrow(ax, s_block.right, a_block.left, label="softmax", label_offset=(0.0, 0.1))
        text(ax, ((s_block.right[0] + a_block.left[0]) / 2, s_block.right[1] - 0.1), "over each row", va="top")
    title = "column convention: tokens are columns" if column else "row convention: tokens are rows"
    text(ax, (0.3, height - 0.3), title, ha="left", va="top", style="italic")
    if highlight_query is not None:
        i = highlight_query
        for key in ("Q", "S", "A", "O"):
            b = blocks[key]
            if column:
                highlight(ax, b, cols=(i, i + 1))
            else:
                highlight(ax, b, rows=(i, i + 1))
    return fig
