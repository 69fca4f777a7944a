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
a sandbox; the comparison below runs in the grader's process, on plain tensors. This module needs
nothing but ``torch``: it is imported inside student notebooks.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

#: the last line of every failure message (once)
HIDDEN_TESTS_NOTE = "Hidden tests with other shapes and dtypes run when your notebook is graded."

#: tensors up to this many rows and columns (in their last two axes) print whole
MAX_ROWS = 8
MAX_COLS = 8
#: at most this many matrices of a batch print whole
MAX_SLICES = 4
#: a 1-D tensor (or one row) prints at most this many entries
MAX_ENTRIES = 12


class CheckFailure(AssertionError):
    """A test expectation that the student's answer does not meet (the message says why).

    ``str()`` of it ends with :data:`HIDDEN_TESTS_NOTE`; :attr:`message` is the message without it.
    """

    def __init__(self, message: str):
        message = str(message)
        if message.endswith(HIDDEN_TESTS_NOTE):
            message = message[: -len(HIDDEN_TESTS_NOTE)].rstrip()
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        return f"{self.message}\n{HIDDEN_TESTS_NOTE}"


def expect(condition: Any, message: str) -> None:
    """Fail with ``message`` (a :class:`CheckFailure`) unless ``condition`` is true."""
    if not condition:
        raise CheckFailure(message)


def tolerances(dtype: torch.dtype) -> dict[str, float]:
    """Tolerances for comparing a student's result with the reference in ``dtype``.

    Tight enough in ``float64`` that an answer computed in ``float32`` (and cast back) fails, and
    in ``float32`` that one computed in ``bfloat16`` or ``float16`` fails.
    """
    if dtype == torch.float64:
        return {"atol": 1e-10, "rtol": 1e-9}
    if dtype in (torch.float16, torch.bfloat16):
        return {"atol": 1e-2, "rtol": 1e-2}
    return {"atol": 1e-5, "rtol": 1e-4}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


#: how a generic guess at a failure's cause starts its line (dropped when a known mistake explains it)
GUESS = "  Hint: "
#: a call whose one-line description is longer than this is written one argument per line
CALL_WIDTH = 100


def describe(value: Any, *, depth: int = 0) -> str:
    """A short description of an argument or a result: a tensor by dtype and shape; a dict or a
    module's parameters by their names with shapes, nested at most two levels."""
    if isinstance(value, torch.Tensor):
        return f"tensor {_dtype_name(value.dtype)} {tuple(value.shape)}"
    if depth >= 2 and isinstance(value, (list, tuple, dict)):
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, (list, tuple)) and len(value) <= 8:
        inner = ", ".join(describe(v, depth=depth + 1) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        shown = [f"{k}: {describe(v, depth=depth + 1)}" for k, v in list(value.items())[:12]]
        more = f", ... {len(value) - 12} more" if len(value) > 12 else ""
        return "{" + ", ".join(shown) + more + "}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_call(name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> str:
    """``name(arg, ..., key=value)`` with tensors described by dtype and shape; one argument per
    line when that is long."""
    parts = [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in (kwargs or {}).items()]
    line = f"{name}({', '.join(parts)})"
    if len(line) <= CALL_WIDTH:
        return line
    return f"{name}(\n" + "".join(f"      {part},\n" for part in parts) + "  )"


# ---------------------------------------------------------------------------------------------
# printing tensors


def _fmt(value: Any, kind: str) -> str:
    if kind == "bool":
        return "1" if value else "0"
    if kind == "int":
        return str(int(value))
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = f"{value:.4g}"
    return "0" if text == "-0" else text


def _kind(t: torch.Tensor) -> str:
    if t.dtype == torch.bool:
        return "bool"
    if t.is_floating_point() or t.is_complex():
        return "float"
    return "int"


def _window(length: int, center: int, size: int) -> range:
    if length <= size:
        return range(length)
    start = min(max(center - size // 2, 0), length - size)
    return range(start, start + size)


def _layout(shape: tuple[int, ...], focus: tuple[int, ...] | None) -> list[tuple[str, tuple[int, ...], range, range]]:
    """Which part of a tensor of ``shape`` to print: blocks of (label, leading index, rows, cols).

    Small tensors print whole; larger ones by the slice, row or window around ``focus`` (the index
    of the worst entry), each labelled with where it is.
    """
    ndim = len(shape)
    focus = tuple(focus) if focus is not None and len(focus) == ndim else (0,) * ndim
    if ndim == 1:
        cols = _window(shape[0], focus[0], MAX_ENTRIES)
        label = "" if len(cols) == shape[0] else f"entries {cols.start}..{cols.stop - 1} of {shape[0]}"
        return [(label, (), range(1), cols)]
    lead, (n_rows, n_cols) = shape[:-2], shape[-2:]
    n_slices = math.prod(lead)
    if n_rows <= MAX_ROWS and n_cols <= MAX_COLS:
        if n_slices <= MAX_SLICES:
            blocks = []
            for flat in range(n_slices):
                index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), lead)) if lead else ()
                label = f"[{', '.join(map(str, index))}, :, :]" if lead else ""
                blocks.append((label, index, range(n_rows), range(n_cols)))
            return blocks
        index = focus[:-2]
        return [
            (
                f"the matrix [{', '.join(map(str, index))}, :, :] (of {n_slices} in the batch)",
                index,
                range(n_rows),
                range(n_cols),
            )
        ]
    # a large matrix: the row of the focus (a window of its columns)
    index, row = focus[:-2], focus[-2]
    cols = _window(n_cols, focus[-1], MAX_ENTRIES)
    where = ", ".join(map(str, (*index, row)))
    part = ":" if len(cols) == n_cols else f"{cols.start}:{cols.stop}"
    return [
        (f"row [{where}, {part}] (of {n_rows} rows{' per matrix' if lead else ''})", index, range(row, row + 1), cols)
    ]


def _cells(t: torch.Tensor, block: tuple[str, tuple[int, ...], range, range]) -> list[list[str]]:
    _, index, rows, cols = block
    kind = _kind(t)
    if t.ndim == 1:
        return [[_fmt(t[c].item(), kind) for c in cols]]
    m = t[index] if index else t
    return [[_fmt(m[r, c].item(), kind) for c in cols] for r in rows]


def format_tensor(
    t: torch.Tensor,
    *,
    focus: tuple[int, ...] | None = None,
    marks: torch.Tensor | None = None,
    width: int | None = None,
    indent: str = "    ",
) -> str:
    """``t`` as aligned rows: masks as 1/0, floats with 4 significant digits.

    A tensor up to :data:`MAX_ROWS` x :data:`MAX_COLS` (and a batch of up to :data:`MAX_SLICES`
    such matrices) prints whole; a larger one by the matrix, row or window around ``focus``, with
    its index. Entries where ``marks`` (a boolean tensor of the same shape) is True get a ``*``.
    ``width``: the width of a column (default: the widest entry shown).
    """
    t = t.detach().to("cpu")
    if t.ndim == 0:
        return indent + _fmt(t.item(), _kind(t))
    if t.numel() == 0:
        return indent + f"(empty, shape {tuple(t.shape)})"
    blocks = _layout(tuple(t.shape), focus)
    cells = [_cells(t, b) for b in blocks]
    flags = [_cells(marks.to(torch.bool), b) if marks is not None and marks.shape == t.shape else None for b in blocks]
    if width is None:
        width = max(len(c) for block in cells for row in block for c in row)
    lines = []
    for block, rows, marked in zip(blocks, cells, flags):
        if block[0]:
            lines.append(f"{indent}{block[0]}:")
        for r, row in enumerate(rows):
            parts = [
                c.rjust(width) + ("*" if marked is not None and marked[r][i] == "1" else " ") for i, c in enumerate(row)
            ]
            lines.append(f"{indent}[{' '.join(parts).rstrip()}]")
    return "\n".join(lines)


def _show_pair(
    expected: torch.Tensor, got: torch.Tensor, focus: tuple[int, ...] | None, wrong: torch.Tensor | None = None
) -> str:
    """``expected`` and ``got`` printed the same way (same part, same column width)."""
    width = 0
    for t in (expected, got):
        if t.ndim and t.numel():
            blocks = _layout(tuple(t.shape), focus)
            width = max([width] + [len(c) for b in blocks for row in _cells(t.detach().cpu(), b) for c in row])
    return (
        f"  expected:\n{format_tensor(expected, focus=focus, width=width or None)}\n"
        f"  got{' (* = wrong)' if wrong is not None and bool(wrong.any()) else ''}:\n"
        f"{format_tensor(got, focus=focus, marks=wrong, width=width or None)}"
    )


# ---------------------------------------------------------------------------------------------
# comparing


def _float_mismatch(
    got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(wrong, error): a boolean tensor of the entries out of tolerance and the error at each."""
    g = got.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    nan_mismatch = torch.isnan(g) != torch.isnan(e)
    both_inf = torch.isinf(e) & (g == e)
    diff = torch.where(torch.isnan(e) | both_inf, torch.zeros_like(e), (g - e).abs())
    diff = torch.nan_to_num(diff, nan=math.inf)
    wrong = (diff > atol + rtol * e.abs().nan_to_num(posinf=0.0, neginf=0.0)) | nan_mismatch
    return wrong, torch.where(nan_mismatch, torch.full_like(diff, math.inf), diff)


def _matches(got: Any, value: Any, **tolerance: Any) -> bool:
    """Whether ``got`` equals ``value`` (tensors, or tuples of them) within tolerance."""
    if isinstance(value, (tuple, list)):
        return (
            isinstance(got, (tuple, list))
            and len(got) == len(value)
            and all(_matches(g, v, **tolerance) for g, v in zip(got, value))
        )
    if not isinstance(value, torch.Tensor) or not isinstance(got, torch.Tensor):
        return False
    if tuple(got.shape) != tuple(value.shape):
        return False
    if not value.is_floating_point() or not got.is_floating_point():
        return got.dtype == value.dtype and bool((got.detach().cpu() == value.detach().cpu()).all())
    tol = tolerances(value.dtype)
    atol = tolerance.get("atol") if tolerance.get("atol") is not None else tol["atol"]
    rtol = tolerance.get("rtol") if tolerance.get("rtol") is not None else tol["rtol"]
    wrong, _ = _float_mismatch(got, value, atol, rtol)
    return not bool(wrong.any())


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
                f"\n{GUESS}{hint}"
                if hint
                else f"\n{GUESS}your result has the shape of the expected one transposed: rows and columns swapped?"
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
            + (f"\n{GUESS}{_negation_diagnosis(got, expected)}" if _negation_diagnosis(got, expected) else "")
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
        message += "\n" + "\n".join(f"{GUESS}{h}" for h in guesses)
    raise CheckFailure(message)


# ---------------------------------------------------------------------------------------------
# calling the student's function


def _copy(value: Any) -> Any:
    """A deep copy of the tensors in ``value`` (tuples, lists and dicts of them followed)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def _same(a: Any, b: Any) -> bool:
    """Whether the tensors in ``a`` are exactly those in ``b`` (shape, dtype, values, nan at nan)."""
    if isinstance(b, torch.Tensor):
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        a, b = a.detach().cpu(), b.detach().cpu()
        if b.is_floating_point() or b.is_complex():
            return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
        return bool((a == b).all())
    if isinstance(b, (tuple, list)):
        return isinstance(a, (tuple, list)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(b, dict):
        return isinstance(a, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in b)
    return True


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
    from .sandboxed.integrity import (
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
            kept = [line for line in message.splitlines() if not line.startswith(GUESS)]
            message = f"Likely mistake: {hint}\n" + "\n".join(kept)
        if check_inputs and changed:
            message += f"\n  Also: {_in_place_message('the call', changed)}"
        raise CheckFailure(message) from None
    if check_inputs and changed:
        raise CheckFailure(_in_place_message(what, changed))
    return got


def random_mask(
    shape: Sequence[int],
    generator: torch.Generator,
    *,
    p_keep: float = 0.6,
    keep_one: bool = True,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """A random boolean keep-mask; with ``keep_one`` every row (last axis) keeps at least one key."""
    mask = torch.rand(*shape, generator=generator) < p_keep
    if keep_one and mask.shape[-1] > 0:
        first = torch.randint(0, mask.shape[-1], tuple(mask.shape[:-1]), generator=generator)
        mask = mask | torch.nn.functional.one_hot(first, mask.shape[-1]).bool()
    return mask.to(device)


def _softmax_guarded(S: torch.Tensor, dim: int, shift: torch.Tensor) -> torch.Tensor:
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(S - shift)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


def softmax_mistakes(dim: int = -1) -> dict[str, Callable[..., torch.Tensor]]:
    """Known wrong softmaxes over ``dim``, for ``check_call(..., mistakes=...)``.

    Each takes the scores as its first argument (and an optional ``beta``, the inverse
    temperature, which multiplies the entries that are not ``-inf``) and ignores the rest.
    """

    def scaled(S: torch.Tensor, beta: float) -> torch.Tensor:
        return S if beta == 1 else torch.where(S == -math.inf, S, S * beta)

    def no_guard(S, *_, beta=1.0, **__):
        return torch.softmax(scaled(S, beta), dim=dim)

    def no_shift(S, *_, beta=1.0, **__):
        e = torch.exp(scaled(S, beta))
        return e / e.sum(dim=dim, keepdim=True)

    def no_shift_guarded(S, *_, beta=1.0, **__):  # rows of -inf give 0, yet exp overflows elsewhere
        return _softmax_guarded(scaled(S, beta), dim, torch.zeros_like(S.amax(dim=dim, keepdim=True)))

    def min_shift(S, *_, beta=1.0, **__):
        S = scaled(S, beta)
        return _softmax_guarded(S, dim, S.amin(dim=dim, keepdim=True))

    def other_axis(S, *_, beta=1.0, **__):
        S = scaled(S, beta)
        other = -2 if dim in (-1, S.ndim - 1) else -1
        return _softmax_guarded(S, other, S.amax(dim=other, keepdim=True))

    return {
        "a slice that is entirely -inf must give weights 0, not nan (torch.softmax and exp/sum give nan there)": no_guard,
        "subtract the maximum before exp: exp of a large score overflows to inf, and inf / inf is nan": no_shift,
        "subtract the row's maximum before exp (not nothing, not the minimum): exp of a large score overflows to inf, and inf / inf is nan": no_shift_guarded,
        "did you subtract the minimum instead of the maximum? Only subtracting the maximum keeps exp from overflowing": min_shift,
        "is the softmax over the wrong axis? Each query's weights (over the keys) must sum to 1": other_axis,
    }


# ---------------------------------------------------------------------------------------------
# otter's report of a failed check


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


_quiet_otter()
