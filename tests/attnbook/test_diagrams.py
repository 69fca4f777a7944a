"""The diagrams (attnbook.figures): what every diagram must be, then the style and the diagrams of the
mechanism (single query, matrix form, masks).

Every diagram is a function ``draw_*`` of a module of ``attnbook.figures``, returning a Figure with
alt text; :func:`test_every_diagram_has_alt_text_on_an_opaque_panel_in_either_theme` finds them all
there (a new one is covered when it is written). What each diagram draws is checked by the file of
its module: ``test_diagrams_<module>.py`` (or this file, for the mechanism's three).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

import attnbook  # noqa: E402
import attnbook.figures  # noqa: E402
from attnbook.figures import style  # noqa: E402
from attnbook.figures.masks import default_masks, draw_masks  # noqa: E402
from attnbook.figures.matrix_form import draw_matrix_form  # noqa: E402
from attnbook.figures.single_query import draw_single_query  # noqa: E402
from tools.alt_text import diagram_cells  # noqa: E402

from ..figures import close_figures, png  # noqa: E402, F401  (close_figures: autouse)
from ..paths import BOOK  # noqa: E402


def diagrams() -> dict[str, object]:
    """Every diagram: the functions ``draw_*`` defined in a module of ``attnbook.figures``."""
    found = {}
    for module in pkgutil.iter_modules(attnbook.figures.__path__):
        loaded = importlib.import_module(f"attnbook.figures.{module.name}")
        for name, function in inspect.getmembers(loaded, inspect.isfunction):
            if name.startswith("draw_") and function.__module__ == loaded.__name__:
                found[f"{module.name}.{name}"] = function
    return found


DIAGRAMS = diagrams()


def test_the_diagrams_are_found():
    assert {"single_query.draw_single_query", "heads.draw_multi_head", "kernel.draw_kernel_loops"} <= set(DIAGRAMS)


@pytest.mark.parametrize("name", sorted(DIAGRAMS))
def test_every_diagram_has_alt_text_on_an_opaque_panel_in_either_theme(name):
    """Drawn with its defaults (and every warning an error), each diagram is a Figure with alt text
    that describes it (not a title), on a transparent background around an opaque light panel: on a
    light page and on a dark one the panel shows light."""
    fig = drawn(DIAGRAMS[name])
    assert len(style.alt_text(fig)) > 80, style.alt_text(fig)
    image = png(fig, transparent=True)
    assert image.shape[-1] == 4
    assert image[0, 0, 3] == 0  # the corner is transparent: the page's background shows ...
    h, w = image.shape[:2]
    assert image[h // 2, w // 2, 3] == 1  # ... around an opaque light panel
    dark = png(fig, facecolor="#121212")  # a dark page: renders, and the panel stays light, all along
    assert dark[2:-2, 4, :3].mean(axis=1).min() > 0.8  # its left margin (4 px in; its rounded corners left out)


def drawn(function, *args, **kwargs) -> Figure:
    """Call a diagram function with every warning turned into an error; check the common contract."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = function(*args, **kwargs)
        fig.canvas.draw()  # lay out the text: mathtext errors and font warnings surface here
    assert isinstance(fig, Figure)
    assert len(style.alt_text(fig)) > 40
    assert fig.patch.get_alpha() == 0.0  # transparent around the light panel: works on dark pages
    return fig


def hatched(fig: Figure) -> int:
    return sum(1 for p in fig.findobj(Rectangle) if p.get_hatch())


# style


def test_new_diagram_needs_alt_text():
    with pytest.raises(ValueError, match="alt text"):
        style.new_diagram(2, 2, alt=" ")
    fig, ax = style.new_diagram(3, 2, alt="A  test\n diagram.")
    assert style.alt_text(fig) == "A test diagram."  # whitespace normalised
    assert [p.get_gid() for p in ax.patches] == ["panel"]
    assert ax.get_xlim() == (0.0, 3.0) and ax.get_ylim() == (0.0, 2.0)


def test_alt_text_missing_is_an_error():
    with pytest.raises(ValueError, match="no alt text"):
        style.alt_text(plt.figure())


def test_role_colours_are_distinct_and_mid_tone():
    roles = ["query", "key", "value", "score", "weight", "output"]
    assert len({style.color(r) for r in roles}) == len(roles)
    for role in roles:
        lum = np.dot(matplotlib.colors.to_rgb(style.color(role)), [0.2126, 0.7152, 0.0722])
        assert 0.15 < lum < 0.75, role  # neither near black nor near white
        # the dark shade used for text stands out from the light panel
        assert np.dot(matplotlib.colors.to_rgb(style.dark(role)), [0.2126, 0.7152, 0.0722]) < 0.45
    with pytest.raises(ValueError, match="unknown role"):
        style.color("keys")


def test_matrix_block_geometry_and_labels():
    fig, ax = style.new_diagram(4, 3, alt="One block.")
    block = style.matrix_block(
        ax,
        (2, 1.5),
        3,
        2,
        role="query",
        label="$Q$",
        shape="$n \\times d_k$",
        cell=0.4,
        values=[[1, 2], [3, 4], [5, 6]],
        fmt="{:.0f}",
    )
    assert (block.rows, block.cols) == (3, 2)
    assert block.center == pytest.approx((2, 1.5))
    assert block.width == pytest.approx(0.8) and block.height == pytest.approx(1.2)
    assert block.cell_center(0, 0) == pytest.approx((1.8, 1.5 + 0.4))  # row 0 at the top
    assert block.left[0] < block.center[0] < block.right[0] and block.bottom[1] < block.top[1]
    assert style.blocks_in(fig) == ["$Q$"]
    assert {"$Q$", "$n \\times d_k$", "1", "6"} <= set(style.labels_in(fig))
    with pytest.raises(ValueError, match="expected \\(3, 2\\)"):
        style.matrix_block(ax, (2, 1.5), 3, 2, role="key", values=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="side"):
        style.matrix_block(ax, (2, 1.5), 1, 1, role="key", label="k", label_side="above")


def test_highlight_checks_its_range():
    fig, ax = style.new_diagram(4, 3, alt="One block.")
    block = style.matrix_block(ax, (2, 1.5), 3, 2, role="score")
    style.highlight(ax, block, rows=(1, 2))
    with pytest.raises(ValueError, match="outside"):
        style.highlight(ax, block, rows=(2, 4))


# single-query attention


def test_single_query_draws_the_worked_example():
    fig = drawn(draw_single_query, tokens=["cat", "sat", "mat"])
    blocks = style.blocks_in(fig)
    assert blocks.count("$q$") == 1 and blocks.count("$o$") == 1
    assert {f"$k_{t}$" for t in (1, 2, 3)} | {f"$v_{t}$" for t in (1, 2, 3)} <= set(blocks)
    labels = style.labels_in(fig)
    # scores 2, 1, 0; weights softmax(2, 1, 0); output (0.755, 0.335): chapter 1's hand computation
    assert {"2", "1", "0", "0.665", "0.245", "0.090", "0.755", "0.335"} <= set(labels)
    assert {"cat", "sat", "mat"} <= set(labels)
    assert "(0.665, 0.245, 0.090)" in style.alt_text(fig)


def test_single_query_matches_attention_on_tensors():
    draw = attnbook.seeded_randn(0)
    q, K, V = draw(3), draw(5, 3), draw(5, 2)
    fig = drawn(draw_single_query, q, K, V)
    out, weights = attnbook.attention(q[None], K, V)
    labels = set(style.labels_in(fig))
    assert {f"{w:.3f}" for w in weights[0].tolist()} <= labels
    assert {f"{o:.3f}" for o in out[0].tolist()} <= labels
    assert len([b for b in style.blocks_in(fig) if b.startswith("$k_")]) == 5


def test_single_query_without_numbers():
    fig = drawn(draw_single_query, numbers=False)
    assert "0.665" not in style.labels_in(fig)
    assert "0.665" not in style.alt_text(fig)


def test_single_query_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="keys"):
        draw_single_query([1.0, 0.0], [[1.0, 0.0, 0.0]], [[1.0]])
    with pytest.raises(ValueError, match="token names"):
        draw_single_query(tokens=["one"])


# matrix form


@pytest.mark.parametrize("convention", ["row", "column"])
def test_matrix_form_draws_six_blocks_with_their_shapes(convention):
    n, m, d_k, d_v = 4, 6, 3, 2
    fig = drawn(draw_matrix_form, convention, n=n, m=m, d_k=d_k, d_v=d_v)
    names = {b.split(" ")[0].rstrip("$").lstrip("$") for b in style.blocks_in(fig)}
    assert names == {"Q", "K^\\top", "S", "A", "V", "O"}
    labels = style.labels_in(fig)
    if convention == "row":
        assert {"$n \\times d_k$", "$d_k \\times m$", "$n \\times m$", "$m \\times d_v$", "$n \\times d_v$"} <= set(
            labels
        )
        assert any("over each row" in label for label in labels)
    else:
        assert {"$d_\\mathrm{attn} \\times \\ell_x$", "$\\ell_z \\times \\ell_x$"} <= set(labels)
        assert any("over each column" in label for label in labels)
    # every block has its true shape: count cells by the blocks' sizes
    ax = fig.axes[0]
    sizes = sorted(
        round(
            p.get_width() * p.get_height() / 0.0729 if convention == "column" else p.get_width() * p.get_height() / 0.09
        )
        for p in ax.patches
        if (p.get_gid() or "").startswith("block:")
    )
    assert sizes == sorted([n * d_k, d_k * m, n * m, n * m, m * d_v, n * d_v])


def test_matrix_form_mask_hatches_blocked_scores_and_weights():
    keep = attnbook.causal_mask(4, 6)
    fig = drawn(draw_matrix_form, mask=keep)
    assert hatched(fig) == 2 * int((~keep).sum())  # in S and in A
    assert f"{int((~keep).sum())} of 24" in style.alt_text(fig)


def test_matrix_form_rejects_bad_arguments():
    with pytest.raises(ValueError, match="convention"):
        draw_matrix_form("rows")
    with pytest.raises(ValueError, match="keep-mask"):
        draw_matrix_form(mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="keep-mask"):
        draw_matrix_form(mask=torch.ones(4, 6))
    with pytest.raises(ValueError, match="highlight_query"):
        draw_matrix_form(highlight_query=4)


# masks


def test_default_masks_are_causal_padding_and_both():
    masks = default_masks(5, 3)
    assert np.array_equal(masks["causal"], np.tril(np.ones((5, 5), dtype=bool)))
    assert np.array_equal(masks["padding"], np.tile(np.arange(5) < 3, (5, 1)))
    assert np.array_equal(masks["causal and padding"], masks["causal"] & masks["padding"])
    with pytest.raises(ValueError, match="length"):
        default_masks(5, 6)


def test_masks_draws_minus_infinity_on_every_blocked_score():
    fig = drawn(draw_masks, n=5, length=3)
    blocked = sum(int((~mask).sum()) for mask in default_masks(5, 3).values())
    assert style.labels_in(fig).count("$-\\infty$") == blocked == hatched(fig)
    assert {"causal", "padding", "causal and padding"} <= set(style.labels_in(fig))
    assert len(style.blocks_in(fig)) == 3


def test_masks_takes_custom_masks():
    keep = attnbook.causal_mask(2, 4, align="lower_right")
    fig = drawn(draw_masks, {"cached decoder": keep}, rules={"cached decoder": "$j \\leq i + 2$"})
    assert style.labels_in(fig).count("$-\\infty$") == int((~keep).sum())
    assert "$j \\leq i + 2$" in style.labels_in(fig)
    with pytest.raises(ValueError, match="boolean"):
        draw_masks({"float": torch.zeros(2, 2)})


# the chapters give every diagram its alt text


@pytest.mark.parametrize("chapter", sorted(p.stem for p in BOOK.glob("[0-9][0-9]_*.md")))
def test_every_diagram_cell_carries_the_diagrams_own_alt_text_and_a_caption(chapter):
    """The page's alt text of each diagram (the cell's ``mystnb.image.alt``, what a screen reader
    reads on the site) is the alt text the drawing function wrote for what it drew, word for word,
    so the two cannot drift apart (``python -m tools.alt_text book/NN_x.md`` writes it in); and each
    has a caption."""
    pytest.importorskip("jupytext")
    cells = diagram_cells(BOOK / f"{chapter}.md")
    if not cells:
        pytest.skip(f"{chapter} draws no diagram of attnbook.figures")
    for cell in cells:
        where = f"{chapter}, code cell {cell.index}:\n{cell.source}"
        assert cell.page_alt == cell.drawn_alt, f"{where}\n(run: .venv/bin/python -m tools.alt_text book/{chapter}.md)"
        assert cell.caption, f"{where}\nhas no caption"


#: chapters that do not yet open with a diagram of the mechanism they add (COURSE.md asks every chapter to)
OPENS_OTHERWISE = {
    "01_single_query_attention": "opens with kernel regression's scatter; the single-query diagram needs the worked example",
}


@pytest.mark.parametrize(
    "chapter",
    [
        pytest.param(stem, marks=pytest.mark.xfail(strict=True, reason=OPENS_OTHERWISE[stem]))
        if stem in OPENS_OTHERWISE
        else stem
        for stem in sorted(p.stem for p in BOOK.glob("[0-9][0-9]_*.md"))
    ],
)
def test_every_chapter_opens_with_a_diagram(chapter):
    """The chapter's first figure is a diagram of :mod:`attnbook.figures`: a picture of the mechanism
    (after, at most, a few cells of motivation) before any plot of results."""
    jupytext = pytest.importorskip("jupytext")
    code = [c for c in jupytext.read(BOOK / f"{chapter}.md").cells if c.cell_type == "code"]
    figures = [i for i, c in enumerate(code) if "plt.show()" in c.source]
    assert figures, f"{chapter} shows no figure"
    assert figures[0] <= 5, f"{chapter}: the first figure is code cell {figures[0]}, deep into the chapter"
    assert "draw_" in code[figures[0]].source, (
        f"{chapter}: the first figure is not a diagram:\n{code[figures[0]].source}"
    )


# the plotting helper for masks (attnbook.figures.plotting.mask_heatmap)


def test_mask_heatmap_marks_allowed_cells_with_ones():
    from attnbook import plotting

    keep = attnbook.causal_mask(3)
    ax = plotting.mask_heatmap(keep, row_labels=["a", "b", "c"], title="causal")
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("1") == 6 and texts.count("0") == 3
    assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query" and ax.get_title() == "causal"
    assert len(ax.figure.axes) == 1  # no colour bar
