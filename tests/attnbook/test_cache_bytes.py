"""Cache accounting: bytes per token of multi-head, multi-query, grouped-query and latent attention, from
a configuration's numbers, against the measured size of real cache tensors (chapter 13)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbook import (
    KVCache,
    LatentCache,
    MultiHeadLatentAttention,
    cache_bytes,
    cache_bytes_per_token,
    cache_numbers_per_token,
    kv_cache_bytes,
)

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def measured(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@settings(max_examples=40, deadline=None)
@given(
    scheme=st.sampled_from(["multi_head", "multi_query", "grouped_query"]),
    num_heads=st.integers(1, 6),
    groups=st.integers(1, 3),
    d_head=st.integers(1, 5),
    d_value=st.integers(1, 5),
    n=st.integers(1, 6),
    batch=st.integers(1, 3),
    dtype=st.sampled_from(DTYPES),
)
def test_key_value_schemes_match_the_cache_tensors(scheme, num_heads, groups, d_head, d_value, n, batch, dtype):
    """A KVCache filled with the keys and values a layer of that scheme stores holds exactly the computed bytes."""
    h_kv = {"multi_head": num_heads * groups, "multi_query": 1, "grouped_query": num_heads}[scheme]
    cache = KVCache(max_len=n)
    cache.append(torch.zeros(batch, h_kv, n, d_head, dtype=dtype), torch.zeros(batch, h_kv, n, d_value, dtype=dtype))
    config = dict(num_heads=num_heads * groups, kv_heads=num_heads, d_head=d_head, d_value=d_value, dtype=dtype)
    assert measured(cache.keys, cache.values) == cache_bytes(scheme, n, batch=batch, **config)
    assert measured(cache._keys, cache._values) == batch * n * cache_bytes_per_token(scheme, **config)
    if d_value == d_head:  # chapter 9's formula, the grouped-query row
        assert cache_bytes(scheme, n, batch=batch, **config) == kv_cache_bytes(
            n, h_kv, d_head, batch=batch, dtype=dtype
        )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_latent_scheme_matches_the_latent_cache_of_the_module(dtype):
    layers, n, batch = 3, 7, 2
    modules = [MultiHeadLatentAttention(48, 4, 12, 8, 4, d_query_latent=16).to(dtype) for _ in range(layers)]
    caches = [LatentCache(max_len=n) for _ in range(layers)]
    x = torch.randn(batch, n, 48).to(dtype)
    with torch.no_grad():
        for mla, cache in zip(modules, caches):
            mla(x, cache=cache)
    total = sum(cache.nbytes for cache in caches)
    assert total == sum(measured(c.latents, c.rope_keys) for c in caches)
    assert total == cache_bytes("latent", n, batch=batch, d_latent=12, d_rope=4, layers=layers, dtype=dtype)
    assert cache_bytes_per_token("latent", d_latent=12, d_rope=4, dtype=dtype) * n * batch == caches[0].nbytes


def test_published_configurations():
    """DeepSeek-V3 (61 layers, latent 512, rotary 64) against a grouped-query model of similar size
    (Llama 3.1 405B: 126 layers, 8 key-value heads of 128) and multi-head attention with V3's 128 heads."""
    v3 = cache_bytes_per_token("latent", d_latent=512, d_rope=64, layers=61)
    assert v3 == 61 * 576 * 2 == 70_272  # about 69 KiB per token in bfloat16
    llama = cache_bytes_per_token("grouped_query", kv_heads=8, d_head=128, layers=126)
    assert llama == 126 * 2 * 8 * 128 * 2 == 516_096
    mha = cache_bytes_per_token("multi_head", num_heads=128, d_head=192, d_value=128, layers=61)
    assert mha == 61 * 128 * (192 + 128) * 2
    assert mha / v3 > 71  # latent attention stores 1/71 of what multi-head attention with V3's heads would
    assert cache_numbers_per_token("multi_query", d_head=128) == 256


def test_errors():
    with pytest.raises(ValueError, match="scheme must be one of"):
        cache_bytes_per_token("sliding", d_head=4)
    with pytest.raises(ValueError, match=r"'latent' needs d_latent, d_rope; missing d_rope"):
        cache_bytes_per_token("latent", d_latent=512)
    with pytest.raises(ValueError, match="missing kv_heads"):
        cache_numbers_per_token("grouped_query", d_head=4)
    with pytest.raises(ValueError, match="d_head must be > 0"):
        cache_numbers_per_token("multi_query", d_head=0)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        cache_bytes_per_token("multi_query", d_head=4, dtype="float16")
    with pytest.raises(ValueError, match="n_tokens must be >= 0"):
        cache_bytes("multi_query", -1, d_head=4)
