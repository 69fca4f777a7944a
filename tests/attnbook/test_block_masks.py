"""Block masks (chapter 12): the kind of each tile against its definition written with loops, against
chapter 9's ``block_layout``, chapters 8 and 11's causal tiles and PyTorch's ``create_block_mask``
(which pads cut tiles with False); the counts and fractions of skipped work; and attention computed
on the non-empty tiles only, equal to the dense computation in float64."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn.attention import flex_attention as flex

from attnbook import (
    TileCounts,
    alibi_score_mod,
    alibi_slopes,
    attention_with_mods,
    block_layout,
    block_sparse_attention,
    causal_mask,
    causal_mask_mod,
    count_tiles,
    document_causal_mask,
    document_ids_from_lengths,
    document_mask_mod,
    flash_attention_tiles,
    mask_from_mask_mod,
    prefix_lm_mask_mod,
    sliding_window_mask,
    sliding_window_mask_mod,
    softcap_score_mod,
    tile_kinds,
    tile_kinds_from_mask_mod,
)
from attnbook.efficient.tiled_attention import attention_tiles
from attnbook.programs.block_masks import EMPTY, FULL, PARTIAL

F64 = torch.float64
LENGTHS = [5, 1, 7, 3]
N = sum(LENGTHS)  # 16


def kinds_by_loop(keep, block_q, block_k):
    n, m = keep.shape
    kinds = []
    for i0 in range(0, n, block_q):
        row = []
        for j0 in range(0, m, block_k):
            tile = keep[i0 : i0 + block_q, j0 : j0 + block_k]  # the pairs that exist
            row.append(EMPTY if not tile.any() else FULL if tile.all() else PARTIAL)
        kinds.append(row)
    return torch.tensor(kinds)


def masks(device):
    ids = document_ids_from_lengths(LENGTHS, device=device)
    return {
        "causal": causal_mask(N, device=device),
        "document": document_causal_mask(ids),
        "window": sliding_window_mask(N, 4, device=device),
        "all": torch.ones(N, N, dtype=torch.bool, device=device),
        "none": torch.zeros(N, N, dtype=torch.bool, device=device),
    }


@pytest.mark.parametrize("blocks", [(4, 4), (3, 5), (5, 3), (1, 1), (16, 16), (7, 16)])
@pytest.mark.parametrize("name", ["causal", "document", "window", "all", "none"])
def test_kinds_equal_their_definition_and_the_block_layout(name, blocks, device):
    keep = masks(device)[name]
    kinds = tile_kinds(keep, *blocks)
    assert kinds.dtype == torch.int64 and kinds.device.type == device.type
    assert kinds.shape == (math.ceil(N / blocks[0]), math.ceil(N / blocks[1]))
    assert torch.equal(kinds.cpu(), kinds_by_loop(keep.cpu(), *blocks))
    if blocks[0] == blocks[1]:
        assert torch.equal(kinds != EMPTY, block_layout(keep, blocks[0]))  # chapter 9's layout


@pytest.mark.parametrize("n, m, bq, bk", [(16, 16, 4, 4), (13, 13, 4, 4), (10, 17, 3, 5), (17, 10, 5, 3)])
def test_causal_kinds_are_chapter_8_and_11s_tiles(n, m, bq, bk):
    kinds = tile_kinds(causal_mask(n, m), bq, bk)
    # chapter 11 visits exactly the tiles that are not empty, and masks exactly the partial ones
    visited = {
        (t.queries.start // bq, t.keys.start // bk): t.kind
        for t in flash_attention_tiles(n, m, block_q=bq, block_k=bk, is_causal=True)
    }
    for a in range(kinds.shape[0]):
        for b in range(kinds.shape[1]):
            if kinds[a, b] == EMPTY:
                assert (a, b) not in visited
            else:
                assert visited[(a, b)] == ("full" if kinds[a, b] == FULL else "diagonal")
    if bq == bk:  # chapter 8's tiles: skipped, full, diagonal
        for t in attention_tiles(n, m, bq, causal=True):
            kind = int(kinds[t.queries.start // bq, t.keys.start // bq])
            assert {"skipped": EMPTY, "full": FULL, "diagonal": PARTIAL}[t.kind] == kind


@pytest.mark.parametrize("name", ["causal", "document", "window"])
@pytest.mark.parametrize("block", [4, 5, (3, 6)])
def test_kinds_against_pytorchs_create_block_mask(name, block):
    ids = document_ids_from_lengths(LENGTHS)
    mod = {"causal": causal_mask_mod, "document": document_mask_mod(ids), "window": sliding_window_mask_mod(4)}[name]
    bq, bk = (block, block) if isinstance(block, int) else block
    block_mask = flex.create_block_mask(mod, 1, 1, N, N, device="cpu", BLOCK_SIZE=(bq, bk))
    n_q, n_k = math.ceil(N / bq), math.ceil(N / bk)
    theirs = torch.full((n_q, n_k), EMPTY)
    for a in range(n_q):
        for idx in block_mask.kv_indices[0, 0, a, : block_mask.kv_num_blocks[0, 0, a]].tolist():
            theirs[a, idx] = PARTIAL
        for idx in block_mask.full_kv_indices[0, 0, a, : block_mask.full_kv_num_blocks[0, 0, a]].tolist():
            theirs[a, idx] = FULL
    ours = tile_kinds_from_mask_mod(mod, N, block_q=bq, block_k=bk)[0, 0]
    # PyTorch pads the mask with False to whole tiles: a cut tile is never full there
    cut = torch.zeros(n_q, n_k, dtype=torch.bool)
    cut[-1, :] |= N % bq != 0
    cut[:, -1] |= N % bk != 0
    expected = torch.where(cut & (ours == FULL), PARTIAL, ours)
    assert torch.equal(theirs, expected)


def test_a_cut_tile_is_full_here_and_partial_in_pytorch():
    keep = torch.ones(5, 5, dtype=torch.bool)
    assert tile_kinds(keep, 4).tolist() == [[FULL, FULL], [FULL, FULL]]
    block_mask = flex.create_block_mask(lambda b, h, q, kv: q >= 0, 1, 1, 5, 5, device="cpu", BLOCK_SIZE=4)
    assert block_mask.full_kv_num_blocks[0, 0].tolist() == [1, 0]  # only tile (0, 0) is whole and full
    assert block_mask.kv_num_blocks[0, 0].tolist() == [1, 2]


def test_counts_and_fractions():
    keep = causal_mask(16)
    counts = count_tiles(keep, 4)
    assert isinstance(counts, TileCounts)
    assert (counts.empty, counts.partial, counts.full) == (6, 4, 6)  # T(T-1)/2, T, T(T-1)/2 for T = 4
    assert counts.tiles == 16 and counts.entries == 256
    assert counts.skipped_entries == 6 * 16
    assert counts.skipped_tiles_fraction == 6 / 16 and counts.skipped_work_fraction == 96 / 256
    # cut tiles count by their real size: 10 x 10 in tiles of 4 -> empty tiles (0,1), (0,2), (1,2)
    counts = count_tiles(causal_mask(10), 4)
    assert counts.empty == 3 and counts.skipped_entries == 16 + 8 + 8
    # a batch of masks sums over it
    two = count_tiles(torch.stack([causal_mask(16), torch.ones(16, 16, dtype=torch.bool)]), 4)
    assert (two.empty, two.full, two.entries) == (6, 6 + 16, 512)


def test_documents_skip_more_than_causal_and_windows_more_still():
    ids = document_ids_from_lengths([16] * 8)  # 8 documents of 16 in a row of 128
    causal = count_tiles(causal_mask(128), 16)
    document = count_tiles(document_causal_mask(ids), 16)
    window = count_tiles(sliding_window_mask(128, 16), 16)
    assert causal.skipped_tiles_fraction == 28 / 64
    assert document.skipped_tiles_fraction == 56 / 64  # only the 8 diagonal tiles remain
    assert window.skipped_tiles_fraction == (64 - 8 - 7) / 64  # the diagonal and the one below it
    assert causal.skipped_work_fraction < window.skipped_work_fraction < document.skipped_work_fraction


def mods(ids):
    return {
        "causal": causal_mask_mod,
        "document": document_mask_mod(ids),
        "window": sliding_window_mask_mod(3),
        "prefix": prefix_lm_mask_mod(6),
        "first query blind": lambda b, h, q, kv: (q > 0) & (kv <= q),
    }


@pytest.mark.parametrize("name", ["causal", "document", "window", "prefix", "first query blind"])
@pytest.mark.parametrize("blocks", [(4, 4), (3, 5), (16, 16), (1, 1)])
def test_block_sparse_attention_equals_the_dense_computation(name, blocks, device):
    ids = document_ids_from_lengths(LENGTHS, device=device)
    mod = mods(ids)[name]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, N, d, generator=g, dtype=F64).to(device) for d in (4, 4, 5))
    expected, _ = attention_with_mods(q, k, v, mask_mod=mod)
    got = block_sparse_attention(q, k, v, mod, block_q=blocks[0], block_k=blocks[1])
    assert got.dtype == F64 and got.shape == (2, 3, N, 5)
    torch.testing.assert_close(got, expected, atol=1e-14, rtol=1e-12)


def test_block_sparse_attention_with_a_score_mod(device):
    ids = document_ids_from_lengths(LENGTHS, device=device)
    g = torch.Generator().manual_seed(1)
    q, k, v = (3 * torch.randn(1, 2, N, 4, generator=g, dtype=F64).to(device) for _ in range(3))
    for score_mod in (softcap_score_mod(2.0), alibi_score_mod(alibi_slopes(2, dtype=F64, device=device))):
        expected, _ = attention_with_mods(q, k, v, mask_mod=document_mask_mod(ids), score_mod=score_mod)
        got = block_sparse_attention(q, k, v, document_mask_mod(ids), score_mod=score_mod, block_q=4, block_k=3)
        torch.testing.assert_close(got, expected, atol=1e-14, rtol=1e-12)


def test_block_sparse_attention_evaluates_the_mask_on_partial_tiles_only():
    calls = []

    def counted(b, h, q_idx, kv_idx):
        calls.append((int(q_idx.numel()), int(kv_idx.numel())))
        return q_idx >= kv_idx

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, 16, 4, generator=g, dtype=F64) for _ in range(3))
    block_sparse_attention(q, k, v, counted, block_q=4)
    # one dense call to find the kinds, then one call per partial tile (the 4 diagonal tiles)
    assert calls[0] == (16, 16) and calls[1:] == [(4, 4)] * 4


def test_a_batch_of_different_document_rows():
    ids = torch.tensor([[0] * 6 + [1] * 10, [0] * 12 + [1] * 4])
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 16, 4, generator=g, dtype=F64) for _ in range(3))
    expected, _ = attention_with_mods(q, k, v, mask_mod=document_mask_mod(ids))
    torch.testing.assert_close(
        block_sparse_attention(q, k, v, document_mask_mod(ids), block_q=4), expected, atol=1e-14, rtol=1e-12
    )
    kinds = tile_kinds(mask_from_mask_mod(document_mask_mod(ids), 16, batch=2), 4)
    assert not torch.equal(kinds[0], kinds[1])  # the rows need different tiles


def test_errors():
    keep = causal_mask(6)
    with pytest.raises(TypeError, match=r"keep must be a boolean tensor, got dtype torch.float32"):
        tile_kinds(keep.float(), 2)
    with pytest.raises(ValueError, match=r"block_q must be > 0"):
        tile_kinds(keep, 0)
    with pytest.raises(TypeError, match=r"block_k must be an int"):
        tile_kinds(keep, 2, 2.5)
    q = torch.zeros(1, 1, 6, 4, dtype=F64)
    with pytest.raises(TypeError, match=r"mask_mod must return a tensor of dtype torch.bool"):
        block_sparse_attention(q, q, q, lambda b, h, i, j: (i >= j).long(), block_q=2)
    with pytest.raises(ValueError, match=r"4 dimensions"):
        block_sparse_attention(q[0], q[0], q[0], causal_mask_mod, block_q=2)
