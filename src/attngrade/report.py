"""Writing grades out: a CSV gradebook and one feedback file per submission.

Files are written to a temporary name and renamed into place, so a submission that planted a
symbolic link at an output path while it ran gets its link replaced, not followed.
"""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .grader import SubmissionResult


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(tmp, path)


def _num(x: float) -> str:
    return f"{x:g}"


def gradebook_csv(results: Sequence[SubmissionResult], questions: Sequence[str]) -> str:
    """CSV text: submission, one column per question, total, possible."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["submission", *questions, "total", "possible"])
    for r in results:
        scores = {q.name: q.score for q in r.questions}
        # a leading =, +, - or @ would make a spreadsheet evaluate the name as a formula
        name = ("'" + r.submission) if r.submission[:1] in ("=", "+", "-", "@") else r.submission
        w.writerow([name, *(_num(scores.get(q, 0.0)) for q in questions), _num(r.total), _num(r.possible)])
    return buf.getvalue()


def feedback_text(r: SubmissionResult, homework: str) -> str:
    """The feedback a student receives: per question the score and each test's verdict."""
    lines = [f"# {homework}: feedback for {r.submission}", "",
             f"Total: {_num(r.total)} / {_num(r.possible)}", ""]
    for q in r.questions:
        lines.append(f"## {q.name}: {_num(q.score)} / {_num(q.possible)}")
        for reason in q.integrity:
            lines.append(f"- integrity: {reason}")
        for c in q.cases:
            mark = "passed" if c.passed else "FAILED"
            kind = "hidden" if c.hidden else "public"
            lines.append(f"- [{mark}] {c.name} ({kind}, {_num(c.points)} pt)")
            if not c.passed:
                lines.extend("    " + line for line in c.message.splitlines())
        lines.append("")
    if r.execution_errors:
        lines.append("## Cells that raised an error when the grader ran your notebook")
        for e in r.execution_errors:
            lines.append(f"- code cell {e['cell']}: {e['error'].splitlines()[0] if e['error'] else ''}")
        lines.append("")
    if r.notes:
        lines.append("## Notes")
        lines.extend(f"- {n}" for n in r.notes)
        lines.append("")
    return "\n".join(lines)


def failure_summary(r: SubmissionResult) -> list[str]:
    """What cost a submission points, one line each: failed tests, integrity findings, notes and
    cells that raised (for instructors' error messages and the tests)."""
    lines = []
    for q in r.questions:
        for c in q.cases:
            if not c.passed:
                lines.append(f"  {q.name} {c.name}: {c.message.splitlines()[0] if c.message else ''}")
        lines.extend(f"  {q.name} integrity: {reason}" for reason in q.integrity)
    lines.extend(f"  note: {n}" for n in r.notes)
    lines.extend(f"  cell {e['cell']}: {e['error']}" for e in r.execution_errors)
    return lines


def safe_filename(name: str) -> str:
    """A file name made only of safe characters, from a submission name."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "submission"
    return cleaned[:120]


def write_reports(results: Sequence[SubmissionResult], questions: Sequence[str], out: str | os.PathLike[str],
                  homework: str) -> tuple[Path, list[Path]]:
    """Write ``out/gradebook.csv`` and ``out/feedback/<submission>.md``; return their paths."""
    out = Path(out)
    book = out / "gradebook.csv"
    _atomic_write(book, gradebook_csv(results, questions))
    paths = []
    used: set[str] = set()
    for r in results:
        stem = safe_filename(r.submission)
        while stem in used:
            stem += "_"
        used.add(stem)
        p = out / "feedback" / f"{stem}.md"
        _atomic_write(p, feedback_text(r, homework))
        paths.append(p)
    return book, paths
