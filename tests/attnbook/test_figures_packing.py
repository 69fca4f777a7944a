"""The diagram of chapter 12 (attnbook.figures.packing): a packed row and its document mask.

It is a function returning a Figure with alt text; these tests check that it draws what the layout
is (the document ids, the restarted positions, cu_seqlens, one kept triangle per document, the cells
a plain causal mask would keep across documents), that it renders on a transparent background behind
an opaque panel (light and dark themes), and that the chapter opens with it and repeats its alt text.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from attnbook.figures.packing import LEGEND, draw_packed_row, packed_layout  # noqa: E402
from attnbook.figures.style import alt_text, labels_in  # noqa: E402

from ..figures import close_figures, png  # noqa: E402, F401  (close_figures: autouse)


@pytest.mark.parametrize("lengths", [(4, 5, 3), (1, 6, 1, 2), (7,), (3, 3, 3, 3, 3, 3)])
def test_the_layout_drawn_is_the_packed_row(lengths):
    layout = packed_layout(lengths)
    n = sum(lengths)
    starts = np.cumsum((0,) + tuple(lengths))[:-1]
    for d, (a, L) in enumerate(zip(starts, lengths)):
        assert (layout["ids"][a : a + L] == d).all()
        assert (layout["positions"][a : a + L] == np.arange(L)).all()
    assert layout["cu_seqlens"].tolist() == [0, *np.cumsum(lengths).tolist()]
    keep = layout["document"]
    for i in range(n):  # the definition, cell by cell
        for j in range(n):
            assert keep[i, j] == (j <= i and layout["ids"][i] == layout["ids"][j])
    fig = draw_packed_row(lengths)
    labels = labels_in(fig)
    assert "cu_seqlens = [" + ", ".join(map(str, layout["cu_seqlens"].tolist())) + "]" in labels
    for d, L in enumerate(lengths):  # every token labelled twice (keys along the top, queries down the left)
        for p in range(L):
            assert labels.count(f"{chr(ord('A') + d)}{p + 1}") == 2
    frames = [p for p in fig.axes[0].patches if (p.get_gid() or "").startswith("document:")]
    assert len(frames) == len(lengths)
    across = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_hatch() == "xxx"]
    assert len(across) == int((layout["causal"] & ~keep).sum()) + 1  # the cells and the legend's key
    alt = alt_text(fig)
    assert f"{int(keep.sum())} cells are kept" in alt and f"cu_seqlens = {layout['cu_seqlens'].tolist()}" in alt
    assert f"the {int((layout['causal'] & ~keep).sum())} cells below the diagonal" in alt
    assert all(line.split()[0] in " ".join(labels) for line in LEGEND.values())


@pytest.mark.parametrize(
    "lengths, error, message",
    [
        ((3, 0, 2), ValueError, "positive document lengths"),
        ((), ValueError, "positive document lengths"),
        ((15, 6), ValueError, "at most 20 tokens"),
        ((2.0, 3), TypeError, "lengths must be ints"),
        ("abc", TypeError, "sequence of ints"),
    ],
)
def test_bad_arguments(lengths, error, message):
    with pytest.raises(error, match=message):
        draw_packed_row(lengths)
