"""How many sandboxes a batch uses: one per eight submissions at most, unless the caller says how
many (``jobs``); a sandbox that is running is used again before another is started.

The sandboxes here are stand-ins (starting a real one costs seconds; the other grader tests start
real ones): ``Worker.start`` does nothing and ``grade_cells`` records which worker graded what.
"""

from __future__ import annotations

import threading
import time

import pytest

from attngrade.grading import grader as grading
from attngrade.grading.grader import SUBMISSIONS_PER_SANDBOX, Grader
from attngrade.grading.results import SubmissionResult

from ..homework_support import homework


@pytest.fixture
def used(monkeypatch) -> dict[str, int]:
    """Submission name -> id of the worker that graded it (no sandbox is started)."""
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def fake_grade(cells, questions, hw, *, worker, name, **_):
        with lock:
            seen[name] = id(worker)
        if int(name[1:]) < 8:  # the first submissions, one per sandbox at most, overlap: each holds its own
            time.sleep(0.1)
        return SubmissionResult(name, "")

    monkeypatch.setattr(grading.Worker, "start", lambda self: None)
    monkeypatch.setattr(grading, "grade_cells", fake_grade)
    return seen


def _grade(n: int, jobs: int | None, cpus: int, monkeypatch) -> list[SubmissionResult]:
    monkeypatch.setattr(grading.os, "cpu_count", lambda: cpus)
    with Grader(homework("hw00"), jobs=jobs) as g:
        return g.grade_sources([(f"s{k:02d}", ["x = 1"]) for k in range(n)])


@pytest.mark.parametrize(
    "n,jobs,cpus,sandboxes",
    [
        (3, None, 4, 1),  # a few late submissions: one sandbox, not four
        (SUBMISSIONS_PER_SANDBOX, None, 4, 1),
        (SUBMISSIONS_PER_SANDBOX + 1, None, 4, 2),
        (40, None, 4, 4),  # a class: every core
        (40, None, 1, 1),
        (3, 2, 4, 2),  # told how many: that many (the concurrency tests rely on it)
        (1, 3, 4, 1),  # never more than the submissions
    ],
)
def test_sandboxes_per_batch(used, monkeypatch, n, jobs, cpus, sandboxes):
    results = _grade(n, jobs, cpus, monkeypatch)
    assert [r.submission for r in results] == [f"s{k:02d}" for k in range(n)], "results keep the input order"
    assert len(used) == n
    assert len(set(used.values())) == sandboxes, f"{n} submissions, jobs={jobs}, {cpus} cores"


def test_some_submissions_are_graded_on_some_questions(monkeypatch):
    """``grade_sources(..., questions={name: [...]})`` grades those submissions on those questions
    only (the mutation tests grade each wrong solution on the question it breaks); an unknown
    question is a clear error before anything runs."""
    asked: dict[str, list[str]] = {}

    def fake_grade(cells, questions, hw, *, worker, name, **_):
        asked[name] = [q.name for q in questions]
        return SubmissionResult(name, "")

    monkeypatch.setattr(grading.Worker, "start", lambda self: None)
    monkeypatch.setattr(grading, "grade_cells", fake_grade)
    hw = homework("hw00")
    every = [q.name for q in hw.questions()]
    with Grader(hw, jobs=1) as g:
        g.grade_sources([("a", ["x = 1"]), ("b", ["x = 2"])], questions={"b": ["q2"]})
        with pytest.raises(ValueError, match=r"hw00 has no question \['q9'\]"):
            g.grade_sources([("c", ["x = 3"])], questions={"c": ["q1", "q9"]})
    assert asked == {"a": every, "b": ["q2"]}
