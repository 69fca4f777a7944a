r"""Hard attention: every query takes the value of its single best-scoring key (chapter 4).

It is the limit of soft attention as the inverse temperature beta grows: softmax_beta of the
scores tends to the one-hot vector of their argmax whenever that argmax is unique.
"""

from __future__ import annotations

import math

import torch

from .attention import attention_scores, check_attention_inputs
from .masks import apply_mask, mask_like_scores


# j*(i) = argmax_j mask(q_i . k_j)   (the first such j on ties)
# W_ij = [j == j*(i)],   output = W V
def hard_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Hard (argmax) attention, row convention (chapter 4, eq. *hard attention*).

    .. math:: W_{ij} = \bigl[\, j = \operatorname*{arg\,max}_{j'} \operatorname{mask}(q_i^\top k_{j'}) \bigr],
              \qquad \operatorname{output} = W V

    Each query copies the value of the key with the largest score; this is
    ``lim_{beta -> inf} softmax(beta * scores)`` when that key is unique. The positive scale
    1/sqrt(d_k) of scaled dot-product attention does not change the argmax and is left out.

    Ties are broken towards the **lowest key index** (``torch.argmax`` returns the first maximum);
    the softmax limit would instead split the weight equally among the tied keys. A query whose
    keys are all masked (every score ``-inf``) gets a row of zero weights and output 0, as in
    :func:`attnbook.attention`.

    Args:
        query: (..., n, d_k). key: (..., m, d_k). value: (..., m, d_v).
        mask: optional, as in :func:`attnbook.attention`: boolean (True = may attend) or a float
            tensor added to the scores, broadcastable to (..., n, m).

    Returns:
        ``(output, weights)``: output (..., n, d_v) and one-hot weights (..., n, m).
    """
    score_shape = check_attention_inputs(query, key, value, mask)
    mask = mask_like_scores(mask, query.dtype)  # a float mask in the dtype of the scores
    scores = apply_mask(attention_scores(query, key, scale=1.0), mask)  # (..., n, m)
    scores = scores.expand(score_shape)  # (..., n, m), a broadcast mask may have added batch dims
    if score_shape[-1] == 0:
        weights = scores.new_zeros(score_shape)  # (..., n, 0): no key to attend to
    else:
        best = scores.argmax(dim=-1, keepdim=True)  # (..., n, 1), first maximum on ties
        weights = torch.zeros_like(scores).scatter_(-1, best, 1.0)  # (..., n, m), one-hot rows
        blocked = scores.amax(dim=-1, keepdim=True) == -math.inf  # (..., n, 1), fully masked rows
        weights = weights.masked_fill(blocked, 0.0)
    output = weights @ value  # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)
    return output, weights
