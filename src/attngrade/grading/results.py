"""What grading a submission gives: per test case, per question and per submission (the data the
grader produces and the report writes), and a gradebook's row (what the comparison and the LMS
export read); plain dataclasses, no behaviour beyond sums."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CaseResult:
    """One test case's verdict: its points, whether it passed, and the message the feedback shows."""

    question: str
    name: str
    hidden: bool
    points: float
    passed: bool
    message: str


@dataclass
class QuestionResult:
    """One question's score: the points of the cases that passed (or all or nothing), of ``possible``."""

    name: str
    score: float
    possible: float
    cases: list[CaseResult] = field(default_factory=list)


@dataclass
class SubmissionResult:
    """The grade of one submission, with everything its feedback file says.

    ``status``: ``ok``; ``review`` when the static reading found constructs an instructor may want
    to look at (the score is what the tests gave); ``error`` when the grader failed (the score is
    not the student's; the command exits non-zero).
    """

    submission: str
    path: str
    questions: list[QuestionResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    execution_errors: list[dict[str, Any]] = field(default_factory=list)
    review: list[str] = field(default_factory=list)
    status: str = "ok"
    error: str = ""
    worker_lost: bool = False

    @property
    def total(self) -> float:
        return sum(q.score for q in self.questions)

    @property
    def possible(self) -> float:
        return sum(q.possible for q in self.questions)

    def score(self, question: str) -> float:
        return next(q.score for q in self.questions if q.name == question)


def score_text(x: float) -> str:
    """A score as the gradebook writes it: six significant digits, no trailing zeros (``8.5``, ``20``)."""
    return f"{x:g}"


@dataclass
class GradebookRow:
    """One row of a gradebook, numbers as numbers: what the comparison with an earlier run and the
    LMS export read, whether the row was graded in this run (:meth:`of`) or read from an earlier
    run's ``gradebook.csv`` (:func:`attngrade.grading.gradebook.read_gradebook`).

    A row holds the numbers the gradebook records (:func:`score_text`: six significant digits), so
    that what is computed from a run's rows equals what is computed from its file later.
    """

    submission: str
    scores: dict[str, float]
    """Per question (in the gradebook's column order); a question missing from an earlier
    gradebook is missing here."""
    total: float
    possible: float
    status: str = "ok"
    error: str = ""
    """Why the grader failed on this row: the first line of the error, at most 300 characters."""

    @classmethod
    def of(cls, result: SubmissionResult, questions: Sequence[str]) -> GradebookRow:
        """The row of a graded submission, with a score for each of ``questions`` (0 for one it was
        not graded on)."""
        scores = {q.name: q.score for q in result.questions}
        return cls(
            result.submission,
            {q: _recorded(scores.get(q, 0.0)) for q in questions},
            _recorded(result.total),
            _recorded(result.possible),
            result.status,
            result.error.splitlines()[0][:300] if result.error else "",
        )

    def value(self, column: str) -> float | None:
        """The number in ``column`` (a question, ``total`` or ``possible``); None if the row has none."""
        if column == "total":
            return self.total
        if column == "possible":
            return self.possible
        return self.scores.get(column)


def _recorded(x: float) -> float:
    return float(score_text(x))
