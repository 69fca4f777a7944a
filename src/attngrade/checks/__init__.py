"""Assertions for the homework tests, with messages a student can act on.

The tests in the homework notebooks call the student's function through :func:`check_call`,
which compares the result with a reference answer computed by ``attnbook`` and, on a mismatch,
says what was called (argument shapes and dtypes), what was expected and what came back: the
type, the shape, the dtype, or the wrong values, with small tensors printed as matrices (larger
ones by their worst row or slice). It also names the likely mistake:

* one of the test's **known mistakes** (``mistakes=``: what a known wrong solution returns on the
  same inputs) when the student's result matches it;
* a few generic ones, found cheaply: a row that should be all zeros (a query that may see no key)
  but came back uniform, non-zero or ``nan``; a result that is the transpose of the expected one,
  or a constant multiple of it; a mask that is its negation (the other polarity); values right only
  to a lower precision; a dtype other than the inputs'; an input modified in place (the
  homework asks that inputs stay unchanged, so that alone fails the check).

Every failure message ends by saying, once, that hidden tests run at grading. Messages never hold
test source code. The same messages appear in the student's notebook (``grader.check("q1")``) and
in the grader's feedback files.

In the class grader the function passed in is a proxy for the student's function, which runs in
a sandbox; the comparison runs in the grader's process, on plain tensors. This package needs
nothing but ``torch``: it is imported inside student notebooks.

The package, by job (each module imports only those above it):

* :mod:`.failure`: :class:`CheckFailure` and :func:`expect`;
* :mod:`.display`: arguments, calls and tensors as a failure message writes them;
* :mod:`.matching`: whether values match (tolerances, sameness), without messages;
* :mod:`.diagnosis`: naming the likely mistake (known wrong solutions, generic guesses);
* :mod:`.comparing`: :func:`expect_tensor_like` and :func:`expect_close`;
* :mod:`.otter_reports`: otter's report of a failed check, without the test's source line;
* :mod:`.calling`: the calling harness, :func:`call` and :func:`check_call`;
* :mod:`.homework_helpers`: :func:`random_mask` and :func:`softmax_mistakes`, for building cases.

Every name the homework tests import is importable from here (``from attngrade.checks import
check_call``).
"""

from __future__ import annotations

from .calling import call, check_call
from .comparing import expect_close, expect_tensor_like
from .diagnosis import HINT_PREFIX, Mistakes
from .display import CALL_WIDTH, MAX_COLS, MAX_ENTRIES, MAX_ROWS, MAX_SLICES, describe, describe_call, format_tensor
from .failure import HIDDEN_TESTS_NOTE, CheckFailure, expect
from .homework_helpers import random_mask, softmax_mistakes
from .matching import tolerances
from .otter_reports import _quiet_otter

__all__ = [
    "CALL_WIDTH",
    "HIDDEN_TESTS_NOTE",
    "HINT_PREFIX",
    "MAX_COLS",
    "MAX_ENTRIES",
    "MAX_ROWS",
    "MAX_SLICES",
    "CheckFailure",
    "Mistakes",
    "call",
    "check_call",
    "describe",
    "describe_call",
    "expect",
    "expect_close",
    "expect_tensor_like",
    "format_tensor",
    "random_mask",
    "softmax_mistakes",
    "tolerances",
]

_quiet_otter()
