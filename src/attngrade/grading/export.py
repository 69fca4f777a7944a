"""Grades into a learning-management system: a gradebook written as the CSV file Canvas, Moodle or
Gradescope imports.

A gradebook row is named after the submission (the file ``alice.ipynb`` is the row ``alice``); the
learning-management system knows the student by its own ID. A **roster** CSV maps one to the
other. Its columns (a header row, any order; only the first two are required):

* ``submission``: the name of the student's row in the gradebook;
* ``id``: the student's ID in the LMS (Canvas's numeric user ID, Moodle's *ID number*, Gradescope's
  *SID*);
* ``name``, ``email``, ``sis_user_id``, ``sis_login_id``, ``section``: filled in where a format has
  the column.

Every student must be on both sides: a gradebook row with no roster entry, and a roster entry with
no gradebook row, are both listed in one error (:class:`RosterMismatch`), never dropped, and so are
rows the grader failed on (``status=error``: their score is not the student's). With
``missing_as_zero`` the roster's students without a submission get 0 instead, and are listed.

The formats, from each system's documentation of its grade import:

* ``canvas``: Canvas's gradebook CSV, as its *Export* writes it and its *Import* reads it:
  ``Student, ID, SIS User ID, SIS Login ID, Section``, then one column per assignment, named
  after it; the row under the header, ``Points Possible``, gives the assignment's maximum. Canvas
  matches a row to a student by ``ID`` (or ``SIS User ID``).
* ``moodle``: for Moodle's *Import grades from CSV file*: ``ID number, Email address, Full name``
  and one column for the grade item. On import, *Identify user by* maps ``ID number`` (or
  ``Email address``) to the user field, and the grade column is mapped to the grade item.
* ``gradescope``: the layout of Gradescope's score export, which its score import reads back:
  ``Name, SID, Email, Total Score, Max Points``; rows match students by ``Email`` or ``SID``.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

FORMATS = ("canvas", "moodle", "gradescope")
ROSTER_COLUMNS = ("submission", "id", "name", "email", "sis_user_id", "sis_login_id", "section")


class RosterMismatch(ValueError):
    """The gradebook and the roster do not hold the same students (both lists in the message)."""


@dataclass(frozen=True)
class Student:
    """One roster entry: a gradebook row's name and the student's identity in the LMS."""

    submission: str
    id: str
    name: str = ""
    email: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""


@dataclass(frozen=True)
class Grade:
    """What an LMS receives for one student: the total and the maximum."""

    student: Student
    score: str
    possible: str


def read_roster(path: str | Path) -> list[Student]:
    """The roster CSV at ``path`` (see the module's documentation); ValueError naming the file
    and the row for a missing column, an empty ``submission`` or ``id``, or a name given twice."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's byte-order mark is not a column
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the roster {path}: {exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip().lower() for h in (reader.fieldnames or [])]
    missing = [c for c in ("submission", "id") if c not in header]
    if missing:
        raise ValueError(f"the roster {path} has no column {missing} (its header: {reader.fieldnames})")
    students, seen = [], {}
    for line, raw in enumerate(reader, start=2):
        row = {k.strip().lower(): (v or "").strip() for k, v in raw.items() if k is not None}
        if not row.get("submission") or not row.get("id"):
            raise ValueError(f"the roster {path}, line {line}: 'submission' and 'id' must both be filled in")
        if row["submission"] in seen:
            raise ValueError(
                f"the roster {path} names the submission {row['submission']!r} twice (lines {seen[row['submission']]} and {line})"
            )
        seen[row["submission"]] = line
        students.append(Student(**{c: row.get(c, "") for c in ROSTER_COLUMNS}))
    return students


def match_roster(
    rows: Sequence[dict[str, str]], roster: Sequence[Student], *, missing_as_zero: bool = False
) -> tuple[list[Grade], list[str]]:
    """Each roster student's grade, in the roster's order, and the students given 0 for having no
    row (only with ``missing_as_zero``). RosterMismatch lists every name found on one side only."""
    by_name = {row["submission"]: row for row in rows}
    unknown = sorted(set(by_name) - {s.submission for s in roster})
    absent = [s.submission for s in roster if s.submission not in by_name]
    problems = []
    if unknown:
        problems.append(f"gradebook rows with no roster entry: {unknown}")
    if absent and not missing_as_zero:
        problems.append(f"roster students with no gradebook row: {absent} (--missing-as-zero gives them 0)")
    failed = sorted(name for name, row in by_name.items() if row.get("status") == "error")
    if failed:
        problems.append(f"rows the grader failed on (status=error; re-grade them with --only): {failed}")
    if problems:
        raise RosterMismatch("; ".join(problems))
    possible = next((row.get("possible", "") for row in rows if row.get("possible")), "")
    grades = [
        Grade(s, by_name[s.submission]["total"], by_name[s.submission].get("possible", possible))
        if s.submission in by_name
        else Grade(s, "0", possible)
        for s in roster
    ]
    return grades, absent


def canvas_csv(grades: Sequence[Grade], assignment: str) -> str:
    """Canvas's gradebook import: student columns, one assignment column, a Points Possible row."""
    rows = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", assignment]]
    rows.append(["Points Possible", "", "", "", "", grades[0].possible if grades else ""])
    for g in grades:
        s = g.student
        rows.append([s.name, s.id, s.sis_user_id, s.sis_login_id, s.section, g.score])
    return _csv(rows)


def moodle_csv(grades: Sequence[Grade], assignment: str) -> str:
    """Moodle's CSV grade import: ID number, email address and full name, one grade column."""
    rows = [["ID number", "Email address", "Full name", assignment]]
    rows += [[g.student.id, g.student.email, g.student.name, g.score] for g in grades]
    return _csv(rows)


def gradescope_csv(grades: Sequence[Grade], assignment: str) -> str:
    """Gradescope's score layout: Name, SID, Email, Total Score, Max Points."""
    rows = [["Name", "SID", "Email", "Total Score", "Max Points"]]
    rows += [[g.student.name, g.student.id, g.student.email, g.score, g.possible] for g in grades]
    return _csv(rows)


WRITERS = {"canvas": canvas_csv, "moodle": moodle_csv, "gradescope": gradescope_csv}


def _csv(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerows([[_cell(v) for v in row] for row in rows])
    return buf.getvalue()


def _cell(value: str) -> str:
    """A cell a spreadsheet shows as text: a leading = + - @ would start a formula."""
    return "'" + value if value[:1] in ("=", "+", "-", "@") and not _is_number(value) else value


def _is_number(value: str) -> bool:
    try:
        float(value)
        return True
    except ValueError:
        return False


def export(
    rows: Sequence[dict[str, str]],
    roster: Sequence[Student],
    fmt: str,
    assignment: str,
    *,
    missing_as_zero: bool = False,
) -> tuple[str, list[str]]:
    """The gradebook ``rows`` as ``fmt``'s CSV text, and the roster students given 0."""
    if fmt not in WRITERS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    grades, zeros = match_roster(rows, roster, missing_as_zero=missing_as_zero)
    return WRITERS[fmt](grades, assignment), zeros


def main(argv: list[str] | None = None) -> int:
    """``python -m attngrade export GRADEBOOK --roster ROSTER --format canvas [--out FILE]``."""
    import argparse

    from .report import read_gradebook

    p = argparse.ArgumentParser(
        prog="python -m attngrade export", description="Write a gradebook as the CSV file an LMS imports."
    )
    p.add_argument("gradebook", help="a gradebook.csv written by attnbook-grade")
    p.add_argument("--roster", required=True, help="CSV with columns submission,id[,name,email,...]")
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--assignment", default=None, help="the assignment's name in the LMS (default: the folder's name)")
    p.add_argument("--out", default=None, help="file to write (default: FORMAT.csv beside the gradebook)")
    p.add_argument("--missing-as-zero", action="store_true", help="give roster students without a row 0")
    args = p.parse_args(argv)
    gradebook = Path(args.gradebook)
    if not gradebook.is_file():
        print(f"attngrade export: {gradebook} is not a gradebook file", file=sys.stderr)
        return 2
    try:
        text, zeros = export(
            read_gradebook(gradebook),
            read_roster(args.roster),
            args.format,
            args.assignment or gradebook.resolve().parent.name,
            missing_as_zero=args.missing_as_zero,
        )
    except ValueError as exc:
        print(f"attngrade export: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else gradebook.parent / f"{args.format}.csv"
    out.write_text(text, encoding="utf-8")
    if zeros:
        print(f"given 0 (no submission): {', '.join(zeros)}", file=sys.stderr)
    print(f"wrote {out} ({args.format}, {text.count(chr(10)) - 1 - (args.format == 'canvas')} students)")
    return 0
