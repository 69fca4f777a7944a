"""attnbook.figures.style.record_figure_text: the PNG of every figure drawn after use_style() records the
size of its smallest text and every string it shows (the website's tests read them: figures legible
on a phone, no raw TeX in a label)."""

from __future__ import annotations

import io
import json

import matplotlib
import matplotlib.pyplot as plt
import pytest
from PIL import Image

from attnbook import plotting


@pytest.fixture
def course_style():
    with matplotlib.rc_context():
        plotting.use_style()
        yield
    plt.close("all")


def _record(png: bytes) -> dict:
    with Image.open(io.BytesIO(png)) as image:
        return dict(image.text)


def _figure():
    fig, (left, right) = plt.subplots(1, 2, figsize=(6, 2.5))
    left.plot([0, 1, 2], [1, 0, 1], label=r"$\alpha_t L_{t-1}$")
    left.legend(fontsize=7)
    left.set_xlabel("scores read")
    right.set_title("running sum")
    return fig


def test_savefig_records_the_smallest_text_and_every_string(course_style):
    fig = _figure()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    record = _record(buffer.getvalue())
    assert float(record[plotting.MIN_TEXT_PX_KEY]) == pytest.approx(7 * 100 / 72, abs=0.01)  # the legend
    texts = json.loads(record[plotting.TEXTS_KEY])
    assert {r"$\alpha_t L_{t-1}$", "scores read", "running sum"} <= set(texts)


def test_the_notebook_display_records_it_at_the_resolution_it_draws(course_style):
    from IPython.core.pylabtools import print_figure

    fig = _figure()
    for fmt, scale in (("png", 1), ("retina", 2)):  # retina doubles the dpi, and so the text's pixels
        record = _record(print_figure(fig, fmt))
        expected = 7 * fig.dpi * scale / 72
        assert float(record[plotting.MIN_TEXT_PX_KEY]) == pytest.approx(expected, abs=0.01)


def test_other_formats_and_figures_outside_the_style_are_untouched(course_style):
    fig = _figure()
    svg = io.StringIO()
    fig.savefig(svg, format="svg")
    assert plotting.TEXTS_KEY not in svg.getvalue()
    with matplotlib.rc_context({"figure.hooks": []}):
        plain = plt.figure()
        plain.add_subplot().set_title("x")
        buffer = io.BytesIO()
        plain.savefig(buffer, format="png")
    assert plotting.TEXTS_KEY not in _record(buffer.getvalue())
