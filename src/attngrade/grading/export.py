"""Grades into a learning-management system: a gradebook written as the CSV file Canvas or Moodle
imports, refused (with the rows named) wherever the importer could put a grade on the wrong
student, and scaled to the LMS item's points when asked.

The rows are a grading run's own (``attnbook-grade ... --export``: the whole class, after an
``--only`` merge too) or those of a gradebook an earlier run wrote (``python -m attngrade export``).
A gradebook row is named after the submission (the file ``alice.ipynb`` is the row ``alice``); the
LMS knows the student by its own identifiers. A **roster** CSV maps one to the other, in one of two
forms (a header row; columns in any order, names in any case):

* the course's own roster: ``submission`` (the gradebook row's name) and the identifiers the format
  needs: ``id`` (Canvas's numeric user ID, or Moodle's *ID number*), ``email``, ``username``,
  ``sis_user_id``, ``sis_login_id``; ``name`` and ``section`` are copied where a format has them;
* **Canvas's own gradebook export** (Grades → Export): ``Student, ID, SIS User ID, SIS Login ID,
  Section`` and the assignment columns (ignored), with its ``Points Possible`` row (skipped). A
  gradebook row then belongs to the student whose name (``Lee, Anna`` or ``Anna Lee``), SIS login
  ID, SIS user ID or ID equals the row's name.

Names are compared after Unicode normalisation (NFC, then case folded, white space collapsed): a
file saved on macOS (``José`` decomposed) matches the roster's ``José``. Every student must be on
both sides: a gradebook row with no roster entry, a row that matches two students, a student
matched by two rows, and a roster student with no gradebook row are all listed in one error
(:class:`RosterMismatch`), never dropped or guessed; so are rows the grader failed on
(``status=error``: their score is not the student's). With ``missing_as_zero`` the roster's
students without a submission get 0 instead, and are listed.

The formats (:data:`FORMATS`, the one list of them), from each system's documentation and the
source of its importer:

* ``canvas``: Canvas's gradebook CSV, as its *Export* writes it and its *Import* reads it:
  ``Student, ID, SIS User ID, SIS Login ID, Section``, one column for the assignment and a
  ``Points Possible`` row. Canvas's importer takes the column's assignment by ``Title (id)`` (the id
  in the assignment's URL) or else by a title equal to the whole header; a header that matches
  neither is offered as a *new* assignment. It takes the student by ``ID`` (Canvas's user ID), else
  by ``SIS User ID`` or ``SIS Login ID``, else by name. So every row needs a usable identifier (an
  ``ID`` that is a Canvas user ID, a positive whole number, or a SIS ID), no identifier may be given
  twice, and a name may not contain ``Points Possible`` (Canvas skips such a row).
* ``moodle``: for Moodle's *Import grades from CSV file*: the identifier columns the roster fills
  (``ID number``, ``Email address``, ``Username``), ``Full name`` and one column for the grade
  item. On import, *Identify user by* maps one identifier column to the user field of the same
  meaning (``Email address`` to *Email address*, never to *User ID*, Moodle's internal number).
  Moodle's importer skips a blank identifier and keeps **the previous row's student**, so a blank
  (or ``0``) identifier would give that grade to the student above: every identifier column
  written must be filled in for every row, and unique (compared without case: Moodle compares
  e-mail and username so, and a database may compare ID numbers so).

Scores are the gradebook's points out of the homework's total unless ``points`` is given: then
each total is scaled to ``points`` (``--points 10``; ``--percent`` is ``--points 100``), and
:class:`Exported` says how many points the LMS item must have (a new Moodle grade item has 100;
17 raw points on it would read as 17 %).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import sys
import tempfile
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .gradebook import read_gradebook
from .output_files import recorded_homework
from .results import GradebookRow

ROSTER_COLUMNS = ("submission", "id", "name", "email", "username", "sis_user_id", "sis_login_id", "section")

#: Canvas's importer drops every column whose header contains one of these (its
#: ``NON_ASSIGNMENT_COLUMN_HEADERS``), and the student columns by these exact names
CANVAS_NOT_ASSIGNMENTS = (
    "Current Score",
    "Current Points",
    "Current Grade",
    "Final Score",
    "Final Points",
    "Final Grade",
    "Override Score",
    "Override Grade",
    "Override Status",
)
CANVAS_STUDENT_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
#: how Canvas's importer splits a header into the assignment's title and id (``Assignment.title_and_id``)
CANVAS_TITLE_AND_ID = re.compile(r"\A(.*)\s\((\d+)\)\Z", re.DOTALL)
MOODLE_IDENTIFIERS = (("ID number", "id"), ("Email address", "email"), ("Username", "username"))


class RosterMismatch(ValueError):
    """The gradebook and the roster do not hold the same students (every problem in the message)."""


def same_name(text: str) -> str:
    """The form in which two names are compared: NFC, case folded, white space collapsed."""
    folded = unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())
    return " ".join(folded.split())


@dataclass(frozen=True)
class Student:
    """One roster entry: a gradebook row's name and the student's identity in the LMS."""

    submission: str
    id: str = ""
    name: str = ""
    email: str = ""
    username: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""
    line: int = 0
    """The roster's line, for error messages (0: not read from a file)."""
    aliases: tuple[str, ...] = ()
    """The names a gradebook row may have for this student when the roster has no ``submission``
    column (Canvas's own export): its names, SIS IDs and ID."""

    def keys(self) -> set[str]:
        return {same_name(k) for k in ((self.submission,) if self.submission else self.aliases) if k.strip()}

    def label(self) -> str:
        who = self.submission or self.name or self.id
        return f"line {self.line} ({who})" if self.line else repr(who)


@dataclass(frozen=True)
class Grade:
    """What an LMS receives for one student: the points, out of ``possible``, and the row's name."""

    student: Student
    score: float
    possible: float
    submission: str | None  # the gradebook row; None for a student given 0 (missing_as_zero)


@dataclass
class Exported:
    """An export's text and what the instructor must know about it."""

    text: str
    assignment: str
    """The LMS item's name, as the file's column has it."""
    students: int
    points: float
    """The points the LMS item must have: the scores are out of this."""
    zeros: list[str] = field(default_factory=list)
    """Roster students given 0 for having no submission (``missing_as_zero``)."""
    notes: list[str] = field(default_factory=list)


# -- the roster ---------------------------------------------------------------------------------


def _column(header: str) -> str:
    return re.sub(r"[\s_]+", "_", header.strip().lower())


def read_roster(path: str | Path) -> list[Student]:
    """The roster CSV at ``path`` (either form of the module's documentation). ValueError naming
    the file and the lines for a missing column, an empty ``submission``, or one name given twice."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's byte-order mark is not a column
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the roster {path}: {exc}") from None
    reader = csv.reader(io.StringIO(text))
    header = [_column(h) for h in next(reader, [])]
    canvas = "submission" not in header and header[:2] == ["student", "id"]
    if "submission" not in header and not canvas:
        raise ValueError(
            f"the roster {path} has no column 'submission' and is not Canvas's gradebook export "
            f"(Student, ID, SIS User ID, SIS Login ID, Section, ...); its header: {header}"
        )
    where = {c: header.index(c) for c in ROSTER_COLUMNS if c in header}
    if canvas:
        where["name"] = 0
    students: list[Student] = []
    seen: dict[str, int] = {}
    for raw in reader:
        line = reader.line_num
        cells = [c.strip() for c in raw]
        value = {c: cells[i] if i < len(cells) else "" for c, i in where.items()}
        if canvas:
            if "Points Possible" in (cells[0] if cells else ""):
                continue  # Canvas's row of the assignments' points (its importer skips it too)
            if all(re.fullmatch(r"(?i)(muted|manual posting.*)?", c) for c in cells):
                continue  # blank, or Canvas's row of muted assignments
            name = value.get("name", "")
            swapped = " ".join(reversed([p.strip() for p in name.split(",", 1)])) if name.count(",") == 1 else ""
            aliases = tuple(
                dict.fromkeys(
                    a for a in (name, swapped, *(value.get(c, "") for c in ("sis_login_id", "sis_user_id", "id"))) if a
                )
            )
            students.append(
                Student(submission="", line=line, aliases=aliases, **{c: value.get(c, "") for c in ROSTER_COLUMNS[1:]})
            )
            continue
        if not any(cells):
            continue
        if not value.get("submission"):
            raise ValueError(f"the roster {path}, line {line}: 'submission' is empty")
        key = same_name(value["submission"])
        if key in seen:
            raise ValueError(
                f"the roster {path} names the submission {value['submission']!r} twice "
                f"(lines {seen[key]} and {line}; names are compared ignoring case and Unicode form)"
            )
        seen[key] = line
        students.append(Student(line=line, **{c: value.get(c, "") for c in ROSTER_COLUMNS}))
    if not students:
        raise ValueError(f"the roster {path} lists no student")
    return students


# -- matching -----------------------------------------------------------------------------------


def _number(text: str | None) -> float | None:
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def match_roster(
    rows: Sequence[GradebookRow], roster: Sequence[Student], *, missing_as_zero: bool = False
) -> tuple[list[Grade], list[str]]:
    """Each roster student's grade, in the roster's order, and the students given 0 for having no
    row (only with ``missing_as_zero``). RosterMismatch lists every problem found."""
    problems = []
    by_key: dict[str, list[Student]] = defaultdict(list)
    for s in roster:
        for k in s.keys():
            by_key[k].append(s)
    rows_by_key: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        rows_by_key[same_name(row.submission)].append(row.submission)
    doubled = sorted(names for names in rows_by_key.values() if len(names) > 1)
    if doubled:
        problems.append(f"gradebook rows that are one name written twice (case or Unicode form): {doubled}")
    owner: dict[str, Student] = {}
    unknown, ambiguous = [], []
    for row in rows:
        found = list(dict.fromkeys(by_key.get(same_name(row.submission), [])))
        if not found:
            unknown.append(row.submission)
        elif len(found) > 1:
            ambiguous.append(f"{row.submission!r} matches roster {', '.join(s.label() for s in found)}")
        else:
            owner[row.submission] = found[0]
    claimed: dict[Student, list[str]] = defaultdict(list)
    for name, s in owner.items():
        claimed[s].append(name)
    twice = [f"roster {s.label()} is matched by the rows {sorted(n)}" for s, n in claimed.items() if len(n) > 1]
    absent = [s for s in roster if s not in claimed]
    if unknown:
        problems.append(f"gradebook rows with no roster entry: {sorted(unknown)}")
    if ambiguous:
        problems.append("gradebook rows that match several roster students: " + "; ".join(ambiguous))
    if twice:
        problems.append("; ".join(twice))
    if absent and not missing_as_zero:
        names = [s.submission or s.name or s.id for s in absent]
        problems.append(f"roster students with no gradebook row: {names} (--missing-as-zero gives them 0)")
    failed = sorted(row.submission for row in rows if row.status == "error")
    if failed:
        problems.append(f"rows the grader failed on (status=error; re-grade them with --only): {failed}")
    bad = sorted(
        row.submission
        for row in rows
        if not math.isfinite(row.total) or not (math.isfinite(row.possible) and row.possible > 0)
    )
    if bad:
        problems.append(f"rows without a numeric total and a positive 'possible': {bad}")
    possibles: dict[float, list[str]] = defaultdict(list)
    for row in rows:
        possibles[row.possible].append(row.submission)
    if len(possibles) > 1:
        problems.append(
            "rows graded out of different totals (one LMS item has one maximum; re-grade them together): "
            + "; ".join(f"{p}: {sorted(n)}" for p, n in possibles.items())
        )
    if problems:
        raise RosterMismatch("; ".join(problems))
    if not rows:
        raise RosterMismatch("the gradebook has no row: nothing to export")
    possible = rows[0].possible
    row_of = {row.submission: row for row in rows}
    by_student = {s: name for name, s in owner.items()}
    grades = [
        Grade(s, row_of[by_student[s]].total, possible, by_student[s])
        if s in by_student
        else Grade(s, 0.0, possible, None)
        for s in roster
    ]
    return grades, [s.submission or s.name or s.id for s in absent]


# -- the formats --------------------------------------------------------------------------------


def _duplicates(grades: Sequence[Grade], attr: str, fold: bool) -> list[str]:
    seen: dict[str, list[str]] = defaultdict(list)
    for g in grades:
        value = getattr(g.student, attr).strip()
        if value:
            seen[value.casefold() if fold else value].append(g.student.label())
    return [f"{v!r} ({', '.join(who)})" for v, who in seen.items() if len(who) > 1]


def canvas_problems(grades: Sequence[Grade], assignment: str) -> list[str]:
    """Why Canvas's importer could put a grade of this export on the wrong student or assignment."""
    problems = []
    for col in CANVAS_NOT_ASSIGNMENTS:
        if col in assignment:
            problems.append(
                f"the assignment title {assignment!r} contains {col!r}: Canvas's importer drops that column"
            )
    if assignment.strip() in CANVAS_STUDENT_COLUMNS or not assignment.strip():
        problems.append(f"{assignment!r} cannot be an assignment column's title")
    no_key = [
        g.student.label() for g in grades if not (g.student.id or g.student.sis_user_id or g.student.sis_login_id)
    ]
    if no_key:
        problems.append(f"students with no ID, SIS User ID or SIS Login ID (Canvas would match them by name): {no_key}")
    not_ids = [
        f"{g.student.label()}: {g.student.id!r}"
        for g in grades
        if g.student.id and not re.fullmatch(r"[1-9][0-9]*", g.student.id)
    ]
    if not_ids:
        problems.append(f"IDs that are not Canvas user IDs (a positive whole number): {not_ids}")
    for attr, label, fold in (
        ("id", "ID", False),
        ("sis_user_id", "SIS User ID", False),
        ("sis_login_id", "SIS Login ID", True),
    ):
        dup = _duplicates(grades, attr, fold)
        if dup:
            problems.append(f"the same {label} for several students: {'; '.join(dup)}")
    pp = [g.student.label() for g in grades if "Points Possible" in g.student.name]
    if pp:
        problems.append(f"names containing 'Points Possible' (Canvas skips such a row): {pp}")
    return problems


def moodle_columns(grades: Sequence[Grade]) -> list[tuple[str, str]]:
    """The identifier columns a Moodle export has: (header, roster field) for each identifier the
    roster fills for at least one student."""
    return [(h, attr) for h, attr in MOODLE_IDENTIFIERS if any(getattr(g.student, attr).strip() for g in grades)]


def moodle_problems(grades: Sequence[Grade], assignment: str) -> list[str]:
    """Why Moodle's importer could put a grade of this export on the wrong student."""
    problems = []
    columns = moodle_columns(grades)
    if not columns:
        problems.append("the roster gives no identifier Moodle can map (id as ID number, email, username)")
    if assignment.strip() in {h for h, _ in MOODLE_IDENTIFIERS} | {"Full name"} or not assignment.strip():
        problems.append(f"{assignment!r} cannot be the grade column's title")
    for header, attr in columns:
        blank = [g.student.label() for g in grades if getattr(g.student, attr).strip() in ("", "0")]
        if blank:
            problems.append(
                f"students with a blank {header!r} (Moodle would give their grade to the row above): {blank}"
            )
        dup = _duplicates(grades, attr, fold=True)  # a database may compare without case
        if dup:
            problems.append(f"the same {header!r} for several students: {'; '.join(dup)}")
    return problems


def canvas_csv(grades: Sequence[Grade], scores: Sequence[str], assignment: str, points: str) -> str:
    """Canvas's gradebook import: student columns, one assignment column, a Points Possible row."""
    rows = [[*CANVAS_STUDENT_COLUMNS, assignment], ["Points Possible", "", "", "", "", points]]
    for g, score in zip(grades, scores):
        s = g.student
        rows.append([_cell(s.name), s.id, s.sis_user_id, s.sis_login_id, _cell(s.section), score])
    return _csv(rows)


def moodle_csv(grades: Sequence[Grade], scores: Sequence[str], assignment: str, points: str) -> str:
    """Moodle's CSV grade import: the identifier columns, the full name, one grade column."""
    columns = moodle_columns(grades)
    rows = [[*(h for h, _ in columns), "Full name", assignment]]
    for g, score in zip(grades, scores):
        rows.append([*(getattr(g.student, attr) for _, attr in columns), _cell(g.student.name), score])
    return _csv(rows)


def _csv(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    return buf.getvalue()


def _cell(value: str) -> str:
    """A name a spreadsheet shows as text: a leading = + - @ would start a formula. Identifiers are
    written as they are (the LMS compares them exactly)."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") and _number(value) is None else value


def points_text(x: float) -> str:
    """A score as both importers read it: plain decimals (no exponent), at most 4 places."""
    text = f"{round(x, 4):.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def canvas_notes(assignment: str) -> list[str]:
    """What the instructor should know about a Canvas column named ``assignment``."""
    if CANVAS_TITLE_AND_ID.match(assignment):
        return []
    return [
        f"Canvas matches the column {assignment!r} to the assignment with exactly that title; "
        "--assignment 'Title (id)' (the id in the assignment's URL) matches it by id"
    ]


def canvas_advice(points: str, assignment: str) -> str:
    return f"the Canvas assignment {assignment!r} must be worth {points} points (the scores are out of {points})"


def moodle_advice(points: str, assignment: str) -> str:
    return (
        f"map the column {assignment!r} to a Moodle grade item whose maximum grade is {points} (a new grade "
        f"item gets 100; the scores are out of {points}); identify users by a column of the same meaning "
        "(Email address to Email address, ...), never by 'User ID'"
    )


@dataclass(frozen=True)
class Format:
    """One LMS's import file: why it could misplace a grade, how it is written, what to tell the
    instructor about it."""

    problems: Callable[[Sequence[Grade], str], list[str]]
    """(grades, assignment) -> why the importer could put a grade on the wrong student or item."""
    write: Callable[[Sequence[Grade], Sequence[str], str, str], str]
    """(grades, scores, assignment, points) -> the file's text."""
    advice: Callable[[str, str], str]
    """(points, assignment) -> the points the LMS item must have, and how to import the file."""
    notes: Callable[[str], list[str]] = lambda assignment: []
    """(assignment) -> what to know about the column's name."""


#: the LMS formats, by the name the command line takes (``--export``, ``--format``)
FORMATS: dict[str, Format] = {
    "canvas": Format(canvas_problems, canvas_csv, canvas_advice, canvas_notes),
    "moodle": Format(moodle_problems, moodle_csv, moodle_advice),
}


def export(
    rows: Sequence[GradebookRow],
    roster: Sequence[Student],
    fmt: str,
    assignment: str,
    *,
    missing_as_zero: bool = False,
    points: float | None = None,
) -> Exported:
    """The gradebook ``rows`` as ``fmt``'s CSV text for the LMS item ``assignment``, scaled to
    ``points`` if given. RosterMismatch (a ValueError) names every row the LMS could misplace."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if points is not None and not (points > 0 and points == points and points != float("inf")):
        raise ValueError(f"--points must be a positive number, not {points}")
    assignment = assignment.strip()  # Canvas finds "Title (id)" only at the header's very end
    grades, zeros = match_roster(rows, roster, missing_as_zero=missing_as_zero)
    lms = FORMATS[fmt]
    problems = lms.problems(grades, assignment)
    if problems:
        raise RosterMismatch("; ".join(problems))
    possible = grades[0].possible
    scale = points if points is not None else possible
    scores = [points_text(g.score * scale / possible) for g in grades]
    text = lms.write(grades, scores, assignment, points_text(scale))
    notes = []
    review = sorted(row.submission for row in rows if row.status == "review")
    if review:
        notes.append(f"rows flagged for review (status=review; the reason is in their feedback): {review}")
    notes += lms.notes(assignment)
    return Exported(text, assignment, len(grades), scale, zeros, notes)


def item_points_advice(fmt: str, result: Exported) -> str:
    """One line: the points the LMS item must have for these scores to mean what they say."""
    return FORMATS[fmt].advice(points_text(result.points), result.assignment)


def write_export(path: Path, make: Callable[[], Exported]) -> tuple[Exported | None, str]:
    """Write what ``make()`` returns to ``path`` through a temporary file renamed into place; when
    ``make`` raises ValueError or the write fails, remove an earlier export at ``path`` (it no
    longer matches the gradebook). Returns (the export, '') or (None, what went wrong)."""
    try:
        result = make()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(result.text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return result, ""
    except (ValueError, OSError) as exc:
        message = str(exc)
        try:
            if path.is_file() or path.is_symlink():
                path.unlink()
                message += f"; removed {path}, an earlier export that no longer matches this gradebook"
            else:
                message += f"; {path} was not written"
        except OSError as gone:
            message += f"; could not remove the earlier {path}: {gone}"
        return None, message


def scale(points: float | None, percent: bool) -> float | None:
    """The points to scale the scores to: ``--percent`` is 100, else ``--points`` (None: raw points)."""
    return 100.0 if percent else points


def main(
    *,
    gradebook: str | os.PathLike[str],
    lms: str,
    roster: str | os.PathLike[str],
    assignment: str | None = None,
    points: float | None = None,
    percent: bool = False,
    missing_as_zero: bool = False,
    out: str | os.PathLike[str] | None = None,
) -> int:
    """``python -m attngrade export GRADEBOOK --roster ROSTER --format canvas ...``: an earlier
    run's gradebook as the file the LMS imports (default ``FORMAT.csv`` beside the gradebook),
    for the LMS item ``assignment`` (default: the homework the run recorded). Returns the exit
    status: 0, or 2 when the export was refused (an earlier export file of that name is removed)."""
    gradebook = Path(gradebook)
    if not gradebook.is_file():
        print(f"attngrade export: {gradebook} is not a gradebook file", file=sys.stderr)
        return 2
    assignment = assignment or recorded_homework(gradebook.parent)
    if not assignment:
        print(
            f"attngrade export: no record of the homework graded into {gradebook.parent}; "
            "give the LMS item's name with --assignment",
            file=sys.stderr,
        )
        return 2
    target = Path(out) if out else gradebook.parent / f"{lms}.csv"
    if target.resolve() == gradebook.resolve():
        print(f"attngrade export: --out {target} is the gradebook itself", file=sys.stderr)
        return 2
    result, error = write_export(
        target,
        lambda: export(
            read_gradebook(gradebook),
            read_roster(roster),
            lms,
            assignment,
            missing_as_zero=missing_as_zero,
            points=scale(points, percent),
        ),
    )
    if result is None:
        print(f"attngrade export: {error}", file=sys.stderr)
        return 2
    report_export(lms, result, target)
    return 0


def report_export(fmt: str, result: Exported, out: Path) -> None:
    """Print what was written and what the instructor must know to import it."""
    print(f"wrote {out} ({fmt}, {result.students} students, column {result.assignment!r})")
    print(f"  {item_points_advice(fmt, result)}")
    if result.zeros:
        print(f"  given 0 (no submission): {', '.join(result.zeros)}")
    for note in result.notes:
        print(f"  note: {note}")
