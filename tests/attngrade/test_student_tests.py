"""Test-writing questions (attngrade.student_tests): honest, empty, always-failing, partial and
hostile student tests get the same verdicts run here (grader.check, otter run) and in the sandbox
(the class grader)."""

from __future__ import annotations

import builtins

import pytest

from attngrade.checks import CheckFailure
from attngrade.homework import DEFAULT_LIMITS
from attngrade.sandboxed import integrity
from attngrade.student_tests import (
    TestRun,
    check_test_catches,
    check_test_passes_on_reference,
    run_student_test,
)

from ..homework_support import bwrap_available

NAME = "causal_keep_mask"
REFERENCE = "def causal_keep_mask(n, m):\n    return torch.ones(n, m, dtype=torch.bool).tril()\n"
#: the known mistakes, each with the words of its feedback
MUTANTS = {
    "the diagonal left out": "def causal_keep_mask(n, m):\n    return torch.ones(n, m, dtype=torch.bool).tril(-1)\n",
    "the mask transposed": "def causal_keep_mask(n, m):\n    return torch.ones(n, m, dtype=torch.bool).triu()\n",
    "a float mask": "def causal_keep_mask(n, m):\n    return torch.ones(n, m).tril()\n",
}
SECRET = "tril(-1)"  # a piece of a hidden candidate's code, which must never come back

#: student tests (notebook cells) -> (passes on the reference, mutants caught)
STUDENT_TESTS = {
    "honest": (
        "def test_causal_keep_mask(f):\n"
        "    got = f(3, 3)\n"
        "    assert got.dtype == torch.bool\n"
        "    assert torch.equal(got, torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))\n"
        "    assert f(2, 4).shape == (2, 4)\n",
        True,
        set(MUTANTS),
    ),
    "partial (shape and diagonal only)": (
        "def test_causal_keep_mask(f):\n"
        "    got = f(3, 3)\n"
        "    assert got.shape == (3, 3)\n"
        "    assert bool(got.diagonal().all())\n",
        True,
        {"the diagonal left out"},
    ),
    "empty (assert True)": ("def test_causal_keep_mask(f):\n    assert True\n", False, set()),
    "never calls, always fails": ("def test_causal_keep_mask(f):\n    assert False, 'no'\n", False, set()),
    "always fails after calling": ("def test_causal_keep_mask(f):\n    f(2, 2)\n    assert False\n", False, set()),
    "loops forever": ("def test_causal_keep_mask(f):\n    f(2, 2)\n    while True:\n        pass\n", False, set()),
    "huge message": (
        "def test_causal_keep_mask(f):\n    f(2, 2)\n    raise AssertionError('x' * 10_000_000)\n",
        False,
        set(),
    ),
    "sys.exit": ("import sys\ndef test_causal_keep_mask(f):\n    f(2, 2)\n    sys.exit(0)\n", False, set()),
    # fails only on a candidate whose code it has read: what it can see is its own process's memory
    # (the compiled candidate), never a file; it prints it, and nothing printed comes back
    "reads the candidate": (
        "import dis, inspect, io\n"
        "def test_causal_keep_mask(f):\n"
        "    f(1, 1)\n"
        "    inner = [c.cell_contents for c in f.__closure__ if callable(c.cell_contents)][0]\n"
        "    try:\n"
        "        print(inspect.getsource(inner))\n"
        "    except OSError as exc:\n"
        "        print('no source:', exc)\n"
        "    out = io.StringIO()\n"
        "    dis.dis(inner, file=out)\n"
        "    print(out.getvalue())\n"
        "    assert '-1' not in out.getvalue()\n",
        True,
        {"the diagonal left out"},
    ),
    # a run_as_test of its own does not make the grader trust its answer
    "claims to be the grader's proxy": (
        "def test_causal_keep_mask(f):\n"
        "    assert False\n"
        "test_causal_keep_mask.run_as_test = lambda *a, **k: {'passed': True, 'calls': 5}\n"
        "class _Proxy:\n"
        "    __module__ = 'attngrade.grading.sandbox'\n"
        "    __name__ = 'test_causal_keep_mask'\n"
        "    def run_as_test(self, *a, **k):\n"
        "        return {'passed': True, 'calls': 5}\n"
        "    def __call__(self, f):\n"
        "        assert False\n"
        "test_causal_keep_mask = _Proxy()\n",
        False,
        set(),
    ),
    # a test can fake its call count (its own memory): that passes the reference, and no more
    "fakes the call count": (
        "def test_causal_keep_mask(f):\n"
        "    f.calls = 10\n"
        "    for cell in f.__closure__:\n"
        "        if isinstance(cell.cell_contents, list):\n"
        "            cell.cell_contents[0] = 10\n",
        True,
        set(),
    ),
    "breaks the call count": (
        "def test_causal_keep_mask(f):\n"
        "    for cell in f.__closure__:\n"
        "        if isinstance(cell.cell_contents, list):\n"
        "            cell.cell_contents.clear()\n",
        False,
        set(),
    ),
}

FORBIDDEN_TEST = (
    "import attnbook\ndef test_causal_keep_mask(f):\n    assert torch.equal(f(3, 3), attnbook.causal_mask(3, 3))\n"
)


def verdicts(run: callable) -> tuple[bool, set[str]]:
    """(passes on the reference, mutants caught) with ``run(name, source) -> TestRun``."""
    ref = run(NAME, REFERENCE)
    passes = ref.passed and ref.calls >= 1
    caught = set()
    for mistake, source in MUTANTS.items():
        result = run(NAME, source)
        if not result.passed and result.calls >= 1:
            caught.add(mistake)
    return passes, caught


def local_test(cell: str):
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    exec("import torch\n" + cell, namespace)
    return namespace["test_causal_keep_mask"]


@pytest.mark.parametrize("kind", [k for k in STUDENT_TESTS if k != "loops forever"])
def test_local_verdicts(kind):
    cell, passes, caught = STUDENT_TESTS[kind]
    test = local_test(cell)
    got = verdicts(lambda name, source: run_student_test(test, name, source))
    assert got == (passes, caught if passes else got[1])


def test_the_checks_score_an_honest_test_and_nothing_for_an_empty_or_failing_one():
    honest = local_test(STUDENT_TESTS["honest"][0])
    run = check_test_passes_on_reference(honest, NAME, REFERENCE)
    assert isinstance(run, TestRun) and run.passed and run.calls == 2
    for mistake, source in MUTANTS.items():
        check_test_catches(honest, NAME, source, mistake, reference=REFERENCE)

    empty = local_test(STUDENT_TESTS["empty (assert True)"][0])
    with pytest.raises(CheckFailure, match="never calls"):
        check_test_passes_on_reference(empty, NAME, REFERENCE)
    with pytest.raises(CheckFailure, match="never calls"):
        check_test_catches(empty, NAME, MUTANTS["the mask transposed"], "the mask transposed", reference=REFERENCE)

    failing = local_test(STUDENT_TESTS["always fails after calling"][0])
    with pytest.raises(CheckFailure, match="fails on a correct"):
        check_test_passes_on_reference(failing, NAME, REFERENCE)
    # a hidden test checks the reference first, and does not repeat the test's own message
    with pytest.raises(CheckFailure, match="fails on a correct") as info:
        check_test_catches(failing, NAME, MUTANTS["a float mask"], "a float mask", reference=REFERENCE)
    assert "AssertionError" not in str(info.value)

    partial = local_test(STUDENT_TESTS["partial (shape and diagonal only)"][0])
    with pytest.raises(CheckFailure, match="your test does not notice: the mask transposed") as info:
        check_test_catches(partial, NAME, MUTANTS["the mask transposed"], "the mask transposed", reference=REFERENCE)
    assert "triu" not in str(info.value), "feedback names the kind of mistake, never its code"


def test_a_huge_message_is_cut_short():
    test = local_test(STUDENT_TESTS["huge message"][0])
    with pytest.raises(CheckFailure) as info:
        check_test_passes_on_reference(test, NAME, REFERENCE)
    assert len(str(info.value)) < 1500


def test_a_test_that_is_not_a_function_fails():
    assert not run_student_test(None, NAME, REFERENCE).passed
    with pytest.raises(CheckFailure, match="fails on a correct"):
        check_test_passes_on_reference(42, NAME, REFERENCE)


def test_a_broken_candidate_is_the_instructors_error():
    from attngrade.sandboxed.candidates import CandidateError

    test = local_test(STUDENT_TESTS["honest"][0])
    with pytest.raises(CandidateError):
        run_student_test(test, NAME, "def other(n, m):\n    return None\n")


def test_a_test_that_calls_a_forbidden_reference_fails_locally():
    test = local_test(FORBIDDEN_TEST)
    integrity.configure(["attnbook.causal_mask"])
    try:
        run = run_student_test(test, NAME, REFERENCE)
        assert not run.passed and run.forbidden == ("attnbook.causal_mask",)
        with pytest.raises(CheckFailure, match="scores 0"):
            check_test_passes_on_reference(test, NAME, REFERENCE)
    finally:
        integrity.configure(None)
    # without the rule (no forbidden list), the same test passes on the reference
    assert integrity.current_guard() is None or "attnbook.causal_mask" not in integrity.current_guard().forbidden
    assert run_student_test(test, NAME, REFERENCE).passed


# -- the sandbox ------------------------------------------------------------------------------

SANDBOX_REASON = bwrap_available()


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    if SANDBOX_REASON is not None:
        pytest.skip(SANDBOX_REASON)
    from attngrade.grading.sandbox import Worker
    from attngrade.grading.view import build_view, hidden_paths

    root = tmp_path_factory.mktemp("student-tests")
    forbidden = ["attnbook.causal_mask"]
    view = build_view(root / "view", forbidden)
    w = Worker(view, hide=hidden_paths([]), forbidden=forbidden, sandbox=True)
    w.start()
    yield w
    w.close()


LIMITS = {**DEFAULT_LIMITS, "call_timeout": 1.0, "call_grace": 2.0, "submission_timeout": 120.0}


def sandbox_session(worker, cell: str):
    from attngrade.grading.sandbox import Session

    session = Session(worker, ["import torch\n" + cell], limits=LIMITS)
    assert session.start(), session.broken
    return session


@pytest.mark.parametrize("kind", list(STUDENT_TESTS))
def test_the_sandbox_gives_the_same_verdicts(worker, kind):
    cell, passes, caught = STUDENT_TESTS[kind]
    session = sandbox_session(worker, cell)
    try:
        proxy = session.proxy("test_causal_keep_mask")
        runs = []

        def run(name, source):
            runs.append(run_student_test(proxy, name, source))
            return runs[-1]

        got = verdicts(run)
        if kind != "loops forever":  # locally, an endless test runs as long as the student lets it
            assert got == verdicts(lambda n, s: run_student_test(local_test(cell), n, s))
        assert got == (passes, caught if passes else got[1])
        for r in runs:  # what comes back: pass/fail, the number of calls, a bounded message
            assert isinstance(r.calls, int) and len(r.error) <= 2000
            assert SECRET not in r.error
    finally:
        session.close()


def test_the_sandbox_checks_give_the_local_messages(worker):
    session = sandbox_session(worker, STUDENT_TESTS["partial (shape and diagonal only)"][0])
    try:
        proxy = session.proxy("test_causal_keep_mask")
        check_test_passes_on_reference(proxy, NAME, REFERENCE)
        check_test_catches(proxy, NAME, MUTANTS["the diagonal left out"], "the diagonal left out", reference=REFERENCE)
        with pytest.raises(CheckFailure, match="your test does not notice: the mask transposed"):
            check_test_catches(proxy, NAME, MUTANTS["the mask transposed"], "the mask transposed", reference=REFERENCE)
    finally:
        session.close()


def test_a_test_that_calls_a_forbidden_reference_fails_in_the_sandbox(worker):
    session = sandbox_session(worker, FORBIDDEN_TEST)
    try:
        proxy = session.proxy("test_causal_keep_mask")
        run = run_student_test(proxy, NAME, REFERENCE)
        assert not run.passed
        with pytest.raises(CheckFailure, match="scores 0"):
            check_test_passes_on_reference(proxy, NAME, REFERENCE)
    finally:
        session.close()


def test_an_endless_test_fails_in_the_sandbox_and_the_session_goes_on(worker):
    session = sandbox_session(
        worker,
        STUDENT_TESTS["loops forever"][0] + STUDENT_TESTS["honest"][0].replace("test_causal_keep_mask", "test_other"),
    )
    try:
        run = run_student_test(session.proxy("test_causal_keep_mask"), NAME, REFERENCE)
        assert not run.passed and "time" in run.error
        assert run_student_test(session.proxy("test_other"), NAME, REFERENCE).passed
    finally:
        session.close()


def test_a_test_that_swallows_the_time_limit_is_stopped_once(worker):
    """A test that catches the soft time limit and goes on is killed; every check of the same
    test and implementation then reuses that verdict (its time is spent once)."""
    cell = (
        "def test_causal_keep_mask(f):\n"
        "    f(2, 2)\n"
        "    while True:\n"
        "        try:\n"
        "            while True:\n"
        "                pass\n"
        "        except BaseException:\n"
        "            pass\n"
    )
    session = sandbox_session(worker, cell)
    try:
        proxy = session.proxy("test_causal_keep_mask")
        first = run_student_test(proxy, NAME, REFERENCE)
        assert not first.passed and "time" in first.error
        starts = session.starts
        assert run_student_test(proxy, NAME, REFERENCE) == first
        assert session.starts == starts, "the verdict was reused, not computed again"
        with pytest.raises(CheckFailure, match="fails on a correct"):
            check_test_catches(proxy, NAME, MUTANTS["a float mask"], "a float mask", reference=REFERENCE)
    finally:
        session.close()
