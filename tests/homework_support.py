"""Shared helpers for the homework and grader tests (not a test module).

Building the homework (``otter assign``) costs seconds, so it happens once per test session,
whichever test module asks first.
"""

from __future__ import annotations

import threading

from attngrade.assign import build
from attngrade.homework import Homework, all_homework

_lock = threading.Lock()
_built: list[Homework] | None = None


def built_homework() -> list[Homework]:
    """Every homework, built if its dist/ is missing or older than its master.

    otter's own run of the solutions is skipped here (it is what ``make assignments`` adds); the
    class grader grades the solutions in tests/test_mutations.py with the same tests.
    """
    global _built
    with _lock:
        if _built is None:
            homeworks = all_homework()
            stale = [hw for hw in homeworks if not hw.is_built()]
            if stale:
                problems = build(stale, verify=False, otter_tests=False)
                assert not problems, "\n".join(problems)
            _built = homeworks
        return _built


def homework(name: str) -> Homework:
    for hw in built_homework():
        if hw.name == name:
            return hw
    raise KeyError(name)
