"""Diagram of single-query attention: query, keys, scores, weights, weighted sum (chapter 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Circle

from ..core.softmax import softmax
from .style import INK, arrow, bracket_label, dark, matrix_block, new_diagram, text

#: the chapter's hand-computable example: d_k = 4 (so 1/sqrt(d_k) = 1/2), scores 2, 1, 0
EXAMPLE_QUERY = (1.0, 1.0, 1.0, 1.0)
EXAMPLE_KEYS = ((1.0, 1.0, 1.0, 1.0), (1.0, 1.0, 0.0, 0.0), (1.0, -1.0, 1.0, -1.0))
EXAMPLE_VALUES = ((1.0, 0.0), (0.0, 1.0), (1.0, 1.0))

THREE = "{:.3f}"  # weights and outputs, to three decimals


def _numbers(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=float)


def _fmt(values: np.ndarray) -> str:
    return "{:.0f}" if np.allclose(values, np.round(values)) else "{:.2f}"


def _vector_text(values: np.ndarray, fmt: str | None = None) -> str:
    return "(" + ", ".join((fmt or _fmt(values)).format(v) for v in values) + ")"


def draw_single_query(
    query: Sequence[float] | torch.Tensor | None = None,
    keys: Sequence[Sequence[float]] | torch.Tensor | None = None,
    values: Sequence[Sequence[float]] | torch.Tensor | None = None,
    *,
    tokens: Sequence[str] | None = None,
    numbers: bool = True,
) -> Figure:
    """Draw one query attending to T key-value pairs, with the numbers of each step.

    s_t = q·k_t / sqrt(d_k),  a = softmax(s),  o = sum_t a_t v_t

    query (d_k,), keys (T, d_k), values (T, d_v) (rows, as in ``attnbook.attention``); by default the
    hand-computable example of chapter 1 (:data:`EXAMPLE_QUERY`, ...). ``tokens`` names the T
    context tokens; ``numbers=False`` leaves the cells blank. Chapter 1, "An example by hand".
    """
    q = _numbers(EXAMPLE_QUERY if query is None else query)
    k = _numbers(EXAMPLE_KEYS if keys is None else keys)
    v = _numbers(EXAMPLE_VALUES if values is None else values)
    if q.ndim != 1 or k.ndim != 2 or v.ndim != 2 or k.shape[1] != q.shape[0] or v.shape[0] != k.shape[0]:
        raise ValueError(
            f"expected query (d_k,), keys (T, d_k), values (T, d_v); got query {q.shape}, "
            f"keys {k.shape}, values {v.shape}"
        )
    T, d_k, d_v = k.shape[0], q.shape[0], v.shape[1]
    if tokens is not None and len(tokens) != T:
        raise ValueError(f"got {len(tokens)} token names for {T} keys")
    s = k @ q / math.sqrt(d_k)  # (T, d_k) @ (d_k,) -> (T,)
    a = softmax(torch.from_numpy(s)).numpy()  # (T,)
    o = a @ v  # (T,) @ (T, d_v) -> (d_v,)

    cell, dx = 0.42, 1.1
    x0 = 2.3  # centre of the first context column
    y_value = 0.95 + d_v * cell / 2
    y_weight = y_value + d_v * cell / 2 + 0.8
    y_score = y_weight + 0.85
    y_key = y_score + 1.1 + d_k * cell / 2
    height = y_key + d_k * cell / 2 + (0.95 if tokens else 0.65)
    width = x0 + (T - 1) * dx + 3.1
    alt = (
        f"Single-query attention with {T} key-value pairs. The query q{' ' + _vector_text(q) if numbers else ''} "
        f"is compared with each key k_1 to k_{T} by a scaled dot product, giving the scores"
        f"{' ' + _vector_text(s) if numbers else ''}; a softmax turns them into weights"
        f"{' ' + _vector_text(a, THREE) if numbers else ''} that sum to 1; the output o is the sum of the "
        f"values v_1 to v_{T}, each multiplied by its weight{': o = ' + _vector_text(o, THREE) if numbers else ''}."
    )
    fig, ax = new_diagram(width, height, alt=alt)

    def fill(x):
        return x if numbers else None

    xs = [x0 + t * dx for t in range(T)]
    q_block = matrix_block(
        ax,
        (0.75, y_key),
        d_k,
        1,
        role="query",
        label="$q$",
        cell=cell,
        values=fill(q[:, None]),
        fmt=_fmt(q),
        shape_side=None,
    )
    key_blocks, score_blocks, value_blocks = [], [], []
    for t, x in enumerate(xs):
        kb = matrix_block(
            ax, (x, y_key), d_k, 1, role="key", label=f"$k_{t + 1}$", cell=cell, values=fill(k[t][:, None]), fmt=_fmt(k)
        )
        if tokens:
            text(ax, (x, kb.y + kb.height + 0.42), tokens[t], style="italic", va="bottom")
        sb = matrix_block(
            ax, (x, y_score), 1, 1, role="score", cell=cell, values=fill([[s[t]]]), fmt=_fmt(s), label_side=None
        )
        wb = matrix_block(
            ax,
            (x, y_weight),
            1,
            1,
            role="weight",
            cell=cell,
            values=fill([[a[t]]]),
            fmt="{:.3f}",
            shade=[[a[t]]],
            label_side=None,
        )
        vb = matrix_block(
            ax,
            (x, y_value),
            d_v,
            1,
            role="value",
            label=f"$v_{t + 1}$",
            cell=cell,
            values=fill(v[t][:, None]),
            fmt=_fmt(v),
            label_side="left",
        )
        arrow(ax, sb.bottom, wb.top, role="score")
        text(ax, (x + 0.02, (wb.y + vb.y + vb.height) / 2), "×", size=12)
        key_blocks.append(kb)
        score_blocks.append(sb)
        value_blocks.append(vb)
    # the query meets every key at a dot-product node on the key's arrow to its score
    y_dot = (key_blocks[0].y + y_score + cell / 2) / 2
    ax.plot([q_block.bottom[0]] * 2, [q_block.y - 0.06, y_dot], color=dark("query"), lw=1.2, zorder=1)
    ax.plot([q_block.bottom[0], xs[-1]], [y_dot, y_dot], color=dark("query"), lw=1.2, zorder=1)
    for kb, sb in zip(key_blocks, score_blocks):
        ax.add_patch(Circle((kb.bottom[0], y_dot), 0.11, facecolor="white", edgecolor=INK, lw=1.0, zorder=4))
        text(ax, (kb.bottom[0], y_dot), "·", size=14, zorder=5)
        arrow(ax, kb.bottom, (kb.bottom[0], y_dot + 0.11), role="key", gap=0.03)
        arrow(ax, (kb.bottom[0], y_dot - 0.11), sb.top, role="score", gap=0.03)
    right = xs[-1] + 0.45
    text(ax, (right, y_score), r"scores  $s_t = q\cdot k_t/\sqrt{d_k}$", ha="left")
    text(ax, (right, (y_score + y_weight) / 2), "softmax over t", ha="left", style="italic")
    text(ax, (right, y_weight), "weights  $a_t$ (they sum to 1)", ha="left")
    # the weighted sum: a bracket under the values, then the output
    y_bus = value_blocks[0].y - 0.3
    total = " + ".join(f"a_{t + 1} v_{t + 1}" for t in range(T)) if T <= 4 else r"\Sigma_t\, a_t v_t"
    bracket_label(ax, (xs[0] - 0.3, y_bus), (xs[-1] + 0.3, y_bus), f"weighted sum  ${total}$", side="bottom")
    for vb in value_blocks:
        ax.plot([vb.bottom[0]] * 2, [vb.bottom[1] - 0.05, y_bus], color="#555555", lw=0.9)
    o_block = matrix_block(
        ax,
        (xs[-1] + 1.9, y_value),
        d_v,
        1,
        role="output",
        label="$o$",
        cell=cell,
        values=fill(o[:, None]),
        fmt="{:.3f}",
        label_side="top",
    )
    arrow(ax, (xs[-1] + 0.3, y_bus), o_block.bottom, role="output", bend=0.25)
    return fig
