"""The diagrams of chapter 14 (attnbook.figures.linear): linear attention's three forms and the
decay mask.

Each is a function returning a Figure with alt text; these tests check that what they draw is the
layout they claim (which cells are masked, computed inside a chunk or reached through the state,
for chunk sizes that divide n and sizes that do not; the products written in the decay mask), that
the alt text counts what is drawn, that bad arguments are refused by name, and that the chapter
opens with the three forms and repeats their alt text. The generic alt-text and opaque-panel test
of every draw_* is in test_diagrams.py.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from attnbook.figures.linear import (  # noqa: E402
    BLOCKED,
    COSTS,
    INSIDE,
    THROUGH_STATE,
    chunk_layout,
    decay_mask_entries,
    draw_decay_mask,
    draw_three_forms,
)
from attnbook.figures.style import alt_text, blocks_in, labels_in  # noqa: E402

from ..figures import close_figures, png  # noqa: E402, F401  (close_figures: autouse)


@pytest.mark.parametrize("n", range(1, 13))
def test_the_chunk_layout_is_the_definition_for_every_chunk_size(n):
    for C in range(1, n + 2):  # every size, divisors or not, and one larger than n
        layout = chunk_layout(n, C)
        chunks = layout["chunks"]
        assert chunks[0][0] == 0 and chunks[-1][1] == n
        assert all(b == c for (_, b), (c, _) in zip(chunks, chunks[1:]))  # consecutive, no gap
        assert all(b - a == C for a, b in chunks[:-1]) and 1 <= chunks[-1][1] - chunks[-1][0] <= C
        kind = layout["kind"]
        for i in range(n):
            for j in range(n):
                expected = BLOCKED if j > i else (INSIDE if i // C == j // C else THROUGH_STATE)
                assert kind[i, j] == expected, (n, C, i, j)
        assert int((kind != BLOCKED).sum()) == n * (n + 1) // 2


@pytest.mark.parametrize("n, C", [(8, 3), (8, 4), (5, 1), (7, 7), (6, 9), (12, 5)])
def test_the_three_forms_draw_the_layout(n, C):
    fig = draw_three_forms(n, C)
    layout = chunk_layout(n, C)
    kind = layout["kind"]
    patches = fig.axes[0].patches
    chunk_frames = [p for p in patches if (p.get_gid() or "").startswith("chunk:")]
    assert len(chunk_frames) == len(layout["chunks"])
    assert sum(p.get_gid() == "through-state" for p in patches) == int((kind == THROUGH_STATE).sum())
    hatched = [p for p in patches if p.get_hatch() == "////"]
    assert len(hatched) == 2 * int((kind == BLOCKED).sum())  # the quadratic grid and the chunkwise one
    labels = labels_in(fig)
    for t in range(1, n + 1):  # the tokens of the recurrent panel
        assert str(t) in labels
    for c in range(1, len(layout["chunks"])):  # the states passed between chunks
        assert f"$S_{{[{c}]}}$" in labels
    assert f"$S_{{[{len(layout['chunks'])}]}}$" not in labels  # nothing passed after the last chunk
    for lines in COSTS.values():
        assert all(line in labels for line in lines)
    assert "$S$" in blocks_in(fig)
    alt = alt_text(fig)
    assert f"the {int((kind == INSIDE).sum())} kept cells inside the triangles" in alt
    assert f"the {int((kind == THROUGH_STATE).sum())} cells in the blocks below them" in alt
    assert f"into {len(layout['chunks'])} chunks of {', '.join(str(b - a) for a, b in layout['chunks'])} tokens" in alt


def test_the_decay_mask_writes_the_products():
    entries = decay_mask_entries(5)
    assert entries[0] == ["1", "", "", "", ""]
    assert entries[4][0] == "$a_{2}a_{3}a_{4}a_{5}$" and entries[4][3] == "$a_{5}$" and entries[2][1] == "$a_{3}$"
    for n in range(1, 7):
        entries = decay_mask_entries(n)
        for i in range(n):
            for j in range(n):
                factors = entries[i][j].count("a_")
                assert factors == (i - j if j <= i else 0)
                assert (entries[i][j] == "") == (j > i)
    fig = draw_decay_mask(5, split=3)
    labels = labels_in(fig)
    for row in decay_mask_entries(5):
        assert all(entry in labels for entry in row if entry)
    assert sum(p.get_hatch() == "////" for p in fig.axes[0].patches) == 10  # the 10 cells above the diagonal
    assert "rows 3 to 5 and columns 1 to 2" in alt_text(fig)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: draw_three_forms(0, 3), ValueError, "n must be > 0"),
        (lambda: draw_three_forms(8, 0), ValueError, "chunk_size must be > 0"),
        (lambda: draw_three_forms(8, 2.5), TypeError, "chunk_size must be an int"),
        (lambda: draw_three_forms(13, 3), ValueError, "at most 12 tokens"),
        (lambda: draw_three_forms(8, 3, step=8), ValueError, "step must be a token index"),
        (lambda: draw_three_forms(8, 3, d_k=6), ValueError, "at most 5 x 5"),
        (lambda: chunk_layout(4, -1), ValueError, "chunk_size must be > 0"),
        (lambda: draw_decay_mask(7), ValueError, "at most 6 tokens"),
        (lambda: draw_decay_mask(5, split=1), ValueError, "split must lie in"),
    ],
)
def test_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()
