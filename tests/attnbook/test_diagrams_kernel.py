"""The diagram of chapter 11 (attnbook.figures.kernel): the loop orders of the forward and backward kernels.

It is a function returning a Figure with alt text (what every diagram must be is checked in
test_diagrams.py); these tests check that it draws what the code does (the T(T - 1)/2 tiles skipped
under the causal mask, the forward's outer loop runs down the query blocks and the backward's across
the key blocks, what each pass keeps on chip), and that the chapter opens with it and repeats its
alt text.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.patches import FancyBboxPatch, Rectangle  # noqa: E402

from attnbook.figures.kernel import MEMORY, draw_kernel_loops  # noqa: E402
from attnbook.figures.style import alt_text, blocks_in, labels_in  # noqa: E402

from ..figures import close_figures  # noqa: E402, F401  (autouse)


@pytest.mark.parametrize("blocks, outer, inner", [(4, 2, 1), (3, 0, 0), (5, 4, 4), (1, 0, 0)])
def test_the_loops_and_the_skipped_tiles(blocks, outer, inner):
    fig = draw_kernel_loops(blocks, outer, inner)
    assert blocks_in(fig).count("forward tiles") == 1 and blocks_in(fig).count("backward tiles") == 1
    labels = labels_in(fig)
    assert "forward: query blocks outside" in labels and "backward: key blocks outside" in labels
    # the forward's outer loop runs down the query blocks (drawn vertically), the backward's across the keys
    loops = {t.get_text(): t.get_rotation() for t in fig.axes[0].texts if t.get_text().endswith(" loop")}
    assert sorted(labels).count("outer loop") == 2 and sorted(labels).count("inner loop") == 2
    vertical = [t.get_text() for t in fig.axes[0].texts if t.get_text().endswith(" loop") and t.get_rotation() == 90]
    assert vertical == ["outer loop", "inner loop"]  # forward panel first, then backward
    assert set(loops) == {"outer loop", "inner loop"}
    for b in range(1, blocks + 1):
        assert labels.count(f"$Q_{{{b}}}$") == 2 and labels.count(f"$K_{{{b}}}$") == 2
    hatched = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_hatch()]
    assert len(hatched) == 2 * blocks * (blocks - 1) // 2  # T(T - 1)/2 skipped tiles per panel
    assert f"the {blocks * (blocks - 1) // 2} tiles above the diagonal" in alt_text(fig)


def test_what_lives_in_fast_memory():
    fig = draw_kernel_loops()
    labels = labels_in(fig)
    for name in ("forward", "backward"):
        for speed in ("fast", "slow"):
            heading, lines = MEMORY[name][speed]
            assert heading in labels and all(line in labels for line in lines)
    boxes = {p.get_gid() for p in fig.axes[0].patches if isinstance(p, FancyBboxPatch) and p.get_gid()}
    assert {"memory:forward:fast", "memory:forward:slow", "memory:backward:fast", "memory:backward:slow"} <= boxes
    assert any("$L_i$" in line for line in MEMORY["forward"]["slow"][1])  # the forward saves L
    assert any("dQ_i$ +=" in line for line in MEMORY["backward"]["slow"][1])  # dQ is accumulated


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: draw_kernel_loops(0), ValueError, r"blocks must be > 0"),
        (lambda: draw_kernel_loops(4, 4, 0), ValueError, r"outer must be a block index in \[0, 4\)"),
        (lambda: draw_kernel_loops(4, 1, 2), ValueError, "inner = 2 > outer = 1"),
        (lambda: draw_kernel_loops(2.0), TypeError, "blocks must be an int"),
    ],
)
def test_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()
