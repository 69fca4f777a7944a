"""What grading a submission gives: per test case, per question and per submission (the data the
grader produces and the report writes; plain dataclasses, no behaviour beyond sums)."""

from __future__ import annotations

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
