"""Naming the likely mistake behind a wrong result: one of the test's known wrong solutions
(:func:`_likely_mistake`), else a few generic guesses found cheaply (a row that should be all
zeros, a transposed, negated or rescaled result, values right only to a lower precision, the
dtype of the inputs)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .display import MAX_ENTRIES, _dtype_name, _fmt
from .matching import _copy, _matches

#: how a generic guess at a failure's cause starts its line (dropped when a known mistake explains it)
HINT_PREFIX = "  Hint: "


def _zero_row_diagnosis(got: torch.Tensor, expected: torch.Tensor) -> str | None:
    """A row (last axis) that should be all zeros but is not: uniform, non-zero or nan."""
    if expected.ndim == 0 or expected.shape[-1] < 2:
        return None
    e = expected.detach().cpu().to(torch.float64)
    g = got.detach().cpu().to(torch.float64)
    zero_rows = (e == 0).all(dim=-1)
    if not bool(zero_rows.any()) or bool(zero_rows.all()):  # only some rows zero, as fully masked ones
        return None
    bad_rows = zero_rows & ~(g == 0).all(dim=-1)
    if not bool(bad_rows.any()):
        return None
    index = tuple(int(i) for i in bad_rows.nonzero()[0])
    row = g[index]
    where = f"row {list(index)}" if len(index) > 1 else f"row {index[0]}"
    shown = " ".join(_fmt(v, "float") for v in row[:MAX_ENTRIES].tolist()) + (
        " ..." if row.numel() > MAX_ENTRIES else ""
    )
    # a uniform row of finite weights-like values (an infinite one is no softmax's output)
    uniform = bool((row == row[0]).all()) and bool(torch.isfinite(row).all())
    start = (
        f"{where} should be all zeros (in attention: a query that may see no key), "
        f"got {'a uniform row' if uniform else 'a row with nan' if bool(torch.isnan(row).any()) else 'a non-zero row'} [{shown}]"
    )
    if bool(torch.isinf(row).any()):  # no weights nor outputs of attention: the fact alone
        return start
    if bool(torch.isnan(row).any()):
        return start + ": a softmax over a row that is entirely -inf gives nan; return zeros for such a row"
    if uniform:
        return (
            start + ": masked scores filled with a large negative number (such as -1e9) instead of -inf "
            "leave a fully masked row uniform after the softmax"
        )
    return start + ": a query that may see no key gets weights 0, hence output 0"


def _transpose_diagnosis(got: torch.Tensor, expected: torch.Tensor, **tolerance: Any) -> str | None:
    if expected.ndim < 2 or got.ndim != expected.ndim:
        return None
    if tuple(got.shape) == tuple(expected.shape) and expected.shape[-1] != expected.shape[-2]:
        return None
    swapped = expected.transpose(-2, -1)
    if tuple(got.shape) != tuple(swapped.shape):
        return None
    if _matches(got, swapped, **tolerance) and not _matches(swapped, expected, **tolerance):
        return "your result is the transpose of the expected one (its last two axes are swapped)"
    return None


def _negation_diagnosis(got: torch.Tensor, expected: torch.Tensor) -> str | None:
    """A boolean result that is the negation of the expected one: a mask of the other polarity."""
    if got.dtype != torch.bool or expected.dtype != torch.bool or got.shape != expected.shape or not got.numel():
        return None
    if not bool((got.detach().cpu() == ~expected.detach().cpu()).all()):
        return None
    return (
        "your mask is the negation of the expected one (True and False swapped): "
        "the wrong polarity? A keep-mask is True where a query may attend"
    )


def _scale_diagnosis(got: torch.Tensor, expected: torch.Tensor, **tolerance: Any) -> str | None:
    if not (got.is_floating_point() and expected.is_floating_point()) or got.shape != expected.shape:
        return None
    if expected.numel() < 2:  # any two numbers are multiples of each other
        return None
    g = got.detach().cpu().to(torch.float64)
    e = expected.detach().cpu().to(torch.float64)
    finite = torch.isfinite(e) & torch.isfinite(g)
    if not bool(finite.all()) or float((e * e).sum()) == 0.0:
        return None
    c = float((g * e).sum() / (e * e).sum())
    if abs(c - 1) < 1e-3 or abs(c) < 1e-12 or not _matches(got, expected * c, **tolerance):
        return None
    hint = f"your result is {c:.4g} times the expected one"
    for k in range(2, 65):
        if abs(abs(c) - math.sqrt(k)) < 1e-6 * math.sqrt(k) or abs(abs(c) - 1 / math.sqrt(k)) < 1e-6 / math.sqrt(k):
            root = f"sqrt({k})" if abs(abs(c) - math.sqrt(k)) < 1e-6 * math.sqrt(k) else f"1/sqrt({k})"
            hint += f" ({'-' if c < 0 else ''}{root}): a scale factor missing or applied twice?"
            break
    else:
        if c < 0 and abs(c + 1) < 1e-9:
            hint += ": a sign flipped?"
    return hint


def _precision_diagnosis(got: torch.Tensor, expected: torch.Tensor) -> str | None:
    """Values right only to the precision of a smaller dtype: computed in it somewhere."""
    if not got.is_floating_point() or got.shape != expected.shape:
        return None
    half = ({"atol": 1e-2, "rtol": 2e-2}, "bfloat16 or float16")
    if expected.dtype == torch.float64:
        candidates = [({"atol": 1e-5, "rtol": 1e-5}, "float32"), half]
    elif expected.dtype == torch.float32:
        candidates = [half]
    else:
        return None
    found = [(lower, names) for lower, names in candidates if _matches(got.to(expected.dtype), expected, **lower)]
    if not found:
        return None
    names = found[0][1]
    return (
        f"the values are right only to about {names} precision: is part of the computation done in "
        f"{names} (a tensor made without dtype=, or a conversion such as .float())? Compute in the "
        f"dtype of the inputs, {_dtype_name(expected.dtype)}"
    )


def _dtype_hint(expected: torch.Tensor, inputs: Sequence[Any]) -> str:
    floats = {a.dtype for a in inputs if isinstance(a, torch.Tensor) and a.is_floating_point()}
    if floats == {expected.dtype}:
        return " (the dtype of the inputs: compute in it, without converting to another dtype)"
    return ""


Mistakes = Mapping[str, Any]


def _likely_mistake(
    got: Any,
    expected: Any,
    mistakes: Mistakes | None,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    tolerance: dict[str, Any],
) -> str | None:
    """The first known mistake whose result ``got`` matches (and the reference does not)."""
    for hint, wrong in (mistakes or {}).items():
        try:
            value = wrong(*_copy(list(args)), **_copy(kwargs)) if callable(wrong) else wrong
        except Exception:  # a known mistake that does not apply to these inputs
            continue
        try:
            if _matches(got, value, **tolerance) and not _matches(expected, value, **tolerance):
                return hint
        except Exception:
            continue
    return None
