"""The diagrams of chapters 3 to 6 (attnbook.figures.heads, encoder_decoder, rotation, permutation).

Each diagram is a function returning a Figure with alt text (what every diagram must be is checked
in test_diagrams.py); these tests check that it draws what its formula says (shapes, links, points,
orders computed by the package), that it rejects inputs it cannot draw, and that each chapter's
cell repeats the diagram's alt text.
"""

from __future__ import annotations

import math
import re

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

import attnbook  # noqa: E402
from attnbook.figures.encoder_decoder import draw_encoder_decoder  # noqa: E402
from attnbook.figures.heads import draw_multi_head  # noqa: E402
from attnbook.figures.permutation import draw_permutation, reordered  # noqa: E402
from attnbook.figures.rotation import SHIFTED_FROM, draw_rotation  # noqa: E402
from attnbook.figures.style import alt_text, blocks_in, labels_in  # noqa: E402

from ..figures import close_figures  # noqa: E402, F401  (autouse)
from ..paths import BOOK  # noqa: E402

DIAGRAMS = {
    "heads": (draw_multi_head, {}),
    "encoder_decoder": (draw_encoder_decoder, {}),
    "rotation": (draw_rotation, {}),
    "permutation": (draw_permutation, {}),
}


@pytest.mark.parametrize("num_heads", [1, 2, 3, 4])
def test_multi_head_draws_every_matrix_and_one_block_per_head(num_heads):
    n, d_model = 3, 3 * num_heads
    fig = draw_multi_head(n=n, d_model=d_model, num_heads=num_heads)
    blocks = blocks_in(fig)
    for label in ("$X$", "$Q$", "$K$", "$V$", "$W_o$"):
        assert blocks.count(label) == 1, label
    labels = labels_in(fig)
    assert [t for t in labels if t.startswith("head ")] == [f"head {h}" for h in range(1, num_heads + 1)] * 2
    assert [t for t in labels if t.startswith("$W_o^")] == [f"$W_o^{h}$" for h in range(1, num_heads + 1)]
    assert [t for t in labels if re.fullmatch(r"\$O\^\d\$", t)] == [f"$O^{h}$" for h in range(1, num_heads + 1)]
    alt = alt_text(fig)
    assert f"split into {num_heads} column blocks of {d_model // num_heads}" in alt


@pytest.mark.parametrize(
    "kwargs", [dict(d_model=6, num_heads=4), dict(n=0), dict(num_heads=5, d_model=10), dict(d_model=2.0), dict(n=True)]
)
def test_multi_head_rejects_what_it_cannot_draw(kwargs):
    with pytest.raises(ValueError):
        draw_multi_head(**kwargs)


def _links(fig: Figure) -> list[Line2D]:
    """The query-key links: two-point lines between a query box and a key box."""
    ax = fig.axes[0]
    return [line for line in ax.lines if len(line.get_xdata()) == 2 and line.get_alpha() == 0.7]


@pytest.mark.parametrize(
    "source, target",
    [
        (["le", "chat", "noir", "dort"], ["<s>", "the", "black", "cat", "sleeps"]),
        (["a"], ["x", "y"]),
        (list("abcdefg"), list("uvw")),
    ],
)
def test_encoder_decoder_links_exactly_the_allowed_pairs(source, target):
    fig = draw_encoder_decoder(source, target)
    m, n = len(source), len(target)
    # encoder m * m, cross n * m, decoder (causal) n (n + 1) / 2
    assert len(_links(fig)) == m * m + n * m + n * (n + 1) // 2
    hatched = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_hatch()]
    assert len(hatched) == n * (n - 1) // 2  # the blocked cells of the causal grid, and no others
    labels = labels_in(fig)
    for word in source + target:
        assert word in labels
    assert f"{n} queries × {m} keys" in labels and f"{n} queries × {n} keys" in labels


@pytest.mark.parametrize("source, target", [([], ["a"]), (["a"], list("abcdefgh")), (["a", ""], ["b"])])
def test_encoder_decoder_rejects_what_it_cannot_draw(source, target):
    with pytest.raises(ValueError):
        draw_encoder_decoder(source, target)


@pytest.mark.parametrize("d_model, pair, positions, delta", [(8, 0, 6, 2), (16, 2, 9, 3), (4, 1, 5, 1)])
def test_rotation_points_are_the_encoding_and_the_matrix_is_the_shift(d_model, pair, positions, delta):
    fig = draw_rotation(d_model=d_model, pair=pair, positions=positions, delta=delta)
    ax = fig.axes[0]
    dots = [line for line in ax.lines if line.get_marker() == "o"]
    assert len(dots) == positions
    circle = next(p for p in ax.patches if type(p).__name__ == "Circle")
    (cx, cy), radius = circle.center, circle.radius
    P = attnbook.sinusoidal_encoding(positions, d_model, dtype=torch.float64)
    for i, dot in enumerate(dots):  # point i is (cos, sin) of pair j at position i
        x, y = dot.get_xdata()[0], dot.get_ydata()[0]
        assert math.isclose((x - cx) / radius, P[i, 2 * pair + 1].item(), abs_tol=1e-12)
        assert math.isclose((y - cy) / radius, P[i, 2 * pair].item(), abs_tol=1e-12)
    omega = attnbook.sinusoid_frequencies(d_model, dtype=torch.float64)[pair]
    R = attnbook.pair_rotation(delta, omega)
    labels = labels_in(fig)
    for value in R.flatten().tolist():
        assert f"{value:+.2f}" in labels
    arcs = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arcs) == len(SHIFTED_FROM)
    for start, arc in zip(SHIFTED_FROM, arcs):  # each arc ends on the point of start + delta
        (x0, y0), (x1, y1) = arc._posA_posB
        start_angle, end_angle = math.atan2(y0 - cy, x0 - cx), math.atan2(y1 - cy, x1 - cx)
        turn = (end_angle - start_angle) % (2 * math.pi)
        assert math.isclose(turn, (delta * omega.item()) % (2 * math.pi), abs_tol=1e-9)
        target = P[start + delta, [2 * pair + 1, 2 * pair]]
        assert math.isclose(math.atan2(target[1], target[0]) % (2 * math.pi), end_angle % (2 * math.pi), abs_tol=1e-9)


@pytest.mark.parametrize(
    "kwargs",
    [dict(d_model=7), dict(pair=4), dict(delta=0), dict(positions=4, delta=2), dict(positions=11), dict(pair=-1)],
)
def test_rotation_rejects_what_it_cannot_draw(kwargs):
    with pytest.raises(ValueError):
        draw_rotation(**kwargs)


@pytest.mark.parametrize("order", [[2, 0, 1], [3, 0, 4, 1, 2], [1, 0], [0, 1, 2, 3]])
def test_permutation_rows_follow_the_permutation_matrix(order):
    X = torch.arange(len(order), dtype=torch.float64)[:, None] * torch.ones(1, 3, dtype=torch.float64)
    P = attnbook.permutation_matrix(torch.tensor(order), dtype=torch.float64)
    assert reordered(order) == order == (P @ X)[:, 0].long().tolist()  # row i of P X is row order[i] of X


def test_permutation_draws_the_new_orders_and_one_crossing_line_per_row():
    queries, pairs = [2, 0, 1], [3, 0, 4, 1, 2]
    fig = draw_permutation(queries, pairs)
    labels = labels_in(fig)
    q_labels = [t for t in labels if t.startswith("$q_")]
    assert q_labels[1::2] == [f"$q_{i}$" for i in queries]  # A Q, drawn after each original row
    assert [t for t in labels if t.startswith("$o_")] == [f"$o_{i}$" for i in queries]  # outputs follow A
    k_labels = [t for t in labels if t.startswith("$k_")]
    assert k_labels[1::2] == [f"$k_{j}$" for j in pairs]
    v_labels = [t for t in labels if t.startswith("$v_")]
    assert v_labels[1::2] == [f"$v_{j}$" for j in pairs]  # keys and values move together
    assert labels.count("$o$") == 2  # one output for either order of the pairs
    assert len([line for line in fig.axes[0].lines if len(line.get_xdata()) == 2]) == len(queries) + len(pairs)


@pytest.mark.parametrize(
    "queries, pairs", [([0, 0, 1], [1, 0]), ([0], [1, 0]), ([1, 0], [0, 2]), ([1, 0], list(range(8)))]
)
def test_permutation_rejects_what_is_not_a_permutation(queries, pairs):
    with pytest.raises(ValueError):
        draw_permutation(queries, pairs)


CHAPTER_CELLS = {
    "03_multi_head_attention.md": "draw_multi_head(",
    "04_self_and_cross_attention.md": "draw_encoder_decoder(",
    "05_positional_encoding.md": "draw_rotation(",
    "06_permutation_properties.md": "draw_permutation(",
}


@pytest.mark.parametrize("chapter", list(CHAPTER_CELLS))
def test_each_chapter_shows_its_diagram_with_the_diagrams_alt_text(chapter):
    jupytext = pytest.importorskip("jupytext")
    notebook = jupytext.read(BOOK / chapter)
    call = CHAPTER_CELLS[chapter]
    cells = [c for c in notebook.cells if c.cell_type == "code" and call in c.source]
    assert len(cells) == 1, f"{chapter} should draw its diagram in one cell"
    cell = cells[0]
    namespace = {
        name: draw
        for name, (draw, _) in {
            "draw_multi_head": DIAGRAMS["heads"],
            "draw_encoder_decoder": DIAGRAMS["encoder_decoder"],
            "draw_rotation": DIAGRAMS["rotation"],
            "draw_permutation": DIAGRAMS["permutation"],
        }.items()
    }
    namespace["plt"] = type("NoShow", (), {"show": staticmethod(lambda: None)})
    exec(cell.source, namespace)  # the cell as the chapter runs it: fig = draw_...(...); plt.show()
    alt = cell.metadata["mystnb"]["image"]["alt"]
    assert " ".join(alt.split()) == alt_text(namespace["fig"])
    assert cell.metadata["mystnb"]["figure"]["caption"]
