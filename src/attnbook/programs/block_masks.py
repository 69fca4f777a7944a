r"""Block masks: which tiles of the scores a kernel may skip, from a mask or a mask function (chapter 12).

A kernel computes the (n, m) scores in tiles of :math:`B_q` queries by :math:`B_k` keys
(chapters 8 and 11). Given a keep-mask, every tile is of one of three kinds:

* **empty** (:data:`EMPTY`): no (query, key) pair of the tile is kept; the kernel skips it;
* **full** (:data:`FULL`): every pair of the tile is kept; the kernel computes it without
  evaluating the mask;
* **partial** (:data:`PARTIAL`): some pairs are kept and some not; the kernel computes it and
  applies the mask entry by entry.

Tile (a, b) covers queries :math:`aB_q, \dots, \min((a+1)B_q, n) - 1` and keys
:math:`bB_k, \dots, \min((b+1)B_k, m) - 1`: the last tiles of a row or column are cut short when
:math:`B_q` does not divide n (or :math:`B_k` m), and their kind is decided on the pairs that exist,
as chapter 8's :func:`attnbook.efficient.tiled_attention.attention_tiles` and chapter 11's
``flash_attention_tiles`` do. PyTorch's ``create_block_mask`` pads the mask with False to whole
tiles instead, so it calls a cut tile whose existing pairs are all kept *partial*, not full (the
tests check both the equality and that one difference).

* :func:`tile_kinds`, :func:`tile_kinds_from_mask_mod`: the kind of every tile;
* :func:`count_tiles`: how many tiles of each kind, and the fractions of tiles and of score
  entries a kernel skips (:class:`TileCounts`);
* :func:`block_sparse_attention`: attention computed tile by tile with the online softmax,
  visiting only the tiles that are not empty and evaluating the mask function only on partial
  ones: chapter 11's causal tile skipping for any mask.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..core.masks import apply_mask
from ..efficient.online_softmax import block_exponentials, rescale_factor, running_max, running_sum
from ..efficient.tiled_attention import normalize_output, running_output
from ..validators import check_mod_output, check_number, check_shapes, check_sizes
from .mask_mods import MaskMod, call_mod, mask_from_mask_mod, mod_indices
from .score_mods import ScoreMod

EMPTY, PARTIAL, FULL = 0, 1, 2
KINDS = {EMPTY: "empty", PARTIAL: "partial", FULL: "full"}


def _tiles(keep: torch.Tensor, block_q: int, block_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per tile, the number of kept pairs and the number of pairs that exist, each (..., N_q, N_k)."""
    n, m = keep.shape[-2], keep.shape[-1]
    n_q, n_k = math.ceil(n / block_q), math.ceil(m / block_k)
    padded = keep.new_zeros(*keep.shape[:-2], n_q * block_q, n_k * block_k)  # (..., N_q B_q, N_k B_k)
    padded[..., :n, :m] = keep
    exists = torch.zeros(n_q * block_q, n_k * block_k, dtype=torch.bool, device=keep.device)  # (N_q B_q, N_k B_k)
    exists[:n, :m] = True
    tiles = padded.unflatten(-1, (n_k, block_k)).unflatten(-3, (n_q, block_q))  # (..., N_q, B_q, N_k, B_k)
    size = exists.unflatten(-1, (n_k, block_k)).unflatten(-3, (n_q, block_q))  # (N_q, B_q, N_k, B_k)
    kept = tiles.sum(dim=(-3, -1))  # (..., N_q, N_k)
    pairs = size.sum(dim=(-3, -1))  # (N_q, N_k)
    return kept, pairs


# kind(a, b) = empty if no pair of tile (a, b) is kept, full if every existing pair is, else partial
def tile_kinds(keep: torch.Tensor, block_q: int, block_k: int | None = None) -> torch.Tensor:
    r"""The kind of each (block_q x block_k) tile of a keep-mask: :data:`EMPTY`, :data:`PARTIAL` or :data:`FULL` (chapter 12).

    .. math:: \mathrm{kind}(a, b) = \begin{cases} \text{empty} & \text{no } M_{ij} \text{ in the tile} \\
              \text{full} & \text{every } M_{ij} \text{ of the tile} \\ \text{partial} & \text{otherwise} \end{cases}

    A cut last tile is judged on the pairs that exist (see the module docstring).
    ``tile_kinds(keep, B) != EMPTY`` equals :func:`attnbook.block_layout` ``(keep, B)``.

    Args:
        keep: boolean keep-mask (..., n, m).
        block_q: queries per tile, >= 1.
        block_k: keys per tile (defaults to ``block_q``).

    Returns:
        An int64 tensor (..., ceil(n / block_q), ceil(m / block_k)) of 0 (empty), 1 (partial) and 2 (full).
    """
    check_shapes(keep=(keep, "(..., n, m)", "bool"))
    block_k = block_q if block_k is None else block_k
    check_sizes(block_q=block_q, block_k=block_k)
    kept, pairs = _tiles(keep, block_q, block_k)  # (..., N_q, N_k), (N_q, N_k)
    kinds = torch.full(kept.shape, PARTIAL, dtype=torch.int64, device=keep.device)  # (..., N_q, N_k)
    kinds[kept == 0] = EMPTY
    kinds[kept == pairs] = FULL
    return kinds


def tile_kinds_from_mask_mod(
    mask_mod: MaskMod,
    n: int,
    m: int | None = None,
    *,
    block_q: int,
    block_k: int | None = None,
    batch: int = 1,
    heads: int = 1,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The tile kinds of a mask function (chapter 12): :func:`tile_kinds` of its dense mask
    (:func:`attnbook.programs.mask_mods.mask_from_mask_mod`), shape (batch, heads, N_q, N_k), as
    PyTorch's ``create_block_mask`` finds them (it too evaluates the whole mask once)."""
    keep = mask_from_mask_mod(mask_mod, n, m, batch=batch, heads=heads, device=device)  # (batch, heads, n, m)
    return tile_kinds(keep, block_q, block_k)


class TileCounts(NamedTuple):
    """How many tiles of each kind, and what a kernel that skips the empty ones saves (chapter 12).

    ``tiles`` is the number of tiles, ``entries`` the number of score entries (n m per batch entry
    and head); ``skipped_entries`` counts the entries in empty tiles, the cut tiles by their real
    size. Summed over every batch entry and head.
    """

    empty: int
    partial: int
    full: int
    entries: int
    skipped_entries: int

    @property
    def tiles(self) -> int:
        return self.empty + self.partial + self.full

    @property
    def skipped_tiles_fraction(self) -> float:
        """The fraction of the tiles a kernel skips (empty ones)."""
        return self.empty / self.tiles if self.tiles else 0.0

    @property
    def skipped_work_fraction(self) -> float:
        """The fraction of the score entries a kernel does not compute (those in empty tiles)."""
        return self.skipped_entries / self.entries if self.entries else 0.0


def count_tiles(keep: torch.Tensor, block_q: int, block_k: int | None = None) -> TileCounts:
    """Count the empty, partial and full tiles of a keep-mask (..., n, m), and the score entries that
    lie in empty tiles (chapter 12); see :class:`TileCounts`."""
    kinds = tile_kinds(keep, block_q, block_k)  # (..., N_q, N_k)
    block_k = block_q if block_k is None else block_k
    _, pairs = _tiles(keep[(0,) * (keep.ndim - 2)], block_q, block_k)  # (N_q, N_k): pairs per tile
    skipped = (pairs * (kinds == EMPTY)).sum()  # entries in empty tiles, over the batch
    batch = math.prod(keep.shape[:-2])
    return TileCounts(
        empty=int((kinds == EMPTY).sum()),
        partial=int((kinds == PARTIAL).sum()),
        full=int((kinds == FULL).sum()),
        entries=batch * keep.shape[-2] * keep.shape[-1],
        skipped_entries=int(skipped),
    )


def _tile_mask(mask_mod: MaskMod, sizes: tuple[int, ...], rows: slice, cols: slice, device) -> torch.Tensor:
    """The mask function evaluated on one tile only: (batch, heads, rows, cols)."""
    b, h, q_idx, kv_idx = mod_indices(*sizes, device=device)
    q_idx, kv_idx = q_idx[..., rows, :], kv_idx[..., cols]  # (1, 1, B_q, 1), (1, 1, 1, B_k)
    shape = (sizes[0], sizes[1], rows.stop - rows.start, cols.stop - cols.start)
    keep = call_mod("mask_mod", mask_mod, b, h, q_idx, kv_idx, sizes=sizes)
    check_mod_output("mask_mod", keep, shape, torch.bool)
    return keep


def _tile_scores(score_mod: ScoreMod, scores: torch.Tensor, sizes: tuple[int, ...], rows: slice, cols: slice):
    """The score function applied to one tile of scores (batch, heads, rows, cols)."""
    b, h, q_idx, kv_idx = mod_indices(*sizes, device=scores.device)
    q_idx, kv_idx = q_idx[..., rows, :], kv_idx[..., cols]  # (1, 1, B_q, 1), (1, 1, 1, B_k)
    modified = call_mod("score_mod", score_mod, scores, b, h, q_idx, kv_idx, sizes=sizes)
    check_mod_output("score_mod", modified, tuple(scores.shape), scores.dtype)
    return modified.expand(scores.shape)


# O = softmax(mask_M(score_mod(Q K^T * scale))) V,   computed on the tiles that are not empty only
def block_sparse_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask_mod: MaskMod,
    *,
    score_mod: ScoreMod | None = None,
    block_q: int = 64,
    block_k: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    r"""Attention with a mask function, tile by tile, skipping the empty tiles (chapter 12).

    .. math:: O = \operatorname{softmax}\!\big(\operatorname{mask}_M(\mathrm{score\_mod}(Q K^\top \cdot \text{scale}))\big)\, V

    Chapter 11's forward loop (query blocks outside, key blocks inside, the online softmax of
    chapter 8) with its causal test replaced by the tile kinds of the mask (:func:`tile_kinds`): an
    empty tile is skipped, a full one computed without the mask, a partial one with the mask
    function evaluated on that tile only. The kinds are found as PyTorch's ``create_block_mask``
    does, from the dense mask, once; a score function, if any, acts on each visited tile before the mask; a tile is visited if it is not empty for some batch entry or
    head, and masked unless it is full for all. The output equals :func:`attention_with_mods`
    (to rounding); a query that sees no key gets zeros.

    Args:
        query: (batch, heads, n, d_k).
        key: (batch, heads, m, d_k).
        value: (batch, heads, m, d_v).
        mask_mod: ``(b, h, q_idx, kv_idx) -> bool``, True = may attend.
        score_mod: ``(score, b, h, q_idx, kv_idx) -> score``, applied to each visited tile, or None.
        block_q: queries per tile, >= 1.
        block_k: keys per tile (defaults to ``block_q``).
        scale: factor on the scores; defaults to ``1 / sqrt(d_k)``.

    Returns:
        The output (batch, heads, n, d_v).
    """
    check_shapes(
        query=(query, "(batch, heads, n, d_k)"),
        key=(key, "(batch, heads, m, d_k)"),
        value=(value, "(batch, heads, m, d_v)"),
    )
    block_k = block_q if block_k is None else block_k
    check_sizes(block_q=block_q, block_k=block_k)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else check_number("scale", scale)
    batch, heads, n, d_v = query.shape[0], query.shape[1], query.shape[2], value.shape[-1]
    m = key.shape[2]
    sizes = (batch, heads, n, m)
    kinds = tile_kinds_from_mask_mod(
        mask_mod, n, m, block_q=block_q, block_k=block_k, batch=batch, heads=heads, device=query.device
    )  # (batch, heads, N_q, N_k)
    visit = (kinds != EMPTY).flatten(0, 1).any(dim=0).tolist()  # [N_q][N_k]: some batch entry or head needs the tile
    unmasked = (kinds == FULL).flatten(0, 1).all(dim=0).tolist()  # [N_q][N_k]: full for every one of them
    output = torch.zeros(batch, heads, n, d_v, dtype=query.dtype, device=query.device)  # (batch, heads, n, d_v)
    for a, i0 in enumerate(range(0, n, block_q)):  # outer loop: a block of queries
        i1 = min(i0 + block_q, n)
        q_i = query[..., i0:i1, :]  # (batch, heads, B_q, d_k)
        m_i = torch.full((batch, heads, i1 - i0), -math.inf, dtype=query.dtype, device=query.device)  # running max
        l_i = torch.zeros((batch, heads, i1 - i0), dtype=query.dtype, device=query.device)  # running normaliser
        o_i = torch.zeros((batch, heads, i1 - i0, d_v), dtype=query.dtype, device=query.device)  # running output
        for b, j0 in enumerate(range(0, m, block_k)):  # inner loop: the key blocks this query block needs
            if not visit[a][b]:
                continue  # an empty tile: nothing to compute
            j1 = min(j0 + block_k, m)
            s_ij = scale * (q_i @ key[..., j0:j1, :].transpose(-2, -1))  # (batch, heads, B_q, d_k) @ (..., d_k, B_k)
            if score_mod is not None:  # the score function on this tile's scores and indices
                s_ij = _tile_scores(score_mod, s_ij, sizes, slice(i0, i1), slice(j0, j1))
            if not unmasked[a][b]:  # a partial tile: the mask function on this tile only
                s_ij = apply_mask(s_ij, _tile_mask(mask_mod, sizes, slice(i0, i1), slice(j0, j1), query.device))
            new_max = running_max(m_i, s_ij)  # M' = max(M, rowmax S_ij)
            alpha = rescale_factor(m_i, new_max)  # alpha = exp(M - M')
            p_ij = block_exponentials(s_ij, new_max)  # P_ij = exp(S_ij - M'), (batch, heads, B_q, B_k)
            l_i = running_sum(l_i, alpha, p_ij)  # L = alpha L + rowsum P_ij
            o_i = running_output(o_i, alpha, p_ij, value[..., j0:j1, :])  # O = alpha O + P_ij V_j
            m_i = new_max
        output[..., i0:i1, :] = normalize_output(o_i, l_i)  # O / L (0 if nothing is visible)
    return output
