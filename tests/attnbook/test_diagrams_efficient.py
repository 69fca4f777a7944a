"""Chapter 8's diagrams: they draw what the code does (tiles and their kinds, the cache's rows); what every
diagram must be (alt text, an opaque panel in either theme) is checked in test_diagrams.py."""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attnbook.efficient.tiled_attention import attention_tiles  # noqa: E402
from attnbook.figures.efficient import draw_kv_cache, draw_tiles  # noqa: E402
from attnbook.figures.style import alt_text, blocks_in, labels_in  # noqa: E402

from ..figures import close_figures  # noqa: E402, F401  (autouse)


def _renders(fig: Figure) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=40)
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("n, block_size", [(12, 3), (14, 4), (5, 5), (1, 1)])
def test_tiles_are_those_of_attention_tiles(n, block_size):
    fig = draw_tiles(n, block_size)
    t = math.ceil(n / block_size)
    blocks = blocks_in(fig)
    computed = [b for b in blocks if b.startswith("tile ")]
    skipped = [tile for tile in attention_tiles(n, n, block_size, causal=True) if tile.kind == "skipped"]
    assert blocks.count("skipped") == len(skipped) == t * (t - 1) // 2
    assert len(computed) == t * t + t * (t + 1) // 2  # left: every tile; right: on and below the diagonal
    labels = labels_in(fig)
    assert [f"$Q_{{{i}}}$" in labels for i in range(1, t + 1)] == [True] * t
    assert f"$K_{{{t}}}^\\top$" in labels
    assert f"no mask: {t * t} of {t * t} tiles computed" in labels
    assert f"causal mask: {t * (t + 1) // 2} of {t * t} tiles computed" in labels
    assert ("skipped" in labels) == (t > 1)
    _renders(fig)


def test_tiles_alt_text_matches_the_drawing():
    alt = alt_text(draw_tiles(12, 3))
    assert "4 by 4" in alt and "numbered 1 to 16" in alt and "6 tiles above the diagonal" in alt
    assert "numbered 1 to 10" in alt


def test_kv_cache_rows():
    fig = draw_kv_cache(steps=4)
    assert blocks_in(fig).count("$K$") == 4 and blocks_in(fig).count("$V$") == 4
    labels = labels_in(fig)
    for t in range(4):
        expected = {f"$q_{{{t}}}$", f"$k_{{{t}}}$", f"$v_{{{t}}}$", f"$o_{{{t}}}$", f"{t + 1} of 4 rows in use"}
        assert expected <= set(labels)
    assert "step t = 0 to 3" in alt_text(fig)
    _renders(fig)


def test_kv_cache_with_room_to_spare():
    fig = draw_kv_cache(steps=3, max_len=5, d=2)
    assert "3 of 5 rows in use" in labels_in(fig)
    assert "two buffers of 5 rows" in alt_text(fig)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: draw_tiles(0, 3), ValueError, r"n must be > 0 \(a positive int\), got 0"),
        (lambda: draw_tiles(4, 1.5), TypeError, "block_size must be an int, got float"),
        (lambda: draw_kv_cache(steps=0), ValueError, r"steps must be > 0 \(a positive int\), got 0"),
        (lambda: draw_kv_cache(steps=4, max_len=3), ValueError, "max_len = 3 cannot hold the 4 steps"),
    ],
)
def test_bad_sizes(call, error, message):
    with pytest.raises(error, match=message):
        call()
