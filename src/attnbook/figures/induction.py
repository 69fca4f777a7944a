"""Diagram of the induction circuit: a previous-token head, K-composition, a copying head (chapter 10)."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from .style import LABEL_SIZE, NOTE_SIZE, SHAPE_SIZE, arrow, dark, light, new_diagram, text

ALT = (
    "A diagram of a token sequence and two attention layers. At the bottom, a row of token boxes: A, "
    "B, some dots, then A again at the current position, followed by a question mark that the output "
    "answers with B. In the middle band, labelled layer 0, previous-token head, a curved arrow goes "
    'from the box of B back to the box of A just before it; a note says it writes "previous token = '
    "A\" into B's residual stream. In the top band, labelled layer 1, induction head, a long curved "
    "arrow goes from the current A back to B; a note says its query from A matches the key at B, "
    "which carries the previous token A (K-composition), and its OV circuit copies B to the output. "
    "An arrow from the current position rises to an output box that reads predict B."
)

#: the tokens drawn, left to right: (text, position label, role of the box, x centre in inches)
TOKENS = (
    ("A", "$j - 1$", "neutral", 1.3),
    ("B", "$j$", "key", 2.4),
    ("…", "", None, 3.75),
    ("A", "$t$", "query", 5.1),
)


def _box(ax, centre: tuple[float, float], width: float, height: float, role: str, gid: str) -> FancyBboxPatch:
    patch = FancyBboxPatch(
        (centre[0] - width / 2, centre[1] - height / 2),
        width,
        height,
        boxstyle="round,pad=0,rounding_size=0.06",
        facecolor=light(role),
        edgecolor=dark(role),
        linewidth=1.3,
        zorder=2,
        gid=gid,
    )
    ax.add_patch(patch)
    return patch


def draw_induction_circuit() -> Figure:
    """Draw the induction circuit that chapter 10 finds in its two-layer attention-only model.

    The sequence holds A, B, ..., A. In layer 0 a previous-token head at B's position (j) attends
    to j - 1 and writes "the previous token is A" (through its OV circuit) into the residual stream
    at j. In layer 1 the induction head at the current A (t) forms its query from A; the key at j
    now carries A (K-composition), so it attends to j and its OV circuit copies B: the model
    predicts B. Token boxes have gids ``token:<index>``, the output box ``output``.
    """
    width, height = 8.6, 3.9
    fig, ax = new_diagram(width, height, alt=ALT)
    y_tok, size = 0.95, 0.5
    boxes = {}
    for index, (token, position, role, x) in enumerate(TOKENS):
        if role is None:
            text(ax, (x, y_tok), token, size=LABEL_SIZE)
            continue
        boxes[index] = _box(ax, (x, y_tok), size, size, role, f"token:{index}")
        text(ax, (x, y_tok), token, size=LABEL_SIZE, zorder=3)
        text(ax, (x, y_tok - size / 2 - 0.08), position, size=SHAPE_SIZE, va="top")
    text(ax, (0.25, y_tok), "tokens", size=NOTE_SIZE, ha="left", va="center", rotation=90)

    # layer 0: the previous-token head at j attends to j - 1
    x_a0, x_b, x_a1 = TOKENS[0][3], TOKENS[1][3], TOKENS[3][3]
    top = y_tok + size / 2
    arrow(ax, (x_b, top), (x_a0, top), role="key", bend=0.9)
    text(ax, ((x_a0 + x_b) / 2, 2.0), "layer 0: previous-token head", role="key", size=NOTE_SIZE, va="bottom")
    text(
        ax,
        ((x_a0 + x_b) / 2, 1.95),
        "writes $W_{OV}\\, e_A$ at $j$:\n“previous token = A”",
        size=NOTE_SIZE - 1,
        va="top",
    )

    # layer 1: the induction head at t attends to j, whose key carries A
    arrow(ax, (x_a1, top), (x_b + 0.12, top + 0.05), role="query", bend=0.55)
    text(ax, ((x_b + x_a1) / 2 + 0.2, 3.2), "layer 1: induction head", role="query", size=NOTE_SIZE, va="bottom")
    text(
        ax,
        ((x_b + x_a1) / 2 + 0.2, 3.15),
        "query $e_A$ matches the key at $j$,\nwhich carries A: K-composition\n$e_A^\\top W_{QK} W_{OV}\\, e_A$ large",
        size=NOTE_SIZE - 1,
        va="top",
    )

    # the output: the current position predicts B, copied by the induction head's OV circuit
    x_out, y_out = 7.35, 2.75
    _box(ax, (6.2, y_tok), size, size, "mask", "token:next")
    text(ax, (6.2, y_tok), "?", size=LABEL_SIZE, zorder=3)
    text(ax, (6.2, y_tok - size / 2 - 0.08), "$t + 1$", size=SHAPE_SIZE, va="top")
    _box(ax, (x_out, y_out), 1.3, 0.55, "output", "output")
    text(ax, (x_out, y_out), "predict B", role="output", size=LABEL_SIZE - 1, zorder=3)
    arrow(ax, (x_a1 + 0.2, top), (x_out - 0.45, y_out - 0.3), role="output", bend=-0.25)
    text(ax, (x_out, y_out - 0.35), "OV circuit copies B", size=NOTE_SIZE - 1, va="top")
    return fig
