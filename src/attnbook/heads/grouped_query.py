r"""Multi-query and grouped-query attention: key and value heads shared by groups of query heads (chapter 9).

Multi-head attention (chapter 3) gives each of its :math:`H` heads its own keys and values, and a
decoder's key-value cache (chapter 8) stores all of them. Grouped-query attention (GQA,
Ainslie et al. 2023) keeps :math:`H_q` query heads but only :math:`H_{kv}` key and value heads,
:math:`H_q = g\,H_{kv}`: counting heads from 1 as chapter 3 does, query head :math:`h` uses key and
value head :math:`\lceil h / g \rceil`,

.. math:: O^h = \operatorname{Attention}\!\left(Q^h, K^{\lceil h/g \rceil}, V^{\lceil h/g \rceil}\right),
          \qquad h = 1, \dots, H_q,

that is, in tensor indices counted from 0, head index ``h`` uses key-value index ``h // g``.
:math:`H_{kv} = H_q` is multi-head attention, :math:`H_{kv} = 1` multi-query attention (MQA,
Shazeer 2019). The cache shrinks by the factor :math:`g` (:func:`kv_cache_bytes`). Repeating the
key and value heads g times (``repeat_interleave``) gives the same output without changing what
the cache stores, but makes a transient copy g times the cache and moves more bytes than
multi-head attention (chapter 9 counts them with :func:`attnbook.lab.memory_traffic.bytes_moved`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..core.attention import attention
from ..core.masks import check_mask, mask_like_scores
from ..validators import check_divisible, check_shapes, check_sizes, check_type, skip_checks


def _check_gqa_inputs(query, key, value, mask):
    """Validate grouped-query inputs; return (batch shape, H_q, H_kv, mask checked against the scores)."""
    check_shapes(
        query=(query, "(..., H_q, n, d_k)"), key=(key, "(..., H_kv, m, d_k)"), value=(value, "(..., H_kv, m, d_v)")
    )
    h_q, h_kv = query.shape[-3], key.shape[-3]
    check_sizes(H_q=h_q, H_kv=h_kv)
    check_divisible(
        "the number of query heads H_q",
        h_q,
        h_kv,
        "the number of key-value heads H_kv",
        why=f"H_q must be a multiple of H_kv; query {tuple(query.shape)}, key {tuple(key.shape)}",
    )
    batch = torch.broadcast_shapes(query.shape[:-3], key.shape[:-3], value.shape[:-3])  # checked above
    score_shape = (*batch, h_q, query.shape[-2], key.shape[-2])  # (..., H_q, n, m)
    if mask is not None:
        check_mask(mask, score_shape, query.device)
        mask = mask_like_scores(mask, query.dtype)  # a float mask in the dtype of the scores
    return batch, h_q, h_kv, mask


def _group_mask(mask: torch.Tensor | None, h_kv: int, groups: int, n: int) -> torch.Tensor | None:
    """A mask broadcastable to (..., H_q, n, m) as one broadcastable to (..., H_kv, g n, m), the
    layout in which the g query heads of a group are stacked as g n query rows."""
    if mask is None:
        return None
    if mask.ndim < 3:
        mask = mask.reshape((1,) * (3 - mask.ndim) + tuple(mask.shape))  # (..., 1, n or 1, m or 1)
    if mask.shape[-3] == 1:
        mask = mask.unsqueeze(-3)  # (..., 1, 1, n or 1, m or 1): the same for every head
    else:
        mask = mask.unflatten(-3, (h_kv, groups))  # (..., H_kv, g, n or 1, m or 1): head index h = (h // g, h % g)
    if mask.shape[-3] == 1 and mask.shape[-2] == 1:
        return mask.squeeze(-3)  # (..., H_kv or 1, 1, m or 1): one row for all g n query rows
    rows = mask.expand(*mask.shape[:-3], groups, n, mask.shape[-1])  # (..., H_kv or 1, g, n, m or 1)
    return rows.flatten(-3, -2)  # (..., H_kv or 1, g n, m or 1)


# O^h = Attention(Q^h, K^ceil(h / g), V^ceil(h / g)),   h = 1..H_q, g = H_q / H_kv  (index h // g from 0)
def grouped_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    need_weights: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Grouped-query attention: query head h attends with key and value head ceil(h / g) (chapter 9).

    .. math:: O^h = \operatorname{softmax}\!\left(\operatorname{mask}\!\left(
              \frac{Q^h (K^{\lceil h/g \rceil})^\top}{\sqrt{d_k}}\right)\right) V^{\lceil h/g \rceil},
              \qquad h = 1, \dots, H_q, \quad g = H_q / H_{kv}

    (heads counted from 1; along the head axis, index ``h`` uses key-value index ``h // g``).

    The same as repeating each key and value head g times (``repeat_interleave(g, dim=-3)``) and
    running multi-head attention, and as ``scaled_dot_product_attention(..., enable_gqa=True)``.
    Here the g query heads of a group are stacked as g n query rows against their one key and
    value head, so the keys and values are read in place, never copied: one decoding step reads
    the cache once, 1/g of the key and value bytes of multi-head attention with H_q heads. ``H_kv = 1`` is
    multi-query attention.

    Args:
        query: (..., H_q, n, d_k).
        key: (..., H_kv, m, d_k), with H_q a multiple of H_kv.
        value: (..., H_kv, m, d_v).
        mask: optional, broadcastable to (..., H_q, n, m), as in :func:`attnbook.attention`:
            boolean (True = may attend) or floating (added to the scores).
        scale: factor on the scores; defaults to ``1 / sqrt(d_k)``.
        need_weights: if False, the output comes from PyTorch's fused
            ``scaled_dot_product_attention(..., enable_gqa=True)`` and no weights are formed.

    Returns:
        ``(output, weights)``: output (..., H_q, n, d_v) and weights (..., H_q, n, m), or
        ``(output, None)`` when ``need_weights`` is False.
    """
    batch, h_q, h_kv, mask = _check_gqa_inputs(query, key, value, mask)
    check_type("need_weights", need_weights, bool)
    groups = h_q // h_kv
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if not need_weights:
        query = query.expand(*batch, *query.shape[-3:])  # (..., H_q, n, d_k): one batch shape for all three
        key = key.expand(*batch, *key.shape[-3:])  # (..., H_kv, m, d_k)
        value = value.expand(*batch, *value.shape[-3:])  # (..., H_kv, m, d_v)
        if mask is not None and mask.ndim < 2:
            mask = mask.reshape((1,) * (2 - mask.ndim) + tuple(mask.shape))  # (1 or n, m or 1), as SDPA needs
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale, enable_gqa=True)
        return out, None
    n = query.shape[-2]
    q = query.unflatten(-3, (h_kv, groups))  # (..., H_kv, g, n, d_k): query head index h = (h // g, h % g)
    q = q.flatten(-3, -2)  # (..., H_kv, g n, d_k): a group's query heads as rows against one key head
    with skip_checks():  # the shapes are right by construction
        output, weights = attention(q, key, value, mask=_group_mask(mask, h_kv, groups, n), scale=scale)
    output = output.unflatten(-2, (groups, n)).flatten(-4, -3)  # (..., H_kv, g, n, d_v) -> (..., H_q, n, d_v)
    weights = weights.unflatten(-2, (groups, n)).flatten(-4, -3)  # (..., H_kv, g, n, m) -> (..., H_q, n, m)
    return output, weights


# bytes = 2 (keys and values) * batch * layers * H_kv * n * d_head * bytes per number
def kv_cache_bytes(
    n_tokens: int,
    kv_heads: int,
    d_head: int,
    *,
    layers: int = 1,
    batch: int = 1,
    dtype: torch.dtype = torch.float16,
) -> int:
    r"""Bytes of a key-value cache: :math:`2 \cdot \text{batch} \cdot \text{layers} \cdot H_{kv} \cdot n \cdot d_\text{head} \cdot \text{bytes per number}` (chapter 9).

    The factor 2 counts keys and values. With grouped-query attention only the :math:`H_{kv}` key
    and value heads are cached, so the cache of multi-head attention with :math:`H_q` heads shrinks
    by :math:`H_q / H_{kv}`.
    """
    check_sizes(minimum=0, n_tokens=n_tokens, kv_heads=kv_heads, d_head=d_head, layers=layers, batch=batch)
    check_type("dtype", dtype, torch.dtype, "torch.dtype")
    bytes_per_number = torch.empty((), dtype=dtype, device="meta").element_size()
    return 2 * batch * layers * kv_heads * n_tokens * d_head * bytes_per_number
