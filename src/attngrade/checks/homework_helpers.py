"""What homework tests build their cases from: random keep-masks, and the known wrong softmaxes
that tests pass to ``check_call(..., mistakes=...)``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch


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
