"""The course's figures, in one style (:mod:`attnbook.figures.style`): data plots and diagrams.

* :mod:`attnbook.figures.style`: the matplotlib settings every figure is drawn with
  (:func:`~attnbook.figures.style.use_style`, which also makes each PNG record its text), the role
  colours and the building blocks of the diagrams;
* :mod:`attnbook.figures.plotting`: data plots (heatmaps of weights, masks and encodings, bars,
  curves), also reachable as ``attnbook.plotting``;
* one module per diagram topic: ``single_query``, ``matrix_form``, ``masks``, ``heads``,
  ``encoder_decoder``, ``rotation``, ``permutation``, ``models``, ``efficient``, ``induction``, ``kernel``,
  ``modern`` (chapter 9's shared key-value heads, window and ALiBi bias),
  ``packing`` (chapter 12's packed row), ``cache`` (chapter 13's cache per token and streaming cache),
  ``linear`` (chapter 14's three forms and decay mask).

The top wing: it may import every wing below it, and nothing imports it. Each diagram is one
function returning a matplotlib Figure that carries its alt text
(:func:`~attnbook.figures.style.alt_text`). Import a diagram from its module, e.g.
``from attnbook.figures.single_query import draw_single_query``; the style is shared by all.
"""

from .style import (
    COLORS,
    Block,
    alt_text,
    arrow,
    blocks_in,
    labels_in,
    matrix_block,
    new_diagram,
    set_alt_text,
    text,
)

__all__ = [
    "COLORS",
    "Block",
    "alt_text",
    "arrow",
    "blocks_in",
    "labels_in",
    "matrix_block",
    "new_diagram",
    "set_alt_text",
    "text",
]
