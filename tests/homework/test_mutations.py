"""Mutation tests: every homework's tests must catch the mistakes students really make.

For each homework, ``exercises/hwNN_topic/mutants.py`` lists wrong solutions (a missing
1/sqrt(d), a softmax over the wrong axis, a transposed or inverted mask, forgotten biases, ...).
Each is graded by the class grader together with the correct solution and the empty student
notebook, in one batch per homework. The correct solution must get full marks and the stub zero
on every question; every mutant is graded on the question it breaks (the other questions' tests
would run the unchanged solutions), where it must lose points.

The same batch grades generic mutants that no homework lists: every student function wrapped so
that it returns its tensors in another dtype (DTYPE_CASTS), which must fail a hidden test on the
dtype. The masters themselves are checked too: a question whose function takes a mask has a
"-1e9 instead of -inf" mutant (so some test has a fully masked row), and each test case takes one
student function (points are per function).
"""

from __future__ import annotations

import ast
import csv
import functools
import os
import re

import pytest

from attngrade.grading.feedback import failure_summary
from attngrade.grading.grader import Grader
from attngrade.grading.report import write_reports
from attngrade.homework import all_homework

from ..homework_support import homework
from ..submissions import (
    code_cells,
    comparing_submission,
    load_mutants,
    mutant_submission,
    stub_submission,
    submission_with,
)
from ..units import by_unit

HOMEWORK = [hw.name for hw in all_homework()]
MUTANTS = [(hw.name, name) for hw in all_homework() for name in load_mutants(hw)]
#: one unit of work per homework for make test's workers: its tests share its graded batch
BY_HOMEWORK = by_unit(HOMEWORK, "mutations")

# -- generic dtype mutants ---------------------------------------------------------------------
#
# Every student function is also graded wrapped so that the tensors it returns come back in another
# dtype (tuples, lists and dicts followed): "the answer is right but computed in, or returned as,
# the wrong dtype". Two wrappers, each graded on the function's question, where a hidden test must
# fail on the dtype.
#: cast name -> {dtype returned: dtype it is turned into} (torch's names)
DTYPE_CASTS = {
    # a float32 answer returned in a lower precision (computed in half precision); float16, not
    # bfloat16: the sandbox sends a bfloat16 tensor back as float32 (attngrade.sandboxed.protocol), so no
    # test could see its dtype, only its rounding
    "float32->float16": {"float32": "float16"},
    # the other dtypes: a float64 answer returned as float32 (computed in float32), a float mask
    # where a boolean one is asked, an int32 permutation where int64 is asked
    "float64->float32,bool->float32,int64->int32": {
        "float64": "float32",
        "bool": "float32",
        "int64": "int32",
    },
}

#: (homework, function, cast) -> why the function never returns a tensor of a dtype the cast
#: changes (its wrapped copy then is the solution itself). Graded anyway: it must keep full marks,
#: so an exemption that stops being true fails (tests/homework/test_mutations.py,
#: test_dtype_exemptions_still_hold). Keep this list minimal.
DTYPE_EXEMPT = {
    # boolean masks: the second cast (bool -> float32) is their dtype test
    ("hw00", "mask_row_to_column", "float32->float16"): "returns a boolean mask (its argument is one)",
    ("hw00", "mask_from_torch_mha", "float32->float16"): "returns a boolean mask (its argument is one)",
    ("hw02", "causal_keep_mask", "float32->float16"): "returns a boolean mask whatever its arguments",
    ("hw02", "padding_keep_mask", "float32->float16"): "returns a boolean mask whatever its arguments",
    ("hw02", "from_additive", "float32->float16"): "returns a boolean mask whatever its argument",
    ("hw09", "window_keep_mask", "float32->float16"): "returns a boolean mask whatever its arguments",
    # float64 by the question, from Python numbers or an integer permutation: no float32 input to
    # follow; the second cast (float64 -> float32) is their dtype test
    ("hw05", "frequencies", "float32->float16"): "returns float64 (the homework asks so) from Python numbers",
    ("hw05", "sinusoidal", "float32->float16"): "returns float64 (the homework asks so) from Python numbers",
    ("hw05", "pair_shift", "float32->float16"): "returns float64 (the homework asks so) from Python numbers",
    ("hw05", "shift_matrix", "float32->float16"): "returns float64 (the homework asks so) from Python numbers",
    ("hw06", "perm_matrix", "float32->float16"): "returns float64 (the question asks so) from an int64 permutation",
    ("hw09", "linear_bias_slopes", "float32->float16"): "returns float64 (the question asks so) from a Python int",
    # an integer permutation: the second cast (int64 -> int32) is its dtype test
    ("hw06", "inverse_permutation", "float32->float16"): "returns an int64 permutation whatever its argument",
    ("hw12", "document_mask", "float32->float16"): "returns a boolean mask whatever its arguments",
    ("hw12", "prefix_lm_mask_mod", "float32->float16"): "returns a boolean mask whatever its arguments",
    # int64 positions: the second cast (int64 -> int32) is its dtype test
    ("hw12", "restarted_positions", "float32->float16"): "returns int64 positions whatever its argument",
    # a Python int (a number of bytes): no tensor for a cast to change; a hidden test checks that it is an int
    **{
        ("hw13", "bytes_per_token", cast): "returns a Python int (a number of bytes), not a tensor"
        for cast in DTYPE_CASTS
    },
    ("hw13", "streaming_keep_mask", "float32->float16"): "returns a boolean mask whatever its arguments",
    # test-writing questions: a student's test returns nothing, so no cast of its result can show;
    # such a question is graded by the wrong versions the test catches (attngrade.student_tests)
    **{
        (hw, test, cast): "a student's test returns nothing: graded by the wrong versions it catches"
        for hw, test in (
            ("hw02", "test_causal_keep_mask"),
            ("hw03", "test_split_heads"),
            ("hw08", "test_online_statistics"),
        )
        for cast in DTYPE_CASTS
    },
}

_DTYPE_WRAPPER = """
def _dtype_mutant_wrap(func, casts):
    import functools

    import torch

    casts = {{getattr(torch, k): getattr(torch, v) for k, v in casts.items()}}

    def cast(value):
        if isinstance(value, torch.Tensor):
            return value.to(casts[value.dtype]) if value.dtype in casts else value
        if isinstance(value, tuple):
            return tuple(cast(v) for v in value)
        if isinstance(value, list):
            return [cast(v) for v in value]
        if isinstance(value, dict):
            return {{k: cast(v) for k, v in value.items()}}
        return value

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        return cast(func(*args, **kwargs))

    return wrapped


{function} = _dtype_mutant_wrap({function}, {casts!r})
"""


def dtype_mutants(hw) -> dict[str, tuple[str, str, str]]:
    """Submission name -> (question, function, cast) for every student function and every cast."""
    return {
        f"<dtype {cast}: {function}>": (q.name, function, cast)
        for q in hw.questions()
        for function in q.functions
        for cast in DTYPE_CASTS
    }


def dtype_submission(hw, function: str, cast: str) -> list[str]:
    """The solutions' code cells and a last cell that wraps ``function`` with ``cast``."""
    return [*code_cells(submission_with(hw, {})), _DTYPE_WRAPPER.format(function=function, casts=DTYPE_CASTS[cast])]


@functools.cache
def graded(name: str) -> dict:
    """Grade the correct solution and the stub (every question) and every mutant (on its own
    question) of one homework, in one batch."""
    hw = homework(name)
    mutants = load_mutants(hw)
    subs = [("<correct>", code_cells(submission_with(hw, {}))), ("<stub>", code_cells(stub_submission(hw)))]
    subs.append(("<correct, comparing>", code_cells(comparing_submission(hw))))
    subs += [(k, code_cells(mutant_submission(hw, mutant))) for k, mutant in mutants.items()]
    dtypes = dtype_mutants(hw)
    subs += [(k, dtype_submission(hw, function, cast)) for k, (_, function, cast) in dtypes.items()]
    only = {k: [mutant[0]] for k, mutant in mutants.items()} | {k: [q] for k, (q, _, _) in dtypes.items()}
    # scores only: the static reading (which never changes one) is left out; under pytest-xdist the
    # other worker keeps the second core busy, so one sandbox grades the batch
    jobs = 1 if os.environ.get("PYTEST_XDIST_WORKER") else None
    with Grader(hw, jobs=jobs, static_checks=False) as grader:
        results = grader.grade_sources(subs, questions=only)
    return {r.submission: r for r in results}


def _explain(result) -> str:
    return "\n".join([f"{result.submission}: {result.total:g} / {result.possible:g}", *failure_summary(result)])


@pytest.mark.parametrize("name", BY_HOMEWORK)
def test_correct_solution_gets_full_marks(name):
    result = graded(name)["<correct>"]
    assert result.possible > 0
    assert result.total == result.possible, _explain(result)


@pytest.mark.parametrize("name", BY_HOMEWORK)
def test_comparing_with_a_reference_at_top_level_costs_nothing(name):
    """Every answer cell calls a forbidden reference above and below its ``def`` (to compare): the
    calls raise while grading, but no definition and no point is lost."""
    result = graded(name)["<correct, comparing>"]
    assert result.total == result.possible > 0, _explain(result)


@pytest.mark.parametrize("name", BY_HOMEWORK)
def test_empty_stub_gets_zero(name):
    result = graded(name)["<stub>"]
    assert result.total == 0, _explain(result)


@pytest.mark.parametrize("name", BY_HOMEWORK)
def test_class_summary_counts_each_named_mistake_from_the_rows(name, tmp_path):
    """The homework's mutants graded as a class (what ``python -m attngrade sample-class`` hands
    out): misconceptions.csv gives, per question and named mistake, exactly the students whose rows
    hold a failed check naming it, and the summary ranks the questions by the points they lost."""
    results = [r for r in graded(name).values() if not r.submission.startswith("<dtype")]
    questions = [q.name for q in homework(name).questions()]
    write_reports(results, questions, tmp_path, name)
    expected: dict[tuple[str, str], set[str]] = {}
    for r in results:
        for q in r.questions:
            for case in q.cases:
                for line in (case.message or "").splitlines():
                    if not case.passed and line.startswith("Likely mistake: "):
                        expected.setdefault((q.name, line.removeprefix("Likely mistake: ").strip()), set()).add(
                            r.submission
                        )
    with open(tmp_path / "misconceptions.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    written = {(row["question"], row["mistake"]): row for row in rows}
    assert set(written) == set(expected)
    for key, row in written.items():
        names = {n.lstrip("'") for n in row["names"].split("; ")}
        assert int(row["students"]) == len(expected[key]) and names == expected[key], key
    # points lost per question, from the gradebook's rows (a mutant graded on its own question only
    # has 0 in the others' columns, as a student who left them out)
    possible = {q.name: q.possible for q in homework(name).questions()}
    with open(tmp_path / "gradebook.csv", encoding="utf-8", newline="") as f:
        book = list(csv.DictReader(f))
    lost = {q: sum(possible[q] - float(row[q]) for row in book) for q in questions}
    ranked = [q for q, points in sorted(lost.items(), key=lambda kv: (-kv[1], kv[0])) if points > 0]
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    shown = [
        line.split(":")[0][2:] for line in summary.splitlines() if line.startswith("- q") and "points lost" in line
    ]
    assert shown == ranked


@pytest.mark.parametrize("name", BY_HOMEWORK)
def test_every_homework_has_mutants_for_every_question(name):
    hw = homework(name)
    targeted = {mutant[0] for mutant in load_mutants(hw).values()}
    questions = {q.name for q in hw.questions()}
    assert questions and targeted == questions, f"questions without a mutant: {sorted(questions - targeted)}"


@pytest.mark.parametrize("name,mutant", by_unit(MUTANTS, "mutations"))
def test_mutant_loses_points(name, mutant):
    result = graded(name)[mutant]
    question = load_mutants(homework(name))[mutant][0]
    (q,) = result.questions  # graded on its own question only
    assert q.name == question
    assert q.score < q.possible, f"mutant {mutant!r} was not caught by {question}:\n{_explain(result)}"


def _fails_on_dtype(case) -> bool:
    """Whether a failed test case's message is about the dtype of the result."""
    return not case.passed and ("dtype" in case.message or "floating-point tensor" in case.message)


@pytest.mark.parametrize("name", BY_HOMEWORK)
def test_dtype_mutants_lose_points(name):
    """Every student function, wrapped to return its tensors in another dtype (DTYPE_CASTS), fails
    a hidden test of its question on the dtype: some hidden test checks each function's output
    dtype (it loses points there even when its values are right to the dtype's precision)."""
    hw = homework(name)
    results = graded(name)
    missed = []
    for submission, (question, function, cast) in dtype_mutants(hw).items():
        if (name, function, cast) in DTYPE_EXEMPT:
            continue
        (q,) = results[submission].questions
        assert q.name == question
        if q.score >= q.possible or not any(case.hidden and _fails_on_dtype(case) for case in q.cases):
            missed.append(f"{question} {function} ({cast})")
    assert not missed, f"{name}: no hidden test checks the output dtype of: {missed}"


@pytest.mark.parametrize("name", BY_HOMEWORK)
def test_dtype_exemptions_still_hold(name):
    """An exempt function's wrapped copy keeps full marks (the cast changes nothing it returns on
    the tests' inputs), and every exemption names a function of the homework."""
    hw = homework(name)
    mutants = {(function, cast): submission for submission, (_, function, cast) in dtype_mutants(hw).items()}
    for homework_name, function, cast in DTYPE_EXEMPT:
        if homework_name != name:
            continue
        assert (function, cast) in mutants, f"DTYPE_EXEMPT names {function} ({cast}), which {name} does not ask for"
        result = graded(name)[mutants[function, cast]]
        assert result.total == result.possible, (
            f"{function} returns a tensor that {cast} changes: remove its exemption\n{_explain(result)}"
        )


def _solution_signatures(hw) -> dict[str, list[str]]:
    """The parameter names of each top-level function of the solutions."""
    signatures = {}
    for source in code_cells(submission_with(hw, {})):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                signatures[node.name] = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return signatures


#: a parameter that takes a mask: mask, attn_mask, memory_mask, key_padding_mask, keep, keep_mask...
#: (not `causal`: a causal mask leaves every query a key, where -1e9 and -inf agree)
MASK_PARAMETER = re.compile(r"(^|_)(mask|keep)(_|$)")

#: (homework, function) -> why a function with a mask parameter needs no "-1e9 instead of -inf" mutant
MASK_EXEMPT = {
    ("hw00", "mask_from_torch_mha"): "converts a boolean mask into a boolean mask: it fills no scores",
}


def _fills_minus_1e9(name: str, mutant: tuple) -> bool:
    """Whether a mutant fills masked scores with -1e9 (its name says so, or its new code does)."""
    if "-1e9" in name:
        return True
    if len(mutant) == 3:
        return "1e9" in mutant[2] and "1e9" not in mutant[1]
    return any("1e9" in source for source in mutant[1].values())


@pytest.mark.parametrize("name", BY_HOMEWORK)
def test_every_masked_question_has_a_minus_1e9_mutant(name):
    """A question whose function takes a mask has a mutant that fills masked scores with -1e9
    instead of -inf, and a hidden test catches it: so some hidden test has a fully masked row (a
    query that may see no key: the only place where -1e9 and -inf differ)."""
    hw = homework(name)
    signatures = _solution_signatures(hw)
    mutants = load_mutants(hw)
    missing, uncaught = [], []
    for q in hw.questions():
        masked = [
            f
            for f in q.functions
            if (name, f) not in MASK_EXEMPT and any(MASK_PARAMETER.search(p) for p in signatures.get(f, []))
        ]
        if not masked:
            continue
        fills = [k for k, m in mutants.items() if m[0] == q.name and _fills_minus_1e9(k, m)]
        if not fills:
            missing.append(f"{q.name} ({', '.join(masked)})")
            continue
        results = graded(name)
        if not any(case.hidden and not case.passed for k in fills for case in results[k].questions[0].cases):
            uncaught.append(f"{q.name} ({', '.join(fills)})")
    for homework_name, function in MASK_EXEMPT:
        if homework_name == name:
            assert any(MASK_PARAMETER.search(p) for p in signatures.get(function, [])), (
                f"MASK_EXEMPT names {function}, which has no mask parameter in {name}"
            )
    assert not missing, f"{name}: questions with a mask and no '-1e9 instead of -inf' mutant: {missing}"
    assert not uncaught, f"{name}: no hidden test catches the -1e9 mutants of: {uncaught}"


@pytest.mark.parametrize("name", BY_HOMEWORK)
def test_each_test_case_checks_one_function(name):
    """Points are per function: each test case (its parameters name what it takes from the
    notebook) takes exactly one student function, so a wrong function costs only its own points."""
    hw = homework(name)
    several = [
        f"{q.name}:{case.name} takes {case.params}"
        for q in hw.questions()
        for case in q.cases
        if len([p for p in case.params if p != "env"]) != 1
    ]
    assert not several, f"{name}: test cases that take more (or less) than one student function: {several}"


@pytest.mark.parametrize("name", BY_HOMEWORK)
def test_mutation_score(name, capsys):
    """Print the homework's mutation score (caught / mutants); every mutant must be caught."""
    results = graded(name)
    mutants = load_mutants(homework(name))
    missed = []
    for mutant, (question, *_) in mutants.items():
        q = next(q for q in results[mutant].questions if q.name == question)
        if q.score >= q.possible:
            missed.append(mutant)
    with capsys.disabled():
        print(f"\n{name}: mutation score {len(mutants) - len(missed)}/{len(mutants)}")
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


@pytest.mark.parametrize("name", BY_HOMEWORK)
def test_feedback_never_shows_hidden_test_source(name):
    """Every graded mutant's feedback (failures with messages of every kind) is free of the hidden
    tests' code."""
    from attngrade.grading.feedback import feedback_text

    secret = _hidden_source_lines(homework(name))
    assert secret, "the hidden tests have source lines to look for"
    for result in graded(name).values():
        text = feedback_text(result, name)
        leaked = [line for line in secret if line in text]
        assert not leaked, f"{result.submission}'s feedback shows hidden test code: {leaked[:3]}"
