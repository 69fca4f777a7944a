"""StreamingLLM's cache: decoding = the full computation under the streaming mask, with positions as the
cache assigns them or the original ones; memory constant in the stream's length; errors (chapter 13)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnbook import (
    KVCache,
    RollingKVCache,
    StreamingCache,
    apply_rotary,
    attention,
    causal_mask,
    sliding_window_mask,
    streaming_mask,
    streaming_positions,
)
from attnbook.efficient.tiled_attention import attention_rounding_bound

PROPERTY = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def stream(batch, n, d_k, d_v, *, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, n, d_k, generator=g, dtype=torch.float64) * 2
    k = torch.randn(*batch, n, d_k, generator=g, dtype=torch.float64)
    v = torch.randn(*batch, n, d_v, generator=g, dtype=torch.float64)
    return (t.to(dtype=dtype, device=device) for t in (q, k, v))


def full_with_cache_positions(q, k, v, num_sinks, window):
    """Each query i against every key under the streaming mask, query and keys rotated at the positions
    StreamingLLM gives them when i is decoded (streaming_positions): the full computation, row by row.
    Returns the outputs and each row's rounding bound."""
    n = q.shape[-2]
    P = streaming_positions(n, num_sinks, window, device=q.device)  # (n, n)
    keep = streaming_mask(n, num_sinks, window, device=q.device)  # (n, n)
    rows, bounds = [], []
    for i in range(n):
        q_i = apply_rotary(q[..., i : i + 1, :], P[i, i : i + 1])  # (..., 1, d_k) at its own position
        k_i = apply_rotary(k, P[i].clamp(min=0))  # (..., n, d_k); unseen keys (P = -1) are masked out
        rows.append(attention(q_i, k_i, v, mask=keep[i : i + 1])[0])
        bounds.append(attention_rounding_bound(q_i, k_i, v, keep[i : i + 1]))
    return torch.cat(rows, dim=-2), torch.cat(bounds, dim=-2)


@PROPERTY
@given(
    batch=st.lists(st.integers(1, 2), max_size=2),
    n=st.integers(1, 18),
    num_sinks=st.integers(0, 4),
    extra=st.integers(1, 6),
    half_d=st.integers(1, 3),
    d_v=st.integers(1, 3),
    pairing=st.sampled_from(["interleaved", "half"]),
    seed=st.integers(0, 10**6),
)
def test_decoding_equals_the_masked_full_computation(
    device, dtype, batch, n, num_sinks, extra, half_d, d_v, pairing, seed
):
    window = num_sinks + extra
    q, k, v = stream(batch, n, 2 * half_d, d_v, dtype=dtype, device=device, seed=seed)
    bound_scale = 2  # two computations, each within its bound

    # positions inside the cache (StreamingLLM)
    cache = StreamingCache(num_sinks, window, pairing=pairing)
    ours, _ = cache.step(q, k, v)
    rows = []
    P = streaming_positions(n, num_sinks, window, device=device)  # (n, n)
    for i in range(n):  # the full computation row by row, keys rotated at the positions of row i
        q_i = apply_rotary(q[..., i : i + 1, :], P[i, i : i + 1], pairing=pairing)
        k_i = apply_rotary(k, P[i].clamp(min=0), pairing=pairing)
        keep = streaming_mask(n, num_sinks, window, device=device)[i : i + 1]
        rows.append((attention(q_i, k_i, v, mask=keep)[0], attention_rounding_bound(q_i, k_i, v, keep)))
    expected = torch.cat([r for r, _ in rows], dim=-2)
    bound = torch.cat([b for _, b in rows], dim=-2)
    assert ((ours - expected).abs() <= bound_scale * bound).all()

    # original positions: one masked computation with every token rotated once at its own position
    cache = StreamingCache(num_sinks, window, positions="original", pairing=pairing)
    ours, _ = cache.step(q, k, v)
    pos = torch.arange(n, device=device)
    q_r, k_r = apply_rotary(q, pos, pairing=pairing), apply_rotary(k, pos, pairing=pairing)
    keep = streaming_mask(n, num_sinks, window, device=device)
    expected, _ = attention(q_r, k_r, v, mask=keep)
    assert ((ours - expected).abs() <= bound_scale * attention_rounding_bound(q_r, k_r, v, keep)).all()


def test_cache_positions_and_original_positions_differ_once_the_window_rolls(device):
    if device.type == "mps":
        pytest.skip("float64")
    n, num_sinks, window = 16, 2, 6
    q, k, v = stream([2], n, 4, 3, dtype=torch.float64, device=device, seed=1)
    cache_pos, _ = StreamingCache(num_sinks, window).step(q, k, v)
    original, _ = StreamingCache(num_sinks, window, positions="original").step(q, k, v)
    difference = (cache_pos - original).abs().amax(dim=(0, 2))  # (n,): per query
    assert (difference[:window] < 1e-12).all()  # nothing evicted yet: the same positions
    assert (difference[window:] > 1e-3).all()  # sinks at offset w - 1 - j instead of i - j
    # the control of the full computation: rows built with the original positions do not match the cache's
    expected, _ = full_with_cache_positions(q, k, v, num_sinks, window)
    assert (cache_pos - expected).abs().amax() < 1e-12
    assert (original - expected).abs().amax() > 1e-3


def test_streaming_mask_and_positions():
    n, k, w = 9, 2, 5
    keep = streaming_mask(n, k, w)
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    assert torch.equal(keep, (j <= i) & ((j < k) | (i - j < w - k)))
    assert (keep.sum(-1)[w - 1 :] == w).all() and torch.equal(keep.sum(-1)[:w], torch.arange(1, w + 1))
    assert torch.equal(streaming_mask(n, 0, 4), sliding_window_mask(n, 4))  # no sinks: a sliding window
    assert torch.equal(streaming_mask(n, 3, n + 3), causal_mask(n))  # a window as long as the stream
    P = streaming_positions(n, k, w)
    assert ((P >= 0) == keep).all()
    for row in range(n):  # the kept tokens carry 0, ..., L - 1 in stream order, the query last
        kept = P[row][keep[row]]
        assert torch.equal(kept, torch.arange(len(kept))) and P[row, row] == len(kept) - 1


def test_memory_is_constant_in_the_length_of_the_stream(device):
    num_sinks, window, d_k, d_v = 3, 8, 4, 2
    q, k, v = stream([2, 3], 200, d_k, d_v, dtype=torch.float32, device=device, seed=2)
    cache = StreamingCache(num_sinks, window)
    sizes = []
    for t in range(200):
        cache.step(q[..., t : t + 1, :], k[..., t : t + 1, :], v[..., t : t + 1, :])
        sizes.append(cache.nbytes)
    full = 2 * 3 * window * (d_k + d_v) * 4  # batch (2, 3), window tokens of d_k + d_v float32 numbers
    assert set(sizes[window - 1 :]) == {full}  # from the first full window on, never more
    assert max(sizes) == full
    assert tuple(cache.sinks._keys.shape) == (2, 3, num_sinks, d_k)
    assert tuple(cache.recent._keys.shape) == (2, 3, window - num_sinks, d_k)
    assert tuple(cache.keys.shape) == (2, 3, window, d_k) and len(cache) == window and cache.seen == 200
    assert torch.equal(cache.original_positions, torch.tensor([0, 1, 2, 195, 196, 197, 198, 199], device=device))
    assert torch.equal(cache.positions, torch.arange(window, device=device))
    cache.reset()
    assert len(cache) == 0 and cache.seen == 0


def test_rolling_cache_keeps_the_last_tokens_in_order(device):
    cache = RollingKVCache(4)
    assert isinstance(cache, KVCache)
    x = torch.arange(11.0, device=device)[:, None].expand(11, 2)  # token t's key and value hold t
    cache.append(x[:3], x[:3])
    assert cache.keys[:, 0].tolist() == [0, 1, 2]
    cache.append(x[3:5], x[3:5])  # wraps inside one append
    assert cache.keys[:, 0].tolist() == [1, 2, 3, 4] and cache.positions.tolist() == [1, 2, 3, 4]
    cache.append(x[5:11], x[5:11])  # more than the buffer in one append: the last 4 stay
    assert cache.keys[:, 0].tolist() == [7, 8, 9, 10] and cache.values[:, 1].tolist() == [7, 8, 9, 10]
    assert cache.positions.tolist() == [7, 8, 9, 10] and cache.seen == 11
    assert cache.nbytes == 2 * 4 * 2 * 4 and "seen=11" in repr(cache)
    # the rolled cache's attention equals attention over the last 4 tokens
    q = torch.ones(1, 2, device=device)
    out, _ = cache.attend(q)
    torch.testing.assert_close(out, attention(q, x[7:11], x[7:11])[0])
    with pytest.raises(ValueError, match="only the last token's query"):
        cache.attend(torch.ones(2, 2, device=device))
    with pytest.raises(ValueError, match=r"needs key \(1, 2\)"):
        cache.append(torch.zeros(1, 3, device=device), torch.zeros(1, 2, device=device))
    cache.reset()
    assert len(cache) == 0 and cache.seen == 0


def test_errors():
    with pytest.raises(ValueError, match=r"window = 3 keys must exceed num_sinks = 4"):
        StreamingCache(4, 3)
    with pytest.raises(ValueError, match=r"window = 4 keys must exceed num_sinks = 4.*window >= 5"):
        StreamingCache(4, 4)
    with pytest.raises(ValueError, match="window = 2 keys must exceed num_sinks = 2"):
        streaming_mask(5, 2, 2)
    with pytest.raises(ValueError, match="num_sinks must be >= 0"):
        StreamingCache(-1, 3)
    with pytest.raises(ValueError, match="positions must be one of"):
        StreamingCache(1, 3, positions="absolute")
    cache = StreamingCache(1, 3)
    with pytest.raises(ValueError, match="empty"):
        _ = cache.keys
    q, k, v = stream([1], 4, 2, 2, dtype=torch.float32, device="cpu")
    cache.append(k[..., :2, :], v[..., :2, :])
    assert cache.positions.tolist() == [0, 1] and cache.original_positions.tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"\(\.\.\., 1, d_k\).*step"):
        cache.attend(q[..., :2, :])
    with pytest.raises(ValueError, match="same t tokens"):
        cache.step(q[..., :2, :], k[..., :3, :], v[..., :3, :])
