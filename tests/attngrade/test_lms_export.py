"""Grades into the LMS (attngrade.grading.export) and re-grade comparisons (attngrade.grading.compare).

Each export is checked twice: against the sample files in ``lms_samples/``, written by hand from
each system's documentation, and by reading it back as the system's importer reads it. The two
readers below follow the public source of those importers (canvas-lms's ``GradebookImporter``,
Moodle's ``gradeimport_csv_load_data``): how they find the header, the assignment column, the
student of a row, and what they do with a blank identifier. Every student must end up with the
grade of their own gradebook row, on the LMS item's scale, or the export must refuse with the rows
named.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from pathlib import Path

import pytest

from attngrade.cli import main as command
from attngrade.grading.compare import Change, compare, comparison_csv, comparison_markdown, fingerprint_tests
from attngrade.grading.export import FORMATS, RosterMismatch, export, read_roster, same_name, write_export
from attngrade.grading.output_files import RUN_FILE
from attngrade.grading.results import GradebookRow

SAMPLES = Path(__file__).resolve().parent / "lms_samples"
ROSTER = """submission,id,name,email,sis_user_id,sis_login_id,section
anna,1001,"Lee, Anna",anna.lee@example.edu,S1001,alee,Section 1
bob,1002,"Ng, Bob",bob.ng@example.edu,S1002,bng,Section 1
"""


# -- the importers, as their source reads a file ------------------------------------------------


def _ruby_to_i(text: str) -> int:
    """Ruby's String#to_i: the leading digits, 0 without any."""
    found = re.match(r"\s*([+-]?\d+)", text)
    return int(found.group(1)) if found else 0


def _canvas_rows(text: str) -> list[list[str]]:
    """Canvas's CSV reading: ';' or ',' chosen on the first three lines (the separator that gives
    every line the same, larger number of fields), lines of only separators and blanks skipped,
    a field that is a number with a decimal comma or period normalised."""
    lines = text.splitlines()[:3]

    def fields(sep):
        counts = {len(next(csv.reader([line], delimiter=sep))) for line in lines}
        return counts.pop() if len(counts) == 1 else 0

    sep = ";" if fields(";") > fields(",") else ","
    out = []
    for line_row in csv.reader(io.StringIO(text), delimiter=sep):
        if not line_row or all(re.fullmatch(r"[;, ]*", c) for c in line_row) and len(line_row) == 1:
            continue
        row = []
        for c in line_row:
            if re.fullmatch(r"-?[0-9.,]+%?", c):
                parts = re.split(r"[,.]", c)
                c = parts[-1] if len(parts) == 1 else "".join(parts[:-1]) + "." + parts[-1]
            row.append(c)
        out.append(row)
    return out


def canvas_import(text: str, students: list[dict], assignments: list[dict]) -> dict:
    """What Canvas's gradebook importer makes of ``text`` in a course with ``students`` (id, name,
    sortable_name, sis_user_id, login_id) and ``assignments`` (id, title): the grades by (student id,
    assignment id), and the students and assignments it would create as new."""
    rows = _canvas_rows(text)
    header = rows[0]
    if not (len(header) > 3 and "Student" in header[0] and "ID" in header[1]):
        raise ValueError("Invalid header row")
    ncols, sis_col, login_col = 3, None, None
    if re.search(r"SIS\s+Login\s+ID", header[2]):
        login_col, ncols = 2, 4
    elif re.search(r"SIS\s+User\s+ID", header[2]) and re.search(r"SIS\s+Login\s+ID", header[3]):
        sis_col, login_col = 2, 3
        ncols = 5 + (1 if re.search(r"Integration\s+ID", header[4] if len(header) > 4 else "") else 0)
    if "Section" not in header[ncols - 1]:
        raise ValueError("Invalid header row")
    not_assignments = re.compile(
        "Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade|"
        "Override Score|Override Grade|Override Status"
    )
    columns, new_assignments = {}, []
    for index, name in enumerate(header):
        if index < ncols or not_assignments.search(name):
            continue
        found = re.fullmatch(r"(.*)\s\((\d+)\)", name, re.DOTALL)
        title, aid = (found.group(1), int(found.group(2))) if found else (name, None)
        match = next((a for a in assignments if aid is not None and a["id"] == aid), None)
        match = match or next((a for a in assignments if a["title"] == name), None)
        if match is None:
            new_assignments.append(title)
            match = {"id": -len(new_assignments), "title": title}
        columns[index] = match["id"]
    grades, new_students, points = {}, [], {}
    for row in rows[1:]:
        if "Points Possible" in row[0]:
            points = {aid: row[i] for i, aid in columns.items()}
            continue
        if all(re.fullmatch(r"(?i)\s*(muted|manual posting.*)?\s*", c) for c in row):
            continue
        by_id = {s["id"]: s for s in students}
        student = by_id.get(_ruby_to_i(row[1])) if row[1] else None
        if student is None and sis_col is not None and row[sis_col]:
            student = next((s for s in students if s.get("sis_user_id") == row[sis_col]), None)
        if student is None and login_col is not None and row[login_col]:
            student = next((s for s in students if s.get("login_id") == row[login_col]), None)
        if student is None:
            student = next((s for s in students if row[0] in (s["name"], s.get("sortable_name"))), None)
        if student is None:
            new_students.append(row[0])
            continue
        for index, aid in columns.items():
            grades[(student["id"], aid)] = row[index].strip()
    return {"grades": grades, "new_students": new_students, "new_assignments": new_assignments, "points": points}


MOODLE_USER_FIELDS = {"userid": "id", "useridnumber": "idnumber", "useremail": "email", "username": "username"}


def moodle_import(text: str, users: list[dict], map_from: str, map_to: str, grade_column: str, grademax=100.0):
    """What Moodle's CSV grade import makes of ``text``: the grades by Moodle user id. ``map_from``
    is the column that identifies the user, ``map_to`` the user field (userid, useridnumber,
    useremail, username; email and username compared without case); a blank or "0" identifier
    keeps the previous row's user, as Moodle's loop does; a user not found, or found twice, fails
    the whole import; a grade above the grade point maximum (100) fails it too."""
    rows = list(csv.reader(io.StringIO(text)))
    header = [h.strip() for h in rows[0]]
    key, col = header.index(map_from), header.index(grade_column)
    field = MOODLE_USER_FIELDS[map_to]
    grades, student = {}, None
    for line in rows[1:]:
        if len(line) <= 1:
            continue
        value = line[key].strip()
        if value not in ("", "0"):  # PHP's empty(): '' and '0' are both "empty"
            fold = field in ("email", "username")
            found = [u for u in users if (str(u[field]).lower() == value.lower() if fold else str(u[field]) == value)]
            if len(found) != 1:
                raise ValueError(f"user mapping error: {field} {value!r} ({len(found)} users)")
            student = found[0]["id"]
        grade = line[col].strip()
        if student is None or grade in ("", "-"):
            continue
        if float(grade) > grademax:
            raise ValueError(f"grade value too big ({grade} > {grademax})")
        grades[student] = float(grade)
    return grades


CANVAS_STUDENTS = [
    {"id": 1001, "name": "Anna Lee", "sortable_name": "Lee, Anna", "sis_user_id": "S1001", "login_id": "alee"},
    {"id": 1002, "name": "Bob Ng", "sortable_name": "Ng, Bob", "sis_user_id": "S1002", "login_id": "bng"},
    {"id": 1003, "name": "José Núñez", "sortable_name": "Núñez, José", "sis_user_id": "S1003", "login_id": "jnunez"},
]
CANVAS_ASSIGNMENTS = [{"id": 4320, "title": "Homework 1"}, {"id": 4321, "title": "Homework 2"}]
MOODLE_USERS = [  # Moodle's internal ids are site-wide: 1001 and 1002 are other people
    {"id": 7, "idnumber": "1001", "email": "Anna.Lee@example.edu", "username": "alee"},
    {"id": 8, "idnumber": "1002", "email": "bob.ng@example.edu", "username": "bng"},
    {"id": 1001, "idnumber": "", "email": "someone@example.edu", "username": "someone"},
    {"id": 1002, "idnumber": "", "email": "other@example.edu", "username": "other"},
]


# -- helpers --------------------------------------------------------------------------------------


def gradebook(possible="17", **totals: str) -> list[GradebookRow]:
    return [GradebookRow(n, {}, float(t), float(possible)) for n, t in totals.items()]


def main(argv: list[str]) -> int:
    """``python -m attngrade export ...``, run in this process."""
    return command(["export", *argv])


@pytest.fixture
def roster(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER, encoding="utf-8")
    return read_roster(path)


def rows_of(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def write_roster(tmp_path, text: str):
    path = tmp_path / "r.csv"
    path.write_text(text, encoding="utf-8")
    return read_roster(path)


# -- the files, as written and as read ------------------------------------------------------------


def test_each_format_matches_the_sample_written_from_its_documentation(roster):
    canvas = export(gradebook(anna="17", bob="8.5"), roster, "canvas", "Homework 2 (4321)")
    assert rows_of(canvas.text) == rows_of((SAMPLES / "canvas.csv").read_text(encoding="utf-8"))
    assert canvas.points == 17 and canvas.zeros == [] and canvas.students == 2
    scaled = export(gradebook(anna="17", bob="8.5"), roster, "canvas", "Homework 2 (4321)", points=10)
    assert rows_of(scaled.text) == rows_of((SAMPLES / "canvas_points10.csv").read_text(encoding="utf-8"))
    moodle = export(gradebook(anna="17", bob="8.5"), roster, "moodle", "hw02")
    assert rows_of(moodle.text) == rows_of((SAMPLES / "moodle.csv").read_text(encoding="utf-8"))
    assert tuple(FORMATS) == ("canvas", "moodle")  # Gradescope documents no CSV import of scores


def test_canvas_reads_every_grade_onto_its_student_and_assignment(roster):
    exported = export(gradebook(anna="17", bob="8.5"), roster, "canvas", "Homework 2 (4321)", points=10)
    read = canvas_import(exported.text, CANVAS_STUDENTS, CANVAS_ASSIGNMENTS)
    assert read["new_students"] == [] and read["new_assignments"] == []
    assert read["grades"] == {(1001, 4321): "10", (1002, 4321): "5"}
    assert read["points"] == {4321: "10"}
    # a title without the id matches only an assignment with exactly that title, as Canvas does
    titled = export(gradebook(anna="17", bob="8.5"), roster, "canvas", "Homework 2")
    assert canvas_import(titled.text, CANVAS_STUDENTS, CANVAS_ASSIGNMENTS)["new_assignments"] == []
    assert any("exactly that title" in n for n in titled.notes)
    folder_named = export(gradebook(anna="17", bob="8.5"), roster, "canvas", "hw02-v2")
    assert canvas_import(folder_named.text, CANVAS_STUDENTS, CANVAS_ASSIGNMENTS)["new_assignments"] == ["hw02-v2"]


def test_moodle_reads_every_grade_onto_its_student_on_the_item_scale(roster):
    raw = export(gradebook(anna="17", bob="8.5"), roster, "moodle", "hw02")
    by_email = moodle_import(raw.text, MOODLE_USERS, "Email address", "useremail", "hw02")
    by_number = moodle_import(raw.text, MOODLE_USERS, "ID number", "useridnumber", "hw02")
    assert by_email == by_number == {7: 17.0, 8: 8.5}  # raw points: the item must be out of 17
    percent = export(gradebook(anna="17", bob="8.5"), roster, "moodle", "hw02", points=100)
    assert moodle_import(percent.text, MOODLE_USERS, "Email address", "useremail", "hw02") == {7: 100.0, 8: 50.0}
    assert percent.points == 100
    # what the guide warns against: "ID number" mapped to "User ID" (Moodle's internal, site-wide id)
    wrong = moodle_import(raw.text, MOODLE_USERS, "ID number", "userid", "hw02")
    assert wrong == {1001: 17.0, 1002: 8.5}  # two other people


def test_a_blank_identifier_is_refused_where_moodle_would_give_the_grade_to_the_row_above(tmp_path):
    roster = write_roster(
        tmp_path,
        "submission,id,name,email\nanna,1001,Anna,anna.lee@example.edu\nbob,1002,Bob,\ncarl,1003,Carl,c@x.edu\n",
    )
    # why: written without the check, Bob's row (no e-mail) would overwrite Anna's grade in Moodle
    unchecked = "ID number,Email address,Full name,hw02\n1001,anna.lee@example.edu,Anna,17\n1002,,Bob,0\n"
    assert moodle_import(unchecked, MOODLE_USERS, "Email address", "useremail", "hw02") == {7: 0.0}
    with pytest.raises(RosterMismatch, match=r"blank 'Email address'.*line 3 \(bob\)") as info:
        export(gradebook(anna="17", carl="3"), roster, "moodle", "hw02", missing_as_zero=True)
    assert "carl" not in str(info.value).split("blank")[1]
    zero = write_roster(tmp_path, "submission,id,email\nanna,1001,a@x.edu\nbob,0,b@x.edu\n")
    with pytest.raises(RosterMismatch, match=r"blank 'ID number'.*bob"):  # PHP's empty('0')
        export(gradebook(anna="1", bob="2"), zero, "moodle", "hw02")
    # a roster without e-mails exports by ID number alone (no blank column to map)
    plain = write_roster(tmp_path, "submission,id\nanna,1001\nbob,1002\n")
    text = export(gradebook(anna="17", bob="8.5"), plain, "moodle", "hw02").text
    assert rows_of(text)[0] == ["ID number", "Full name", "hw02"]
    assert moodle_import(text, MOODLE_USERS, "ID number", "useridnumber", "hw02") == {7: 17.0, 8: 8.5}


def test_duplicate_and_unusable_identifiers_are_refused_with_the_rows_named(tmp_path):
    twice = write_roster(tmp_path, "submission,id,email\nanna,1001,A@x.edu\nbob,1001,a@X.edu\n")
    with pytest.raises(RosterMismatch) as info:
        export(gradebook(anna="1", bob="2"), twice, "canvas", "hw02")
    assert "the same ID for several students: '1001' (line 2 (anna), line 3 (bob))" in str(info.value)
    with pytest.raises(RosterMismatch) as info:
        export(gradebook(anna="1", bob="2"), twice, "moodle", "hw02")
    assert "the same 'Email address'" in str(info.value) and "line 3 (bob)" in str(info.value)
    odd = write_roster(tmp_path, "submission,id,sis_user_id\nanna,s-17,\nbob,,S2\ncarl,,\n")
    with pytest.raises(RosterMismatch) as info:
        export(gradebook(anna="1", bob="2", carl="3"), odd, "canvas", "hw02")
    message = str(info.value)
    assert "not Canvas user IDs" in message and "line 2 (anna): 's-17'" in message
    assert "no ID, SIS User ID or SIS Login ID" in message and "['line 4 (carl)']" in message
    assert "bob" not in message  # a SIS User ID is enough for Canvas
    for title in ("Final Grade project", "Student", ""):
        with pytest.raises(RosterMismatch, match="title"):
            export(gradebook(anna="1", bob="2"), write_roster(tmp_path, ROSTER), "canvas", title)


def test_a_canvas_export_is_a_roster_and_names_match_in_any_unicode_form(tmp_path):
    roster = read_roster(SAMPLES / "canvas_export.csv")
    assert [s.id for s in roster] == ["1001", "1002", "1003"]  # the Points Possible row skipped
    nfd = unicodedata.normalize("NFD", "José Núñez")  # a file name saved on macOS
    assert nfd != "José Núñez" and same_name(nfd) == same_name("JOSÉ NÚÑEZ")
    rows = gradebook(**{"Lee, Anna": "17", "bng": "8.5", nfd: "12"})
    exported = export(rows, roster, "canvas", "Homework 2 (4321)", points=10)
    read = canvas_import(exported.text, CANVAS_STUDENTS, CANVAS_ASSIGNMENTS)
    assert read["new_students"] == [] and read["new_assignments"] == []
    assert read["grades"] == {(1001, 4321): "10", (1002, 4321): "5", (1003, 4321): "7.0588"}
    # one student by two of their names, or a row that two students could own: refused, named
    with pytest.raises(RosterMismatch, match=r"matched by the rows \['Anna Lee', 'alee'\]"):
        export(gradebook(**{"alee": "1", "Anna Lee": "2", "bng": "1", nfd: "1"}), roster, "canvas", "hw02")
    doubled = gradebook(anna="1", bob="2")
    doubled.append(GradebookRow("ANNA", {}, 3.0, 17.0))
    with pytest.raises(RosterMismatch, match=r"one name written twice.*\['ANNA', 'anna'\]"):
        export(doubled, write_roster(tmp_path, ROSTER), "canvas", "hw02")


def test_every_student_on_one_side_only_is_listed(roster):
    with pytest.raises(RosterMismatch) as info:
        export(gradebook(anna="17", carol="3", dave="4"), roster, "canvas", "hw02")
    message = str(info.value)
    assert "['carol', 'dave']" in message and "['bob']" in message
    result = export(gradebook(anna="17"), roster, "moodle", "hw02", missing_as_zero=True)
    assert result.zeros == ["bob"] and rows_of(result.text)[2][-1] == "0"
    with pytest.raises(RosterMismatch, match="carol"):  # a row without a student is never dropped
        export(gradebook(anna="17", bob="1", carol="3"), roster, "moodle", "hw02", missing_as_zero=True)


def test_rows_the_grader_failed_on_or_graded_out_of_another_total_are_not_exported(roster):
    rows = gradebook(anna="17", bob="0")
    rows[1].status = "error"
    with pytest.raises(RosterMismatch, match=r"status=error.*\['bob'\]"):
        export(rows, roster, "canvas", "hw02")
    rows = gradebook(anna="17", bob="3")
    rows[1].possible = 20.0
    with pytest.raises(RosterMismatch, match=r"different totals.*17.0: \['anna'\]; 20.0: \['bob'\]"):
        export(rows, roster, "moodle", "hw02")
    rows = gradebook(anna="17", bob="3")
    rows[1].status = "review"
    assert any("review" in n and "['bob']" in n for n in export(rows, roster, "canvas", "hw02").notes)


def test_roster_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "r.csv"
    bad.write_text("name,email\nA,a@x\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"r\.csv has no column 'submission'"):
        read_roster(bad)
    bad.write_text("submission,id\nanna,1\nAnna,2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"twice \(lines 2 and 3"):
        read_roster(bad)
    bad.write_text("submission,id\n,1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        read_roster(bad)
    bad.write_text("\ufeffSubmission,ID,SIS User ID\nanna,1,S1\n", encoding="utf-8")  # a BOM, capitals, spaces
    assert [(s.submission, s.id, s.sis_user_id) for s in read_roster(bad)] == [("anna", "1", "S1")]


def test_names_are_never_formulas_and_identifiers_are_written_as_they_are(tmp_path):
    roster = write_roster(tmp_path, 'submission,id,name,email\nanna,1,"=HYPERLINK(""x"")",a@x\nbob,2,@bob,-b@x\n')
    text = export(gradebook(anna="1", bob="2"), roster, "moodle", "hw02").text
    assert [row[2] for row in rows_of(text)[1:]] == ['\'=HYPERLINK("x")', "'@bob"]
    assert rows_of(text)[2][1] == "-b@x"  # Moodle compares it exactly


def test_a_failed_export_leaves_no_stale_file_and_says_so(tmp_path, roster):
    out = tmp_path / "canvas.csv"
    good = write_export(out, lambda: export(gradebook(anna="17", bob="9"), roster, "canvas", "hw02"))
    assert good[0] is not None and rows_of(out.read_text())[3][-1] == "9"
    result, error = write_export(out, lambda: export(gradebook(anna="17"), roster, "canvas", "hw02"))
    assert result is None and not out.exists()
    assert "['bob']" in error and f"removed {out}" in error
    result, error = write_export(out, lambda: export(gradebook(anna="17"), roster, "canvas", "hw02"))
    assert f"{out} was not written" in error
    blocked = tmp_path / "nowhere" / "canvas.csv"
    (tmp_path / "nowhere").write_text("a file where a folder should be")
    result, error = write_export(blocked, lambda: export(gradebook(anna="1", bob="2"), roster, "canvas", "hw02"))
    assert result is None and "was not written" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nowhere", "roster.csv"]  # no temporary file


def test_export_command_names_the_homework_the_run_recorded(tmp_path, capsys):
    folder = tmp_path / "hw02-v2"  # a re-grade into the guide's folder
    folder.mkdir()
    book = folder / "gradebook.csv"
    book.write_text("submission,q1,total,possible,status,error\nanna,4,17,17,ok,\nbob,2,8.5,17,ok,\n")
    (tmp_path / "roster.csv").write_text(ROSTER)
    args = [str(book), "--roster", str(tmp_path / "roster.csv"), "--format", "canvas"]
    assert main(args) == 2 and "--assignment" in capsys.readouterr().err  # no record: no guess
    (folder / RUN_FILE).write_text('{"homework": "hw02", "graded_at": 0}')
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "column 'hw02'" in out and "must be worth 17 points" in out
    assert rows_of((folder / "canvas.csv").read_text())[0][-1] == "hw02"
    assert main([*args, "--assignment", "Homework 2 (4321)", "--points", "10"]) == 0
    assert "must be worth 10 points" in capsys.readouterr().out
    written = (folder / "canvas.csv").read_text()
    assert rows_of(written) == rows_of((SAMPLES / "canvas_points10.csv").read_text())
    assert main([*args[:-1], "moodle", "--percent"]) == 0
    out = capsys.readouterr().out
    assert "maximum grade is 100" in out and "never by 'User ID'" in out
    (tmp_path / "roster.csv").write_text("submission,id\nanna,1\n")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "gradebook rows with no roster entry: ['bob']" in err and "removed" in err
    assert not (folder / "canvas.csv").exists()
    with pytest.raises(SystemExit):
        main([*args[:-1], "gradescope"])
    assert main([*args, "--out", str(book)]) == 2 and book.read_text().startswith("submission,")


class _Case:
    def __init__(self, name, func, points=1.0, hidden=False):
        self.name, self.func, self.points, self.hidden = name, func, points, hidden


class _Question:
    def __init__(self, name, cases):
        self.name, self.cases, self.source = name, cases, ""


def _test_a(f):
    assert f(1) == 1


def _test_b(f):
    assert f(2) == 2


def _test_b_stricter(f):
    assert f(2) == 2 and f(3) == 3


def test_comparison_lists_every_lowered_score_and_the_tests_that_changed():
    old_tests = fingerprint_tests([_Question("q1", [_Case("a", _test_a), _Case("b", _test_b)])])
    new_tests = fingerprint_tests(
        [_Question("q1", [_Case("a", _test_a), _Case("b", _test_b_stricter)]), _Question("q2", [_Case("c", _test_a)])]
    )
    old = [GradebookRow("anna", {"q1": 2.0}, 2.0, 2.0), GradebookRow("bob", {"q1": 1.0}, 1.0, 2.0)]
    new = [
        GradebookRow("anna", {"q1": 1.0, "q2": 1.0}, 2.0, 3.0),
        GradebookRow("bob", {"q1": 1.0, "q2": 1.0}, 2.0, 3.0),
        GradebookRow("carol", {"q1": 0.0, "q2": 0.0}, 0.0, 3.0),
    ]
    cmp = compare(old, new, ["q1", "q2"], old_tests, new_tests)
    assert Change("anna", "q1", 2.0, 1.0) in cmp.lowered
    assert [c.submission for c in cmp.lowered if c.question != "total"] == ["anna"]
    assert Change("bob", "total", 1.0, 2.0) in cmp.raised
    assert Change("carol", "total", None, 0.0) in cmp.changes  # a new student is listed too
    assert (cmp.tests_added, cmp.tests_removed, cmp.tests_changed) == (["q2/c"], [], ["q1/b"])
    text = comparison_markdown(cmp, Path("old/gradebook.csv"))
    assert "## Lowered scores (1)\n\n- anna, q1: 2 → 1" in text and "changed: q1/b" in text
    assert ["anna", "q1", "2", "1", "-1"] in rows_of(comparison_csv(cmp))
    unknown = compare(old, new, ["q1"], None, new_tests)
    assert not unknown.tests_known and "unknown" in comparison_markdown(unknown, Path("x"))
