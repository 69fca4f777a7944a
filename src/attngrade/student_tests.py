"""Test-writing questions: the student writes the test, the grader runs it on known implementations.

A test-writing question asks for one function ``test_<function>(<function>)`` in pytest style: it
receives the function under test and asserts what a correct one must do (it may call helpers of
the student's own, but not the course's reference implementations: they are absent at grading).
The question is graded by the homework's known mistakes, as the course's own tests are:

* the public test (:func:`check_test_passes_on_reference`, and :func:`check_test_catches` on one
  wrong version as an example) runs the student's test on a correct implementation: it must pass
  and call the function at least once;
* each hidden test (:func:`check_test_catches`) runs it on one wrong version of the function (a
  "mutant"), and passes when the student's test *fails* on it, after calling it; it first checks
  the reference again, so a test that always fails, or never runs the function, scores nothing.

The implementations are given as source strings (the instructor's, in the tests; hidden tests never
ship to students). A test must carry the answer: every run of it, on the reference or on a wrong
version, takes a fresh process, and the candidate runs in another process, where the test cannot
read it (:mod:`attngrade.sandboxed.candidates`): the test holds a proxy that sends inputs and
returns outputs, the calls are counted on the candidate's side, and nothing one run leaves behind
reaches the next. So a test that remembers what an earlier candidate returned, passes "the first
time", or reads the candidate's code, closure or frames learns nothing it can use, and
:func:`check_test_catches` runs the reference and the wrong version in a random order.

* in the class grader, the student's test is a proxy for the function in the sandbox, with a
  ``run_as_test`` method (:class:`attngrade.grading.session.StudentFunction`): the source goes
  sealed, under a key no cell can read, to a candidate server forked before the notebook's first
  cell ran; the test's process is forked by a factory from that same moment and runs the
  notebook's cells again, then the test, under the same integrity guard and time limit as any call;
  only the server's signed pass/fail and number of calls come back;
* in ``grader.check`` and ``otter run`` (no sandbox), the server and each test's process are forked
  from the notebook's own process (the test's from its state as it is), and the test runs under
  the same run-time integrity guard as the public checks
  (:func:`attngrade.sandboxed.integrity.watch_call`), so a test that runs a forbidden reference
  fails alike in every grader. The hidden tests' own code is in that process there, so the class
  grader's grade is the one that counts. Where processes cannot be forked (Windows), the test runs
  in the notebook's process, as a check for the student only.

Feedback for a missed mutant names the *kind* of mistake (``mistake``), never its code. The
student's own error message is shown only by the check on the reference in the public test; the
hidden tests say only that the test fails on a correct implementation, so that nothing a test saw
of a hidden candidate can come back through a message.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checks import CheckFailure
from .sandboxed import candidates
from .sandboxed.candidates import describe, prepare
from .sandboxed.integrity import ForbiddenReference, current_guard, forbidden_what, watch_call

#: longest part of a student's error message that a public check repeats
MAX_ERROR = 600
#: CPU seconds a student's test may take on one candidate in ``grader.check`` and ``otter run``
LOCAL_SECONDS = 30.0


@dataclass(frozen=True)
class TestRun:
    """One run of a student's test on one candidate implementation."""

    __test__ = False  # not a pytest test class

    passed: bool
    calls: int
    error: str = ""
    forbidden: tuple[str, ...] = ()


#: the module and class of the class grader's proxy for a function in the sandbox
_PROXY_MODULE, _PROXY_CLASS = "attngrade.grading.session", "StudentFunction"


def _grader_proxy(test: Any) -> bool:
    """Whether ``test`` is the class grader's proxy for a student's function in the sandbox (an
    object of :class:`attngrade.grading.session.StudentFunction`, loaded from this package's own
    file). A ``run_as_test`` that a student's function or class defines, a class that calls its
    module ``attngrade...``, or a fake module put in ``sys.modules`` does not count: those run
    here, as the student's own code."""
    module = sys.modules.get(_PROXY_MODULE)
    if module is None or type(test) is not getattr(module, _PROXY_CLASS, None):
        return False
    expected = Path(__file__).resolve().parent / "grading" / "session.py"
    try:
        return Path(str(module.__spec__.origin)).resolve() == expected and expected.is_file()
    except (AttributeError, OSError, TypeError, ValueError):
        return False


def _test_name(test: Any) -> str:
    name = getattr(test, "__name__", None)
    return name if isinstance(name, str) and name else "your test"


def run_student_test(test: Any, function_name: str, source: str) -> TestRun:
    """Run the student's ``test`` on the implementation of ``function_name`` that ``source``
    defines; in the sandbox when ``test`` is the class grader's proxy, else here (under the
    homework's integrity guard)."""
    if _grader_proxy(test):
        reply = type(test).run_as_test(test, function_name, source)
        if not isinstance(reply, dict):
            return TestRun(False, 0, "the grader could not run the test")
        return TestRun(
            passed=bool(reply.get("passed")),
            calls=int(reply.get("calls") or 0),
            error=str(reply.get("error") or ""),
            forbidden=tuple(str(r) for r in reply.get("forbidden") or ()),
        )
    if test is None or not callable(test):
        return TestRun(False, 0, "it is not defined as a function; run the cell that defines it")
    if not _can_fork():
        return _run_in_this_process(test, function_name, source)
    return _run_in_fresh_processes(test, function_name, source)


def _can_fork() -> bool:
    return hasattr(os, "fork") and hasattr(__import__("socket"), "send_fds") and sys.platform != "win32"


_SERVER: dict[int, Any] = {}  # this process's candidate server, by the pid that started it


def _server() -> Any:
    """The candidate server of this process (forked at the first run, once per process)."""
    pid = os.getpid()
    if pid not in _SERVER:
        _SERVER.clear()
        _SERVER[pid] = candidates.start_server(None)[0]
    return _SERVER[pid]


def _run_in_fresh_processes(test: Any, function_name: str, source: str) -> TestRun:
    """The test in a fresh process forked from this one, the candidate in another
    (:mod:`attngrade.sandboxed.candidates`)."""
    seconds = LOCAL_SECONDS
    deadline = time.monotonic() + seconds * 3 + 4 * candidates.GRACE
    request = json.dumps({"name": function_name, "source": source, "seconds": seconds * 3}).encode()
    try:
        server = _server()
        conn, answer = candidates.request_run(server, request, deadline)
    except (OSError, ValueError):  # the server is gone (the notebook killed it): start another
        _SERVER.clear()
        server = _server()
        conn, answer = candidates.request_run(server, request, deadline)
    if conn is None:
        payload = json.loads(str(answer.get("payload") or "{}"))
        if payload.get("candidate_error"):
            raise candidates.CandidateError(str(payload["candidate_error"]))
        return TestRun(False, 0, str(payload.get("refused") or "the grader could not run the test"))
    # no folder is cleaned here (other programs of the student's write there too): where namespaces
    # are not available, a test's process may create names but write no file contents
    candidates.run_test(test, conn, _test_name(test), guard=current_guard(), seconds=seconds, wall_factor=3.0)
    try:
        payload = json.loads(str(candidates.receive_verdict(server, deadline).get("payload") or "{}"))
    except (OSError, ValueError):
        _SERVER.clear()
        return TestRun(False, 0, "the grader could not run the test")
    calls = payload.get("calls")
    return TestRun(
        passed=payload.get("passed") is True and not payload.get("forbidden"),
        calls=calls if type(calls) is int and calls >= 0 else 0,
        error=str(payload.get("error") or "")[:2000],
        forbidden=tuple(str(r) for r in payload.get("forbidden") or ()),
    )


def _run_in_this_process(test: Any, function_name: str, source: str) -> TestRun:
    """Where processes cannot be forked (Windows): the test runs here, on the compiled candidate."""
    candidate, calls = prepare(function_name, source)
    try:
        with watch_call(_test_name(test)):
            test(candidate)
    except ForbiddenReference as exc:
        return TestRun(False, calls(), str(exc), tuple(exc.hits))
    except (Exception, SystemExit) as exc:  # KeyboardInterrupt still stops the student's own kernel
        return TestRun(False, calls(), describe(exc))
    return TestRun(True, calls())


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 3] + "..."


def _forbidden_message(test: Any, run: TestRun) -> str:
    return (
        f"your test `{_test_name(test)}` ran {forbidden_what(list(run.forbidden))} (the reference implementations "
        "are absent at grading: test the function you receive, and compare with values of your own); "
        "this question scores 0"
    )


def check_test_passes_on_reference(test: Any, function_name: str, source: str, *, show_error: bool = True) -> TestRun:
    """Fail unless the student's ``test`` passes on the correct implementation ``source`` of
    ``function_name`` and calls it at least once. ``show_error``: repeat the test's own error
    message (the public test); the hidden tests leave it out."""
    name = _test_name(test)
    run = run_student_test(test, function_name, source)
    if run.forbidden:
        raise CheckFailure(_forbidden_message(test, run))
    if not run.passed:
        why = f": {_short(run.error)}" if show_error and run.error else " (its message is shown by the public test)"
        raise CheckFailure(
            f"your test `{name}` fails on a correct `{function_name}`{why}. A test that fails on a correct "
            "implementation scores nothing: check what it asserts"
        )
    if run.calls < 1:
        raise CheckFailure(
            f"your test `{name}` never calls the `{function_name}` it receives: a test that never runs the "
            "function scores nothing"
        )
    return run


def check_test_catches(
    test: Any, function_name: str, source: str, mistake: str, *, reference: str | None = None
) -> TestRun:
    """Fail unless the student's ``test`` fails on the wrong implementation ``source`` (after
    calling it at least once). ``mistake`` names the kind of mistake, for the feedback ("the
    diagonal left out of the causal mask"). ``reference``: the correct implementation's source,
    checked first (:func:`check_test_passes_on_reference`, without the test's own message), so that
    a test that always fails catches nothing."""
    run = None
    if reference is not None and random.random() < 0.5:  # the order is not one the test can rely on
        run = run_student_test(test, function_name, source)
    if reference is not None:
        check_test_passes_on_reference(test, function_name, reference, show_error=False)
    if run is None:
        run = run_student_test(test, function_name, source)
    if run.forbidden:
        raise CheckFailure(_forbidden_message(test, run))
    if run.passed:
        raise CheckFailure(f"your test does not notice: {mistake}")
    if run.calls < 1:
        raise CheckFailure(
            f"your test does not notice: {mistake} (it failed without calling `{function_name}`, so the "
            "failure says nothing about this mistake)"
        )
    return run


__all__ = ["TestRun", "check_test_catches", "check_test_passes_on_reference", "run_student_test"]
