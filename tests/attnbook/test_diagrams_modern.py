"""The diagram of chapter 9 (attnbook.figures.modern): query heads sharing key-value heads, a sliding
window and ALiBi's bias.

What every diagram must be (alt text, an opaque panel in either theme) is checked in
test_diagrams.py, and so is the chapter opening with it and repeating its alt text; these tests
check that it draws what the code does: which key-value head each query head reads (by the rule
h // g, not h % H_kv), one line per query head to the right box, the window's kept cells and the
bias's numbers, the counts its alt text gives, and text large enough to read on a phone.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from attnbook.figures.modern import SCHEMES, draw_modern_attention, head_sharing, modern_layout  # noqa: E402
from attnbook.figures.style import alt_text, blocks_in, labels_in  # noqa: E402

from ..figures import close_figures  # noqa: E402, F401  (autouse)

MINUS = "\u2212"


def _patches(fig, prefix: str) -> dict[str, Rectangle]:
    return {
        p.get_gid(): p
        for p in fig.axes[0].patches
        if isinstance(p, Rectangle) and (p.get_gid() or "").startswith(prefix)
    }


@pytest.mark.parametrize("num_heads, kv_heads", [(8, 2), (8, 4), (6, 3), (8, 8), (8, 1), (4, 2)])
def test_head_sharing_is_the_ceil_rule(num_heads, kv_heads):
    """Query head h (from 0) reads key-value head h // g (chapter 9's ceil(h / g), counted from 1)."""
    g = num_heads // kv_heads
    assert head_sharing(num_heads, kv_heads) == [h // g for h in range(num_heads)]
    if 1 < kv_heads < num_heads:  # the tiled grouping (repeat instead of repeat_interleave) differs
        assert head_sharing(num_heads, kv_heads) != [h % kv_heads for h in range(num_heads)]


@pytest.mark.parametrize("num_heads, kv_heads, n, window", [(8, 2, 6, 3), (4, 2, 4, 1), (6, 3, 8, 8), (8, 4, 5, 2)])
def test_boxes_and_the_lines_between_them(num_heads, kv_heads, n, window):
    fig = draw_modern_attention(num_heads, kv_heads, n, window)
    counts = {"multi-head": num_heads, "grouped-query": kv_heads, "multi-query": 1}
    queries, keys, values = _patches(fig, "query:"), _patches(fig, "key:"), _patches(fig, "value:")
    assert len(queries) == 3 * num_heads
    assert len(keys) == len(values) == num_heads + kv_heads + 1
    lines = {line.get_gid(): line for line in fig.axes[0].get_lines() if (line.get_gid() or "").startswith("reads:")}
    assert len(lines) == 3 * num_heads  # one line per query head and scheme
    for scheme in SCHEMES:
        g = num_heads // counts[scheme]
        assert sorted(k for k in keys if k.startswith(f"key:{scheme}:")) == sorted(
            f"key:{scheme}:{c}" for c in range(1, counts[scheme] + 1)
        )
        for h in range(1, num_heads + 1):
            c = (h - 1) // g + 1  # the key-value head query head h reads, both counted from 1
            line = lines[f"reads:{scheme}:{h}:{c}"]
            (x_top, x_bottom), (y_top, y_bottom) = line.get_xdata(), line.get_ydata()
            q = queries[f"query:{scheme}:{h}"]
            k, v = keys[f"key:{scheme}:{c}"], values[f"value:{scheme}:{c}"]
            # from the middle of the query box's lower edge to where its key box meets its value box
            assert (x_top, y_top) == pytest.approx((q.get_x() + q.get_width() / 2, q.get_y()))
            assert (x_bottom, y_bottom) == pytest.approx((k.get_x() + k.get_width(), k.get_y() + k.get_height()))
            assert v.get_x() == pytest.approx(k.get_x() + k.get_width()) and v.get_y() == pytest.approx(k.get_y())
        for c in range(1, counts[scheme] + 1):  # each key-value head sits under the middle of its readers
            readers = [queries[f"query:{scheme}:{h}"] for h in range((c - 1) * g + 1, c * g + 1)]
            middle = np.mean([r.get_x() + r.get_width() / 2 for r in readers])
            key = keys[f"key:{scheme}:{c}"]
            assert key.get_x() + key.get_width() == pytest.approx(middle)
    labels = labels_in(fig)
    for h in range(1, num_heads + 1):
        assert labels.count(f"q{h}") == 3
    assert labels.count("k1") == labels.count("v1") == 3  # every scheme has a first key-value head
    assert labels.count(f"k{num_heads}") == 1  # only multi-head attention has num_heads of them
    for scheme in SCHEMES:
        kv = counts[scheme]
        assert f"{scheme}: {num_heads} query heads, {kv} key-value head{'s' if kv > 1 else ''}" in labels


@pytest.mark.parametrize("n, window", [(6, 3), (4, 1), (8, 8), (5, 2)])
def test_window_and_bias_grids(n, window):
    fig = draw_modern_attention(8, 2, n, window)
    layout = modern_layout(8, 2, n, window)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    assert np.array_equal(layout["window"], (i - j >= 0) & (i - j < window))
    assert np.array_equal(layout["causal"], j <= i)
    assert np.array_equal(np.nan_to_num(layout["alibi"], nan=1.0), np.where(j <= i, -(i - j), 1.0))
    kept = int(layout["window"].sum())
    assert kept == n * window - window * (window - 1) // 2  # chapter 9's count
    assert sorted(blocks_in(fig)) == ["alibi", "window"]
    hatched = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_hatch()]
    assert len(hatched) == (n * n - kept) + n * (n - 1) // 2
    labels = labels_in(fig)
    for d in range(1, n):  # the bias -(i - j) = -d on the n - d cells of each lower diagonal
        assert labels.count(f"{MINUS}{d}") == n - d
    assert labels.count("0") == n + 4  # the diagonal, and 0 among the row and column numbers of both grids
    assert f"{MINUS}{n}" not in labels
    # the frame around the last query's row covers its `window` keys
    grid = next(p for p in fig.axes[0].patches if p.get_gid() == "block:window")
    frames = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_linestyle() != "solid"]
    assert len(frames) == 1
    cell = grid.get_width() / n
    assert frames[0].get_width() == pytest.approx(window * cell + 0.08)
    assert frames[0].get_x() + frames[0].get_width() / 2 == pytest.approx(grid.get_x() + (n - window / 2) * cell)
    alt = alt_text(fig)
    assert f"{kept} cells in a band along the diagonal, and the other {n * n - kept} are hatched" in alt
    assert f"the {n * (n - 1) // 2} cells above the diagonal are hatched" in alt
    assert f"two {n} by {n} grids" in alt and f"down to -{n - 1} in the bottom left" in alt


def test_alt_text_of_the_default():
    alt = alt_text(draw_modern_attention())
    assert "three rows of 8 query heads, boxes q1 to q8" in alt
    assert "Grouped-query attention: 2 key-value heads, each shared by 4 consecutive query heads" in alt
    assert "(q1 to q4 read k1 v1 and q5 to q8 read k2 v2)" in alt
    assert "a causal sliding window of w = 3" in alt and "keeping keys 3, 4 and 5" in alt


def test_legible_on_a_phone():
    """No text below 9 points, and the figure narrow enough that, shown 358 CSS pixels wide (a 390
    pixel phone less the page's margins), its smallest text is at least 9.5 CSS pixels: the size
    below which the site's script makes a figure scroll sideways (book/_static/attnbook.js)."""
    fig = draw_modern_attention()
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text().strip()]
    assert min(sizes) >= 9
    assert min(sizes) / 72 * 358 / fig.get_figwidth() >= 9.5, fig.get_figwidth()


def test_no_stray_lines():
    """Lines are the query heads' links, the separator between the two halves, and nothing else."""
    fig = draw_modern_attention()
    lines = [line for line in fig.axes[0].get_lines() if isinstance(line, Line2D)]
    assert len(lines) == 3 * 8 + 1


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: draw_modern_attention(3, 1), ValueError, "between 4 and 8 query heads"),
        (lambda: draw_modern_attention(9, 3), ValueError, "between 4 and 8 query heads"),
        (lambda: draw_modern_attention(8, 3), ValueError, "kv_heads = 3 must divide num_heads = 8"),
        (lambda: draw_modern_attention(8, 8), ValueError, "strictly between 1 and 8"),
        (lambda: draw_modern_attention(8, 1), ValueError, "strictly between 1 and 8"),
        (lambda: draw_modern_attention(8, 2, n=9), ValueError, "between 2 and 8 queries"),
        (lambda: draw_modern_attention(8, 2, n=6, window=7), ValueError, "window = 7 is larger than n = 6"),
        (lambda: draw_modern_attention(8, 2, window=0), ValueError, "window must be > 0"),
        (lambda: draw_modern_attention(8.0, 2), TypeError, "num_heads must be an int"),
        (lambda: draw_modern_attention(8, True), TypeError, "kv_heads must be an int"),
        (lambda: head_sharing(8, 3), ValueError, "kv_heads = 3 must divide num_heads = 8"),
    ],
)
def test_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()
