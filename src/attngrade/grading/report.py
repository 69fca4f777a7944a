"""Writing grades out: :func:`write_reports` writes a run's output folder, each file made by the
module of its job.

* ``gradebook.csv`` (:mod:`.gradebook`): submission, one column per question, total, possible,
  status (``ok``, ``review``, ``error``), error (why the grader failed on that row);
* ``feedback/<submission>.md`` (:mod:`.feedback`, named by :mod:`.file_names`): per question the
  score and each test's verdict; failing hidden tests say what went wrong but never show the
  test's source;
* ``summary.md`` (:mod:`.class_summary`) and ``histogram.png`` (:mod:`.histograms`): per-question
  averages, how often each hidden test failed, the score distribution, and the entries of the class
  folder that were not graded, with the reason;
* ``hidden_failures.json``: the hidden tests each graded row failed, and ``mistakes.json``, the
  known mistakes its failed checks named ("Likely mistake: ..."), kept so that the summary after a
  partial re-grade still counts the whole class;
* ``misconceptions.csv``: per question and named mistake, how many students it explains and who
  (the summary ranks the questions by points lost and lists the same counts under each);
* ``questions.png``: one histogram of the scores per question (one y-scale, bars centred on the
  scores); ``questions.json``: each question's points; ``run.json`` (:mod:`.output_files`): the
  homework graded and when (what ``export`` and ``course-report`` name it by).

With ``merge`` (the CLI's ``--only``) the rows graded now replace those of the same students in the
existing gradebook and the other rows stay, and the summary is computed from the merged rows;
without it the gradebook and the feedback folder are replaced whole (no stale feedback files
remain). Files are written to a temporary name and renamed into place
(:func:`.output_files.atomic_write`), so a link planted at an output path is replaced, not followed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .class_summary import hidden_failures, merged_record, misconceptions_csv, named_mistakes, summary_text
from .feedback import feedback_text
from .file_names import unique_filenames
from .gradebook import gradebook_csv, read_gradebook
from .histograms import histogram_png, question_histograms_png
from .output_files import RUN_FILE, atomic_write
from .results import GradebookRow, SubmissionResult


@dataclass
class WrittenReports:
    """What :func:`write_reports` wrote, and the whole class's rows (after a merge too), for the
    comparison and the LMS export of the same run."""

    gradebook: Path
    feedback: list[Path]
    summary: Path
    histogram: Path | None
    summary_text: str
    rows: list[GradebookRow]


def write_reports(
    results: Sequence[SubmissionResult],
    questions: Sequence[str],
    out: str | os.PathLike[str],
    homework: str,
    *,
    merge: bool = False,
    ignored: Sequence[tuple[str, str]] = (),
) -> WrittenReports:
    """Write the gradebook, the feedback files and the summary into ``out`` (see the module doc)."""
    out = Path(out)
    book = out / "gradebook.csv"
    rows = {r.submission: GradebookRow.of(r, questions) for r in results}
    if merge:
        for row in read_gradebook(book):
            rows.setdefault(row.submission, row)
    atomic_write(book, gradebook_csv(list(rows.values()), questions))
    atomic_write(out / RUN_FILE, json.dumps({"homework": homework, "graded_at": time.time()}, indent=1) + "\n")
    names = sorted(rows)
    files = dict(zip(names, unique_filenames(names)))
    feedback_dir = out / "feedback"
    if not merge and feedback_dir.is_dir():
        keep = {f"{files[r.submission]}.md" for r in results}
        for old in feedback_dir.glob("*.md"):
            if old.name not in keep and old.is_file():
                old.unlink()
    paths = []
    for r in results:
        p = feedback_dir / f"{files[r.submission]}.md"
        atomic_write(p, feedback_text(r, homework))
        paths.append(p)
    # the hidden tests each row failed, kept beside the gradebook so that a re-grade of some
    # students (--only) still summarises the whole class
    failed = merged_record(out / "hidden_failures.json", hidden_failures(results), results, rows, merge)
    mistakes = merged_record(out / "mistakes.json", named_mistakes(results), results, rows, merge)
    atomic_write(out / "misconceptions.csv", misconceptions_csv(mistakes))
    text = summary_text(
        list(rows.values()), questions, results, homework, hidden_failed=failed, mistakes=mistakes, ignored=ignored
    )
    summary = out / "summary.md"
    png = histogram_png(list(rows.values()), homework)
    histogram = None
    if png is not None:
        histogram = out / "histogram.png"
        atomic_write(histogram, png)
        text += "\n![score histogram](histogram.png)\n"
    possible = {q.name: q.possible for r in results for q in r.questions}
    atomic_write(out / "questions.json", json.dumps({q: possible.get(q) for q in questions}, indent=1) + "\n")
    per_question = question_histograms_png(list(rows.values()), questions, possible, homework)
    if per_question is not None:
        atomic_write(out / "questions.png", per_question)
        text += "\n![scores per question](questions.png)\n"
    atomic_write(summary, text)
    return WrittenReports(book, paths, summary, histogram, text, sorted(rows.values(), key=lambda r: r.submission))
