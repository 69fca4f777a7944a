"""What the class got wrong: named mistakes counted per question (misconceptions.csv, the summary),
kept across partial re-grades, and the course report over every homework."""

from __future__ import annotations

import csv
import io
import json

import pytest

from attngrade.cli import main
from attngrade.grading.class_summary import misconceptions_csv, named_mistakes
from attngrade.grading.course_report import course_report
from attngrade.grading.report import write_reports
from attngrade.grading.results import CaseResult, GradebookRow, QuestionResult, SubmissionResult

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
    assert main(["course-report", str(tmp_path)]) == 0 and (tmp_path / "course_report.md").read_text() == text
    assert main(["course-report", str(tmp_path / "missing")]) == 2


def test_course_report_keys_homework_by_what_the_run_recorded(tmp_path):
    """A re-grade into grades/hw02-v2 (the guide's folder) is hw02 again: it replaces the first
    run in the course report, never adds a homework; a folder's name never names a homework."""
    write_reports(CLASS, ["q1", "q2"], tmp_path / "hw02", "hw02")
    write_reports([result("anna", 4, 6), result("bob", 4, 5)], ["q1", "q2"], tmp_path / "hw03", "hw03")
    assert json.loads((tmp_path / "hw02" / "run.json").read_text())["homework"] == "hw02"
    fixed = [result(r.submission, 4, 6, status=r.status) for r in CLASS]  # a test fixed: everyone right
    write_reports(fixed, ["q1", "q2"], tmp_path / "hw02-v2", "hw02")
    write_reports([result("anna", 0, 0)], ["q1", "q2"], tmp_path / "week-3", "hw04")
    text = course_report(tmp_path)
    table = [line for line in text.splitlines() if line.startswith("| hw")]
    assert table == ["| hw04 | 1 | 10 of 10 | 100% |", "| hw03 | 2 | 1 of 20 | 5% |", "| hw02 | 5 | 0 of 50 | 0% |"]
    assert "hw02 in hw02-v2/" in text and "Left out, graded again later: hw02/ (hw02)" in text
    assert "hw02-v2 |" not in text and "week-3" not in table[0]
    # graded in the other order, the older folder's name sorting last changes nothing
    write_reports(CLASS, ["q1", "q2"], tmp_path / "hw02-v2", "hw02")
    write_reports(fixed, ["q1", "q2"], tmp_path / "hw02", "hw02")
    assert "| hw02 | 5 | 0 of 50 | 0% |" in course_report(tmp_path)


def _bars(ax) -> list[tuple[float, float, float]]:
    return [(p.get_x(), p.get_x() + p.get_width(), p.get_height()) for p in ax.patches]


def test_histograms_centre_bars_on_scores_with_one_y_scale():
    import matplotlib.pyplot as plt

    from attngrade.grading.histograms import histogram_figure, question_histograms_figure, score_bins

    assert score_bins([0, 3, 4], 4) == [-0.5, 0.5, 1.5, 2.5, 3.5, 4.5]
    assert score_bins([0.5, 2], 2) == [-0.25, 0.25, 0.75, 1.25, 1.75, 2.25]
    wide = score_bins(list(range(0, 101, 7)), 100)
    assert len(wide) - 1 <= 40 and wide[1] - wide[0] == 4 and wide[0] == -2
    rows = [
        GradebookRow(f"s{k}", {"q1": q1, "q2": q2}, q1 + q2, 10.0)
        for k, (q1, q2) in enumerate([(4, 6), (4, 6), (4, 6), (0, 5), (4, 3.5), (2, 0)])
    ]
    fig = question_histograms_figure(rows, ["q1", "q2"], {"q1": 4.0, "q2": 6.0}, "hw02")
    try:
        ax1, ax2 = fig.axes
        assert ax1.get_ylim() == ax2.get_ylim()  # one y-scale: q1 tallest bar (4) sets both, q2 tallest is 3
        for ax, scores in ((ax1, [4, 4, 4, 0, 4, 2]), (ax2, [6, 6, 6, 5, 3.5, 0])):
            heights = {(lo + hi) / 2: h for lo, hi, h in _bars(ax) if h}
            expected = {float(s): float(scores.count(s)) for s in set(scores)}
            assert heights == expected, (heights, expected)  # every bar centred on its score
    finally:
        plt.close(fig)
    fig = histogram_figure(rows, "hw02")
    try:
        heights = {(lo + hi) / 2: h for lo, hi, h in _bars(fig.axes[0]) if h}
        assert heights == {10.0: 3.0, 5.0: 1.0, 7.5: 1.0, 2.0: 1.0}
    finally:
        plt.close(fig)


def test_the_runs_rows_are_the_numbers_its_gradebook_records(tmp_path):
    """The comparison and the export of a run read its rows, not its gradebook file: the rows hold
    exactly what the file records (six significant digits), so both give what a later command
    reading the file gives, thirds of a point included; a merge's rows are the whole class."""
    from attngrade.grading.gradebook import read_gradebook

    third = result("anna", 4 / 3, 17 / 3)
    written = write_reports([third, result("bob", 0, 6)], ["q1", "q2"], tmp_path, "hw02")
    assert written.rows == read_gradebook(written.gradebook)
    assert written.rows[0] == GradebookRow("anna", {"q1": 1.33333, "q2": 5.66667}, 7.0, 10.0)
    merged = write_reports([result("carol", 4, 6)], ["q1", "q2"], tmp_path, "hw02", merge=True)
    assert [r.submission for r in merged.rows] == ["anna", "bob", "carol"]
    assert merged.rows == read_gradebook(merged.gradebook)
    (tmp_path / "bad.csv").write_text("submission,q1,total,possible,status,error\nanna,x,1,2,ok,\n")
    with pytest.raises(ValueError, match=r"bad\.csv, line 2: 'q1' is 'x', not a number"):
        read_gradebook(tmp_path / "bad.csv")
