"""Mutation tests: every homework's tests must catch the mistakes students really make.

For each homework, ``exercises/hwNN_topic/mutants.py`` lists wrong solutions (a missing
1/sqrt(d), a softmax over the wrong axis, a transposed or inverted mask, forgotten biases, ...).
Each is graded by the class grader together with the correct solution and the empty student
notebook, in one batch per homework. The correct solution must get full marks and the stub zero
on every question; every mutant is graded on the question it breaks (the other questions' tests
would run the unchanged solutions), where it must lose points.
"""

from __future__ import annotations

import functools
import os

import pytest

from attngrade.grader import Grader
from attngrade.homework import all_homework
from attngrade.report import failure_summary

from .homework_support import homework
from .submissions import (
    code_cells,
    comparing_submission,
    load_mutants,
    mutant_submission,
    stub_submission,
    submission_with,
)

HOMEWORK = [hw.name for hw in all_homework()]
MUTANTS = [(hw.name, name) for hw in all_homework() for name in load_mutants(hw)]


@functools.cache
def graded(name: str) -> dict:
    """Grade the correct solution and the stub (every question) and every mutant (on its own
    question) of one homework, in one batch."""
    hw = homework(name)
    mutants = load_mutants(hw)
    subs = [("<correct>", code_cells(submission_with(hw, {}))), ("<stub>", code_cells(stub_submission(hw)))]
    subs.append(("<correct, comparing>", code_cells(comparing_submission(hw))))
    subs += [(k, code_cells(mutant_submission(hw, mutant))) for k, mutant in mutants.items()]
    # scores only: the static reading (which never changes one) is left out; under pytest-xdist the
    # other worker keeps the second core busy, so one sandbox grades the batch
    jobs = 1 if os.environ.get("PYTEST_XDIST_WORKER") else None
    with Grader(hw, jobs=jobs, static_checks=False) as grader:
        results = grader.grade_sources(subs, questions={k: [mutant[0]] for k, mutant in mutants.items()})
    return {r.submission: r for r in results}


def _explain(result) -> str:
    return "\n".join([f"{result.submission}: {result.total:g} / {result.possible:g}", *failure_summary(result)])


@pytest.mark.parametrize("name", HOMEWORK)
def test_correct_solution_gets_full_marks(name):
    result = graded(name)["<correct>"]
    assert result.possible > 0
    assert result.total == result.possible, _explain(result)


@pytest.mark.parametrize("name", HOMEWORK)
def test_comparing_with_a_reference_at_top_level_costs_nothing(name):
    """Every answer cell calls a forbidden reference above and below its ``def`` (to compare): the
    calls raise while grading, but no definition and no point is lost."""
    result = graded(name)["<correct, comparing>"]
    assert result.total == result.possible > 0, _explain(result)


@pytest.mark.parametrize("name", HOMEWORK)
def test_empty_stub_gets_zero(name):
    result = graded(name)["<stub>"]
    assert result.total == 0, _explain(result)


@pytest.mark.parametrize("name", HOMEWORK)
def test_every_homework_has_mutants_for_every_question(name):
    hw = homework(name)
    targeted = {mutant[0] for mutant in load_mutants(hw).values()}
    questions = {q.name for q in hw.questions()}
    assert questions and targeted == questions, f"questions without a mutant: {sorted(questions - targeted)}"


@pytest.mark.parametrize("name,mutant", MUTANTS, ids=[f"{h}:{m}" for h, m in MUTANTS])
def test_mutant_loses_points(name, mutant):
    result = graded(name)[mutant]
    question = load_mutants(homework(name))[mutant][0]
    (q,) = result.questions  # graded on its own question only
    assert q.name == question
    assert q.score < q.possible, f"mutant {mutant!r} was not caught by {question}:\n{_explain(result)}"


def test_mutation_scores(capsys):
    """Print the mutation score of each homework (caught / mutants); every mutant must be caught."""
    lines = []
    missed = []
    for name in HOMEWORK:
        results = graded(name)
        mutants = load_mutants(homework(name))
        caught = 0
        for mutant, (question, *_) in mutants.items():
            q = next(q for q in results[mutant].questions if q.name == question)
            if q.score < q.possible:
                caught += 1
            else:
                missed.append(f"{name}: {mutant}")
        lines.append(f"{name}: mutation score {caught}/{len(mutants)}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert not missed, missed


def _hidden_source_lines(hw) -> list[str]:
    """Distinctive lines of the hidden tests' source (what no feedback may show)."""
    lines = []
    for question in hw.questions():
        for case in question.cases:
            if case.hidden:
                import inspect

                try:
                    body = inspect.getsource(case.func)
                except (OSError, TypeError):
                    body = question.source
                lines += [ln.strip() for ln in body.splitlines() if len(ln.strip()) >= 30]
    return lines


@pytest.mark.parametrize("name", HOMEWORK)
def test_feedback_never_shows_hidden_test_source(name):
    """Every graded mutant's feedback (failures with messages of every kind) is free of the hidden
    tests' code."""
    from attngrade.report import feedback_text

    secret = _hidden_source_lines(homework(name))
    assert secret, "the hidden tests have source lines to look for"
    for result in graded(name).values():
        text = feedback_text(result, name)
        leaked = [line for line in secret if line in text]
        assert not leaked, f"{result.submission}'s feedback shows hidden test code: {leaked[:3]}"
