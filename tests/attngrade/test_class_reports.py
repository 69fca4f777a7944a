"""What the class got wrong: named mistakes counted per question (misconceptions.csv, the summary),
kept across partial re-grades, and the course report over every homework."""

from __future__ import annotations

import csv
import io
import json

from attngrade.grading.course_report import course_report, main
from attngrade.grading.report import misconceptions_csv, named_mistakes, write_reports
from attngrade.grading.results import CaseResult, QuestionResult, SubmissionResult

AXIS = "softmax over the queries (dim=-2) instead of the keys (dim=-1)"
FILL = "masked scores filled with -1e9 instead of -inf"


def result(name: str, q1: float, q2: float, *, q1_mistake: str = "", q2_mistake: str = "", status="ok"):
    def case(question, points, possible, mistake):
        message = f"Likely mistake: {mistake}\n  got ..." if mistake else ("" if points == possible else "wrong")
        return CaseResult(question, "values", False, points, points == possible, message)

    questions = [
        QuestionResult("q1", q1, 4.0, [case("q1", q1, 4.0, q1_mistake)]),
        QuestionResult("q2", q2, 6.0, [case("q2", q2, 6.0, q2_mistake)]),
    ]
    return SubmissionResult(name, f"{name}.ipynb", questions, status=status)


CLASS = [
    result("anna", 4, 6),
    result("bob", 0, 6, q1_mistake=AXIS),
    result("carol", 0, 0, q1_mistake=AXIS, q2_mistake=FILL),
    result("dan", 4, 0, q2_mistake=FILL),
    result("erin", 0, 3),  # loses points, no named mistake
    result("frank", 0, 0, q1_mistake=AXIS, status="error"),  # the grader failed: not counted
]


def test_named_mistakes_per_student_and_question():
    found = named_mistakes(CLASS)
    assert found["carol"] == [f"q1: {AXIS}", f"q2: {FILL}"] and found["anna"] == [] and "frank" not in found
    rows = list(csv.DictReader(io.StringIO(misconceptions_csv(found))))
    assert [(r["question"], r["mistake"], r["students"], r["names"]) for r in rows] == [
        ("q1", AXIS, "2", "bob; carol"),
        ("q2", FILL, "2", "carol; dan"),
    ]


def test_summary_ranks_questions_by_points_lost_and_counts_each_mistake(tmp_path):
    written = write_reports(CLASS, ["q1", "q2"], tmp_path, "hw02")
    text = written.summary_text
    # q1: bob, carol, erin lost 4 each (12); q2: carol and dan 6, erin 3 (15): q2 first
    section = text[text.index("What the class got wrong") :]
    assert section.index("- q2: 15 points lost") < section.index("- q1: 12 points lost")
    assert f"  - 2 of 5: {FILL}" in section and f"  - 2 of 5: {AXIS}" in section
    assert (tmp_path / "questions.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "questions.json").read_text()) == {"q1": 4.0, "q2": 6.0}
    # carol re-graded alone (--only), now right: the class's counts keep bob's and dan's mistakes
    write_reports([result("carol", 4, 6)], ["q1", "q2"], tmp_path, "hw02", merge=True)
    rows = list(csv.DictReader(open(tmp_path / "misconceptions.csv", encoding="utf-8")))
    assert {(r["question"], r["names"]) for r in rows} == {("q1", "bob"), ("q2", "dan")}


def test_course_report_ranks_the_homework_by_share_lost(tmp_path, capsys):
    write_reports(CLASS, ["q1", "q2"], tmp_path / "hw02", "hw02")
    write_reports([result("anna", 4, 6), result("bob", 4, 5)], ["q1", "q2"], tmp_path / "hw03", "hw03")
    (tmp_path / "notes").mkdir()  # a folder without a gradebook is not a homework
    text = course_report(tmp_path)
    assert text.index("| hw02 |") < text.index("| hw03 |")
    assert "| hw02 | 5 | 27 of 50 | 54% |" in text and "| hw03 | 2 | 1 of 20 | 5% |" in text
    hw02 = text[text.index("## hw02") : text.index("## hw03")]
    assert f"  - 2 of 5 students: {AXIS}" in hw02
    assert main([str(tmp_path)]) == 0 and (tmp_path / "course_report.md").read_text() == text
    assert main([str(tmp_path / "missing")]) == 2
