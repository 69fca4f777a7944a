"""Scaled dot-product attention in the row convention (chapters 1 and 2).

:func:`attention` has two paths with the same output. With ``need_weights=True`` (the default) it
is the formula, written out: scores, mask, softmax, weighted sum. With ``need_weights=False`` it
calls PyTorch's fused kernel (:func:`_fused_attention`), which never forms the (n, m) weights;
speed comes from that path only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..validators import broadcast_batch, check_shapes
from .masks import apply_mask, check_mask, mask_like_scores
from .softmax import softmax


def _attention_inputs_agree(query: object, key: object, value: object) -> bool:
    """The usual case of :func:`check_attention_inputs`, decided in a few attribute reads (attention
    is called in loops, where a full :func:`check_shapes` costs as much as a small kernel's
    launch): three floating tensors of one dtype on one device, each at least 2-D, with query and
    key sharing d_k and key and value sharing m. Batch broadcasting is checked by the caller."""
    return (
        isinstance(query, torch.Tensor)
        and isinstance(key, torch.Tensor)
        and isinstance(value, torch.Tensor)
        and query.dtype == key.dtype == value.dtype
        and query.is_floating_point()
        and query.device == key.device == value.device
        and min(query.ndim, key.ndim, value.ndim) >= 2
        and query.shape[-1] == key.shape[-1]
        and key.shape[-2] == value.shape[-2]
    )


def check_attention_inputs(query: object, key: object, value: object, mask: object = None) -> torch.Size:
    """Check the inputs of attention (query (..., n, d_k), key (..., m, d_k), value (..., m, d_v),
    mask broadcastable to (..., n, m), see :func:`check_mask`); return the score shape (..., n, m)."""
    if not _attention_inputs_agree(query, key, value):
        # something is wrong: check_shapes finds what, and says it
        check_shapes(query=(query, "(..., n, d_k)"), key=(key, "(..., m, d_k)"), value=(value, "(..., m, d_v)"))
    batch = query.shape[:-2]
    if not batch == key.shape[:-2] == value.shape[:-2]:
        batch = broadcast_batch(query=batch, key=key.shape[:-2], value=value.shape[:-2])
    score_shape = torch.Size((*batch, query.shape[-2], key.shape[-2]))
    if mask is not None:
        check_mask(mask, score_shape, query.device)
    return score_shape


# S = Q K^T * scale,   scale = 1 / sqrt(d_k) by default
def attention_scores(query: torch.Tensor, key: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    r"""Scaled dot-product scores :math:`S = Q K^\top / \sqrt{d_k}` (chapter 2), shape (..., n, m)."""
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    return query @ key.transpose(-2, -1) * scale  # (..., n, d_k) @ (..., d_k, m) -> (..., n, m)


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
    check_attention_inputs(query, key, value, mask)
    mask = mask_like_scores(mask, query.dtype)  # a float mask in the dtype of the scores
    if not need_weights:
        return _fused_attention(query, key, value, mask, scale), None
    scores = apply_mask(attention_scores(query, key, scale), mask)  # (..., n, m)
    weights = softmax(scores, dim=-1)  # (..., n, m): each row sums to 1, or is 0 if fully masked
    output = weights @ value  # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)
    return output, weights


def _fused_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float | None
) -> torch.Tensor:
    """The fast path of :func:`attention` (``need_weights=False``), on checked inputs: PyTorch's
    fused ``scaled_dot_product_attention``, which computes the same output without forming the
    weights. A fully masked row gives zeros there too (torch >= 2.5)."""
    if mask is not None and not query.shape[:-2] == key.shape[:-2] == value.shape[:-2]:
        # the kernel applies a mask within the batch shape of Q K^T only; when the values bring more
        # batch entries, a view of the queries with the full batch shape gives it those entries
        batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
        query = query.expand(*batch, *query.shape[-2:])  # (..., n, d_k)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale)  # (..., n, d_v)
