"""otter's report of a failed check: under otter (``grader.check``, ``otter run``) a
:class:`~.failure.CheckFailure` is reported by its own message, never with the test's source line."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .failure import CheckFailure


def _without_test_source(original: Callable[..., str]) -> Callable[..., str]:
    """otter reports a failed test as "Error at line N in test qK:", the line of the test's code
    that raised, then the exception. For a :class:`CheckFailure` that line is only the call of
    :func:`check_call` (in ``grader.check``), or a line of a hidden test (in the autograder's
    ``results.json``, which students may see): the failure's own message says what went wrong, so
    the report keeps that alone. Other exceptions are reported as otter reports them."""

    def message(self: Any, excp: Exception, context: int = 0) -> str:
        if isinstance(excp, CheckFailure):
            return f"{self.name} failed:\n{excp}"
        return original(self, excp, context)

    message.attngrade = True  # type: ignore[attr-defined]
    return message


def _quiet_otter() -> None:
    """Apply :func:`_without_test_source` to otter's test runner when otter runs these checks
    (``grader.check`` in a notebook, ``otter run``); a no-op anywhere else."""
    if "otter" not in sys.modules:
        return
    try:
        from otter.test_files.exception_test import ExceptionTestFile
    except Exception:  # another otter layout: its own messages stay
        return
    current = getattr(ExceptionTestFile, "_generate_error_message", None)
    if current is not None and not getattr(current, "attngrade", False):
        ExceptionTestFile._generate_error_message = _without_test_source(current)
