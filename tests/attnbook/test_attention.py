"""attention: against PyTorch's scaled_dot_product_attention and a plain numpy implementation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import attention, causal_mask, padding_mask

from ..conftest import tolerances


def qkv(shape_q, shape_k, d_v, *, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape_q, generator=g, dtype=dtype).to(device)
    k = torch.randn(*shape_k, generator=g, dtype=dtype).to(device)
    v = torch.randn(*shape_k[:-1], d_v, generator=g, dtype=dtype).to(device)
    return q, k, v


def check_against_sdpa(q, k, v, mask=None, **sdpa_kwargs):
    out, weights = attention(q, k, v, mask=mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **sdpa_kwargs)
    assert_close(out, expected, **tolerances(q.dtype))
    fast, none = attention(q, k, v, mask=mask, need_weights=False)
    assert none is None
    assert_close(fast, out, **tolerances(q.dtype))
    return out, weights


@pytest.mark.parametrize(
    "shape_q, shape_k",
    [((5, 8), (7, 8)), ((2, 5, 8), (2, 7, 8)), ((2, 3, 5, 8), (2, 3, 7, 8)), ((2, 3, 5, 8), (1, 1, 7, 8))],
    ids=["no-batch", "batch", "batch-heads", "broadcast-kv"],
)
def test_unmasked_matches_sdpa(device, dtype, shape_q, shape_k):
    q, k, v = qkv(shape_q, shape_k, 6, dtype=dtype, device=device)
    out, weights = check_against_sdpa(q, k, v)
    assert out.shape == (*torch.broadcast_shapes(shape_q[:-2], shape_k[:-2]), 5, 6)
    assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))


def test_bool_mask_matches_sdpa(device, dtype):
    q, k, v = qkv((2, 3, 5, 8), (2, 3, 7, 8), 4, dtype=dtype, device=device)
    g = torch.Generator().manual_seed(1)
    mask = (torch.rand(2, 3, 5, 7, generator=g) > 0.4).to(device)
    mask[..., 0] = True  # no fully masked rows here (they get their own test)
    _, weights = check_against_sdpa(q, k, v, mask)
    assert (weights[~mask] == 0).all()


def test_float_mask_matches_sdpa(device, dtype):
    q, k, v = qkv((2, 5, 8), (2, 7, 8), 4, dtype=dtype, device=device)
    g = torch.Generator().manual_seed(2)
    additive = torch.randn(2, 5, 7, generator=g, dtype=dtype).to(device)
    additive[:, :, 3] = -math.inf
    _, weights = check_against_sdpa(q, k, v, additive)
    assert (weights[:, :, 3] == 0).all()


@pytest.mark.parametrize("n, m", [(6, 6), (4, 6), (6, 4)])
def test_causal_mask_matches_is_causal(device, dtype, n, m):
    # SDPA's is_causal aligns the diagonal at the top-left corner, as causal_mask does by default
    q, k, v = qkv((2, n, 8), (2, m, 8), 3, dtype=dtype, device=device)
    out, _ = attention(q, k, v, mask=causal_mask(n, m, device=device))
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), **tolerances(dtype))


def test_causal_self_attention_ignores_the_future(device, dtype):
    q, k, v = qkv((6, 4), (6, 4), 3, dtype=dtype, device=device)
    mask = causal_mask(6, device=device)
    out, weights = attention(q, k, v, mask=mask)
    assert (weights.triu(diagonal=1) == 0).all()
    k2, v2 = k.clone(), v.clone()
    k2[4:] += 10.0
    v2[4:] -= 10.0
    out2, _ = attention(q, k2, v2, mask=mask)
    assert_close(out2[:4], out[:4], **tolerances(dtype))  # rows 0..3 never see keys 4 and 5
    assert not torch.allclose(out2[4:], out[4:])


def test_fully_masked_rows_give_zeros_like_sdpa(device, dtype):
    q, k, v = qkv((2, 5, 8), (2, 7, 8), 4, dtype=dtype, device=device)
    mask = torch.ones(2, 5, 7, dtype=torch.bool, device=device)
    mask[0, 1] = False
    mask[1, 4] = False
    additive = torch.zeros(2, 5, 7, dtype=dtype, device=device).masked_fill(~mask, -math.inf)
    for m in (mask, additive):
        out, weights = check_against_sdpa(q, k, v, m)
        assert not torch.isnan(out).any()
        assert (out[0, 1] == 0).all() and (out[1, 4] == 0).all()
        assert (weights[0, 1] == 0).all() and (weights[1, 4] == 0).all()


def test_padding_mask_hides_padded_keys(device, dtype):
    lengths = [3, 7, 5]
    q, k, v = qkv((3, 4, 8), (3, 7, 8), 2, dtype=dtype, device=device)
    mask = padding_mask(lengths, 7, device=device)[:, None, :]  # (batch, 1, m) -> broadcast over queries
    out, weights = check_against_sdpa(q, k, v, mask)
    for b, length in enumerate(lengths):
        alone, _ = attention(q[b], k[b, :length], v[b, :length])
        assert_close(out[b], alone, **tolerances(dtype))
        assert (weights[b, :, length:] == 0).all()


def test_scale_argument(device, dtype):
    q, k, v = qkv((5, 8), (7, 8), 4, dtype=dtype, device=device)
    out, _ = attention(q, k, v, scale=0.3)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.3), **tolerances(dtype))


def test_half_precision_on_the_fused_path(device):
    dtype = torch.float16 if device.type != "cpu" else torch.bfloat16
    q, k, v = qkv((2, 5, 8), (2, 7, 8), 4, dtype=dtype, device=device)
    out, _ = attention(q, k, v)
    fast, _ = attention(q, k, v, need_weights=False)
    assert out.dtype == dtype and fast.dtype == dtype
    assert_close(out.float(), fast.float(), atol=2e-2, rtol=2e-2)


def numpy_attention(q, k, v, keep=None):
    """The formula in plain numpy, one query at a time, for comparison."""
    out = np.zeros((q.shape[0], v.shape[1]))
    for i in range(q.shape[0]):
        s = np.array([q[i] @ k[j] / np.sqrt(q.shape[1]) for j in range(k.shape[0])])
        allowed = np.ones(k.shape[0], bool) if keep is None else keep[i]
        if not allowed.any():
            continue
        e = np.where(allowed, np.exp(s - s[allowed].max()), 0.0)
        out[i] = (e / e.sum()) @ v
    return out


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 5), st.integers(1, 6), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**31 - 1), st.booleans()
)
def test_matches_numpy(n, m, d_k, d_v, seed, masked):
    rng = np.random.default_rng(seed)
    q, k, v = rng.normal(size=(n, d_k)), rng.normal(size=(m, d_k)), rng.normal(size=(m, d_v))
    keep = rng.random((n, m)) > 0.3 if masked else None
    out, _ = attention(
        torch.from_numpy(q),
        torch.from_numpy(k),
        torch.from_numpy(v),
        mask=None if keep is None else torch.from_numpy(keep),
    )
    np.testing.assert_allclose(out.numpy(), numpy_attention(q, k, v, keep), atol=1e-12)


def test_huge_scores_stay_finite(device, dtype):
    q, k, v = qkv((4, 8), (6, 8), 3, dtype=dtype, device=device)
    out, weights = attention(q * 1e3, k * 1e3, v)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()


class TestErrors:
    def test_non_tensor(self):
        with pytest.raises(TypeError, match="query must be a torch.Tensor"):
            attention([[1.0]], torch.zeros(1, 1), torch.zeros(1, 1))

    def test_integer_dtype(self):
        with pytest.raises(TypeError, match=r"key must have a floating-point dtype, got torch.int64"):
            attention(torch.zeros(2, 3), torch.zeros(4, 3, dtype=torch.long), torch.zeros(4, 3))

    def test_mixed_dtypes(self):
        with pytest.raises(TypeError, match=r"query: torch.float32, key: torch.float64"):
            attention(torch.zeros(2, 3), torch.zeros(4, 3, dtype=torch.float64), torch.zeros(4, 3))

    def test_d_k_mismatch(self):
        with pytest.raises(ValueError, match=r"query \(2, 3\) and key \(4, 5\)"):
            attention(torch.zeros(2, 3), torch.zeros(4, 5), torch.zeros(4, 5))

    def test_m_mismatch(self):
        with pytest.raises(ValueError, match=r"key \(4, 3\) and value \(5, 2\)"):
            attention(torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(5, 2))

    def test_one_dimensional_query(self):
        with pytest.raises(ValueError, match=r"query must have at least 2 dimensions .* got shape \(3,\)"):
            attention(torch.zeros(3), torch.zeros(4, 3), torch.zeros(4, 3))

    def test_batch_mismatch(self):
        with pytest.raises(ValueError, match=r"batch dimensions do not broadcast"):
            attention(torch.zeros(2, 5, 3), torch.zeros(3, 4, 3), torch.zeros(3, 4, 3))

    def test_mask_shape(self):
        with pytest.raises(ValueError, match=r"mask of shape \(4, 5\) does not broadcast to the score shape \(5, 4\)"):
            attention(torch.zeros(5, 3), torch.zeros(4, 3), torch.zeros(4, 3), mask=torch.ones(4, 5, dtype=torch.bool))

    def test_mask_that_would_enlarge_the_output(self):
        with pytest.raises(ValueError, match=r"mask of shape \(2, 5, 4\)"):
            attention(
                torch.zeros(5, 3), torch.zeros(4, 3), torch.zeros(4, 3), mask=torch.ones(2, 5, 4, dtype=torch.bool)
            )

    def test_integer_mask(self):
        with pytest.raises(TypeError, match=r"mask must be boolean .* got torch.int64"):
            attention(torch.zeros(5, 3), torch.zeros(4, 3), torch.zeros(4, 3), mask=torch.ones(5, 4, dtype=torch.long))
