"""The implementations a student's test is run on, in a test-writing question.

A test-writing question asks the student for one test, ``test_<function>(<function>)``: it receives
the function under test and asserts what a correct one must do. The grader runs it on candidate
implementations written by the instructor (the reference, and the known wrong versions of the
homework's ``mutants``), given as *source* in the tests. Each candidate is compiled here, in a fresh
namespace that holds ``torch`` and ``math``, where the student's test runs: inside the student's own
sandbox in the class grader (:func:`attngrade.sandboxed.worker.serve`, request ``run_test``), in the
notebook's or the autograder's process in ``grader.check`` and ``otter run``
(:mod:`attngrade.student_tests`).

A candidate counts its calls, so that a test that never runs the function scores nothing. What a
student's test can see of a candidate is its own process's memory: the compiled function (reachable
through the garbage collector, say), never a file (``inspect.getsource`` finds no source: the code
is compiled from a string under the file name ``<candidate>``, which ``linecache`` does not hold).
Nothing of it leaves the sandbox but pass or fail and the number of calls.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any

#: the file name candidates are compiled under (no file: ``inspect.getsource`` fails on them)
FILENAME = "<candidate>"


def describe(exc: BaseException) -> str:
    """``"TypeError: message"`` for an exception that student code raised (at most 2,000
    characters), or its type's name alone when its ``__str__`` itself fails; used wherever a
    student's code runs (the sandbox's worker, and a student's test in the notebook)."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # a student's exception whose __str__ fails
        text = type(exc).__name__
    return text[:2000]


class CandidateError(Exception):
    """The instructor's candidate source does not compile or does not define the function."""


def compile_candidate(name: str, source: str) -> Callable[..., Any]:
    """The function ``name`` defined by ``source``, compiled in a fresh namespace (torch, math)."""
    import torch

    namespace: dict[str, Any] = {"__builtins__": builtins, "__name__": "candidate", "torch": torch, "math": math}
    try:
        exec(compile(str(source), FILENAME, "exec"), namespace)
    except Exception as exc:
        raise CandidateError(f"the candidate source does not run: {type(exc).__name__}: {exc}") from None
    func = namespace.get(str(name))
    if not callable(func):
        raise CandidateError(f"the candidate source defines no function `{name}`")
    return func


def counting(func: Callable[..., Any], name: str) -> tuple[Callable[..., Any], Callable[[], int]]:
    """``(candidate, calls)``: a function that calls ``func`` and counts it, and a function that
    says how many times it was called (the count is kept in a closure, not in an attribute that
    the test could set)."""
    count = [0]

    def candidate(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return func(*args, **kwargs)

    candidate.__name__ = candidate.__qualname__ = str(name)
    candidate.__doc__ = f"The `{name}` your test is run on."

    def calls() -> int:
        try:  # the test may have tampered with the count (it lives in the test's own memory)
            value = count[0]
        except Exception:
            return 0
        return value if type(value) is int and value >= 0 else 0

    return candidate, calls


def prepare(name: str, source: str) -> tuple[Callable[..., Any], Callable[[], int]]:
    """The compiled candidate wrapped with its call counter (see :func:`counting`)."""
    return counting(compile_candidate(name, source), name)
