"""The score histograms: ``histogram.png`` (the totals) and ``questions.png`` (one histogram per
question, one y-scale), bars centred on the scores; nothing without matplotlib.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from .results import GradebookRow

MAX_BARS = 40
"""The most bars a score histogram draws (wider bars, of whole points, beyond)."""


def score_bins(scores: Sequence[float], top: float) -> list[float]:
    """Histogram bin edges for ``scores`` out of ``top``, each bar centred on a score it counts:
    one bar per point when every score is whole, per half point when they are halves (the bars
    of 0, 1, 2, ... are [-0.5, 0.5), [0.5, 1.5), ...), widened to 2, 4, ... points so that there are
    at most :data:`MAX_BARS`. Scores of any other kind (a scaled total) get 20 equal bins over [0, top]."""
    values = [float(v) for v in scores] + [float(top)]
    if not all((2 * v).is_integer() for v in values):
        return [top * k / 20 for k in range(21)]
    step = 1.0 if all(v.is_integer() for v in values) else 0.5
    while max(values) / step + 1 > MAX_BARS:
        step = 2 * step if step >= 1 else 1.0
    bars = int(max(values) // step) + 1
    return [(k - 0.5) * step for k in range(bars + 1)]


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _png(fig) -> bytes:
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def histogram_figure(rows: Sequence[GradebookRow], homework: str):
    """The histogram of the totals (status=error rows left out), bars centred on the scores
    (:func:`score_bins`); None without matplotlib."""
    plt = _pyplot()
    if plt is None:
        return None
    from matplotlib.ticker import MaxNLocator

    totals = [r.total for r in rows if r.status != "error"]
    possible = max([r.possible for r in rows] + [1.0])
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.hist(totals, bins=score_bins(totals, possible), color="#4C72B0", edgecolor="white")
    ax.set_xlabel(f"total score (of {possible:g})")
    ax.set_ylabel("submissions")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{homework}: {len(totals)} graded submissions")
    fig.tight_layout()
    return fig


def histogram_png(rows: Sequence[GradebookRow], homework: str) -> bytes | None:
    """:func:`histogram_figure` as PNG bytes, or None without matplotlib."""
    fig = histogram_figure(rows, homework)
    return None if fig is None else _png(fig)


def question_histograms_figure(
    rows: Sequence[GradebookRow], questions: Sequence[str], possible: dict[str, float], homework: str
):
    """One histogram of the scores per question (status=error rows left out), side by side with
    one y-scale, so that bar heights compare across questions; bars centred on the scores
    (:func:`score_bins`). None without matplotlib or without a graded row."""
    plt = _pyplot()
    if plt is None:
        return None
    from matplotlib.ticker import MaxNLocator

    graded = [r for r in rows if r.status != "error"]
    if not graded or not questions:
        return None
    fig, axes = plt.subplots(
        1, len(questions), figsize=(2.2 * len(questions) + 0.6, 2.6), dpi=100, squeeze=False, sharey=True
    )
    for ax, q in zip(axes[0], questions):
        scores = [r.scores.get(q, 0.0) for r in graded]
        top = possible.get(q) or max(scores + [1.0])
        ax.hist(scores, bins=score_bins(scores, top), color="#4C72B0", edgecolor="white")
        ax.set_title(q)
        ax.set_xlabel("points")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0][0].set_ylabel("submissions")
    fig.suptitle(f"{homework}: scores per question")
    fig.tight_layout()
    return fig


def question_histograms_png(
    rows: Sequence[GradebookRow], questions: Sequence[str], possible: dict[str, float], homework: str
) -> bytes | None:
    """:func:`question_histograms_figure` as PNG bytes (None without matplotlib or graded rows)."""
    fig = question_histograms_figure(rows, questions, possible, homework)
    return None if fig is None else _png(fig)
