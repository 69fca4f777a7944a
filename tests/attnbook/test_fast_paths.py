"""Fast paths: without weights attention uses PyTorch's fused kernel, with weights the explicit
formula, and both give the same numbers."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import attnbook
from attnbook import attention, causal_mask

from ..conftest import tolerances

PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def spy_on_sdpa():
    """Patch F.scaled_dot_product_attention with a wrapper that counts its calls."""
    return mock.patch.object(F, "scaled_dot_product_attention", wraps=F.scaled_dot_product_attention)


def test_attention_uses_the_fused_kernel_only_without_weights(device):
    q, k, v = (torch.randn(2, 5, 4, device=device) for _ in range(3))
    with spy_on_sdpa() as sdpa:
        out, weights = attention(q, k, v)
        assert sdpa.call_count == 0 and weights is not None
        fast, none = attention(q, k, v, need_weights=False)
        assert sdpa.call_count == 1 and none is None
    assert_close(fast, out, **tolerances(q.dtype))


mask_kinds = st.sampled_from(["none", "bool", "bool-broadcast", "float", "causal", "empty-rows"])


def make_mask(kind, batch, n, m, g, dtype, device):
    if kind == "none":
        return None
    if kind == "bool":
        return (torch.rand(*batch, n, m, generator=g) > 0.3).to(device)
    if kind == "bool-broadcast":  # (1, m): the same key mask for every query
        return (torch.rand(1, m, generator=g) > 0.3).to(device)
    if kind == "float":
        additive = torch.randn(*batch, n, m, generator=g, dtype=dtype)
        additive[torch.rand(*batch, n, m, generator=g) > 0.8] = -math.inf
        return additive.to(device)
    if kind == "causal":
        return causal_mask(n, m, device=device)
    keep = torch.rand(*batch, n, m, generator=g) > 0.3
    keep[..., n // 2, :] = False  # one query with no key at all
    return keep.to(device)


@PROPERTY
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    n=st.integers(1, 9),
    m=st.integers(1, 9),
    d_k=st.integers(1, 6),
    d_v=st.integers(1, 5),
    kind=mask_kinds,
    scaled=st.booleans(),
    seed=st.integers(0, 10**6),
)
def test_fast_path_equals_explicit_formula(device, dtype, batch, n, m, d_k, d_v, kind, scaled, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, n, d_k, generator=g, dtype=dtype).to(device)
    k = torch.randn(*batch, m, d_k, generator=g, dtype=dtype).to(device)
    v = torch.randn(*batch, m, d_v, generator=g, dtype=dtype).to(device)
    mask = make_mask(kind, batch, n, m, g, dtype, device)
    scale = 0.37 if scaled else None
    explicit, weights = attention(q, k, v, mask=mask, scale=scale)
    fast, none = attention(q, k, v, mask=mask, scale=scale, need_weights=False)
    assert none is None and fast.shape == explicit.shape and fast.dtype == dtype
    assert not torch.isnan(fast).any() and not torch.isnan(explicit).any()
    assert_close(fast, explicit, **tolerances(dtype))
    # and both are the formula: weights from the package's softmax, times the values
    assert_close(explicit, weights @ v, **tolerances(dtype))


def test_fully_masked_rows_are_zero_on_both_paths(device, dtype):
    q, k, v = (torch.randn(4, 3, dtype=dtype, device=device) for _ in range(3))
    keep = torch.ones(4, 4, dtype=torch.bool, device=device)
    keep[1] = False
    for mask in (keep, torch.zeros(4, 4, dtype=dtype, device=device).masked_fill(~keep, -math.inf)):
        explicit, weights = attention(q, k, v, mask=mask)
        fast, _ = attention(q, k, v, mask=mask, need_weights=False)
        assert (explicit[1] == 0).all() and (fast[1] == 0).all() and (weights[1] == 0).all()


def test_explicit_path_keeps_gradients_finite_for_fully_masked_rows():
    q, k, v = (torch.randn(4, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    keep = torch.ones(4, 4, dtype=torch.bool)
    keep[2] = False
    attention(q, k, v, mask=keep)[0].square().sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))
    assert (q.grad[2] == 0).all()  # query 2 sees nothing, so nothing depends on it
    assert torch.autograd.gradcheck(lambda q, k, v: attention(q, k, v, mask=keep)[0], (q, k, v))


def test_explicit_path_does_not_modify_its_inputs():
    """The weights path works in place on its own scores; the inputs and the mask are left alone."""
    q, k, v = (torch.randn(2, 5, 4) for _ in range(3))
    keep = causal_mask(5)
    additive = torch.zeros(5, 5).masked_fill(~keep, -math.inf)
    copies = [x.clone() for x in (q, k, v, keep, additive)]
    attention(q, k, v, mask=keep)
    attention(q, k, v, mask=additive)
    for before, after in zip(copies, (q, k, v, keep, additive)):
        assert torch.equal(before, after)


def test_mask_larger_than_the_product_of_query_and_key():
    """Value's batch may enlarge the score shape; the mask then cannot be applied in place."""
    q, k = torch.randn(5, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    v = torch.randn(2, 4, 6, dtype=torch.float64)
    mask = torch.rand(2, 5, 4, generator=torch.Generator().manual_seed(0)) > 0.3
    out, weights = attention(q, k, v, mask=mask)
    fast, _ = attention(q, k, v, mask=mask, need_weights=False)
    assert weights.shape == (2, 5, 4)
    assert_close(fast, out)
    for b in range(2):
        assert_close(out[b], attention(q, k, v[b], mask=mask[b])[0])


@pytest.mark.skipif(not hasattr(attnbook, "MultiHeadAttention"), reason="attnbook.MultiHeadAttention not written yet")
def test_multi_head_attention_uses_the_fused_kernel_only_without_weights(device):
    torch.manual_seed(0)
    module = attnbook.MultiHeadAttention(8, 2, device=device)
    x = torch.randn(2, 5, 8, device=device)
    with torch.no_grad(), spy_on_sdpa() as sdpa:
        out, weights = module(x, x, x, need_weights=True)
        assert sdpa.call_count == 0 and weights is not None
        fast, none = module(x, x, x, need_weights=False)
        assert sdpa.call_count == 1 and none is None
    assert_close(fast, out)
