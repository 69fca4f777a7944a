"""Attention with sink logits: the formula, the proof-carrying virtual key, the window, the errors (chapter 13)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnbook import (
    attention,
    causal_mask,
    grouped_query_attention,
    sink_attention,
    sinks_as_virtual_key,
    sliding_window_mask,
)
from attnbook.efficient.tiled_attention import attention_rounding_bound

from ..conftest import tolerances

PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def inputs(batch, h, h_kv, n, m, d_k, d_v, *, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, h, n, d_k, generator=g, dtype=torch.float64) * 1.5
    k = torch.randn(*batch, h_kv, m, d_k, generator=g, dtype=torch.float64)
    v = torch.randn(*batch, h_kv, m, d_v, generator=g, dtype=torch.float64)
    sinks = torch.randn(h, generator=g, dtype=torch.float64) * 2
    return (t.to(dtype=dtype, device=device) for t in (q, k, v, sinks))


def test_sink_attention_is_the_formula(device, dtype):
    """w_ij = e^{s_ij} / (e^{sigma_h} + sum_l e^{s_il}), written out with exp for one head at a time."""
    q, k, v, sinks = inputs([2], 4, 2, 5, 6, 3, 2, dtype=dtype, device=device)
    mask = causal_mask(5, 6, align="lower_right", device=device)
    out, weights = sink_attention(q, k, v, sinks, mask=mask)
    for h in range(4):
        s = q[:, h] @ k[:, h // 2].transpose(-2, -1) / math.sqrt(3)  # (2, 5, 6)
        e = torch.exp(s).masked_fill(~mask, 0)  # (2, 5, 6)
        w = e / (torch.exp(sinks[h]) + e.sum(-1, keepdim=True))
        torch.testing.assert_close(weights[:, h], w, **tolerances(dtype))
        torch.testing.assert_close(out[:, h], w @ v[:, h // 2], **tolerances(dtype))
    share = 1 - weights.sum(-1)  # the sink's share, in (0, 1) for every row
    assert ((share > 0) & (share < 1)).all()


@PROPERTY
@given(
    batch=st.lists(st.integers(1, 2), max_size=2),
    h_kv=st.integers(1, 3),
    groups=st.integers(1, 3),
    n=st.integers(1, 6),
    m=st.integers(1, 7),
    d_k=st.integers(1, 5),
    d_v=st.integers(1, 4),
    window=st.integers(0, 4),
    seed=st.integers(0, 10**6),
)
def test_sink_equals_a_virtual_key_with_zero_value(device, dtype, batch, h_kv, groups, n, m, d_k, d_v, window, seed):
    """Proof: the augmented query [q, 1] scores [k, 0] as before and the virtual key [0, sigma / scale] at
    sigma; the virtual value 0 adds nothing to the sum. So attention over m + 1 keys = sink attention,
    for every size, with or without a window (window 0: no mask)."""
    h = h_kv * groups
    q, k, v, sinks = inputs(batch, h, h_kv, n, m, d_k, d_v, dtype=dtype, device=device, seed=seed)
    mask = sliding_window_mask(n, window, m, align="lower_right", device=device) if window else None
    out, weights = sink_attention(q, k, v, sinks, mask=mask)
    q_v, k_v, v_v, mask_v, scale = sinks_as_virtual_key(q, k, v, sinks, mask=mask)
    assert k_v.shape[-2] == m + 1 and (v_v[..., -1, :] == 0).all()
    expected, expected_w = attention(q_v, k_v, v_v, mask=mask_v, scale=scale)
    # the virtual key's score is sigma_h exactly up to rounding: one product (sigma / scale) * scale
    torch.testing.assert_close(weights, expected_w[..., :-1], **tolerances(dtype))
    bound = attention_rounding_bound(q_v, k_v, v_v, mask_v, scale=scale)  # (..., n, 1), for either computation
    assert ((out - expected).abs() <= 2 * bound).all()


def test_a_fully_masked_row_gives_all_weight_to_the_sink(device, dtype):
    q, k, v, sinks = inputs([1], 2, 2, 3, 4, 3, 2, dtype=dtype, device=device)
    mask = torch.ones(3, 4, dtype=torch.bool, device=device)
    mask[1] = False
    out, weights = sink_attention(q, k, v, sinks, mask=mask)
    assert (weights[..., 1, :] == 0).all() and (out[..., 1, :] == 0).all()
    assert torch.isfinite(out).all()


def test_sinks_and_a_window(device, dtype):
    """With the window of gpt-oss's even layers (a query sees itself and W - 1 earlier keys)."""
    n, w = 9, 3
    q, k, v, sinks = inputs([2], 4, 1, n, n, 4, 3, dtype=dtype, device=device, seed=3)
    window = sliding_window_mask(n, w, device=device)
    out, weights = sink_attention(q, k, v, sinks, mask=window)
    assert (weights.masked_fill(window, 0) == 0).all()  # nothing outside the window
    assert ((weights > 0).sum(-1)[..., w - 1 :] == w).all()
    q_v, k_v, v_v, mask_v, scale = sinks_as_virtual_key(q, k, v, sinks, mask=window)
    torch.testing.assert_close(out, attention(q_v, k_v, v_v, mask=mask_v, scale=scale)[0], **tolerances(dtype))
    # a float mask (0 / -inf) gives the same
    additive = torch.zeros(n, n, dtype=dtype, device=device).masked_fill(~window, -math.inf)
    torch.testing.assert_close(sink_attention(q, k, v, sinks, mask=additive)[0], out, **tolerances(dtype))
    _, _, _, mask_f, _ = sinks_as_virtual_key(q, k, v, sinks, mask=additive)
    assert mask_f.dtype == dtype and (mask_f[..., -1] == 0).all()


def test_a_very_negative_sink_is_plain_attention_and_the_sink_matters_otherwise(device, dtype):
    q, k, v, sinks = inputs([2], 4, 2, 5, 5, 3, 2, dtype=dtype, device=device, seed=4)
    mask = causal_mask(5, device=device)
    plain, _ = grouped_query_attention(q, k, v, mask=mask)
    none, _ = sink_attention(q, k, v, torch.full_like(sinks, -math.inf), mask=mask)
    torch.testing.assert_close(none, plain, **tolerances(dtype))
    with_sink, _ = sink_attention(q, k, v, sinks, mask=mask)
    assert (with_sink - plain).abs().amax() > 0.05  # the control: the sink changes the output


def test_need_weights_false_returns_none(device):
    q, k, v, sinks = inputs([1], 2, 1, 3, 3, 2, 2, dtype=torch.float32, device=device)
    out, weights = sink_attention(q, k, v, sinks, need_weights=False)
    assert weights is None
    torch.testing.assert_close(out, sink_attention(q, k, v, sinks)[0])


def test_errors_name_the_shapes():
    q, k, v, sinks = inputs([1], 4, 2, 3, 5, 2, 2, dtype=torch.float32, device="cpu")
    with pytest.raises(
        ValueError,
        match=r"sinks must hold one logit per head, shape \(4,\) for scores of shape \(1, 4, 3, 5\) .*got shape \(2,\)",
    ):
        sink_attention(q, k, v, sinks[:2])
    with pytest.raises(ValueError, match=r"shape \(4,\).*got shape \(4, 1\)"):
        sink_attention(q, k, v, sinks[:, None])
    with pytest.raises(TypeError, match="sinks must have a floating-point dtype"):
        sink_attention(q, k, v, torch.zeros(4, dtype=torch.long))
    with pytest.raises(TypeError, match="dtype"):
        sink_attention(q, k, v, sinks.double())
    with pytest.raises(ValueError, match="not divisible"):
        sink_attention(q[:, :3], k, v, sinks[:3])
    with pytest.raises(ValueError, match="mask"):
        sink_attention(q, k, v, sinks, mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="sinks"):
        sinks_as_virtual_key(q, k, v, sinks[:3])
