"""Comparing a result with the expected one: :func:`expect_tensor_like` (type, shape, dtype) and
:func:`expect_close` (values), each failing with a message that prints both and the generic
guesses of :mod:`.diagnosis`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .diagnosis import (
    HINT_PREFIX,
    _dtype_hint,
    _negation_diagnosis,
    _precision_diagnosis,
    _scale_diagnosis,
    _transpose_diagnosis,
    _zero_row_diagnosis,
)
from .display import _dtype_name, _fmt, _kind, _show_pair, describe
from .failure import CheckFailure
from .matching import _float_mismatch, tolerances


def expect_tensor_like(
    got: Any, expected: torch.Tensor, what: str, *, check_dtype: bool = True, inputs: Sequence[Any] = ()
) -> torch.Tensor:
    """Fail unless ``got`` is a tensor with the shape (and dtype) of ``expected``.

    ``inputs``: the arguments of the call, to say when the expected dtype is theirs.
    """
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(f"{what}: expected a torch.Tensor of shape {tuple(expected.shape)}, got {describe(got)}")
    if tuple(got.shape) != tuple(expected.shape):
        message = f"{what}: expected shape {tuple(expected.shape)}, got shape {tuple(got.shape)}"
        if expected.ndim >= 2 and tuple(got.shape) == tuple(expected.transpose(-2, -1).shape):
            hint = _transpose_diagnosis(got, expected)
            message += (
                f"\n{HINT_PREFIX}{hint}"
                if hint
                else f"\n{HINT_PREFIX}your result has the shape of the expected one transposed: rows and columns swapped?"
            )
        raise CheckFailure(message)
    if check_dtype and got.dtype != expected.dtype:
        raise CheckFailure(
            f"{what}: expected dtype {_dtype_name(expected.dtype)}{_dtype_hint(expected, inputs)}, "
            f"got {_dtype_name(got.dtype)}"
        )
    return got


def _mismatch_message(
    got: torch.Tensor, expected: torch.Tensor, what: str, atol: float | None, rtol: float | None
) -> str | None:
    """The description of the values of ``got`` that differ from ``expected``, or None."""
    got = got.detach().to("cpu")
    expected = expected.detach().to("cpu")
    if not expected.is_floating_point():
        if not got.is_floating_point() and got.dtype != expected.dtype:
            return f"{what}: expected dtype {_dtype_name(expected.dtype)}, got {_dtype_name(got.dtype)}"
        wrong = got != expected
        if not bool(wrong.any()):
            return None
        index = tuple(int(i) for i in wrong.nonzero()[0])
        return (
            f"{what}: {int(wrong.sum())} of {wrong.numel()} entries differ; the first at index {index}: "
            f"expected {_fmt(expected[index].item(), _kind(expected))}, got {_fmt(got[index].item(), _kind(got))}\n"
            f"{_show_pair(expected, got, index, wrong)}"
            + (f"\n{HINT_PREFIX}{_negation_diagnosis(got, expected)}" if _negation_diagnosis(got, expected) else "")
        )
    if not got.is_floating_point():
        return f"{what}: expected a floating-point tensor ({_dtype_name(expected.dtype)}), got {_dtype_name(got.dtype)}"
    tol = tolerances(expected.dtype)
    atol = tol["atol"] if atol is None else atol
    rtol = tol["rtol"] if rtol is None else rtol
    wrong, diff = _float_mismatch(got, expected, atol, rtol)
    if not bool(wrong.any()):
        return None
    worst = int(torch.argmax(torch.where(wrong, diff, torch.full_like(diff, -1.0))))
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), expected.shape)) if expected.ndim else ()
    e, g = expected[index].item(), got[index].item()
    infinite = wrong & (torch.isinf(expected) != torch.isinf(got))
    if bool(infinite.any()):  # an error of "1.8e+308" would say nothing: name the infinity
        index = tuple(int(i) for i in infinite.nonzero()[0])
        e, g = expected[index].item(), got[index].item()
        head = (
            f"{what}: {int(wrong.sum())} of {wrong.numel()} values are wrong, e.g. at index {index}: "
            f"{_fmt(e, 'float')} expected, got {_fmt(g, 'float')}"
        )
    elif math.isnan(g) != math.isnan(e):
        detail = (
            f"nan at index {index}, where the answer is {_fmt(e, 'float')}"
            if math.isnan(g)
            else f"{_fmt(g, 'float')} at index {index}, where the answer is nan"
        )
        head = f"{what}: {int(wrong.sum())} of {wrong.numel()} values are wrong, e.g. {detail}"
    else:
        head = (
            f"{what}: {int(wrong.sum())} of {wrong.numel()} values are wrong; the largest error is "
            f"{diff.reshape(-1)[worst].item():.3g} at index {index}: expected {e:.6g}, got {g:.6g} "
            f"(tolerance atol={atol:g}, rtol={rtol:g})"
        )
    return f"{head}\n{_show_pair(expected, got, index, wrong)}"


def expect_close(
    got: Any,
    expected: torch.Tensor,
    what: str,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    check_dtype: bool = True,
    inputs: Sequence[Any] = (),
) -> None:
    """Fail unless ``got`` matches ``expected`` in type, shape, dtype and values (within tolerance).

    Boolean and integer tensors must be equal; floating ones close (default tolerances:
    :func:`tolerances` of the expected dtype), with ``nan`` nowhere unless the reference has it at
    the same place. On a mismatch the message prints both (small ones as matrices) and, where it
    sees one, a likely cause: a row that should be all zeros, a transposed or rescaled result.
    ``inputs``: the arguments of the call, to say when the expected dtype is theirs.
    """
    got = expect_tensor_like(got, expected, what, check_dtype=check_dtype, inputs=inputs)
    message = _mismatch_message(got, expected, what, atol, rtol)
    if message is None:
        return
    tolerance = {"atol": atol, "rtol": rtol}
    # a fact about the result (a row that should be zeros), then guesses at its cause, which a
    # known mistake that explains the result replaces (check_call drops the guesses then)
    zero_row = _zero_row_diagnosis(got, expected) if got.is_floating_point() else None
    # values right to a lower precision explain any apparent factor (a difference of rounding
    # errors, as 1e-7 against 1e-16): then the factor is no guess
    precision = _precision_diagnosis(got, expected)
    guesses = [
        h
        for h in (
            _transpose_diagnosis(got, expected, **tolerance),
            None if precision else _scale_diagnosis(got, expected, **tolerance),
            precision,
        )
        if h
    ]
    if zero_row:
        message += f"\n  Note: {zero_row}"
    if guesses:
        message += "\n" + "\n".join(f"{HINT_PREFIX}{h}" for h in guesses)
    raise CheckFailure(message)
