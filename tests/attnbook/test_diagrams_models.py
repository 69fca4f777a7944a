"""The diagram of chapter 7 (attnbook.figures.models): the models' pipeline and their training loop.

The diagram is a function returning a Figure with alt text (what every diagram must be is checked
in test_diagrams.py); these tests check that it draws what the models do (the parts and their
order, the optional parts dashed, the weights' patterns), that it rejects alignments it cannot
draw, and that the chapter's cell repeats its alt text.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Circle, FancyBboxPatch, Rectangle  # noqa: E402
from torch import nn  # noqa: E402

from attnbook.figures.models import ALIGNMENT, draw_attention_model  # noqa: E402
from attnbook.figures.style import alt_text, labels_in  # noqa: E402
from attnbook.models.blocks import DecoderBlock, EncoderBlock  # noqa: E402
from attnbook.models.configs import EncoderDecoderConfig, SequenceModelConfig  # noqa: E402
from attnbook.models.encoder_decoder import EncoderDecoder  # noqa: E402
from attnbook.models.sequence import SequenceModel  # noqa: E402
from attnbook.models.tasks import Translation  # noqa: E402

from ..figures import close_figures  # noqa: E402, F401  (autouse)
from ..paths import BOOK  # noqa: E402

CHAPTER = "07_attention_at_work.md"


def _modules(fig: Figure) -> dict[str, FancyBboxPatch]:
    """The module boxes by name (the first of two with one name: the model's, drawn before the encoder's)."""
    found = {}
    for patch in fig.axes[0].patches:
        gid = patch.get_gid() or ""
        if isinstance(patch, FancyBboxPatch) and gid.startswith("module:"):
            found.setdefault(gid[len("module:") :], patch)
    return found


def _dashed(patch) -> bool:
    return patch.get_linestyle() not in ("-", "solid")


def _centre_x(patch: FancyBboxPatch) -> float:
    return patch.get_x() + patch.get_width() / 2


def _weight_grids(fig: Figure) -> list[np.ndarray]:
    """The depth of colour (0 light .. 1 dark) of every cell of the two weight grids, (rows, cols) each."""
    ax = fig.axes[0]
    frames = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_gid() == "block:weights"]
    grids = []
    for frame in frames:
        x0, y0, w, h = frame.get_x(), frame.get_y(), frame.get_width(), frame.get_height()
        cells = [
            p
            for p in ax.patches
            if isinstance(p, Rectangle)
            and p.get_gid() is None
            and x0 - 1e-9 <= p.get_x() + p.get_width() / 2 <= x0 + w + 1e-9
            and y0 - 1e-9 <= p.get_y() + p.get_height() / 2 <= y0 + h + 1e-9
        ]
        size = cells[0].get_width()
        rows, cols = round(h / size), round(w / size)
        depth = np.zeros((rows, cols))
        for cell in cells:
            col = int((cell.get_x() - x0) / size + 0.5)
            row = int((y0 + h - cell.get_y() - size) / size + 0.5)  # row 0 at the top
            depth[row, col] = 1.0 - np.mean(mcolors.to_rgb(cell.get_facecolor()))
        grids.append(depth)
    return grids


def test_the_default_alignment_is_the_chapters_translation():
    assert ALIGNMENT == Translation(length=6, num_symbols=10, seed=0).order


def test_the_block_is_pre_norm_self_attention_cross_attention_mlp_in_that_order():
    modules = _modules(draw_attention_model())
    order = ["embedding", "positions $P$", "self-attention", "cross-attention", "MLP", "final LN", "head"]
    xs = [_centre_x(modules[name]) for name in order]
    assert xs == sorted(xs)
    for k, name in enumerate(("self-attention", "cross-attention", "MLP"), start=1):  # pre-norm: LN first
        assert _centre_x(modules[f"LN {k}"]) < _centre_x(modules[name])
        assert modules[f"LN {k}"].get_y() > modules[name].get_y()  # on the branch, between stream and module
    sums = [p for p in draw_attention_model().axes[0].patches if isinstance(p, Circle) and p.get_gid() == "sum"]
    assert len(sums) == 1 + 3  # the positions, then one residual sum per sublayer
    # the package's decoder block runs its sublayers in this order, each after its own layer norm
    block, calls = DecoderBlock(8, 2), []
    for name in ("norm1", "self_attn", "norm2", "cross_attn", "norm3", "mlp"):
        getattr(block, name).register_forward_hook(lambda module, args, output, name=name: calls.append(name))
    block(torch.zeros(1, 3, 8), torch.zeros(1, 4, 8))
    assert calls == ["norm1", "self_attn", "norm2", "cross_attn", "norm3", "mlp"]
    assert block.norm == "pre"


def test_the_dashed_parts_are_the_ones_a_model_can_leave_out():
    modules = _modules(draw_attention_model())
    assert {name for name, patch in modules.items() if _dashed(patch)} == {"positions $P$", "cross-attention", "MLP"}
    without = SequenceModel(SequenceModelConfig(10, 8, 2, positional=False, mlp=False))
    assert not without.embed.positional and without.blocks[0].mlp is None  # positions and MLP: off
    assert not hasattr(EncoderBlock(8, 2), "cross_attn")  # cross-attention: only in an encoder-decoder
    assert isinstance(EncoderDecoder(EncoderDecoderConfig(10, 11, 8, 2)).decoder[0].cross_attn, nn.Module)
    assert isinstance(SequenceModel(SequenceModelConfig(10, 8, 2)).final_norm, nn.LayerNorm)  # the final LN of pre-norm


@pytest.mark.parametrize("alignment", [ALIGNMENT, (1, 0), (0, 1, 2), tuple(range(8))[::-1], (3, 0, 4, 1, 2)])
def test_the_weights_are_the_reversal_anti_diagonal_and_the_alignment(alignment):
    fig = draw_attention_model(alignment)
    n = len(alignment)
    self_weights, cross_weights = _weight_grids(fig)
    assert self_weights.shape == cross_weights.shape == (n, n)
    assert self_weights.argmax(axis=1).tolist() == list(range(n - 1, -1, -1))  # query i reads key n - 1 - i
    assert cross_weights.argmax(axis=1).tolist() == list(alignment)  # target i reads source alignment[i]
    assert f"at columns {', '.join(map(str, alignment))}" in alt_text(fig)


def test_the_diagram_names_the_parts_of_the_package():
    labels = labels_in(draw_attention_model())
    for label in ("tokens", "logits", "$Z$", "keys and\nvalues", "AdamW step", "targets", "cross-entropy"):
        assert label in labels, label
    assert "training: attnbook.models.training.train" in labels
    assert "encoder (EncoderDecoder only)" in labels


@pytest.mark.parametrize("alignment", [(0,), (0, 0), (1, 2), tuple(range(9)), (0.0, 1.0), (True, False), ()])
def test_the_diagram_rejects_what_is_not_a_drawable_permutation(alignment):
    with pytest.raises(ValueError):
        draw_attention_model(alignment)


def test_the_chapter_shows_the_diagram_with_its_alt_text():
    jupytext = pytest.importorskip("jupytext")
    notebook = jupytext.read(BOOK / CHAPTER)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    cells = [c for c in code if "draw_attention_model(" in c.source]
    assert len(cells) == 1, f"{CHAPTER} should draw its diagram in one cell"
    cell = cells[0]
    assert code.index(cell) <= 1, "the diagram opens the chapter: right after the imports"
    namespace = {"plt": type("NoShow", (), {"show": staticmethod(lambda: None)}), "Translation": Translation}
    exec(cell.source, namespace)  # the cell as the chapter runs it: fig = draw_attention_model(...); plt.show()
    alt = cell.metadata["mystnb"]["image"]["alt"]
    assert " ".join(alt.split()) == alt_text(namespace["fig"])
    assert cell.metadata["mystnb"]["figure"]["caption"]
