"""KVCache: decoding step by step equals causal attention over the whole sequence."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import attention, causal_mask
from attnbook.efficient.kv_cache import KVCache
from attnbook.efficient.tiled_attention import attention_rounding_bound

from ..conftest import tolerances

PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def sequence(batch, n, d_k, d_v, *, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, n, d_k, generator=g, dtype=dtype).to(device)
    k = torch.randn(*batch, n, d_k, generator=g, dtype=dtype).to(device)
    v = torch.randn(*batch, n, d_v, generator=g, dtype=dtype).to(device)
    return q, k, v


@PROPERTY
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    n=st.integers(1, 10),
    d_k=st.integers(1, 5),
    d_v=st.integers(1, 4),
    prefill=st.integers(0, 10),
    seed=st.integers(0, 10**6),
)
def test_decoding_equals_full_causal_attention(device, dtype, batch, n, d_k, d_v, prefill, seed):
    q, k, v = sequence(batch, n, d_k, d_v, dtype=dtype, device=device, seed=seed)
    expected, expected_weights = attention(q, k, v, mask=causal_mask(n, device=device))
    cache = KVCache(max_len=n)
    prefill = min(prefill, n)
    rows = []
    if prefill:  # a prompt of several tokens at once, then one token per step
        out, _ = cache.step(q[..., :prefill, :], k[..., :prefill, :], v[..., :prefill, :])
        rows.append(out)
    for t in range(prefill, n):
        out, weights = cache.step(q[..., t : t + 1, :], k[..., t : t + 1, :], v[..., t : t + 1, :], need_weights=True)
        assert weights.shape[-1] == t + 1  # step t sees t + 1 keys
        assert_close(weights[..., 0, :], expected_weights[..., t, : t + 1], **tolerances(dtype))
        rows.append(out)
    assert len(cache) == n
    assert_close(torch.cat(rows, dim=-2), expected, **tolerances(dtype))
    mask = causal_mask(n, device=device)  # and within the derived rounding bound, entry by entry (chapter 8)
    bound = attention_rounding_bound(q, k, v, mask) + attention_rounding_bound(q, k, v, mask, blocks=n)
    assert ((torch.cat(rows, dim=-2) - expected).abs() <= bound).all()
    assert_close(cache.keys, k)
    assert_close(cache.values, v)


def test_a_cache_without_the_causal_mask_would_be_wrong(device):
    """Attending from the prompt's queries to all its keys (no lower-right mask) lets them see the future."""
    q, k, v = sequence((), 5, 3, 2, dtype=torch.float64, device=device)
    cache = KVCache(8)
    cache.append(k, v)
    right, _ = cache.attend(q)
    wrong, _ = attention(q, cache.keys, cache.values)
    assert_close(right, attention(q, k, v, mask=causal_mask(5, device=device))[0])
    assert not torch.allclose(right, wrong)


def test_reset_reuses_the_buffer(device):
    q, k, v = sequence((2,), 4, 3, 2, dtype=torch.float64, device=device)
    cache = KVCache(4)
    cache.append(k, v)
    buffer = cache.keys.data_ptr()
    cache.reset()
    assert len(cache) == 0
    cache.append(k[:, :2], v[:, :2])
    assert cache.keys.data_ptr() == buffer and cache.keys.shape == (2, 2, 3)
    out, _ = cache.attend(q[:, 1:2])
    assert_close(out, attention(q[:, 1:2], k[:, :2], v[:, :2])[0])


class TestErrors:
    def test_max_len(self):
        with pytest.raises(ValueError, match=r"max_len must be > 0 \(a positive int\), got 0"):
            KVCache(0)
        with pytest.raises(TypeError, match="max_len must be an int, got float"):
            KVCache(3.0)

    def test_overflow(self):
        cache = KVCache(3)
        cache.append(torch.zeros(2, 4), torch.zeros(2, 5))
        with pytest.raises(ValueError, match=r"at most max_len = 3 tokens; it has 2 and 2 more"):
            cache.append(torch.zeros(2, 4), torch.zeros(2, 5))
        assert len(cache) == 2  # a failed append changes nothing

    def test_shape_dtype_device_changes(self):
        cache = KVCache(5)
        cache.append(torch.zeros(2, 1, 4), torch.zeros(2, 1, 3))
        with pytest.raises(ValueError, match=r"appending t = 1 tokens needs key \(2, 1, 4\) and value \(2, 1, 3\)"):
            cache.append(torch.zeros(2, 1, 5), torch.zeros(2, 1, 3))
        with pytest.raises(ValueError, match=r"needs key \(2, 1, 4\)"):
            cache.append(torch.zeros(3, 1, 4), torch.zeros(3, 1, 3))
        with pytest.raises(TypeError, match=r"cached: torch.float32, key: torch.float64"):
            cache.append(torch.zeros(2, 1, 4, dtype=torch.float64), torch.zeros(2, 1, 3, dtype=torch.float64))

    def test_key_value_mismatch(self):
        with pytest.raises(ValueError, match=r"key \(2, 4\) and value \(3, 5\)"):
            KVCache(5).append(torch.zeros(2, 4), torch.zeros(3, 5))
        with pytest.raises(TypeError, match=r"key must have a floating-point dtype"):
            KVCache(5).append(torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 5))

    def test_attend(self):
        cache = KVCache(5)
        with pytest.raises(ValueError, match="the cache is empty"):
            cache.attend(torch.zeros(1, 4))
        cache.append(torch.zeros(2, 4), torch.zeros(2, 3))
        with pytest.raises(ValueError, match=r"query \(3, 4\) has t = 3 rows but the cache holds only 2 tokens"):
            cache.attend(torch.zeros(3, 4))
        with pytest.raises(ValueError, match=r"query \(1, 5\) and key \(2, 4\)"):
            cache.attend(torch.zeros(1, 5))
