"""The gradebook CSV: submission, one column per question, total, possible, status (``ok``,
``review``, ``error``), error (why the grader failed on that row); written, and read back for a
merge (the CLI's ``--only``) or an earlier run.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from .results import GradebookRow, score_text

FIXED_COLUMNS = ("total", "possible", "status", "error")


def cell_name(name: str) -> str:
    # a leading =, +, - or @ would make a spreadsheet evaluate the name as a formula
    return ("'" + name) if name[:1] in ("=", "+", "-", "@", "\t", "\r") else name


def gradebook_csv(rows: Sequence[GradebookRow], questions: Sequence[str]) -> str:
    """CSV text: submission, one column per question, total, possible, status, error."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["submission", *questions, *FIXED_COLUMNS])
    for row in sorted(rows, key=lambda r: r.submission):
        w.writerow(
            [
                cell_name(row.submission),
                *(score_text(row.scores.get(q, 0.0)) for q in questions),
                score_text(row.total),
                score_text(row.possible),
                row.status,
                row.error,
            ]
        )
    return buf.getvalue()


def read_gradebook(path: Path) -> list[GradebookRow]:
    """The rows of a gradebook an earlier run wrote (submission names unescaped; [] if there is
    none). ValueError names the file, the line and the column of a score that is not a number."""
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        questions = [c for c in reader.fieldnames or [] if c != "submission" and c not in FIXED_COLUMNS]

        def number(raw: dict, column: str) -> float:
            text = (raw.get(column) or "").strip()
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"{path}, line {reader.line_num}: {column!r} is {text!r}, not a number") from None

        for raw in reader:
            name = raw.get("submission") or ""
            if name[:2] in ("'=", "'+", "'-", "'@", "'\t", "'\r"):
                name = name[1:]
            scores = {q: number(raw, q) for q in questions if (raw.get(q) or "").strip()}
            total, possible = number(raw, "total"), number(raw, "possible")
            rows.append(GradebookRow(name, scores, total, possible, raw.get("status") or "ok", raw.get("error") or ""))
    return rows
