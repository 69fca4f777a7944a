r"""Tiled attention: attention one tile of scores at a time, without the n x m matrix (chapter 8).

The loop of FlashAttention, written with PyTorch operations instead of one fused kernel, so it
shows the memory saving but not the speed. The queries are cut into blocks :math:`Q_i` of
``block_size`` rows (the outer loop) and the keys and values into blocks :math:`K_j, V_j` (the
inner loop). For one block of queries the online softmax (:mod:`attnbook.efficient.online_softmax`) keeps,
per query, a running maximum :math:`M`, a running normaliser :math:`L` and a running
*unnormalised output* :math:`O`; after key block :math:`j`

.. math:: S_{ij} = \text{scale} \cdot Q_i K_j^\top, \qquad
          M' = \max(M, \operatorname{rowmax} S_{ij}), \qquad \alpha = e^{M - M'}, \qquad
          P_{ij} = e^{S_{ij} - M'},

.. math:: L \leftarrow \alpha L + \operatorname{rowsum} P_{ij}, \qquad
          O \leftarrow \alpha O + P_{ij} V_j, \qquad M \leftarrow M',

and after the last key block the output rows of the block are :math:`O / L`, which is
:math:`\operatorname{softmax}(S) V` exactly in exact arithmetic and within
:func:`attention_rounding_bound` in floating point. Between tiles only the (block, d_v) output, two (block,)
vectors and one (block, block) tile of scores exist; the (n, m) score matrix never does.

Loop order: FlashAttention (Dao et al. 2022, Algorithm 1) puts the key blocks in the outer loop
and writes :math:`O_i, L_i, M_i` back to memory after every tile; FlashAttention-2 (Dao 2023)
puts the query blocks outside, as here, so that each query block's running numbers stay put and
:math:`O / L` is taken once at the end.

Under a causal mask (key j visible to query i iff j <= i) a tile whose first key comes after its
last query is entirely masked; it and every tile to its right are skipped without computing
anything (:func:`attention_tiles` lists which tiles are skipped).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..core.attention import check_attention_inputs
from ..core.masks import apply_mask, mask_like_scores
from ..validators import check_sizes, check_type
from .online_softmax import _check_block_size, block_exponentials, rescale_factor, running_max, running_sum


class Tile(NamedTuple):
    """One tile of the (n, m) score matrix: query rows ``queries``, key columns ``keys``.

    ``kind`` is ``"full"`` (no causal masking inside), ``"diagonal"`` (the causal mask cuts
    through it) or ``"skipped"`` (every key comes after every query: entirely masked).
    """

    queries: slice
    keys: slice
    kind: str


# tile (a, b) covers queries [a B, (a+1) B) and keys [b B, (b+1) B);
# causal: skipped iff b B > (a+1) B - 1 (its first key is after its last query),
#         full    iff (b+1) B - 1 <= a B (its last key is not after its first query)
def attention_tiles(n: int, m: int, block_size: int, *, causal: bool = False) -> list[Tile]:
    r"""The tiles of an (n, m) score matrix in blocks of ``block_size``, in the loop's order (chapter 8).

    For each block of queries (outer loop), the key blocks from left to right (inner loop). With
    ``causal=False`` every tile is ``"full"``. With ``causal=True`` (upper-left alignment, as
    :func:`attnbook.causal_mask` and ``scaled_dot_product_attention(is_causal=True)``) a tile is
    ``"skipped"`` when its first key j0 is after its last query i1 - 1, ``"full"`` when its last
    key j1 - 1 is at most its first query i0, and ``"diagonal"`` otherwise. For n = m, with
    :math:`T = \lceil n / B \rceil` blocks per side, :math:`T(T-1)/2` of the :math:`T^2` tiles
    are skipped. :func:`tiled_attention` computes exactly the tiles that are not skipped.
    """
    check_sizes(minimum=0, n=n, m=m)
    _check_block_size(block_size)
    tiles = []
    for i0 in range(0, n, block_size):
        i1 = min(i0 + block_size, n)
        for j0 in range(0, m, block_size):
            j1 = min(j0 + block_size, m)
            if not causal or j1 - 1 <= i0:
                kind = "full"
            elif j0 > i1 - 1:
                kind = "skipped"
            else:
                kind = "diagonal"
            tiles.append(Tile(slice(i0, i1), slice(j0, j1), kind))
    return tiles


# O_t = alpha_t O_{t-1} + P_t V_t   (V_t: the values of block t)
def running_output(
    previous_output: torch.Tensor, alpha: torch.Tensor, p: torch.Tensor, value_block: torch.Tensor
) -> torch.Tensor:
    r"""The running unnormalised output :math:`O_t = \alpha_t O_{t-1} + P_t V_{\mathcal{B}_t}` (chapter 8).

    Args:
        previous_output: :math:`O_{t-1}` (..., n, d_v), zeros before the first block.
        alpha: :func:`attnbook.efficient.online_softmax.rescale_factor` (..., n).
        p: :func:`attnbook.efficient.online_softmax.block_exponentials` of block t, (..., n, block).
        value_block: the values of block t, (..., block, d_v).
    """
    pv = p.to(value_block.dtype) @ value_block  # (..., n, block) @ (..., block, d_v) -> (..., n, d_v)
    return alpha.unsqueeze(-1) * previous_output + pv.to(previous_output.dtype)  # (..., n, 1) * (..., n, d_v)


# O = O_T / L_T,   and 0 where L_T = 0 (a query with no visible key)
def normalize_output(output: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    r"""The attention output :math:`O_T / L_T` after the last block; 0 for a fully masked query (chapter 8).

    Args:
        output: :math:`O_T` (..., n, d_v).
        total: :math:`L_T` (..., n).
    """
    safe = torch.where(total > 0, total, torch.ones_like(total))
    return output / safe.unsqueeze(-1)  # (..., n, d_v) / (..., n, 1)


def _masked_tile(
    scores: torch.Tensor, mask: torch.Tensor | None, queries: slice, keys: slice, causal: bool
) -> torch.Tensor:
    """One tile of scores (..., block, block) with its part of ``mask`` (and of the causal mask) applied."""
    if mask is not None:
        rows = queries if mask.shape[-2] != 1 else slice(None)  # a size-1 axis broadcasts: keep it whole
        cols = keys if mask.shape[-1] != 1 else slice(None)
        part = mask[..., rows, cols]  # (..., block or 1, block or 1)
        scores = apply_mask(scores, part)  # (..., block, block)
    if causal and keys.stop - 1 > queries.start:  # the diagonal cuts through this tile
        i = torch.arange(queries.start, queries.stop, device=scores.device).unsqueeze(-1)  # (block, 1)
        j = torch.arange(keys.start, keys.stop, device=scores.device)  # (block,)
        scores = scores.masked_fill(j > i, -math.inf)  # key j after query i: hidden
    return scores


# O = softmax(mask(scale Q K^T)) V,   one (block x block) tile of scores at a time
def tiled_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    block_size: int = 128,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    r"""Scaled dot-product attention computed tile by tile with the online softmax (chapter 8).

    .. math:: O = \operatorname{softmax}\bigl(\text{mask}(\text{scale} \cdot Q K^\top)\bigr) V

    The same function as :func:`attnbook.attention` (its output, to rounding error), with memory
    O(n d_v + block_size^2) per batch entry for the intermediates instead of O(n m): the scores
    of only one (block_size, block_size) tile exist at a time. See the module docstring for the loop.

    Args:
        query: (..., n, d_k).
        key: (..., m, d_k).
        value: (..., m, d_v).
        mask: optional, as in :func:`attnbook.attention`: boolean (True = may attend) or floating
            (added to the scores), broadcastable to (..., n, m).
        block_size: rows per block of queries and of keys, an int >= 1.
        causal: if True, query i also may not attend to key j > i (upper-left alignment, as
            :func:`attnbook.causal_mask`); tiles entirely above the diagonal are skipped. Combined
            with ``mask`` by "and".
        scale: factor on the scores; defaults to ``1 / sqrt(d_k)``.

    Returns:
        The output (..., n, d_v). A query with no key to attend to gets zeros. In float16 and
        bfloat16 the running statistics are kept in float32, as fused kernels do.
    """
    score_shape = check_attention_inputs(query, key, value, mask)
    mask = mask_like_scores(mask, query.dtype)  # a float mask in the dtype of the scores
    check_type("causal", causal, bool)
    _check_block_size(block_size)
    if mask is not None and mask.ndim < 2:
        mask = mask.reshape((1,) * (2 - mask.ndim) + tuple(mask.shape))  # (1 or n, m or 1)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    *batch, n, m = score_shape
    d_v = value.shape[-1]
    # running numbers in float32 for half-precision inputs, as fused kernels keep them
    stats_dtype = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    stats = {"dtype": stats_dtype, "device": query.device}
    output = torch.zeros(*batch, n, d_v, dtype=query.dtype, device=query.device)  # (..., n, d_v)

    for i0 in range(0, n, block_size):  # outer loop: a block Q_i of queries
        i1 = min(i0 + block_size, n)
        q_i = query[..., i0:i1, :]  # (..., B, d_k)
        m_i = torch.full((*batch, i1 - i0), -math.inf, **stats)  # running maximum M, (..., B)
        l_i = torch.zeros((*batch, i1 - i0), **stats)  # running normaliser L, (..., B)
        o_i = torch.zeros((*batch, i1 - i0, d_v), **stats)  # running output O, (..., B, d_v)
        for j0 in range(0, m, block_size):  # inner loop: a block K_j, V_j of keys and values
            if causal and j0 > i1 - 1:  # its first key is after the last query: the tile is entirely
                break  # masked, and so is every tile to its right
            j1 = min(j0 + block_size, m)
            k_j, v_j = key[..., j0:j1, :], value[..., j0:j1, :]  # (..., B, d_k), (..., B, d_v)
            s_ij = scale * (q_i @ k_j.transpose(-2, -1)).to(stats_dtype)  # (..., B, d_k) @ (..., d_k, B)
            s_ij = _masked_tile(s_ij, mask, slice(i0, i1), slice(j0, j1), causal)  # (..., B, B)
            new_max = running_max(m_i, s_ij)  # M' = max(M, rowmax S_ij)
            alpha = rescale_factor(m_i, new_max)  # alpha = exp(M - M')
            p_ij = block_exponentials(s_ij, new_max)  # P_ij = exp(S_ij - M'), (..., B, B)
            l_i = running_sum(l_i, alpha, p_ij)  # L = alpha L + rowsum P_ij
            o_i = running_output(o_i, alpha, p_ij, v_j)  # O = alpha O + P_ij V_j, (..., B, d_v)
            m_i = new_max
        output[..., i0:i1, :] = normalize_output(o_i, l_i).to(query.dtype)  # O / L (0 if nothing is visible)
    return output


# |o_i (computed) - o_i| <= eps v_bar (2m + 6 + (2 d_k + 10) s_bar_i + (blocks + 1)(4 s_bar_i + 6))
def attention_rounding_bound(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    blocks: int = 1,
) -> torch.Tensor:
    r"""A bound on the rounding error of each output row of attention in the inputs' dtype (chapter 8).

    For query :math:`i` let :math:`\bar s_i = \max_j \bigl(\text{scale} \sum_l |q_{il}| |k_{jl}| + |\text{mask}_{ij}|\bigr)`
    (the mask term only for a float mask, over its finite entries), a bound on every score of the
    query, and :math:`\bar v = \max_{j, l} |v_{jl}|`. Any computation of
    :math:`\operatorname{softmax}(\text{mask}(\text{scale}\, q_i K^\top)) V` by dot products,
    a softmax over at most ``blocks`` blocks (:func:`attnbook.efficient.online_softmax.softmax_rounding_bound`)
    and a weighted sum of the values rescaled as often (the explicit formula and the fused kernel
    with ``blocks = 1``, :func:`tiled_attention` with one block per tile of keys) is within

    .. math:: \epsilon \bar v \bigl(2m + 6 + (2 d_k + 10) \bar s_i + (\text{blocks} + 1)(4 \bar s_i + 6)\bigr)

    of the exact output in every entry of row :math:`i`, to first order in the unit roundoff
    :math:`\epsilon` (``torch.finfo(dtype).eps / 2``). The derivation: a dot product of length
    :math:`d_k` is accurate to :math:`d_k \epsilon \sum_l |q_{il} k_{jl}|`, and the scaling, a rounded
    scale (or its square root applied to both factors, as a fused kernel may do) and the mask
    add :math:`5 \epsilon \bar s_i`; an error of at most :math:`\eta` in the scores changes each weight
    by a factor within :math:`e^{\pm 2 \eta}`; the softmax's own rounding is bounded with
    :math:`\Delta \le 2 \bar s_i`; the weighted sum of :math:`m` values and its rescalings are bounded as
    the normaliser is, each relative error multiplying :math:`\sum_j a_j |v_{jl}| \le \bar v`. Two
    computations differ by at most the sum of their bounds Weights below the dtype's smallest normal number
    (underflow) are outside the derivation, as in the softmax bound.

    Args:
        query, key, value, mask, scale: as in :func:`attnbook.attention`.
        blocks: the number of blocks of keys the computation rescales over, an int >= 1.

    Returns:
        The bound for each query, shape (..., n, 1): it broadcasts against the output (..., n, d_v).
    """
    score_shape = check_attention_inputs(query, key, value, mask)
    mask = mask_like_scores(mask, query.dtype)  # a float mask in the dtype of the scores
    _check_block_size(blocks, "blocks")
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    eps = torch.finfo(query.dtype).eps / 2  # the unit roundoff
    d_k, m = query.shape[-1], score_shape[-1]
    size = abs(scale) * (query.abs() @ key.abs().transpose(-2, -1))  # (..., n, d_k) @ (..., d_k, m) -> (..., n, m)
    if mask is not None and mask.dtype != torch.bool:
        size = size + mask.abs().masked_fill(mask == -math.inf, 0.0)  # |mask_ij| where finite, (..., n, m)
    s_bar = size.amax(dim=-1, keepdim=True)  # (..., n, 1): every score of query i is at most s_bar_i in size
    v_bar = value.abs().amax(dim=(-2, -1), keepdim=True)  # (..., 1, 1): the largest value entry
    return eps * v_bar * (2 * m + 6 + (2 * d_k + 10) * s_bar + (blocks + 1) * (4 * s_bar + 6))  # (..., n, 1)
