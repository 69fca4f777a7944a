r"""Tiled attention: exact attention over blocks of keys, without the n x m matrix (chapter 8).

The queries are cut into blocks of ``block_size`` rows and the keys and values into blocks of
``block_size`` rows. For one block of queries the key blocks :math:`B_1, \dots, B_T` are visited in
turn, and the online softmax (:mod:`attnbook.online_softmax`) keeps, per query, a running maximum
:math:`M_t`, a running normaliser :math:`L_t` and a running *unnormalised output*

.. math:: O_t = \alpha_t O_{t-1} + P_t V_{B_t}, \qquad \alpha_t = e^{M_{t-1} - M_t}, \quad
          (P_t)_{ij} = e^{s_{ij} - M_t},

so that after the last block :math:`O_T / L_T = \operatorname{softmax}(S) V`, exactly. Between
blocks only the (block, d_v) output, two (block,) vectors and one (block, block) tile of scores
exist; the (n, m) score matrix never does. This is the algorithm of FlashAttention, written with
PyTorch operations instead of one fused kernel, so it shows the memory saving but not the speed.

Under a causal mask (key j visible to query i iff j <= i) a tile whose first key comes after its
last query is entirely masked; it is skipped without computing anything (:func:`attention_tiles`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .attention import check_attention_inputs
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
    r"""The tiles of an (n, m) score matrix in blocks of ``block_size``, in the order they are visited (chapter 8).

    For each block of queries, the key blocks from left to right. With ``causal=False`` every tile
    is ``"full"``. With ``causal=True`` (upper-left alignment, as :func:`attnbook.causal_mask`
    and ``scaled_dot_product_attention(is_causal=True)``) a tile is ``"skipped"`` when its first
    key j0 is after its last query i1 - 1, ``"full"`` when its last key j1 - 1 is at most its
    first query i0, and ``"diagonal"`` otherwise. For n = m, with :math:`T = \lceil n / B \rceil`
    blocks per side, :math:`T(T-1)/2` of the :math:`T^2` tiles are skipped.
    """
    for name, value in (("n", n), ("m", m)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    block_size = _check_block_size(block_size)
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


def _mask_tile(mask: torch.Tensor, queries: slice, keys: slice) -> torch.Tensor:
    """The part of a mask broadcastable to (..., n, m) that covers one tile; size-1 axes stay."""
    rows = queries if mask.shape[-2] != 1 else slice(None)
    cols = keys if mask.shape[-1] != 1 else slice(None)
    return mask[..., rows, cols]  # (..., block or 1, block or 1)


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
    return alpha.unsqueeze(-1) * previous_output + pv.to(previous_output.dtype)


# O = O_T / L_T,   and 0 where L_T = 0 (a query with no visible key)
def normalize_output(output: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    r"""The attention output :math:`O_T / L_T` after the last block; 0 for a fully masked query (chapter 8)."""
    safe = torch.where(total > 0, total, torch.ones_like(total))
    return output / safe.unsqueeze(-1)  # (..., n, d_v) / (..., n, 1)


# Attention(Q, K, V) = softmax(mask(Q K^T * scale)) V, one (block x block) tile at a time
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

    The same function as :func:`attnbook.attention` (its output, to rounding error), with memory
    O(n d_v + block_size^2) per batch entry for the intermediates instead of O(n m): the scores
    of only one (block_size, block_size) tile exist at a time.

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
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    block_size = _check_block_size(block_size)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if mask is not None and mask.ndim < 2:
        mask = mask.reshape((1,) * (2 - mask.ndim) + tuple(mask.shape))  # (1 or n, m or 1)
    *batch, n, m = score_shape
    d_v = value.shape[-1]
    dtype, device = query.dtype, query.device
    stats_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    # zeros: with m = 0 keys no tile exists, and every query has no key to attend to
    output = torch.zeros(*batch, n, d_v, dtype=dtype, device=device)  # (..., n, d_v)
    stats = {"dtype": stats_dtype, "device": device}

    current = None  # the query block whose running statistics are held
    m_t = l_t = o_t = None  # M, L, O of that block: set when its first tile comes
    for tile in attention_tiles(n, m, block_size, causal=causal):
        if tile.queries != current:
            if current is not None:
                output[..., current, :] = normalize_output(o_t, l_t).to(dtype)
            current = tile.queries
            rows = current.stop - current.start
            m_t = torch.full((*batch, rows), -math.inf, **stats)  # M_0, (..., block)
            l_t = torch.zeros((*batch, rows), **stats)  # L_0, (..., block)
            o_t = torch.zeros((*batch, rows, d_v), **stats)  # O_0, (..., block, d_v)
        if tile.kind == "skipped":
            continue
        q_block = query[..., tile.queries, :]  # (..., block, d_k)
        k_block = key[..., tile.keys, :]  # (..., block, d_k)
        s = (q_block @ k_block.transpose(-2, -1)).to(stats_dtype)  # (..., block, d_k) @ (..., d_k, block)
        s = s.mul_(scale)  # (..., block, block), one tile of the scores
        if mask is not None:
            part = _mask_tile(mask, tile.queries, tile.keys)
            s = s.masked_fill(~part, -math.inf) if part.dtype == torch.bool else s + part.to(stats_dtype)
        if tile.kind == "diagonal":
            i = torch.arange(tile.queries.start, tile.queries.stop, device=device).unsqueeze(-1)  # (block, 1)
            j = torch.arange(tile.keys.start, tile.keys.stop, device=device)  # (block,)
            s = s.masked_fill(j > i, -math.inf)  # the causal mask inside the tile
        new_max = running_max(m_t, s)
        alpha = rescale_factor(m_t, new_max)
        p = block_exponentials(s, new_max)  # (..., block, block)
        l_t = running_sum(l_t, alpha, p)
        o_t = running_output(o_t, alpha, p, value[..., tile.keys, :])
        m_t = new_max
    if current is not None:
        output[..., current, :] = normalize_output(o_t, l_t).to(dtype)
    return output
