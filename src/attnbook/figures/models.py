"""Diagram of the small models of chapter 7 and of the loop that trains them (attnbook.models, attnbook.models.training)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyBboxPatch

from .style import INK, arrow, dark, light, matrix_block, new_diagram, text

#: the alignment drawn by default: the word order of the chapter's Translation(length=6, seed=0)
ALIGNMENT = (2, 5, 3, 0, 1, 4)

LINE = 1.3  # width of the residual stream and of the branch lines (points)


def _check_alignment(alignment: Sequence[int]) -> list[int]:
    order = list(alignment)
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in order):
        raise ValueError(f"alignment must hold ints, got {alignment!r}")
    if not 2 <= len(order) <= 8 or sorted(order) != list(range(len(order))):
        raise ValueError(f"alignment must be a permutation of 0..n-1 with 2 <= n <= 8, got {alignment!r}")
    return [int(i) for i in order]


def _box(
    ax,
    centre: tuple[float, float],
    width: float,
    height: float,
    title: str,
    note: str | None = None,
    *,
    role: str = "neutral",
    optional: bool = False,
    gid: str | None = None,
) -> dict[str, tuple[float, float]]:
    """A rounded module box with a title (and a small note under it); return its edge midpoints.

    An optional part (switched off by an argument of the model) has a dashed edge.
    """
    x, y = centre
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0,rounding_size=0.06",
            facecolor=light(role, 0.8),
            edgecolor=dark(role),
            linewidth=1.2,
            linestyle=(0, (4, 2)) if optional else "-",
            zorder=2,
            gid=gid or f"module:{title}",
        )
    )
    if note:
        text(ax, (x, y + 0.09), title, role=role if role != "neutral" else None, size=9.5, zorder=3)
        text(ax, (x, y - 0.13), note, size=7.5, zorder=3)
    else:
        text(ax, (x, y), title, role=role if role != "neutral" else None, size=9.5, zorder=3)
    return {
        "left": (x - width / 2, y),
        "right": (x + width / 2, y),
        "top": (x, y + height / 2),
        "bottom": (x, y - height / 2),
    }


def _plus(ax, centre: tuple[float, float], radius: float = 0.1) -> None:
    """A residual (or positional) sum: a circled plus on the stream."""
    x, y = centre
    ax.add_patch(Circle(centre, radius, facecolor="white", edgecolor=INK, linewidth=1.2, zorder=4, gid="sum"))
    ax.plot([x - radius * 0.6, x + radius * 0.6], [y, y], color=INK, linewidth=1.2, zorder=5)
    ax.plot([x, x], [y - radius * 0.6, y + radius * 0.6], color=INK, linewidth=1.2, zorder=5)


def _line(ax, xs: Sequence[float], ys: Sequence[float]) -> None:
    ax.plot(xs, ys, color=INK, linewidth=LINE, zorder=1, solid_capstyle="butt")


def _frame(ax, x0: float, y0: float, x1: float, y1: float, title: str, *, gid: str) -> None:
    """A dashed rounded frame around a group of modules, titled at its top left."""
    ax.add_patch(
        FancyBboxPatch(
            (x0, y0),
            x1 - x0,
            y1 - y0,
            boxstyle="round,pad=0,rounding_size=0.1",
            facecolor="none",
            edgecolor=dark("neutral", 0.2),
            linewidth=1.0,
            linestyle=(0, (2, 2)),
            zorder=0,
            gid=gid,
        )
    )
    text(ax, (x0 + 0.1, y1 - 0.08), title, size=8.5, ha="left", va="top")


def _alt(order: list[int]) -> str:
    n = len(order)
    return (
        "A flow diagram in three parts. At the top, the model, from left to right: a column of n token "
        "ids enters an embedding box, E[token]; a circled plus adds the positions P, in a dashed box "
        "marked optional; the sum runs along a residual stream through a dashed frame labelled block "
        "times num_layers, pre-norm. In the frame three sublayers hang below the stream, each a branch "
        "that goes down through a layer norm, LN, into a module and comes back up into a circled plus "
        "on the stream: self-attention, causal in a decoder; cross-attention, dashed, with a dot, "
        "additive or general score; and the MLP, dashed, off with mlp=False. After the frame come a "
        "final LN, the head, a linear layer, and the logits, n by out_size. Below each attention "
        f"module hang its weights as a grid of {n} by {n} cells: for self-attention, labelled n by n, "
        f"the dark cells lie on the anti-diagonal; for cross-attention, labelled n by m, there is one "
        f"dark cell per row, at columns {', '.join(map(str, order))}. A note says that dashed marks a part the "
        "model can leave out (positional=False, mlp=False, no encoder). Bottom left, in a frame "
        "labelled encoder (EncoderDecoder only): source ids, an embedding plus P (optional), encoder "
        "blocks (self-attention, MLP), an LN and the output Z, which an arrow brings up into the "
        "cross-attention as keys and values. Bottom right, in a frame labelled training: a task with a "
        "seeded generator makes a batch; its inputs go to the model, which gives logits, and its "
        "targets to the loss, the cross-entropy; an arrow labelled AdamW step goes back from the loss "
        "to the model."
    )


def draw_attention_model(alignment: Sequence[int] = ALIGNMENT) -> Figure:
    """Draw the models of chapter 7 (one pipeline, parts switched on and off) and their training loop.

    X_0 = E[tokens] + P                      (P only with positional=True)
    pre-norm block:  X <- X + SelfAttn(LN(X))  (causal mask in a decoder)
                     X <- X + CrossAttn(LN(X), Z)   (EncoderDecoder's decoder only)
                     X <- X + FFN(LN(X))       (mlp=True)
    logits = LN(X_L) W_out^T + b_out           (batch, n, out_size)
    training step: batch = task(batch_size, generator); loss = CE(logits, targets); AdamW step

    The attention weights come out of the attention modules: self-attention (n, n) drawn as the
    anti-diagonal of reversal, cross-attention (n, m) with one dark cell per row at column
    ``alignment[i]`` (a permutation of 0..n-1, 2 <= n <= 8), the word order of a translation.
    Chapter 7.
    """
    order = _check_alignment(alignment)
    n = len(order)
    width, height = 11.0, 5.9
    fig, ax = new_diagram(width, height, alt=_alt(order))
    cell = 0.12  # the cells of every matrix drawn

    # --- the model: tokens -> embedding (+ P) -> blocks -> LN -> head -> logits -----------------
    y_s = height - 0.85  # the residual stream
    y_ln, y_mod = y_s - 0.6, y_s - 1.3  # the layer norms and the modules of the sublayers
    tokens = matrix_block(ax, (0.4, y_s), n, 1, role="neutral", cell=cell)
    text(ax, (0.4, tokens.top[1] + 0.08), "tokens", size=9.5, va="bottom")
    text(ax, (0.4, tokens.bottom[1] - 0.08), "$n$ ids", size=8.5, va="top")
    embed = _box(ax, (1.2, y_s), 0.9, 0.5, "embedding", "$E[\\mathrm{token}]$")
    arrow(ax, tokens.right, embed["left"])
    x_pos = 2.05
    _plus(ax, (x_pos, y_s))
    pos = _box(ax, (x_pos, y_ln - 0.1), 0.9, 0.5, "positions $P$", "optional", optional=True)
    arrow(ax, pos["top"], (x_pos, y_s - 0.1), gap=0.0)
    _line(ax, [embed["right"][0], x_pos - 0.1], [y_s, y_s])

    module_w, module_h, ln_w, ln_h = 1.25, 0.56, 0.42, 0.26
    sublayers = [
        ("self-attention", "causal in a decoder", "weight", False),
        ("cross-attention", "dot, additive, general", "weight", True),
        ("MLP", "off with mlp=False", "neutral", True),
    ]
    x_first, step = 3.45, 1.75  # centre of the first module, distance between sublayers
    x_in = x_pos + 0.1
    modules = {}
    for k, (title, note, role, optional) in enumerate(sublayers):
        x = x_first + k * step
        x_branch, x_sum = x - 0.35, x + module_w / 2 + 0.22
        _line(ax, [x_in, x_sum - 0.1], [y_s, y_s])  # the stream up to this sublayer's sum
        ln = _box(ax, (x_branch, y_ln), ln_w, ln_h, "LN", gid=f"module:LN {k + 1}")
        arrow(ax, (x_branch, y_s), ln["top"], gap=0.0)
        box = _box(ax, (x, y_mod), module_w, module_h, title, note, role=role, optional=optional)
        arrow(ax, ln["bottom"], (x_branch, y_mod + module_h / 2), gap=0.0)
        _line(ax, [box["right"][0], x_sum], [y_mod, y_mod])
        arrow(ax, (x_sum, y_mod), (x_sum, y_s - 0.1), gap=0.0)
        _plus(ax, (x_sum, y_s))
        modules[title] = box
        x_in = x_sum + 0.1
    x_frame0, x_frame1 = x_first - module_w / 2 - 0.15, x_in + 0.12
    _frame(
        ax,
        x_frame0,
        y_mod - module_h / 2 - 0.15,
        x_frame1,
        y_s + 0.45,
        "block × num_layers (pre-norm)",
        gid="frame:block",
    )
    final_ln = _box(ax, (x_frame1 + 0.38, y_s), ln_w, ln_h + 0.1, "LN", gid="module:final LN")
    _line(ax, [x_in, final_ln["left"][0]], [y_s, y_s])
    head = _box(ax, (final_ln["right"][0] + 0.7, y_s), 0.9, 0.5, "head", "linear")
    arrow(ax, final_ln["right"], head["left"], gap=0.0)
    logits = matrix_block(ax, (head["right"][0] + 0.6, y_s), n, 5, role="output", cell=cell)
    text(ax, (logits.top[0], logits.top[1] + 0.08), "logits", role="output", size=9.5, va="bottom")
    text(ax, (logits.bottom[0], logits.bottom[1] - 0.08), "$n \\times$ out_size", role="output", size=8.5, va="top")
    arrow(ax, head["right"], logits.left)

    # --- the attention weights that the chapter plots -----------------------------------------------
    y_w = y_mod - module_h / 2 - 0.35 - n * cell / 2
    self_box, cross_box = modules["self-attention"], modules["cross-attention"]
    reversal = np.fliplr(np.eye(n)) * 0.9 + 0.05  # query i reads key n - 1 - i
    self_w = matrix_block(
        ax,
        (self_box["bottom"][0] + 0.25, y_w),
        n,
        n,
        role="weight",
        label="weights",
        shape="$n \\times n$",
        cell=cell,
        shade=reversal,
        label_side="left",
        shape_side="left",
    )
    arrow(ax, (self_w.top[0], self_box["bottom"][1]), self_w.top)
    aligned = np.eye(n)[order] * 0.9 + 0.05  # row i: source word order[i]
    cross_w = matrix_block(
        ax,
        (cross_box["bottom"][0] + 0.3, y_w),
        n,
        n,
        role="weight",
        label="weights",
        shape="$n \\times m$",
        cell=cell,
        shade=aligned,
        label_side="right",
        shape_side="right",
    )
    arrow(ax, (cross_w.top[0], cross_box["bottom"][1]), cross_w.top)
    text(
        ax,
        (cross_w.right[0] + 1.3, y_w),
        "dashed: a part the model can leave out\n(positional=False, mlp=False, no encoder)",
        size=8,
        ha="left",
    )

    # --- the encoder of an encoder-decoder, whose output Z enters the cross-attention -----------
    y_e, y_top = 0.85, 2.0  # the encoder's row, the top of the bottom frames
    x_z = cross_box["left"][0] + 0.25  # Z rises into the left part of the cross-attention
    source = matrix_block(ax, (0.5, y_e), n, 1, role="neutral", cell=cell)
    text(ax, (0.5, source.top[1] + 0.08), "source", size=9.5, va="bottom")
    src_embed = _box(ax, (1.3, y_e), 0.9, 0.5, "embedding", "$+\\,P$ (optional)")
    arrow(ax, source.right, src_embed["left"])
    encoder = _box(ax, (2.65, y_e), 1.4, 0.5, "encoder blocks", "self-attention, MLP")
    arrow(ax, src_embed["right"], encoder["left"])
    enc_ln = _box(ax, (3.75, y_e), ln_w, ln_h + 0.1, "LN", gid="module:encoder LN")
    arrow(ax, encoder["right"], enc_ln["left"], gap=0.0)
    z = matrix_block(ax, (x_z, y_e), n, 3, role="key", cell=cell)
    text(ax, (z.right[0] + 0.08, y_e), "$Z$", role="key", size=13, ha="left")
    arrow(ax, enc_ln["right"], z.left)
    arrow(ax, z.top, (x_z, cross_box["bottom"][1]))
    text(ax, (x_z - 0.08, y_w), "keys and\nvalues", role="key", size=8.5, ha="right")
    x_enc1 = z.right[0] + 0.3
    _frame(ax, 0.2, 0.2, x_enc1, y_top, "encoder (EncoderDecoder only)", gid="frame:encoder")

    # --- the training loop ---------------------------------------------------------------------------
    steps = [("task", "seeded generator"), ("batch", "inputs"), ("model", "logits"), ("loss", "cross-entropy")]
    box_w, gap = 1.05, 0.27
    x_t1 = width - 0.2
    x_t0 = x_t1 - 0.15 - len(steps) * box_w - (len(steps) - 1) * gap
    y_t = 1.05
    boxes = []
    for k, (title, note) in enumerate(steps):
        centre = (x_t0 + box_w / 2 + k * (box_w + gap), y_t)
        boxes.append(_box(ax, centre, box_w, 0.5, title, note, role="output" if title == "model" else "neutral"))
        if k:
            arrow(ax, boxes[k - 1]["right"], boxes[k]["left"], gap=0.02)
    arrow(ax, boxes[1]["top"], boxes[3]["top"], bend=-0.25, label="targets", label_offset=(0.0, 0.36))
    arrow(ax, boxes[3]["bottom"], boxes[2]["bottom"], bend=-0.45, label="AdamW step", label_offset=(0.0, -0.34))
    _frame(ax, x_t0 - 0.15, 0.2, x_t1, y_top, "training: attnbook.models.training.train", gid="frame:training")
    return fig


__all__ = ["ALIGNMENT", "draw_attention_model"]
