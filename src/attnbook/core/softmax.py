"""The softargmax with an inverse temperature (chapter 1, chapter 4)."""

from __future__ import annotations

import math

import torch

from ..validators import check_number, check_shapes


# softmax_beta(s)_j = exp(beta s_j) / sum_u exp(beta s_u)
#                   = exp(beta s_j - c) / sum_u exp(beta s_u - c)   for any constant c, here c = max_u beta s_u
def softmax(scores: torch.Tensor, dim: int = -1, beta: float = 1.0) -> torch.Tensor:
    r"""Softargmax with inverse temperature ``beta`` along ``dim`` (chapter 1, eq. *softmax*).

    .. math:: \operatorname{softmax}_\beta(s)_j = \frac{e^{\beta s_j}}{\sum_u e^{\beta s_u}}
              = \frac{e^{\beta s_j - c}}{\sum_u e^{\beta s_u - c}}, \qquad c = \max_u \beta s_u

    Subtracting the maximum c leaves the value unchanged (it cancels) and makes every exponent
    at most 0, so large scores cannot overflow. Entries equal to ``-inf`` are masked out: they get
    weight 0 for every ``beta >= 0``. A slice that is entirely ``-inf`` (a query with no key to
    attend to) has no distribution; it gets all zeros instead of ``nan``, as
    ``torch.nn.functional.scaled_dot_product_attention`` gives a fully masked row. ``beta = 0``
    gives the uniform distribution over the unmasked entries and ``beta -> inf`` the one-hot
    vector of the argmax (chapter 4).

    Args:
        scores: floating tensor of any shape, e.g. (..., n, m) attention scores.
        dim: the axis the probabilities are taken over (the keys, ``-1``, in the row convention;
            ``0`` in the column convention of :mod:`attnbook.core.column_convention`).
        beta: inverse temperature, a finite number ``>= 0``.

    Returns:
        A tensor of the shape, dtype and device of ``scores`` whose slices along ``dim`` are
        non-negative and sum to 1 (or are all 0 where fully masked).
    """
    check_shapes(scores=(scores, "(...)"))
    check_number("beta", beta, minimum=0)
    if beta != 1:  # beta s_j, keeping masked entries at -inf (beta * -inf would be nan for beta = 0)
        scores = torch.where(scores == -math.inf, scores, beta * scores)
    c = scores.amax(dim=dim, keepdim=True)  # max_u s_u
    empty = c == -math.inf  # slices with every entry masked: no distribution, weights 0
    exps = torch.exp(scores - c.masked_fill(empty, 0.0))  # e^(s_j - c) <= 1; e^(-inf) = 0 for masked entries
    return exps / exps.sum(dim=dim, keepdim=True).masked_fill(empty, 1.0)  # an empty slice: 0 / 1 = 0
