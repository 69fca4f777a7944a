r"""Tiled attention: exact attention one tile of scores at a time, without the n x m matrix (chapter 8).

The loop of FlashAttention, written with PyTorch operations instead of one fused kernel, so it
shows the memory saving but not the speed. The queries are cut into blocks :math:`Q_i` of
``block_size`` rows (the outer loop) and the keys and values into blocks :math:`K_j, V_j` (the
inner loop). For one block of queries the online softmax (:mod:`attnbook.online_softmax`) keeps,
per query, a running maximum :math:`M`, a running normaliser :math:`L` and a running
*unnormalised output* :math:`O`; after key block :math:`j`

.. math:: S_{ij} = \text{scale} \cdot Q_i K_j^\top, \qquad
          M' = \max(M, \operatorname{rowmax} S_{ij}), \qquad \alpha = e^{M - M'}, \qquad
          P_{ij} = e^{S_{ij} - M'},

.. math:: L \leftarrow \alpha L + \operatorname{rowsum} P_{ij}, \qquad
          O \leftarrow \alpha O + P_{ij} V_j, \qquad M \leftarrow M',

and after the last key block the output rows of the block are :math:`O / L`, exactly
:math:`\operatorname{softmax}(S) V`. Between tiles only the (block, d_v) output, two (block,)
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

from .online_softmax import _check_block_size, block_exponentials, rescale_factor, running_max, running_sum
from .validators import check_attention_inputs, check_sizes, check_type


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


# O_t = alpha_t O_{t-1} + P_t V_{B_t}
def running_output(
    previous_output: torch.Tensor, alpha: torch.Tensor, p: torch.Tensor, value_block: torch.Tensor
) -> torch.Tensor:
    r"""The running unnormalised output :math:`O_t = \alpha_t O_{t-1} + P_t V_{B_t}` (chapter 8).

    Args:
        previous_output: :math:`O_{t-1}` (..., n, d_v), zeros before the first block.
        alpha: :func:`attnbook.online_softmax.rescale_factor` (..., n).
        p: :func:`attnbook.online_softmax.block_exponentials` of block t, (..., n, block).
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
        scores = scores.masked_fill(~part, -math.inf) if part.dtype == torch.bool else scores + part
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
    score_shape, mask = check_attention_inputs(query, key, value, mask)
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
