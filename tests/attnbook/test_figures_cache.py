"""The diagrams of chapter 13 (attnbook.figures.cache): the cache of one token per scheme, to scale,
and StreamingLLM's cache of sink tokens and a rolling window.

Each is a function returning a Figure with alt text (the generic test of test_diagrams.py checks its
panel on light and dark pages); these tests check that it draws what the package computes: squares in
proportion to :func:`attnbook.cache_numbers_per_token` for every scheme, and, cell by cell, the kept
keys of :func:`attnbook.streaming_mask` with the positions of :func:`attnbook.streaming_positions`.
The chapter opens with the first and repeats its alt text.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

import attnbook  # noqa: E402
from attnbook.figures.cache import (  # noqa: E402
    PART_LEGEND,
    STREAM_LEGEND,
    cache_layout,
    draw_cache_per_token,
    draw_streaming_cache,
)
from attnbook.figures.style import alt_text, labels_in  # noqa: E402

from ..figures import close_figures, png  # noqa: E402, F401  (close_figures: autouse)


def squares(fig, scheme=None, part=None):
    """The squares drawn for a scheme (and part), found by their gid."""
    found = []
    for patch in fig.axes[0].patches:
        gid = patch.get_gid() or ""
        if gid.startswith("square:"):
            _, s, p = gid.split(":")
            if (scheme is None or s == scheme) and (part is None or p == part):
                found.append(patch)
    return found


@pytest.mark.parametrize(
    "config",
    [
        dict(),  # DeepSeek-V3's latent against heads of 128, 8 key-value heads
        dict(num_heads=8, kv_heads=2, d_head=64, d_latent=128, d_rope=32, unit=32),
        dict(num_heads=4, kv_heads=4, d_head=16, d_latent=48, d_rope=16, unit=16),
    ],
)
def test_each_scheme_is_drawn_to_scale(config):
    fig = draw_cache_per_token(**config)
    unit = config.get("unit", 64)
    h, h_kv, d = config.get("num_heads", 128), config.get("kv_heads", 8), config.get("d_head", 128)
    d_c, d_r = config.get("d_latent", 512), config.get("d_rope", 64)
    expected = {
        "multi-head": attnbook.cache_numbers_per_token("multi_head", num_heads=h, d_head=d),
        "grouped-query": attnbook.cache_numbers_per_token("grouped_query", kv_heads=h_kv, d_head=d),
        "multi-query": attnbook.cache_numbers_per_token("multi_query", d_head=d),
        "latent": attnbook.cache_numbers_per_token("latent", d_latent=d_c, d_rope=d_r),
    }
    sides = {round(p.get_width(), 9) for p in squares(fig)} | {round(p.get_height(), 9) for p in squares(fig)}
    assert len(sides) == 1  # every square the same size: areas are in proportion to the counts
    for scheme, numbers in expected.items():
        assert len(squares(fig, scheme)) * unit == numbers, scheme
        assert f"{numbers:,} numbers" in labels_in(fig)
        assert f"{numbers:,} numbers" in alt_text(fig)
    for scheme in ("multi-head", "grouped-query", "multi-query"):  # keys and values of equal width
        assert len(squares(fig, scheme, "key")) == len(squares(fig, scheme, "value")) > 0
    assert len(squares(fig, "latent", "latent")) * unit == d_c
    assert len(squares(fig, "latent", "rotary key")) * unit == d_r
    assert all(words in labels_in(fig) for words in PART_LEGEND.values())
    assert {s: e["numbers"] for s, e in cache_layout(h, h_kv, d, d_c, d_r, unit).items()} == expected


def test_the_cache_diagram_refuses_sizes_it_cannot_draw_to_scale():
    with pytest.raises(ValueError, match="d_rope = 48 must be a multiple of unit = 64"):
        draw_cache_per_token(d_rope=48)
    with pytest.raises(ValueError, match="kv_heads = 3 must divide num_heads = 128"):
        draw_cache_per_token(kv_heads=3)
    with pytest.raises(ValueError, match="d_head must be > 0"):
        draw_cache_per_token(d_head=0)


@pytest.mark.parametrize("n, num_sinks, window", [(12, 2, 6), (10, 0, 4), (9, 1, 3), (5, 2, 8)])
def test_the_streaming_diagram_is_the_mask_and_its_positions(n, num_sinks, window):
    fig = draw_streaming_cache(n, num_sinks, window)
    keep = attnbook.streaming_mask(n, num_sinks, window)
    positions = attnbook.streaming_positions(n, num_sinks, window)
    cells = {}
    for patch in fig.axes[0].patches:
        gid = patch.get_gid() or ""
        if gid.startswith("cell:"):
            cells.setdefault(gid[len("cell:") :], []).append(patch)
    j = torch.arange(n)
    below = torch.ones(n, n, dtype=torch.bool).tril(-1)
    assert len(cells.get("sink", [])) == int((keep & (j < num_sinks)).sum())
    assert len(cells.get("window", [])) == int((keep & (j >= num_sinks)).sum())
    assert len(cells.get("evicted", [])) == int((below & ~keep).sum())
    assert len(cells.get("future", [])) == n * (n - 1) // 2
    # every kept cell shows its position inside the cache, and nothing else is written in the grid
    numbers = [t for t in fig.axes[0].texts if t.get_text().isdigit()]
    shown = sorted(int(t.get_text()) for t in numbers if t.get_fontsize() == 8.5)
    assert shown == sorted(positions[keep].tolist())
    alt = alt_text(fig)
    assert f"a cache of {window} tokens with {num_sinks} sink tokens" in alt
    assert f"the {int((below & ~keep).sum())} cells" in alt
    assert all(words in labels_in(fig) for words in STREAM_LEGEND.values())
    evicted = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_hatch() == "xxx"]
    assert len(evicted) == int((below & ~keep).sum()) + 1  # the cells and the legend's key


def test_the_streaming_diagram_refuses_bad_arguments():
    with pytest.raises(ValueError, match="window = 2 keys must exceed num_sinks = 2"):
        draw_streaming_cache(8, 2, 2)
    with pytest.raises(ValueError, match="at most 24 tokens"):
        draw_streaming_cache(30, 2, 6)
