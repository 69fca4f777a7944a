"""Assertions for the homework tests, with messages a student can act on.

The tests in the homework notebooks call the student's function through :func:`check_call`,
which compares the result with a reference answer computed by ``attnbook`` and, on a mismatch,
says what was called (argument shapes and dtypes), what was expected and what came back: the
type, the shape, the dtype, or the largest difference and where it is. The same messages appear
in the student's notebook (``grader.check("q1")``) and in the grader's feedback files.

In the class grader the function passed in is a proxy for the student's function, which runs in
a sandbox; the comparison below runs in the grader's process, on plain tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


class CheckFailure(AssertionError):
    """A test expectation that the student's answer does not meet (the message says why)."""


def tolerances(dtype: torch.dtype) -> dict[str, float]:
    """Tolerances for comparing a student's result with the reference in ``dtype``."""
    if dtype == torch.float64:
        return {"atol": 1e-9, "rtol": 1e-7}
    if dtype in (torch.float16, torch.bfloat16):
        return {"atol": 1e-2, "rtol": 1e-2}
    return {"atol": 1e-5, "rtol": 1e-4}


def describe(value: Any) -> str:
    """A short description of an argument or a result: a tensor by dtype and shape."""
    if isinstance(value, torch.Tensor):
        return f"tensor {str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}"
    if isinstance(value, (list, tuple)) and len(value) <= 8:
        inner = ", ".join(describe(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_call(name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> str:
    """``name(arg, ..., key=value)`` with tensors described by dtype and shape."""
    parts = [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in (kwargs or {}).items()]
    return f"{name}({', '.join(parts)})"


def _preview(t: torch.Tensor) -> str:
    flat = t.detach().reshape(-1)[:6].tolist()
    body = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat)
    return f"[{body}{', ...' if t.numel() > 6 else ''}]"


def expect_tensor_like(got: Any, expected: torch.Tensor, what: str, *, check_dtype: bool = True) -> torch.Tensor:
    """Fail unless ``got`` is a tensor with the shape (and dtype) of ``expected``."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailure(f"{what}: expected a torch.Tensor of shape {tuple(expected.shape)}, got {describe(got)}")
    if tuple(got.shape) != tuple(expected.shape):
        raise CheckFailure(
            f"{what}: expected shape {tuple(expected.shape)}, got shape {tuple(got.shape)}"
        )
    if check_dtype and got.dtype != expected.dtype:
        raise CheckFailure(f"{what}: expected dtype {expected.dtype}, got {got.dtype}")
    return got


def expect_close(got: Any, expected: torch.Tensor, what: str, *, atol: float | None = None,
                 rtol: float | None = None, check_dtype: bool = True) -> None:
    """Fail unless ``got`` matches ``expected`` in type, shape, dtype and values (within tolerance).

    Boolean and integer tensors must be equal; floating ones close, with ``nan`` nowhere unless
    the reference has it at the same place.
    """
    got = expect_tensor_like(got, expected, what, check_dtype=check_dtype)
    got = got.detach().to("cpu")
    expected = expected.detach().to("cpu")
    if not expected.is_floating_point():
        if got.dtype != expected.dtype:
            raise CheckFailure(f"{what}: expected dtype {expected.dtype}, got {got.dtype}")
        wrong = got != expected
        if bool(wrong.any()):
            index = tuple(int(i) for i in wrong.nonzero()[0])
            raise CheckFailure(
                f"{what}: {int(wrong.sum())} of {wrong.numel()} entries differ; first at index {index}: "
                f"expected {expected[index].item()}, got {got[index].item()}\n"
                f"  expected {_preview(expected)}\n  got      {_preview(got)}"
            )
        return
    if not got.is_floating_point():
        raise CheckFailure(f"{what}: expected a floating-point tensor ({expected.dtype}), got {got.dtype}")
    tol = tolerances(expected.dtype)
    atol = tol["atol"] if atol is None else atol
    rtol = tol["rtol"] if rtol is None else rtol
    g = got.to(torch.float64)
    e = expected.to(torch.float64)
    nan_mismatch = torch.isnan(g) != torch.isnan(e)
    if bool(nan_mismatch.any()):
        index = tuple(int(i) for i in nan_mismatch.nonzero()[0])
        raise CheckFailure(
            f"{what}: expected {e[index].item()} at index {index}, got {g[index].item()} "
            f"(nan where the answer is a number, or the other way round)"
        )
    both_inf = torch.isinf(e) & (g == e)
    diff = torch.where(torch.isnan(e) | both_inf, torch.zeros_like(e), (g - e).abs())
    diff = torch.nan_to_num(diff, nan=float("inf"))
    bad = diff > atol + rtol * e.abs().nan_to_num(posinf=0.0, neginf=0.0)
    if bool(bad.any()):
        worst = int(torch.argmax(torch.where(bad, diff, torch.zeros_like(diff))))
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), e.shape)) if e.ndim else ()
        raise CheckFailure(
            f"{what}: {int(bad.sum())} of {bad.numel()} values are wrong; the largest error is "
            f"{diff.reshape(-1)[worst].item():.3g} at index {index}: expected {e[index].item():.6g}, "
            f"got {g[index].item():.6g} (tolerance atol={atol:g}, rtol={rtol:g})\n"
            f"  expected {_preview(e)}\n  got      {_preview(g)}"
        )


def call(func: Callable[..., Any] | None, name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> Any:
    """Call the student's ``func``; turn a missing definition or an exception into a clear failure."""
    kwargs = dict(kwargs or {})
    what = describe_call(name, args, kwargs)
    if func is None or not callable(func):
        raise CheckFailure(f"`{name}` is not defined as a function; run the cell that defines it")
    # the student's function gets copies: an answer that writes into its inputs cannot spoil the
    # reference computed from them afterwards
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    kwargs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    try:
        return func(*args, **kwargs)
    except Exception as exc:  # the student's error, reported as a failed check
        if getattr(exc, "student_error", False):  # from the grader's sandbox: already worded
            raise CheckFailure(f"{what} {exc}") from None
        raise CheckFailure(f"{what} raised {type(exc).__name__}: {exc}") from None


def check_call(func: Callable[..., Any] | None, name: str, args: Sequence[Any], expected: Any,
               kwargs: dict[str, Any] | None = None, **tolerance: Any) -> Any:
    """Call ``func(*args, **kwargs)`` and compare the result with ``expected``.

    ``expected`` is a tensor, or a tuple of tensors (then the result must be a tuple or list of the
    same length, compared item by item). Returns the student's result.
    """
    what = describe_call(name, args, kwargs)
    got = call(func, name, args, kwargs)
    if isinstance(expected, tuple):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            raise CheckFailure(f"{what}: expected a tuple of {len(expected)} results, got {describe(got)}")
        for i, (g, e) in enumerate(zip(got, expected)):
            expect_close(g, e, f"{what}[{i}]", **tolerance)
    else:
        expect_close(got, expected, what, **tolerance)
    return got


def random_mask(shape: Sequence[int], generator: torch.Generator, *, p_keep: float = 0.6,
                keep_one: bool = True, device: str | torch.device = "cpu") -> torch.Tensor:
    """A random boolean keep-mask; with ``keep_one`` every row (last axis) keeps at least one key."""
    mask = torch.rand(*shape, generator=generator) < p_keep
    if keep_one and mask.shape[-1] > 0:
        first = torch.randint(0, mask.shape[-1], tuple(mask.shape[:-1]), generator=generator)
        mask = mask | torch.nn.functional.one_hot(first, mask.shape[-1]).bool()
    return mask.to(device)
