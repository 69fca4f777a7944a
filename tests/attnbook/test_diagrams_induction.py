"""The diagram of chapter 10 (attnbook.figures.induction): the induction circuit.

It is a function returning a Figure with alt text (what every diagram must be is checked in
test_diagrams.py); these tests check that it draws the circuit's parts (the tokens A, B, ..., A in
order, the two heads, the prediction), and that the chapter's cell repeats its alt text.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

from attnbook.figures.induction import TOKENS, draw_induction_circuit  # noqa: E402
from attnbook.figures.style import labels_in  # noqa: E402

from ..figures import close_figures  # noqa: E402, F401  (autouse)


def test_it_draws_the_sequence_the_heads_and_the_prediction():
    fig = draw_induction_circuit()
    labels = labels_in(fig)
    for label in ("layer 0: previous-token head", "layer 1: induction head", "predict B", "OV circuit copies B"):
        assert label in labels
    assert any("K-composition" in s for s in labels)
    boxes = {p.get_gid(): p for p in fig.axes[0].patches if isinstance(p, FancyBboxPatch) and p.get_gid()}
    tokens = [boxes[f"token:{i}"] for i, (_, _, role, _) in enumerate(TOKENS) if role is not None]
    xs = [box.get_x() for box in tokens]
    assert xs == sorted(xs)  # A, B, A from left to right
    assert [t for t, _, role, _ in TOKENS if role is not None] == ["A", "B", "A"]
    assert "output" in boxes
    assert sum(isinstance(p, FancyArrowPatch) for p in fig.axes[0].patches) == 3  # two heads, one output
