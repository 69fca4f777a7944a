"""tiled_attention against attention: shapes, block sizes, masks, causal skipping, memory, errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import attention, causal_mask, padding_mask
from attnbook.efficient.tiled_attention import attention_rounding_bound, attention_tiles, tiled_attention
from attnbook.lab.memory import peak_memory_bytes

PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
EXACT = {"atol": 1e-6, "rtol": 1e-6}  # the package's bound in float64 (the differences are ~1e-15)


def draw(shape, g, dtype, device):
    return torch.randn(*shape, generator=g, dtype=dtype).to(device)


masks = st.sampled_from(["none", "bool", "bool-keys", "float", "with-empty-rows"])


def make_mask(kind, batch, n, m, g, dtype, device):
    if kind == "none":
        return None
    if kind == "bool":
        return (torch.rand(*batch, n, m, generator=g) > 0.4).to(device)
    if kind == "bool-keys":  # broadcast over the queries, as a padding mask is
        return (torch.rand(m, generator=g) > 0.3).to(device)
    if kind == "float":
        additive = torch.randn(n, m, generator=g, dtype=dtype)
        additive[torch.rand(n, m, generator=g) > 0.7] = -math.inf
        return additive.to(device)
    keep = torch.rand(*batch, n, m, generator=g) > 0.5
    keep[..., 0, :] = False  # query 0 sees nothing
    return keep.to(device)


@PROPERTY
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    n=st.integers(1, 12),
    m=st.integers(1, 12),
    d_k=st.integers(1, 5),
    d_v=st.integers(1, 4),
    block_size=st.integers(1, 14),
    causal=st.booleans(),
    mask_kind=masks,
    seed=st.integers(0, 10**6),
)
def test_equals_attention_float64(device, batch, n, m, d_k, d_v, block_size, causal, mask_kind, seed):
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    dtype = torch.float64
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        draw((*batch, n, d_k), g, dtype, device),
        draw((*batch, m, d_k), g, dtype, device),
        draw((*batch, m, d_v), g, dtype, device),
    )
    mask = make_mask(mask_kind, batch, n, m, g, dtype, device)
    full = mask
    if causal:
        keep = causal_mask(n, m, device=device)
        if mask is None:
            full = keep
        elif mask.dtype == torch.bool:
            full = mask & keep
        else:
            full = mask.masked_fill(~keep, -math.inf)
    expected, _ = attention(q, k, v, mask=full)
    out = tiled_attention(q, k, v, mask=mask, block_size=block_size, causal=causal)
    assert out.shape == expected.shape and out.dtype == dtype and out.device.type == device.type
    assert_close(out, expected, **EXACT)
    blocks = math.ceil(m / block_size)  # the derived rounding bound, entry by entry (chapter 8)
    bound = attention_rounding_bound(q, k, v, full, blocks=blocks) + attention_rounding_bound(q, k, v, full)
    assert ((out - expected).abs() <= bound).all()


@PROPERTY
@given(
    n=st.integers(1, 40),
    m=st.integers(1, 40),
    d_k=st.integers(1, 16),
    block_size=st.integers(1, 16),
    size=st.sampled_from([0.1, 1.0, 4.0]),
    mask_kind=masks,
    seed=st.integers(0, 10**6),
)
def test_rounding_bound_holds(device, dtype, n, m, d_k, block_size, size, mask_kind, seed):
    """Tiled, explicit and fused attention agree within the sum of their rounding bounds, in float32 (where
    the rounding is visible) as in float64, for scores of any size."""
    g = torch.Generator().manual_seed(seed)
    q = size * draw((2, n, d_k), g, dtype, device)
    k, v = draw((2, m, d_k), g, dtype, device), draw((2, m, 3), g, dtype, device)
    mask = make_mask(mask_kind, (2,), n, m, g, dtype, device)
    explicit, _ = attention(q, k, v, mask=mask)
    fused, _ = attention(q, k, v, mask=mask, need_weights=False)
    tiled = tiled_attention(q, k, v, mask=mask, block_size=block_size)
    one_block = attention_rounding_bound(q, k, v, mask)
    assert (
        (tiled - explicit).abs() <= one_block + attention_rounding_bound(q, k, v, mask, blocks=-(-m // block_size))
    ).all()
    assert ((fused - explicit).abs() <= one_block + attention_rounding_bound(q, k, v, mask, blocks=m)).all()


def test_rounding_bound_is_small_in_float64():
    """Not a vacuous tolerance: far below the package's 1e-6 at the chapter's sizes."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (draw((2, 3, 37, 8), g, torch.float64, "cpu") for _ in range(3))
    bound = attention_rounding_bound(q, k, v, blocks=37)
    assert bound.shape == (2, 3, 37, 1) and bound.max() < 1e-12


def test_equals_sdpa_is_causal(device, dtype):
    g = torch.Generator().manual_seed(0)
    q, k, v = (draw((2, 3, 37, 8), g, dtype, device) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    tol = {"atol": 1e-10, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-4}
    assert_close(tiled_attention(q, k, v, block_size=8, causal=True), expected, **tol)


def test_broadcast_batch_and_scale(device, dtype):
    g = torch.Generator().manual_seed(1)
    q = draw((2, 3, 9, 4), g, dtype, device)
    k = draw((1, 3, 7, 4), g, dtype, device)
    v = draw((2, 1, 7, 5), g, dtype, device)
    mask = padding_mask([4, 7], 7, device=device)[:, None, None, :]  # (batch, 1, 1, m)
    tol = {"atol": 1e-10, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-4}
    out = tiled_attention(q, k, v, mask=mask, block_size=3, scale=0.7)
    assert_close(out, attention(q, k, v, mask=mask, scale=0.7)[0], **tol)


def test_fully_masked_rows_give_zeros(device, dtype):
    g = torch.Generator().manual_seed(2)
    q, k, v = draw((6, 4), g, dtype, device), draw((9, 4), g, dtype, device), draw((9, 3), g, dtype, device)
    keep = torch.ones(6, 9, dtype=torch.bool, device=device)
    keep[2] = False
    out = tiled_attention(q, k, v, mask=keep, block_size=4)
    assert not torch.isnan(out).any() and (out[2] == 0).all()
    # with causal alignment and more queries than keys nothing is fully masked; with n > m, lower rows see all
    assert_close(
        tiled_attention(q, k[:4], v[:4], causal=True, block_size=2),
        attention(q, k[:4], v[:4], mask=causal_mask(6, 4, device=device))[0],
    )


def test_half_precision_keeps_float32_statistics(device):
    dtype = torch.bfloat16
    g = torch.Generator().manual_seed(3)
    q, k, v = (draw((2, 40, 16), g, torch.float32, device) for _ in range(3))
    exact = attention(q, k, v, mask=causal_mask(40, device=device))[0]
    out = tiled_attention(q.to(dtype), k.to(dtype), v.to(dtype), block_size=8, causal=True)
    assert out.dtype == dtype
    assert_close(out.float(), exact, atol=3e-2, rtol=3e-2)


def test_no_keys_gives_zeros(device):
    q = torch.randn(3, 4, device=device)
    out = tiled_attention(q, torch.zeros(0, 4, device=device), torch.zeros(0, 2, device=device))
    assert out.shape == (3, 2) and (out == 0).all()


@pytest.mark.parametrize("n, m, block_size", [(16, 16, 4), (17, 17, 4), (5, 9, 2), (9, 5, 2), (8, 8, 8), (6, 6, 1)])
def test_tiles_cover_the_matrix_and_skip_exactly_the_masked_ones(n, m, block_size):
    keep = causal_mask(n, m)
    tiles = attention_tiles(n, m, block_size, causal=True)
    covered = torch.zeros(n, m, dtype=torch.long)
    for tile in tiles:
        covered[tile.queries, tile.keys] += 1
        part = keep[tile.queries, tile.keys]
        expected = "full" if part.all() else "skipped" if not part.any() else "diagonal"
        assert tile.kind == expected, tile
    assert (covered == 1).all()  # a partition of the score matrix
    assert all(t.kind == "full" for t in attention_tiles(n, m, block_size))


@pytest.mark.parametrize("n, block_size", [(1, 1), (12, 4), (13, 4), (64, 16), (100, 7)])
def test_number_of_skipped_tiles_is_t_choose_2(n, block_size):
    t = math.ceil(n / block_size)
    tiles = attention_tiles(n, n, block_size, causal=True)
    assert len(tiles) == t * t
    assert sum(tile.kind == "skipped" for tile in tiles) == t * (t - 1) // 2
    assert sum(tile.kind != "skipped" for tile in tiles) == t * (t + 1) // 2  # computed: on and below the diagonal


def test_causal_tiled_attention_never_reads_skipped_tiles():
    """Poison every key and value that only skipped tiles would read: the output stays finite and exact."""
    g = torch.Generator().manual_seed(4)
    n, block = 12, 4
    q, k, v = (draw((n, 3), g, torch.float64, "cpu") for _ in range(3))
    expected = attention(q, k, v, mask=causal_mask(n))[0]
    # rows 0-3 only need keys 0-3; give the first query block its own copy with poisoned later keys
    k_bad, v_bad = k.clone(), v.clone()
    k_bad[block:], v_bad[block:] = math.nan, math.nan
    out = tiled_attention(q[:block], k_bad, v_bad, block_size=block, causal=True)
    assert_close(out, expected[:block])
    # the explicit formula does read them: 0 * nan is nan
    assert torch.isnan(attention(q[:block], k_bad, v_bad, mask=causal_mask(block, n))[0]).all()


def test_memory_is_the_output_plus_tiles_not_n_squared(device):
    """The theory's bounds, O(n d + B^2), with margins wide enough for any allocator (the CUDA caching
    allocator rounds every block up to 512 bytes; another PyTorch version may keep a temporary more or
    less)."""
    if device.type not in ("cpu", "cuda"):
        pytest.skip("peak memory is measured on cpu and cuda")
    g = torch.Generator().manual_seed(5)
    n, d, block = 512, 16, 32
    q, k, v = (draw((n, d), g, torch.float32, device) for _ in range(3))
    score_bytes, output_bytes, tile_bytes = n * n * 4, n * d * 4, block * block * 4
    attention(q, k, v), tiled_attention(q, k, v, block_size=block)  # warm-up: a GPU library's workspace
    explicit = peak_memory_bytes(lambda: attention(q, k, v), device)
    tiled = peak_memory_bytes(lambda: tiled_attention(q, k, v, block_size=block), device)
    assert 2 * score_bytes <= explicit <= 6 * score_bytes  # at least the scores and the weights
    assert tiled <= 8 * (output_bytes + tile_bytes)  # the output, running numbers and a few tiles
    assert tiled < score_bytes / 10
    # beyond the output, the same bytes at twice the length: the tiles do not grow with n
    q2, k2, v2 = (draw((2 * n, d), g, torch.float32, device) for _ in range(3))
    tiled_twice = peak_memory_bytes(lambda: tiled_attention(q2, k2, v2, block_size=block), device)
    assert tiled_twice - 2 * output_bytes <= 1.05 * (tiled - output_bytes)


def test_memory_of_a_single_tile_is_no_smaller(device):
    """For n <= block_size one tile is the whole score matrix: tiling saves nothing."""
    if device.type not in ("cpu", "cuda"):
        pytest.skip("peak memory is measured on cpu and cuda")
    g = torch.Generator().manual_seed(6)
    n, d = 64, 8
    q, k, v = (draw((n, d), g, torch.float32, device) for _ in range(3))
    tiled_attention(q, k, v)  # warm-up
    assert peak_memory_bytes(lambda: tiled_attention(q, k, v, block_size=n), device) >= 2 * n * n * 4


@pytest.mark.parametrize("n, m, block_size", [(100, 100, 32), (13, 13, 4), (7, 12, 3), (12, 7, 3), (5, 5, 8)])
def test_causal_tiled_attention_computes_exactly_the_tiles_not_skipped(n, m, block_size):
    from torch.utils.flop_counter import FlopCounterMode

    g = torch.Generator().manual_seed(7)
    q, k, v = (
        draw((n, 4), g, torch.float64, "cpu"),
        draw((m, 4), g, torch.float64, "cpu"),
        draw((m, 3), g, torch.float64, "cpu"),
    )
    computed = [t for t in attention_tiles(n, m, block_size, causal=True) if t.kind != "skipped"]
    expected = sum(2 * (t.queries.stop - t.queries.start) * (t.keys.stop - t.keys.start) * (4 + 3) for t in computed)
    with FlopCounterMode(display=False) as counter:
        tiled_attention(q, k, v, block_size=block_size, causal=True)
    assert counter.get_total_flops() == expected


def test_peak_memory_counts_an_allocation():
    x = torch.zeros(64, 64, dtype=torch.float64)
    # the result, plus a few bytes for the wrapped scalar 1
    assert 64 * 64 * 8 <= peak_memory_bytes(lambda: x + 1, "cpu") <= 64 * 64 * 8 + 64
    assert 3 * 64 * 64 * 8 <= peak_memory_bytes(lambda: (x + 1) * (x + 2), "cpu") <= 3 * 64 * 64 * 8 + 128
    assert peak_memory_bytes(lambda: (x + 1).sum(), "cpu") >= 64 * 64 * 8
    assert peak_memory_bytes(lambda: x.view(-1), "cpu") == 0
    with pytest.raises(TypeError, match="fn must be callable"):
        peak_memory_bytes(x, "cpu")


class TestErrors:
    def test_block_size(self):
        q = torch.zeros(4, 3)
        with pytest.raises(ValueError, match=r"block_size must be > 0 \(a positive int\), got 0"):
            tiled_attention(q, q, q, block_size=0)
        with pytest.raises(ValueError, match=r"block_size must be > 0 \(a positive int\), got -3"):
            tiled_attention(q, q, q, block_size=-3)
        with pytest.raises(TypeError, match=r"block_size must be an int, got float"):
            tiled_attention(q, q, q, block_size=2.0)
        with pytest.raises(TypeError, match=r"block_size must be an int, got NoneType"):
            tiled_attention(q, q, q, block_size=None)
        with pytest.raises(ValueError, match=r"block_size must be > 0"):
            attention_tiles(4, 4, 0)

    def test_causal_must_be_bool(self):
        q = torch.zeros(4, 3)
        with pytest.raises(TypeError, match=r"causal must be a bool, got str"):
            tiled_attention(q, q, q, causal="yes")

    def test_same_input_checks_as_attention(self):
        with pytest.raises(ValueError, match=r"query \(2, 3\) and key \(4, 5\)"):
            tiled_attention(torch.zeros(2, 3), torch.zeros(4, 5), torch.zeros(4, 5))
        with pytest.raises(TypeError, match=r"query: torch.float32, key: torch.float64"):
            tiled_attention(torch.zeros(2, 3), torch.zeros(4, 3, dtype=torch.float64), torch.zeros(4, 3))
        with pytest.raises(ValueError, match=r"mask of shape \(4, 5\) does not broadcast to the score shape \(5, 4\)"):
            tiled_attention(
                torch.zeros(5, 3), torch.zeros(4, 3), torch.zeros(4, 3), mask=torch.ones(4, 5, dtype=torch.bool)
            )
        with pytest.raises(TypeError, match=r"mask must be boolean .* got torch.int64"):
            tiled_attention(
                torch.zeros(5, 3), torch.zeros(4, 3), torch.zeros(4, 3), mask=torch.ones(5, 4, dtype=torch.long)
            )

    def test_tile_sizes(self):
        with pytest.raises(ValueError, match=r"n must be >= 0, got -1"):
            attention_tiles(-1, 4, 2)
        with pytest.raises(TypeError, match=r"m must be an int, got float"):
            attention_tiles(4, 4.0, 2)
