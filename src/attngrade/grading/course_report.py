"""What a class got wrong across a whole course: every homework's gradebook in one report.

``python -m attngrade course-report grades/`` reads each ``grades/<homework>/`` that
``attnbook-grade`` wrote (``gradebook.csv`` and ``mistakes.json``) and writes
``grades/course_report.md``: the homework ranked by the share of points the class lost (the
chapter to re-teach first), and under each its questions ranked by points lost with the known
mistakes that explain them and how many students made each.

A homework is known by what its grading run recorded (``run.json``, see
:func:`attngrade.grading.output_files.recorded_homework`), never by its folder's name: a re-grade into
``grades/hw03-v2`` is hw03 again, and of two folders of one homework the one graded last counts
(the report says which folder it read and which it left out).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .class_summary import misconceptions, read_record
from .gradebook import read_gradebook
from .output_files import atomic_write, recorded_homework, recorded_time


@dataclass
class HomeworkLosses:
    name: str
    folder: Path
    graded: int
    lost: float  # points lost by all graded rows together
    possible: float  # points all graded rows could have had together
    questions: list[tuple[str, float]]  # (question, points lost), most first
    mistakes: list[tuple[str, str, list[str]]]  # (question, mistake, students)

    @property
    def share_lost(self) -> float:
        return self.lost / self.possible if self.possible else 0.0


def homework_losses(folder: Path) -> HomeworkLosses | None:
    """The losses of the homework graded into ``folder`` (None if it holds no gradebook).
    ValueError names a gradebook cell that is not a number."""
    rows = [r for r in read_gradebook(folder / "gradebook.csv") if r.status != "error"]
    if not rows:
        return None
    questions = list(dict.fromkeys(q for r in rows for q in r.scores))  # the gradebook's question columns
    # each question's points, as the grading run recorded them (questions.json); without that
    # record, the best score any row got (then the losses are lower bounds)
    try:
        recorded = json.loads((folder / "questions.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = {}
    best = {q: float(recorded.get(q) or max(r.scores.get(q, 0.0) for r in rows)) for q in questions}
    possible_total = rows[0].possible or sum(best.values())
    lost_total = sum(possible_total - r.total for r in rows)
    per_question = {q: sum(best[q] - r.scores.get(q, 0.0) for r in rows) for q in questions}
    return HomeworkLosses(
        name=recorded_homework(folder) or folder.name,
        folder=folder,
        graded=len(rows),
        lost=lost_total,
        possible=possible_total * len(rows),
        questions=sorted(per_question.items(), key=lambda kv: (-kv[1], kv[0])),
        mistakes=misconceptions(read_record(folder / "mistakes.json")),
    )


def course_report(grades: Path) -> str:
    folders = [f for f in sorted(grades.iterdir()) if f.is_dir() and (f / "gradebook.csv").is_file()]
    # one entry per homework, as the runs recorded it: the folder graded last replaces the others
    latest: dict[str, Path] = {}
    for f in sorted(folders, key=lambda f: (recorded_time(f), f.name)):
        latest[recorded_homework(f) or f.name] = f
    replaced = sorted((recorded_homework(f) or f.name, f.name) for f in folders if f not in latest.values())
    found = [h for h in (homework_losses(f) for f in latest.values()) if h is not None]
    lines = [f"# Course report: {grades}", ""]
    if not found:
        return "\n".join(lines + ["No graded homework found (no <homework>/gradebook.csv)."]) + "\n"
    lines += [
        "Homework by the share of points the class lost (re-teach from the top):",
        "",
        "| homework | graded | points lost | share lost |",
        "|---|---|---|---|",
    ]
    ranked = sorted(found, key=lambda h: (-h.share_lost, h.name))
    lines += [f"| {h.name} | {h.graded} | {h.lost:g} of {h.possible:g} | {h.share_lost:.0%} |" for h in ranked]
    lines += [
        "",
        "Read from: " + ", ".join(f"{h.name} in {h.folder.name}/" for h in sorted(found, key=lambda h: h.name)),
    ]
    if replaced:
        lines.append("Left out, graded again later: " + ", ".join(f"{f}/ ({name})" for name, f in replaced))
    for h in ranked:
        lines += ["", f"## {h.name}", ""]
        for q, lost in h.questions:
            if lost <= 0:
                continue
            lines.append(f"- {q}: {lost:g} points lost")
            lines += [f"  - {len(s)} of {h.graded} students: {m}" for qq, m, s in h.mistakes if qq == q]
        if all(lost <= 0 for _, lost in h.questions):
            lines.append("- every graded row has full marks")
    return "\n".join(lines) + "\n"


def main(*, grades: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> int:
    """``python -m attngrade course-report GRADES``: write :func:`course_report` of the folder
    ``grades`` to ``out`` (default ``GRADES/course_report.md``) and print it. Returns the exit
    status: 0, or 2 when ``grades`` is not a folder or holds a gradebook that cannot be read."""
    grades = Path(grades)
    if not grades.is_dir():
        print(f"attngrade course-report: {grades} is not a folder", file=sys.stderr)
        return 2
    try:
        text = course_report(grades)
    except ValueError as exc:
        print(f"attngrade course-report: {exc}", file=sys.stderr)
        return 2
    target = Path(out) if out else grades / "course_report.md"
    atomic_write(target, text)
    print(text)
    print(f"written to {target}")
    return 0
