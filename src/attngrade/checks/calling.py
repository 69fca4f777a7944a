"""The calling harness: the student's function called on copies of its arguments, under the
integrity guard, its error turned into a failure, an input modified in place found; and
:func:`check_call`, which calls, compares and names the likely mistake."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .comparing import expect_close
from .diagnosis import HINT_PREFIX, Mistakes, _likely_mistake
from .display import describe, describe_call
from .failure import CheckFailure
from .matching import _copy, _same
from .otter_reports import _quiet_otter


def _invoke(func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, list[Any], dict[str, Any]]:
    """``func(*args, **kwargs)``, and the arguments as they are after the call.

    A grader proxy (a class of this package) that runs the function elsewhere may define
    ``call_returning_inputs(args, kwargs) -> (value, args_after, kwargs_after)``, so that an input
    modified in place there is seen here too; for any other callable the arguments are the very
    objects passed in.
    """
    hook = getattr(type(func), "call_returning_inputs", None)
    if hook is not None and str(getattr(type(func), "__module__", "")).startswith("attngrade."):
        value, args_after, kwargs_after = hook(func, args, kwargs)
        return value, list(args_after), dict(kwargs_after)
    return func(*args, **kwargs), args, kwargs


def _modified_inputs(
    before: Sequence[Any], after: Sequence[Any], before_kw: dict[str, Any], after_kw: dict[str, Any], func: Any
) -> list[str]:
    """The names of the arguments that differ after the call from copies taken before it."""
    try:
        import inspect

        names = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        names = []
    changed = []
    for i, (b, a) in enumerate(zip(before, after)):
        if not _same(a, b):
            changed.append(f"`{names[i]}` (argument {i + 1})" if i < len(names) else f"argument {i + 1}")
    for key, b in before_kw.items():
        if not _same(after_kw.get(key), b):
            changed.append(f"`{key}`")
    return changed


def _in_place_message(what: str, changed: list[str]) -> str:
    return (
        f"{what} modified its input {', '.join(changed)} in place; leave the inputs unchanged "
        "(e.g. `S = S - m` or `S.masked_fill(...)`, not `S -= m`, `S.masked_fill_(...)` or `S[...] = ...`)"
    )


def _call(
    func: Callable[..., Any] | None, name: str, args: Sequence[Any], kwargs: dict[str, Any] | None
) -> tuple[Any, list[str]]:
    """The student's result, and the names of the inputs it modified in place."""
    kwargs = dict(kwargs or {})
    what = describe_call(name, args, kwargs)
    if func is None or not callable(func):
        raise CheckFailure(f"`{name}` is not defined as a function; run the cell that defines it")
    # the student's function gets copies: an answer that writes into its inputs cannot spoil the
    # reference computed from them afterwards; comparing the copies with the originals after the
    # call shows such an answer
    before, before_kw = list(args), kwargs
    args = [_copy(a) for a in args]
    kwargs = {k: _copy(v) for k, v in kwargs.items()}
    from ..sandboxed.integrity import (
        ForbiddenReference,
        watch_call,
    )  # decided by what runs (attngrade.sandboxed.integrity)

    try:
        with watch_call(name):
            value, args_after, kwargs_after = _invoke(func, args, kwargs)
    except ForbiddenReference as exc:  # same rule in grader.check and in otter's autograder
        raise CheckFailure(str(exc)) from None
    except Exception as exc:  # the student's error, reported as a failed check
        if getattr(exc, "student_error", False):  # from the grader's sandbox: already worded
            raise CheckFailure(f"{what} {exc}") from None
        raise CheckFailure(f"{what} raised {type(exc).__name__}: {exc}") from None
    return value, _modified_inputs(before, args_after, before_kw, kwargs_after, func)


def call(
    func: Callable[..., Any] | None,
    name: str,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    check_inputs: bool = True,
) -> Any:
    """Call the student's ``func`` on copies of the arguments and return its result.

    A missing definition or an exception becomes a clear failure. ``check_inputs`` (default
    True): fail if the function modified an input in place (the homework asks that inputs stay
    unchanged).
    """
    value, changed = _call(func, name, args, kwargs)
    if check_inputs and changed:
        raise CheckFailure(_in_place_message(describe_call(name, args, kwargs), changed))
    return value


def check_call(
    func: Callable[..., Any] | None,
    name: str,
    args: Sequence[Any],
    expected: Any,
    kwargs: dict[str, Any] | None = None,
    *,
    mistakes: Mistakes | None = None,
    check_inputs: bool = True,
    **tolerance: Any,
) -> Any:
    """Call ``func(*args, **kwargs)`` and compare the result with ``expected``; return the result.

    ``expected`` is a tensor, or a tuple of tensors (then the result must be a tuple or list of the
    same length, compared item by item).

    ``mistakes``: known wrong solutions, ``{hint: wrong}``. Each ``wrong`` is test code (trusted)
    that computes what a known wrong solution returns on the same inputs, called as
    ``wrong(*args, **kwargs)`` on copies of them (or a precomputed value: a tensor or tuple). When
    the student's result is wrong and matches one of them (within the same tolerance), the
    failure message starts with that ``hint``, e.g. ``{"did you fill masked scores with -1e9
    instead of -inf?": lambda Q, K, V, mask=None: ...}``. A ``wrong`` that raises is skipped.

    ``check_inputs`` (default True): a function that modifies one of its inputs in place fails,
    even when its result is right.

    ``atol``/``rtol``: tolerances other than :func:`tolerances` of the expected dtype.
    Every failure message ends with :data:`HIDDEN_TESTS_NOTE`.
    """
    _quiet_otter()  # otter may have been imported after this module
    kwargs = dict(kwargs or {})
    what = describe_call(name, args, kwargs)
    got, changed = _call(func, name, args, kwargs)
    inputs = list(args) + list(kwargs.values())
    try:
        if isinstance(expected, tuple):
            if not isinstance(got, (tuple, list)) or len(got) != len(expected):
                raise CheckFailure(f"{what}: expected a tuple of {len(expected)} results, got {describe(got)}")
            for i, (g, e) in enumerate(zip(got, expected)):
                expect_close(g, e, f"{what}[{i}]", inputs=inputs, **tolerance)
        else:
            expect_close(got, expected, what, inputs=inputs, **tolerance)
    except CheckFailure as failure:
        message = failure.message
        hint = _likely_mistake(got, expected, mistakes, args, kwargs, tolerance)
        if hint:  # a known mistake explains the result: the generic guesses would only contradict it
            kept = [line for line in message.splitlines() if not line.startswith(HINT_PREFIX)]
            message = f"Likely mistake: {hint}\n" + "\n".join(kept)
        if check_inputs and changed:
            message += f"\n  Also: {_in_place_message('the call', changed)}"
        raise CheckFailure(message) from None
    if check_inputs and changed:
        raise CheckFailure(_in_place_message(what, changed))
    return got
