r"""Attention with linear biases (ALiBi): relative position as an additive float mask (chapter 9).

ALiBi (Press, Smith and Lewis, 2022) adds no positional encoding to the input. Instead each head h
adds to the score of query i and key j a penalty proportional to their distance,

.. math:: B_{h,ij} = -\mu_h\, |p_i - p_j|,

with a fixed slope :math:`\mu_h > 0` per head (:func:`alibi_slopes`). The bias is a float mask
(chapter 2): pass it as ``mask`` to :func:`attnbook.attention`, added to a causal mask written with
``-inf``. It depends on the positions only through their difference, so shifting every position
by the same amount changes nothing. In the paper's decoders the key never comes after the query,
so :math:`|p_i - p_j| = p_i - p_j`; using the distance for every pair lets the same bias serve an
encoder, and it is the paper's bias on every entry a causal mask keeps.
"""

from __future__ import annotations

import math

import torch

from ..validators import broadcast_batch, check_dtype, check_one_of, check_reals, check_shapes, check_sizes, skip_checks

_ALIGNS = ("upper_left", "lower_right")


# H = 2^k:  mu_h = 2^(-8 h / H),  h = 1, ..., H   (start 2^(-8/H), ratio 2^(-8/H))
# otherwise, with P = 2^floor(log2 H):  slopes(P), then slopes(2P) numbered 1, 3, ..., 2(H - P) - 1
# (the rule of get_slopes in the authors' code, ofirpress/attention_with_linear_biases)
def alibi_slopes(
    num_heads: int, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    r"""The per-head slopes of ALiBi: the geometric sequence :math:`\mu_h = 2^{-8h/H}`, :math:`h = 1, \dots, H` (chapter 9).

    For 8 heads: 1/2, 1/4, ..., 1/256. The paper defines the slopes for H a power of two. For other
    H this follows the authors' reference code (``get_slopes`` in the repository
    ``ofirpress/attention_with_linear_biases``): the slopes of the nearest power of two below,
    :math:`P = 2^{\lfloor \log_2 H \rfloor}`, followed by the first H - P of the odd-numbered
    slopes of 2P heads, :math:`2^{-4(2k-1)/P}` for :math:`k = 1, \dots, H - P`.

    Returns:
        A tensor of shape (num_heads,), every slope in (0, 1). For H a power of two it is strictly
        decreasing. Otherwise each of its two parts (the first P, the last H - P) is strictly
        decreasing but the whole is not: the late slopes interleave with the first ones, e.g. for
        12 heads :math:`2^{-1}, \dots, 2^{-8}` then :math:`2^{-1/2}, 2^{-3/2}, 2^{-5/2}, 2^{-7/2}`.
        All of them are slopes of 2P heads: sorted in decreasing order, they are those numbered
        1, 2, ..., 2(H - P), then the even-numbered ones up to 2P.
    """
    check_sizes(num_heads=num_heads)
    check_dtype(dtype)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    power = 2 ** math.floor(math.log2(num_heads))
    h = torch.arange(1, power + 1, dtype=torch.float64)  # (P,)
    slopes = 2.0 ** (-8.0 * h / power)  # (P,): 2^(-8/P), 2^(-16/P), ..., 2^(-8)
    if power < num_heads:
        h_odd = torch.arange(1, 2 * (num_heads - power), 2, dtype=torch.float64)  # (H - P,): 1, 3, 5, ...
        slopes = torch.cat((slopes, 2.0 ** (-8.0 * h_odd / (2 * power))))  # (H,)
    return slopes.to(device=device, dtype=dtype)


# B[..., h, i, j] = -mu_h |p_i - p_j|
def alibi_bias_for_positions(
    query_positions: torch.Tensor, key_positions: torch.Tensor, slopes: torch.Tensor
) -> torch.Tensor:
    r"""ALiBi bias for queries and keys at arbitrary positions, :math:`B_{h,ij} = -\mu_h |p_i - p_j|` (chapter 9).

    Args:
        query_positions: (..., n), integer or real.
        key_positions: (..., m), integer or real; batch axes broadcast with those of the queries.
        slopes: (H,), e.g. :func:`alibi_slopes`; the bias has their dtype and device.

    Returns:
        The bias (..., H, n, m), to add to scores of shape (..., H, n, m).
    """
    check_shapes(slopes=(slopes, "(H,)"))
    check_shapes(query_positions=(query_positions, "(..., n)", "any"))  # any integer or real dtype
    check_shapes(key_positions=(key_positions, "(..., m)", "any"))
    check_reals(query_positions=query_positions)  # not boolean or complex
    check_reals(key_positions=key_positions)
    for name, p in (("query_positions", query_positions), ("key_positions", key_positions)):
        if p.device != slopes.device:
            raise ValueError(f"{name} is on {p.device} but slopes are on {slopes.device}")
    broadcast_batch(query_positions=query_positions.shape[:-1], key_positions=key_positions.shape[:-1])
    p_q = query_positions.to(slopes.dtype).unsqueeze(-1)  # (..., n, 1)
    p_k = key_positions.to(slopes.dtype).unsqueeze(-2)  # (..., 1, m)
    distance = (p_q - p_k).abs()  # (..., n, m)
    return -slopes[:, None, None] * distance.unsqueeze(-3)  # (H, 1, 1) * (..., 1, n, m) -> (..., H, n, m)


# B[h, i, j] = -mu_h |(i + o) - j|,   o = 0 (upper_left) or m - n (lower_right)
def alibi_bias(n: int, m: int, slopes: torch.Tensor, *, align: str = "upper_left") -> torch.Tensor:
    r"""ALiBi bias of n queries and m keys at positions 0, 1, ...: :math:`B_{h,ij} = -\mu_h\, |(i + o) - j|` (chapter 9).

    Add it to the scores (``attnbook.attention(q, k, v, mask=bias)``, with a causal mask folded in
    as ``bias.masked_fill(~causal_mask(n, m), -inf)`` for a decoder). Every diagonal is constant:
    the bias depends on j - i only.

    Args:
        n: number of queries.
        m: number of keys.
        slopes: (H,), e.g. :func:`alibi_slopes`; the bias has their dtype and device.
        align: ``"upper_left"``: query i is at position i; ``"lower_right"``: at i + m - n (the last
            n of m tokens, as with a key-value cache), as in :func:`attnbook.causal_mask`.

    Returns:
        The bias (H, n, m).
    """
    check_sizes(minimum=0, n=n, m=m)
    check_one_of("align", align, _ALIGNS)
    check_shapes(slopes=(slopes, "(H,)"))
    offset = 0 if align == "upper_left" else m - n
    query_positions = torch.arange(n, device=slopes.device) + offset  # (n,)
    key_positions = torch.arange(m, device=slopes.device)  # (m,)
    with skip_checks():
        return alibi_bias_for_positions(query_positions, key_positions, slopes)  # (H, n, m)
