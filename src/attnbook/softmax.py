"""The softargmax with an inverse temperature (chapter 1, chapter 4)."""

from __future__ import annotations

import math

import torch

from ._checks import check_floating


# softmax_beta(s)_j = exp(beta * s_j) / sum_u exp(beta * s_u)
#                   = exp(beta * s_j - c) / sum_u exp(beta * s_u - c)   for any constant c
def softmax(scores: torch.Tensor, dim: int = -1, beta: float = 1.0) -> torch.Tensor:
    r"""Softargmax with inverse temperature ``beta`` along ``dim`` (chapter 1, eq. *softmax*).

    .. math:: \operatorname{softmax}_\beta(s)_j = \frac{e^{\beta s_j}}{\sum_u e^{\beta s_u}}

    The maximum of each slice is subtracted before exponentiating (the value is unchanged because
    the constant cancels), so large scores cannot overflow. Entries equal to ``-inf`` are masked
    out: they get weight 0 for every ``beta >= 0``, and a slice that is entirely ``-inf`` gives all
    zeros instead of ``nan``, as ``torch.nn.functional.scaled_dot_product_attention`` does for a
    fully masked row. ``beta = 0`` gives the uniform distribution over the unmasked entries and
    ``beta -> inf`` the one-hot vector of the argmax (chapter 4).

    Args:
        scores: floating tensor of any shape, e.g. (..., n, m) attention scores.
        dim: the axis the probabilities are taken over (the keys, ``-1``, in the row convention;
            ``0`` in the column convention of :mod:`attnbook.formal`).
        beta: inverse temperature, a finite number ``>= 0``.

    Returns:
        A tensor of the shape, dtype and device of ``scores`` whose slices along ``dim`` are
        non-negative and sum to 1 (or are all 0 where fully masked).
    """
    check_floating("scores", scores)
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta < 0:
        raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
    if beta != 1:
        # beta * (-inf) is -inf for beta > 0 but nan for beta == 0: keep masked entries at -inf.
        scores = torch.where(scores == -math.inf, scores, scores * beta)
    # torch.softmax computes exp(s_j - max_u s_u) / sum_u exp(s_u - max_u s_u) in one fused
    # kernel: the shift by the maximum above, without the temporaries of writing it out. It only
    # gets one case wrong for us: a fully masked slice has max -inf, the shift gives
    # (-inf) - (-inf) = nan, and the slice must be 0 instead.
    empty = scores.amax(dim=dim, keepdim=True) == -math.inf  # slices with no unmasked entry
    if bool(empty.any()):
        # Give those slices a finite score (any value would do), then zero their weights. Unlike
        # replacing the nan afterwards, this keeps the gradient finite as well.
        return torch.softmax(scores.masked_fill(empty, 0.0), dim=dim).masked_fill(empty, 0.0)
    return torch.softmax(scores, dim=dim)
