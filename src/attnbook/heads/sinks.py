r"""Attention with learned sink logits: a softmax allowed to put weight on nothing (chapter 13).

The weights of a query over its keys sum to one, so a head that finds no key worth attending to
must still spread its weight over some of them; trained models park it on the first token or a
few content-free positions (an *attention sink*, Xiao et al. 2023). gpt-oss gives each head
:math:`h` a learned logit :math:`\sigma_h` that joins the softmax's denominator and carries no
value:

.. math:: o_i = \sum_j \frac{e^{s_{ij}}}{e^{\sigma_h} + \sum_l e^{s_{il}}}\, v_j,
          \qquad s_{ij} = \text{scale}\; q_i \cdot k_j \ (\text{masked: } -\infty),

so the weights on the real keys sum to :math:`1 - e^{\sigma_h} / (e^{\sigma_h} + \sum_l e^{s_{il}}) < 1`.
It is attention over one more key, a *virtual key* whose score is :math:`\sigma_h` for every query
and whose value is zero (:func:`sinks_as_virtual_key` builds it with one extra feature, and
``attention`` of what it returns equals :func:`sink_attention`). A fully masked row gives all its
weight to the sink and outputs zeros. The window of gpt-oss's even-index layers is a mask: pass
:func:`attnbook.sliding_window_mask`.
"""

from __future__ import annotations

import math

import torch

from ..core.attention import attention_scores
from ..core.masks import apply_mask, check_mask, mask_like_scores
from ..core.softmax import softmax
from ..validators import check_divisible, check_shapes, check_sink_logits, check_type


def _check_sink_inputs(query, key, value, sinks, mask):
    """Validate sink-attention inputs; return (score shape (..., H, n, m), groups g, the mask as a float mask)."""
    check_shapes(
        query=(query, "(..., H, n, d_k)"), key=(key, "(..., H_kv, m, d_k)"), value=(value, "(..., H_kv, m, d_v)")
    )
    h, h_kv = query.shape[-3], key.shape[-3]
    check_divisible(
        "the number of query heads H",
        h,
        h_kv,
        "the number of key-value heads H_kv",
        why=f"query {tuple(query.shape)}, key {tuple(key.shape)}",
    )
    batch = torch.broadcast_shapes(query.shape[:-3], key.shape[:-3], value.shape[:-3])  # checked above
    score_shape = (*batch, h, query.shape[-2], key.shape[-2])  # (..., H, n, m)
    check_sink_logits(sinks, h, score_shape)
    check_shapes(query=(query, "(..., H, n, d_k)"), sinks=(sinks, "(H,)"))  # one dtype and device
    if mask is not None:
        check_mask(mask, score_shape, query.device)
    return score_shape, h // h_kv, mask_like_scores(mask, query.dtype)


# o_i = sum_j exp(s_ij) v_j / (exp(sigma_h) + sum_l exp(s_il))
def sink_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    sinks: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    need_weights: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Attention whose softmax has one more logit per head, the sink, with no value (chapter 13).

    .. math:: w_{ij} = \frac{e^{s_{ij}}}{e^{\sigma_h} + \sum_l e^{s_{il}}}, \qquad
              o_i = \sum_j w_{ij} v_j, \qquad s = \operatorname{mask}(\text{scale}\; Q^h K^{h\top})

    The sink logits are appended as a last column of the scores, the softmax runs over the m + 1
    columns and the sink's column is dropped: the returned weights of a row sum to less than one,
    the rest being the sink's share. With ``H_kv < H`` key-value heads, query head h uses key-value
    head ``h // (H / H_kv)`` as in :func:`attnbook.grouped_query_attention` (gpt-oss has 64 query
    and 8 key-value heads, and one sink per query head).

    Args:
        query: (..., H, n, d_k).
        key: (..., H_kv, m, d_k), H a multiple of H_kv.
        value: (..., H_kv, m, d_v).
        sinks: (H,), one logit per query head, in the dtype of the query.
        mask: optional, broadcastable to (..., H, n, m), as in :func:`attnbook.attention` (a
            sliding window is :func:`attnbook.sliding_window_mask`).
        scale: factor on the scores; defaults to ``1 / sqrt(d_k)``.
        need_weights: return the (..., H, n, m) weights on the real keys, or None.

    Returns:
        ``(output, weights)``: output (..., H, n, d_v); weights (..., H, n, m) or None.
    """
    score_shape, groups, mask = _check_sink_inputs(query, key, value, sinks, mask)
    check_type("need_weights", need_weights, bool)
    key = key.repeat_interleave(groups, dim=-3)  # (..., H, m, d_k): key-value head h // g for query head h
    value = value.repeat_interleave(groups, dim=-3)  # (..., H, m, d_v)
    scores = apply_mask(
        attention_scores(query, key, scale), mask
    )  # (..., H, n, d_k) @ (..., H, d_k, m) -> (..., H, n, m)
    sink = sinks[:, None, None].expand(*scores.shape[:-1], 1)  # (H, 1, 1) -> (..., H, n, 1): sigma_h in every row
    weights = softmax(torch.cat((scores, sink), dim=-1))[..., :-1]  # (..., H, n, m + 1) -> (..., H, n, m)
    output = weights @ value  # (..., H, n, m) @ (..., H, m, d_v) -> (..., H, n, d_v)
    return output, (weights if need_weights else None)


# q'_i = [q_i, 1],  k'_j = [k_j, 0],  k'_* = [0, sigma_h / scale],  v'_j = v_j,  v'_* = 0
def sinks_as_virtual_key(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    sinks: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, float]:
    r"""Sink attention as plain attention over one more key: a virtual key with a zero value (chapter 13).

    Each query gains a last feature 1 and each key a last feature 0, so every real score is
    unchanged; one key is added at the end, zero but for a last feature :math:`\sigma_h / \text{scale}`,
    so its score is :math:`\text{scale}\,(q_i, 1) \cdot (0, \sigma_h / \text{scale}) = \sigma_h` for
    every query of head h; its value is zero, so it adds to the denominator and nothing to the sum:

    .. math:: \operatorname{Attention}(Q', K', V')_i = \sum_j \frac{e^{s_{ij}}}{e^{\sigma_h} + \sum_l e^{s_{il}}} v_j
              + \frac{e^{\sigma_h}}{e^{\sigma_h} + \sum_l e^{s_{il}}}\, 0 = \operatorname{sink\_attention}(Q, K, V, \sigma)_i .

    The virtual key is always visible: the mask gains a last column True (0 for a float mask).

    Returns:
        ``(query', key', value', mask', scale)`` for :func:`attnbook.attention`: query' (..., H, n, d_k + 1),
        key' (..., H, m + 1, d_k + 1), value' (..., H, m + 1, d_v), mask' broadcastable to
        (..., H, n, m + 1) or None, and the scale of the original scores (``1 / sqrt(d_k)`` by default,
        not that of the wider vectors).
    """
    score_shape, groups, _ = _check_sink_inputs(query, key, value, sinks, mask)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    batch = score_shape[:-3]
    query = query.expand(*batch, *query.shape[-3:])  # (..., H, n, d_k)
    key = key.expand(*batch, *key.shape[-3:]).repeat_interleave(groups, dim=-3)  # (..., H, m, d_k)
    value = value.expand(*batch, *value.shape[-3:]).repeat_interleave(groups, dim=-3)  # (..., H, m, d_v)
    ones = query.new_ones(*query.shape[:-1], 1)  # (..., H, n, 1)
    query_v = torch.cat((query, ones), dim=-1)  # (..., H, n, d_k + 1)
    key_v = torch.cat((key, key.new_zeros(*key.shape[:-1], 1)), dim=-1)  # (..., H, m, d_k + 1)
    virtual = key.new_zeros(*key.shape[:-2], 1, key.shape[-1] + 1)  # (..., H, 1, d_k + 1)
    virtual[..., -1] = (sinks / scale)[:, None]  # (H, 1): the score scale * (1 * sigma_h / scale) = sigma_h
    key_v = torch.cat((key_v, virtual), dim=-2)  # (..., H, m + 1, d_k + 1)
    value_v = torch.cat((value, value.new_zeros(*value.shape[:-2], 1, value.shape[-1])), dim=-2)  # (..., H, m + 1, d_v)
    if mask is None:
        return query_v, key_v, value_v, None, scale
    mask = mask.reshape((1,) * max(0, 2 - mask.ndim) + tuple(mask.shape))  # at least (n or 1, m or 1)
    mask = mask.expand(*mask.shape[:-1], score_shape[-1])  # (..., n or 1, m): the key axis spelled out
    seen = torch.ones_like(mask[..., :1]) if mask.dtype == torch.bool else torch.zeros_like(mask[..., :1])
    return query_v, key_v, value_v, torch.cat((mask, seen), dim=-1), scale  # mask (..., n or 1, m + 1)
