"""Input checks shared by the package: they turn bad input into errors a student can read.

Every public function validates its arguments here before any arithmetic, so a wrong shape or
dtype is reported with the names and shapes involved instead of a traceback from inside torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def check_tensor(name: str, x: object) -> torch.Tensor:
    """Raise ``TypeError`` unless ``x`` is a ``torch.Tensor``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_floating(name: str, x: object) -> torch.Tensor:
    """Raise ``TypeError`` unless ``x`` is a tensor with a floating-point dtype."""
    check_tensor(name, x)
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must have a floating-point dtype, got {x.dtype} with shape {tuple(x.shape)}"
        )
    return x


def check_ndim(name: str, x: torch.Tensor, ndim: int, layout: str, *, at_least: bool = False) -> None:
    """Raise ``ValueError`` unless ``x`` has ``ndim`` dimensions (or at least that many)."""
    ok = x.ndim >= ndim if at_least else x.ndim == ndim
    if not ok:
        need = f"at least {ndim}" if at_least else f"exactly {ndim}"
        raise ValueError(
            f"{name} must have {need} dimensions {layout}, got shape {tuple(x.shape)}"
        )


def check_same_dtype_device(**tensors: torch.Tensor) -> None:
    """Raise ``TypeError`` on mixed dtypes and ``ValueError`` on mixed devices."""
    items = [(k, v) for k, v in tensors.items() if v is not None]
    dtypes = {v.dtype for _, v in items}
    if len(dtypes) > 1:
        listing = ", ".join(f"{k}: {v.dtype}" for k, v in items)
        raise TypeError(f"all inputs must share one dtype, got {listing}")
    devices = {v.device for _, v in items}
    if len(devices) > 1:
        listing = ", ".join(f"{k}: {v.device}" for k, v in items)
        raise ValueError(f"all inputs must be on one device, got {listing}")


def broadcast_batch(**shapes: Sequence[int]) -> torch.Size:
    """Broadcast the leading (batch) dimensions of several inputs, or say which ones clash."""
    try:
        return torch.broadcast_shapes(*shapes.values())
    except RuntimeError:
        listing = ", ".join(f"{k} batch dims {tuple(v)}" for k, v in shapes.items())
        raise ValueError(f"batch dimensions do not broadcast: {listing}") from None


def check_mask(mask: object, target: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Validate an attention mask against the score shape ``target`` = (..., n, m).

    A mask is boolean (True = may attend) or floating (added to the scores). It must broadcast to
    ``target`` without enlarging it. A float mask is cast to ``dtype`` (the dtype of the scores).
    """
    check_tensor("mask", mask)
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            f"mask must be boolean (True = may attend) or floating (added to the scores), "
            f"got {mask.dtype}; convert a {{0,1}} mask with mask.bool()"
        )
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but the inputs are on {device}")
    target = tuple(target)
    try:
        ok = tuple(torch.broadcast_shapes(tuple(mask.shape), target)) == target
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the score shape {target} "
            f"(..., n queries, m keys)"
        )
    if mask.is_floating_point() and mask.dtype != dtype:
        mask = mask.to(dtype)
    return mask
