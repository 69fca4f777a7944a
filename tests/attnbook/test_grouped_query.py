"""Grouped-query and multi-query attention (chapter 9): equal to repeating the key and value heads,
to PyTorch's ``scaled_dot_product_attention(..., enable_gqa=True)``, and to multi-head attention
when every query head has its own key head; masks per head; the KV-cache bytes; the errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import KVCache, attention, causal_mask, grouped_query_attention, kv_cache_bytes, padding_mask

from ..conftest import tolerances

F64 = torch.float64
PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def heads(batch, h_q, h_kv, n, m, d_k, d_v, *, dtype=F64, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, h_q, n, d_k, generator=g, dtype=F64).to(device=device, dtype=dtype)
    k = torch.randn(*batch, h_kv, m, d_k, generator=g, dtype=F64).to(device=device, dtype=dtype)
    v = torch.randn(*batch, h_kv, m, d_v, generator=g, dtype=F64).to(device=device, dtype=dtype)
    return q, k, v


@PROPERTY
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    h_kv=st.integers(1, 3),
    groups=st.integers(1, 4),
    n=st.integers(1, 7),
    m=st.integers(1, 7),
    d_k=st.integers(1, 5),
    d_v=st.integers(1, 4),
    seed=st.integers(0, 10**6),
)
def test_equals_repeating_the_key_value_heads(device, dtype, batch, h_kv, groups, n, m, d_k, d_v, seed):
    q, k, v = heads(batch, h_kv * groups, h_kv, n, m, d_k, d_v, dtype=dtype, device=device, seed=seed)
    out, weights = grouped_query_attention(q, k, v)
    # query head h uses key head h // groups: repeat_interleave, not repeat (which would give h % H_kv)
    k_rep, v_rep = k.repeat_interleave(groups, dim=-3), v.repeat_interleave(groups, dim=-3)
    expected, expected_weights = attention(q, k_rep, v_rep)
    assert out.shape == (*batch, h_kv * groups, n, d_v) and weights.shape == (*batch, h_kv * groups, n, m)
    assert_close(out, expected, **tolerances(dtype))
    assert_close(weights, expected_weights, **tolerances(dtype))
    sdpa = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert_close(out, sdpa, **tolerances(dtype))
    fused, none = grouped_query_attention(q, k, v, need_weights=False)
    assert none is None
    assert_close(fused, expected, **tolerances(dtype))


def test_head_h_uses_key_head_h_over_g(device):
    """Each query head, one at a time, against the key head h // g."""
    q, k, v = heads((2,), 6, 2, 5, 4, 3, 3, device=device, seed=1)
    out, _ = grouped_query_attention(q, k, v)
    for h in range(6):
        assert_close(out[:, h], attention(q[:, h], k[:, h // 3], v[:, h // 3])[0])
    wrong = attention(q, k.repeat(1, 3, 1, 1), v.repeat(1, 3, 1, 1))[0]  # tiles the heads: h % H_kv
    assert not torch.allclose(out, wrong)


def test_multi_head_and_multi_query_are_the_ends(device):
    q, k, v = heads((2,), 4, 4, 5, 6, 3, 2, device=device, seed=2)
    assert_close(grouped_query_attention(q, k, v)[0], attention(q, k, v)[0])  # H_kv = H_q: multi-head
    k1, v1 = k[:, :1], v[:, :1]  # H_kv = 1: multi-query, every query head shares one key and value head
    out, _ = grouped_query_attention(q, k1, v1)
    assert_close(out, attention(q, k1, v1)[0])  # plain broadcasting over the head axis


@pytest.mark.parametrize("need_weights", [True, False])
def test_masks_per_head_and_shared(device, dtype, need_weights):
    q, k, v = heads((2,), 6, 3, 7, 7, 4, 5, dtype=dtype, device=device, seed=3)
    k_rep, v_rep = k.repeat_interleave(2, dim=-3), v.repeat_interleave(2, dim=-3)
    causal = causal_mask(7, device=device)  # (n, m): the same for every head
    padded = padding_mask([7, 4], 7, device=device)[:, None, None, :] & causal  # (batch, 1, n, m)
    g = torch.Generator().manual_seed(4)
    per_head = torch.rand(2, 6, 7, 7, generator=g).to(device) > 0.4  # (batch, H_q, n, m), some rows empty
    bias = torch.randn(6, 7, 7, generator=g, dtype=F64).to(device=device, dtype=dtype)  # float, per head
    keys_only = padding_mask([7, 4], 7, device=device)[:, None, None, :]  # (batch, 1, 1, m)
    keys_per_head = torch.rand(1, 6, 1, 7, generator=g).to(device) > 0.3  # (1, H_q, 1, m)
    row = torch.rand(7, generator=g).to(device) > 0.5  # (m,)
    for mask in (causal, padded, per_head, bias, keys_only, keys_per_head, row):
        out, _ = grouped_query_attention(q, k, v, mask=mask, need_weights=need_weights)
        expected = F.scaled_dot_product_attention(q, k_rep, v_rep, attn_mask=mask if mask.ndim > 1 else mask[None])
        assert_close(out, expected, **tolerances(dtype))
        assert_close(out, attention(q, k_rep, v_rep, mask=mask)[0], **tolerances(dtype))


def test_scale_and_broadcast_batch(device):
    q, _, _ = heads((3,), 4, 2, 5, 6, 3, 2, device=device, seed=5)
    _, k, v = heads((1,), 4, 2, 5, 6, 3, 2, device=device, seed=6)  # keys and values shared by the batch
    for need_weights in (True, False):
        out, _ = grouped_query_attention(q, k, v, scale=0.3, need_weights=need_weights)
        k_rep, v_rep = k.repeat_interleave(2, dim=-3), v.repeat_interleave(2, dim=-3)
        assert_close(out, attention(q, k_rep, v_rep, scale=0.3)[0])


def test_gradients_reach_the_shared_heads():
    q, k, v = heads((), 4, 2, 3, 3, 2, 2, seed=7)
    k.requires_grad_()
    grouped_query_attention(q, k, v)[0].sum().backward()
    k2 = k.detach().clone().requires_grad_()
    attention(q, k2.repeat_interleave(2, dim=-3), v.repeat_interleave(2, dim=-3))[0].sum().backward()
    assert_close(k.grad, k2.grad)  # the gradient of a shared head sums over its group


def test_kv_cache_bytes_formula_and_measured(device):
    assert kv_cache_bytes(4096, 8, 128, layers=32, dtype=torch.float16) == 2 * 32 * 8 * 4096 * 128 * 2
    assert kv_cache_bytes(10, 2, 4, batch=3, dtype=torch.float32) == 2 * 3 * 2 * 10 * 4 * 4
    assert kv_cache_bytes(4096, 32, 128, layers=32) == 4 * kv_cache_bytes(4096, 8, 128, layers=32)
    for h_kv in (1, 2, 8):
        cache = KVCache(max_len=16)
        _, k, v = heads((2,), 8, h_kv, 1, 16, 4, 4, dtype=torch.float32, device=device)
        cache.append(k, v)
        assert cache.keys.nbytes + cache.values.nbytes == kv_cache_bytes(16, h_kv, 4, batch=2, dtype=torch.float32)


def test_errors():
    q, k, v = heads((), 6, 4, 3, 3, 2, 2)
    with pytest.raises(ValueError, match="multiple"):
        grouped_query_attention(q, k, v)
    q, k, v = heads((), 4, 2, 3, 3, 2, 2)
    with pytest.raises(ValueError, match="H_kv"):
        grouped_query_attention(q, k, v[:1])
    with pytest.raises(ValueError, match="d_k"):
        grouped_query_attention(q, k[..., :1], v)
    with pytest.raises(ValueError, match="at least 3"):
        grouped_query_attention(q[0], k[0], v[0])
    with pytest.raises(TypeError, match="dtype"):
        grouped_query_attention(q, k.float(), v)
    with pytest.raises(ValueError, match="does not broadcast"):
        grouped_query_attention(q, k, v, mask=torch.ones(2, 3, 3, dtype=torch.bool))  # 2 heads, not 4
    with pytest.raises(ValueError, match="n_tokens"):
        kv_cache_bytes(-1, 2, 4)
