"""Scaled dot-product attention in the row convention (chapters 1 and 2)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._checks import broadcast_batch, check_floating, check_mask, check_ndim, check_same_dtype_device
from .softmax import softmax


def check_attention_inputs(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Size, torch.Tensor | None]:
    """Validate (query, key, value, mask) and return the score shape (..., n, m) and the mask."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        check_floating(name, x)
    check_same_dtype_device(query=query, key=key, value=value)
    check_ndim("query", query, 2, "(..., n, d_k)", at_least=True)
    check_ndim("key", key, 2, "(..., m, d_k)", at_least=True)
    check_ndim("value", value, 2, "(..., m, d_v)", at_least=True)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query (..., n, d_k) and key (..., m, d_k) must share d_k, got query {tuple(query.shape)} "
            f"and key {tuple(key.shape)}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key (..., m, d_k) and value (..., m, d_v) must have the same number m of rows, got "
            f"key {tuple(key.shape)} and value {tuple(value.shape)}"
        )
    batch = query.shape[:-2]
    if not batch == key.shape[:-2] == value.shape[:-2]:  # (equal batch shapes need no broadcasting)
        batch = broadcast_batch(query=query.shape[:-2], key=key.shape[:-2], value=value.shape[:-2])
    score_shape = torch.Size((*batch, query.shape[-2], key.shape[-2]))
    if mask is not None and not _mask_fits(mask, score_shape, query.dtype, query.device):
        mask = check_mask(mask, score_shape, query.dtype, query.device)  # converts, or says what is wrong
    return score_shape, mask


def _mask_fits(mask: object, score_shape: torch.Size, dtype: torch.dtype, device: torch.device) -> bool:
    """True for a mask that :func:`check_mask` would return unchanged: boolean or of the scores' dtype, on
    their device, each axis equal to the score shape's or 1. A quick test for the common case
    (``torch.broadcast_shapes`` alone costs about 10 microseconds on a CPU)."""
    return (
        isinstance(mask, torch.Tensor)
        and (mask.dtype == torch.bool or mask.dtype == dtype)
        and mask.device == device
        and _broadcasts_into(mask.shape, score_shape)
    )


def _broadcasts_into(shape: torch.Size, target: torch.Size) -> bool:
    """Whether ``shape`` broadcasts to ``target`` without enlarging it (each axis equal or 1)."""
    return len(shape) <= len(target) and all(a == b or a == 1 for a, b in zip(reversed(shape), reversed(target)))


# S = Q K^T * scale
def attention_scores(query: torch.Tensor, key: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    r"""Scaled dot-product scores :math:`S = Q K^\top / \sqrt{d_k}` (chapter 2), shape (..., n, m)."""
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    scores = query @ key.transpose(-2, -1)  # (..., n, d_k) @ (..., d_k, m) -> (..., n, m)
    # scale in place: the product is a fresh tensor, and this saves allocating (and paging in)
    # a second n x m matrix; autograd allows it, as the product's backward needs only Q and K
    return scores.mul_(scale)


# mask_M(S)_ij = S_ij if M_ij else -inf     (bool keep-mask)
# mask_M(S)_ij = S_ij + M_ij                (additive float mask)
def apply_mask(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Masked scores (chapter 2): ``-inf`` where a boolean keep-mask is False; ``+ mask`` for a float mask."""
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, -math.inf)
    return scores + mask


def _apply_mask_in_place(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """:func:`apply_mask` writing into ``scores`` (a fresh tensor of :func:`attention`) when the mask
    fits its shape, to save an n x m allocation; out of place when the mask would enlarge it."""
    if mask is None:
        return scores
    if not _broadcasts_into(mask.shape, scores.shape):
        return apply_mask(scores, mask)
    if mask.dtype == torch.bool:
        return scores.masked_fill_(~mask, -math.inf)
    return scores.add_(mask)


# Attention(Q, K, V) = softmax(mask(Q K^T / sqrt(d_k))) V
def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    need_weights: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Scaled dot-product attention, row convention (chapter 2, eq. *attention*).

    .. math:: \operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(
              \operatorname{mask}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right)\right) V

    The softmax runs over the keys (the last axis of the scores), so each row of the weights is a
    probability distribution over the m values.

    Args:
        query: (..., n, d_k).
        key: (..., m, d_k).
        value: (..., m, d_v).
        mask: optional, broadcastable to (..., n, m). Boolean: ``True`` = may attend (the meaning
            of ``scaled_dot_product_attention``, the *opposite* of ``nn.MultiheadAttention``).
            Floating: added to the scores (use ``-inf`` to block). A row with no key to attend
            to gets weights 0 and output 0.
        scale: factor on the scores; defaults to ``1 / sqrt(d_k)``.
        need_weights: if False, the output is computed by PyTorch's fused
            ``scaled_dot_product_attention`` and the weights are not formed.

    Returns:
        ``(output, weights)``: output (..., n, d_v) and weights (..., n, m), or
        ``(output, None)`` when ``need_weights`` is False.
    """
    score_shape, mask = check_attention_inputs(query, key, value, mask)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if not need_weights:
        if mask is not None and query.shape[:-2] != score_shape[:-2]:
            # SDPA cannot apply a mask with more batch entries than Q K^T has (when only the values
            # bring them); a view of the queries with the full batch shape gives it those entries
            query = query.expand(*score_shape[:-2], *query.shape[-2:])  # (..., n, d_k)
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale), None
    scores = _apply_mask_in_place(attention_scores(query, key, scale), mask)  # (..., n, m), = apply_mask(...)
    weights = softmax(scores, dim=-1)  # (..., n, m), rows sum to 1
    output = weights @ value  # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)
    return output, weights
