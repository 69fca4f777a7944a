"""Whether values match, without messages: the tolerances of a dtype, the entries of a result
out of tolerance, a result within tolerance of a value, exact sameness, and the copies of the
arguments that sameness is checked against."""

from __future__ import annotations

import math
from typing import Any

import torch


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
