"""Diagram of self- and cross-attention in an encoder-decoder (chapter 4)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from .style import arrow, dark, light, matrix_block, new_diagram, text

TOKEN_STEP = 0.58  # horizontal distance between neighbouring tokens (inches)
TOKEN_BOX = (0.52, 0.28)  # width and height of a token's box


def _check_words(name: str, words: Sequence[str]) -> list[str]:
    words = list(words)
    if not 1 <= len(words) <= 7 or not all(isinstance(w, str) and w for w in words):
        raise ValueError(f"{name} must be 1 to 7 non-empty strings, got {words!r}")
    return words


def _tokens(ax, x_left: float, y: float, words: list[str], role: str) -> list[tuple[float, float]]:
    """A row of token boxes starting at ``x_left``; return the centre of each."""
    centres = []
    for i, word in enumerate(words):
        cx = x_left + (i + 0.5) * TOKEN_STEP
        w, h = TOKEN_BOX
        ax.add_patch(
            FancyBboxPatch(
                (cx - w / 2, y - h / 2),
                w,
                h,
                boxstyle="round,pad=0,rounding_size=0.05",
                facecolor=light(role, 0.75),
                edgecolor=dark(role),
                linewidth=1.0,
                zorder=2,
            )
        )
        text(ax, (cx, y), word, size=8, zorder=3)
        centres.append((cx, y))
    return centres


def _links(ax, queries, keys, allowed: np.ndarray) -> None:
    """A line from query i (above) down to key j (below) for every allowed pair."""
    h = TOKEN_BOX[1] / 2
    for i, (qx, qy) in enumerate(queries):
        for j, (kx, ky) in enumerate(keys):
            if allowed[i, j]:
                ax.plot([qx, kx], [qy - h, ky + h], color=dark("weight", 0.1), linewidth=0.9, alpha=0.7, zorder=1)


def _alt(source: list[str], target: list[str]) -> str:
    n, m = len(target), len(source)
    return (
        f"Three panels. Left, encoder self-attention with no mask: the {m} source tokens "
        f"({', '.join(source)}) as queries above and as keys and values below, every query linked to "
        f"every key, and a full {m} by {m} grid of allowed pairs. Middle, cross-attention: the {n} "
        f"target tokens ({', '.join(target)}) as queries above and the encoder's {m} outputs as keys "
        f"and values below, every query linked to every key, and a full {n} by {m} grid. Right, decoder "
        f"self-attention with a causal mask: the {n} target tokens as queries and as keys, each query "
        f"linked to itself and the tokens before it, and a {n} by {n} grid whose cells above the "
        f"diagonal are hatched as blocked. Dashed arrows bring the encoder's output and the decoder's "
        f"tokens into the cross-attention."
    )


def draw_encoder_decoder(
    source: Sequence[str] = ("le", "chat", "noir", "dort"),
    target: Sequence[str] = ("<s>", "the", "black", "cat", "sleeps"),
) -> Figure:
    """Draw the three attentions of an encoder-decoder: who attends to whom, and the mask.

    encoder self-attention:  Q, K, V from X_enc (m tokens), no mask, weights (m, m)
    cross-attention:         Q from X_dec (n tokens), K, V from the encoder's output, no mask, (n, m)
    decoder self-attention:  Q, K, V from X_dec, causal mask (key j <= query i), weights (n, n)

    Each panel links every query (top row) to the keys it may attend to (bottom row), and shows
    below the grid of allowed (query, key) pairs, blocked ones hatched. Chapter 4.
    """
    source, target = _check_words("source", source), _check_words("target", target)
    m, n = len(source), len(target)
    panel_gap, cell = 0.65, 0.2
    widths = [m * TOKEN_STEP, max(n, m) * TOKEN_STEP, n * TOKEN_STEP]
    lefts = [1.0]
    for w in widths[:-1]:
        lefts.append(lefts[-1] + w + panel_gap)
    width = lefts[-1] + widths[-1] + 0.35
    grid_top = 0.45 + n * cell + 0.3
    y_keys, y_queries = grid_top + 0.45, grid_top + 1.55
    height = y_queries + 0.95
    fig, ax = new_diagram(width, height, alt=_alt(source, target))

    causal = np.tril(np.ones((n, n), dtype=bool))
    panels = [
        ("encoder self-attention", "$Z = X_\\mathrm{enc}$, no mask", source, source, np.ones((m, m), bool)),
        (
            "cross-attention",
            "queries from the decoder,\nkeys and values from the encoder",
            target,
            source,
            np.ones((n, m), bool),
        ),
        ("decoder self-attention", "$Z = X_\\mathrm{dec}$, causal mask", target, target, causal),
    ]
    rows = {}
    for (title, subtitle, q_words, k_words, allowed), left, w in zip(panels, lefts, widths):
        centre = left + w / 2
        text(ax, (centre, height - 0.2), title, size=10.5, va="top")
        text(ax, (centre, height - 0.45), subtitle, size=8, va="top")
        q_left = centre - len(q_words) * TOKEN_STEP / 2
        k_left = centre - len(k_words) * TOKEN_STEP / 2
        queries = _tokens(ax, q_left, y_queries, q_words, "query")
        keys = _tokens(ax, k_left, y_keys, k_words, "key")
        _links(ax, queries, keys, allowed)
        rows[title] = (queries, keys)
        matrix_block(
            ax,
            (centre, grid_top - len(q_words) * cell / 2),
            len(q_words),
            len(k_words),
            role="weight",
            cell=cell,
            blocked=~allowed,
            shape=f"{len(q_words)} queries × {len(k_words)} keys",
            shape_side="bottom",
        )
    text(ax, (lefts[0] - 0.1, y_queries), "queries", size=8.5, ha="right", role="query")
    text(ax, (lefts[0] - 0.1, y_keys), "keys and\nvalues", size=8.5, ha="right", role="key")
    text(ax, (lefts[0] - 0.1, grid_top - n * cell / 2), "allowed\npairs", size=8.5, ha="right", role="weight")
    enc_keys = rows["encoder self-attention"][1]
    cross_queries, cross_keys = rows["cross-attention"]
    dec_queries = rows["decoder self-attention"][0]
    half = TOKEN_BOX[0] / 2
    arrow(
        ax,
        (enc_keys[-1][0] + half, y_keys),
        (cross_keys[0][0] - half, y_keys),
        linestyle="--",
        label="output",
        label_offset=(0.0, 0.05),
    )
    arrow(ax, (dec_queries[0][0] - half, y_queries), (cross_queries[-1][0] + half, y_queries), linestyle="--")
    return fig
