"""Diagrams of the mechanism, drawn by code in one style (:mod:`attnbook.figures.style`).

Each diagram is one function returning a matplotlib Figure that carries its alt text
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
