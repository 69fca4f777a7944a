"""Grades into the LMS (attngrade.grading.export) and re-grade comparisons (attngrade.grading.compare).

The export of a small gradebook must equal, byte for byte once parsed, the sample import files in
``lms_samples/`` that were written by hand from each system's documentation; every student found on
only one side is listed, never dropped; cells that a spreadsheet would read as formulas are quoted.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from attngrade.grading.compare import Change, compare, comparison_csv, comparison_markdown, fingerprint_tests
from attngrade.grading.export import FORMATS, RosterMismatch, export, main, read_roster

SAMPLES = Path(__file__).resolve().parent / "lms_samples"
ROSTER = """submission,id,name,email,sis_user_id,sis_login_id,section
anna,1001,"Lee, Anna",anna.lee@example.edu,S1001,alee,Section 1
bob,1002,"Ng, Bob",bob.ng@example.edu,S1002,bng,Section 1
"""


def gradebook(**totals: str) -> list[dict[str, str]]:
    return [{"submission": n, "total": t, "possible": "17", "status": "ok"} for n, t in totals.items()]


@pytest.fixture
def roster(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER, encoding="utf-8")
    return read_roster(path)


def rows_of(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_matches_the_sample_written_from_its_documentation(fmt, roster):
    text, zeros = export(gradebook(anna="17", bob="8.5"), roster, fmt, "hw02")
    assert zeros == []
    assert rows_of(text) == rows_of((SAMPLES / f"{fmt}.csv").read_text(encoding="utf-8"))


def test_every_student_on_one_side_only_is_listed(roster):
    with pytest.raises(RosterMismatch) as info:
        export(gradebook(anna="17", carol="3", dave="4"), roster, "canvas", "hw02")
    message = str(info.value)
    assert "['carol', 'dave']" in message and "['bob']" in message
    text, zeros = export(gradebook(anna="17"), roster, "moodle", "hw02", missing_as_zero=True)
    assert zeros == ["bob"] and rows_of(text)[2][-1] == "0"
    with pytest.raises(RosterMismatch, match="carol"):  # a row without a student is never dropped
        export(gradebook(anna="17", bob="1", carol="3"), roster, "moodle", "hw02", missing_as_zero=True)


def test_rows_the_grader_failed_on_are_not_exported(roster):
    rows = gradebook(anna="17", bob="0")
    rows[1]["status"] = "error"
    with pytest.raises(RosterMismatch, match=r"status=error.*\['bob'\]"):
        export(rows, roster, "gradescope", "hw02")


def test_roster_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "r.csv"
    bad.write_text("name,email\nA,a@x\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"r\.csv has no column \['submission', 'id'\]"):
        read_roster(bad)
    bad.write_text("submission,id\nanna,1\nanna,2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="twice"):
        read_roster(bad)
    bad.write_text("submission,id\nanna,\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        read_roster(bad)
    bad.write_text("\ufeffSubmission,ID\nanna,1\n", encoding="utf-8")  # a spreadsheet's BOM and capitals
    assert [(s.submission, s.id) for s in read_roster(bad)] == [("anna", "1")]


def test_cells_are_never_formulas(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text('submission,id,name\nanna,1,"=HYPERLINK(""x"")"\nbob,-2,@bob\n', encoding="utf-8")
    text, _ = export(gradebook(anna="1", bob="2"), read_roster(path), "gradescope", "hw02")
    names = [row[0] for row in rows_of(text)[1:]]
    assert names == ['\'=HYPERLINK("x")', "'@bob"] and rows_of(text)[2][1] == "-2"


def test_export_command(tmp_path, capsys):
    (tmp_path / "hw02").mkdir()
    book = tmp_path / "hw02" / "gradebook.csv"
    book.write_text("submission,q1,total,possible,status,error\nanna,4,17,17,ok,\nbob,2,8.5,17,ok,\n")
    (tmp_path / "roster.csv").write_text(ROSTER)
    assert main([str(book), "--roster", str(tmp_path / "roster.csv"), "--format", "canvas"]) == 0
    written = (tmp_path / "hw02" / "canvas.csv").read_text()
    assert rows_of(written) == rows_of((SAMPLES / "canvas.csv").read_text())
    (tmp_path / "roster.csv").write_text("submission,id\nanna,1\n")
    assert main([str(book), "--roster", str(tmp_path / "roster.csv"), "--format", "moodle"]) == 2
    assert "gradebook rows with no roster entry: ['bob']" in capsys.readouterr().err


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
    old = [{"submission": "anna", "q1": "2", "total": "2"}, {"submission": "bob", "q1": "1", "total": "1"}]
    new = [
        {"submission": "anna", "q1": "1", "q2": "1", "total": "2"},
        {"submission": "bob", "q1": "1", "q2": "1", "total": "2"},
        {"submission": "carol", "q1": "0", "q2": "0", "total": "0"},
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
