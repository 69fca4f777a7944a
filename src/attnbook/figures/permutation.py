"""Diagram of a permutation acting on the queries and on the key-value pairs (chapter 6)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ..positions.permutations import permutation_matrix
from .style import arrow, dark, light, new_diagram, text

ROW_STEP = 0.36  # vertical distance between rows (inches)
BOX = (0.5, 0.27)  # width and height of one vector's box


def _box(ax, centre: tuple[float, float], label: str, role: str, width: float = BOX[0]) -> None:
    x, y = centre
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - BOX[1] / 2),
            width,
            BOX[1],
            boxstyle="round,pad=0,rounding_size=0.04",
            facecolor=light(role, 0.72),
            edgecolor=dark(role),
            linewidth=1.0,
            zorder=2,
        )
    )
    text(ax, centre, label, size=9, zorder=3)


def reordered(order: Sequence[int]) -> list[int]:
    """Which original row each row of P_sigma X is: P_sigma @ (0, 1, ..., n-1), by the package."""
    n = len(order)
    P = permutation_matrix(torch.tensor(list(order)), dtype=torch.float64)  # (n, n)
    return [int(round(v)) for v in (P @ torch.arange(n, dtype=torch.float64)).tolist()]


def _check_order(name: str, order: Sequence[int], low: int, high: int) -> list[int]:
    order = [int(i) for i in order]
    if not low <= len(order) <= high or sorted(order) != list(range(len(order))):
        raise ValueError(f"{name} must hold each of 0..n-1 once, with {low} <= n <= {high}; got {order}")
    return order


def _crossings(ax, x_left: float, x_right: float, ys: list[float], rows: list[int], role: str) -> None:
    """Lines from row rows[i] on the left to row i on the right (row i of P X is row rows[i] of X)."""
    for i, source in enumerate(rows):
        ax.plot([x_left, x_right], [ys[source], ys[i]], color=dark(role, 0.1), linewidth=1.1, alpha=0.8, zorder=1)


def _alt(queries: list[int], pairs: list[int]) -> str:
    q_new = ", ".join(f"q{i}" for i in queries)
    k_new = ", ".join(f"k{j}" for j in pairs)
    return (
        f"Two panels. Left, the {len(queries)} queries q0 to q{len(queries) - 1} are reordered by a "
        f"permutation matrix A into {q_new}; attention of the reordered queries over the same keys "
        f"and values gives the outputs in the same new order, {', '.join(f'o{i}' for i in queries)}: "
        f"attention is equivariant in the queries. Right, the {len(pairs)} key-value pairs, each a key "
        f"box joined to its value box, are reordered together by B into {k_new}; a query attending to "
        f"either order gets the same output o: attention is invariant in the key-value pairs."
    )


def draw_permutation(query_order: Sequence[int] = (2, 0, 1), pair_order: Sequence[int] = (3, 0, 4, 1, 2)) -> Figure:
    """Draw a permutation of the queries (outputs follow) and of the key-value pairs (output stays).

    Attention(A Q, K, V) = A Attention(Q, K, V)   and   Attention(Q, B K, B V) = Attention(Q, K, V),

    with A = P_sigma for sigma = ``query_order`` (row i of A Q is q_sigma(i)) and B = P_tau for
    tau = ``pair_order`` (row j of B K is k_tau(j), and of B V is v_tau(j)). Q is (n, d_k), K is
    (m, d_k), V is (m, d_v). The reordering is computed with :func:`attnbook.permutation_matrix`.
    Chapter 6.
    """
    sigma = _check_order("query_order", query_order, 2, 6)
    tau = _check_order("pair_order", pair_order, 2, 7)
    queries, pairs = reordered(sigma), reordered(tau)
    n, m = len(sigma), len(tau)
    rows = max(n, m)
    height = rows * ROW_STEP + 2.0
    y_top = height - 0.95  # centre of row 0
    fig, ax = new_diagram(8.6, height, alt=_alt(queries, pairs))

    # left: the queries, A Q, and the outputs in the new order
    x_q, x_aq, x_out = 0.55, 1.75, 3.35
    ys_q = [y_top - i * ROW_STEP - (rows - n) * ROW_STEP / 2 for i in range(n)]
    text(ax, (1.95, height - 0.2), "reorder the queries: the outputs follow", size=10, va="top")
    text(
        ax,
        (1.95, height - 0.45),
        "$\\mathrm{Attention}(AQ, K, V) = A\\,\\mathrm{Attention}(Q, K, V)$",
        size=9,
        va="top",
    )
    for i in range(n):
        _box(ax, (x_q, ys_q[i]), f"$q_{i}$", "query")
        _box(ax, (x_aq, ys_q[i]), f"$q_{queries[i]}$", "query")
        _box(ax, (x_out, ys_q[i]), f"$o_{queries[i]}$", "output")
    _crossings(ax, x_q + BOX[0] / 2, x_aq - BOX[0] / 2, ys_q, queries, "query")
    text(ax, ((x_q + x_aq) / 2, ys_q[-1] - 0.3), "$A$", size=11, va="top")
    text(ax, (x_q, ys_q[-1] - 0.3), "$Q$", size=11, va="top", role="query")
    text(ax, (x_aq, ys_q[-1] - 0.3), "$AQ$", size=11, va="top", role="query")
    text(ax, (x_out, ys_q[-1] - 0.3), "$AO$", size=11, va="top", role="output")
    y_mid_q = (ys_q[0] + ys_q[-1]) / 2
    arrow(
        ax,
        (x_aq + BOX[0] / 2 + 0.05, y_mid_q),
        (x_out - BOX[0] / 2 - 0.05, y_mid_q),
        label="attend to\n$K, V$",
        label_offset=(0.0, 0.08),
    )

    # right: the key-value pairs, B K and B V, and the one output that does not change
    pair_w = 2 * BOX[0]
    x_kv, x_bkv = 5.0, 7.2
    ys_k = [y_top - j * ROW_STEP - (rows - m) * ROW_STEP / 2 for j in range(m)]
    text(ax, (6.1, height - 0.2), "reorder the key–value pairs together: nothing changes", size=10, va="top")
    text(ax, (6.1, height - 0.45), "$\\mathrm{Attention}(Q, BK, BV) = \\mathrm{Attention}(Q, K, V)$", size=9, va="top")
    for j in range(m):
        for x, index in ((x_kv, j), (x_bkv, pairs[j])):
            _box(ax, (x - BOX[0] / 2, ys_k[j]), f"$k_{index}$", "key")
            _box(ax, (x + BOX[0] / 2, ys_k[j]), f"$v_{index}$", "value")
    _crossings(ax, x_kv + pair_w / 2, x_bkv - pair_w / 2, ys_k, pairs, "key")
    y_label = ys_k[-1] - 0.3
    text(ax, (x_kv, y_label), "$K, V$", size=11, va="top", role="key")
    text(ax, ((x_kv + x_bkv) / 2, y_label), "$B$", size=11, va="top")
    text(ax, (x_bkv, y_label), "$BK, BV$", size=11, va="top", role="key")
    y_o = y_label - 0.55
    for x in (x_kv, x_bkv):
        _box(ax, (x, y_o), "$o$", "output")
    text(ax, ((x_kv + x_bkv) / 2, y_o), "$=$", size=12)
    text(
        ax,
        ((x_kv + x_bkv) / 2, y_o - 0.22),
        "the output of a query, in either order",
        size=8.5,
        va="top",
        role="output",
    )
    return fig
