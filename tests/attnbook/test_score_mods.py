"""Scores changed by functions (chapter 12): soft-capping against its closed form and its properties,
ALiBi as a score_mod against chapter 9's bias, the dense reference ``attention_with_mods`` against
the course's ``attention`` and PyTorch's ``flex_attention`` (CPU, no compile, float64), and every
error."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention import flex_attention as flex

from attnbook import (
    alibi_bias,
    alibi_score_mod,
    alibi_slopes,
    attention,
    attention_scores,
    attention_with_mods,
    causal_mask,
    causal_mask_mod,
    document_ids_from_lengths,
    document_mask_mod,
    mask_from_mask_mod,
    prefix_lm_mask_mod,
    scores_from_score_mod,
    softcap,
    softcap_score_mod,
)

F64 = torch.float64
UNCOMPILED = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def qkv(batch, heads, n, m, d=4, d_v=3, *, device="cpu", dtype=F64, seed=0, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    shapes = ((batch, heads, n, d), (batch, heads, m, d), (batch, heads, m, d_v))
    return tuple((spread * torch.randn(*s, generator=g, dtype=F64)).to(device=device, dtype=dtype) for s in shapes)


def test_softcap_is_its_formula_entry_by_entry(device, dtype):
    g = torch.Generator().manual_seed(1)
    s = (20 * torch.randn(5, 7, generator=g, dtype=F64)).to(device=device, dtype=dtype)
    got = softcap(s, 5.0)
    assert got.dtype == dtype and got.device.type == device.type and got.shape == s.shape
    expected = torch.tensor([[5.0 * math.tanh(x / 5.0) for x in row] for row in s.double().cpu().tolist()], dtype=F64)
    tol = {"atol": 1e-14, "rtol": 1e-14} if dtype == F64 else {"atol": 1e-5, "rtol": 1e-6}
    torch.testing.assert_close(got.double().cpu(), expected, **tol)


@settings(max_examples=60, deadline=None)
@given(cap=st.floats(0.5, 100.0), scale=st.floats(0.01, 400.0))
def test_softcap_bounds_keeps_order_and_leaves_small_scores(cap, scale):
    s = torch.linspace(-scale, scale, 41, dtype=F64)
    c = softcap(s, cap)
    assert (c.abs() <= cap).all()  # bounded by the cap
    assert (c[1:] >= c[:-1]).all()  # increasing: the order of the scores stays
    assert (c.abs() <= s.abs()).all()  # |c tanh(s/c)| <= |s|
    small = s[s.abs() <= 0.1 * cap]
    # c tanh(s/c) = s - s^3/(3c^2) + ...: the error of the identity is at most |s|^3 / (3 c^2)
    assert ((softcap(small, cap) - small).abs() <= small.abs() ** 3 / (3 * cap**2) + 1e-15).all()


def test_the_softcap_score_mod_is_softcap_and_not_a_variant():
    q, k, _ = qkv(2, 3, 5, 6, spread=3.0)
    scores = attention_scores(q, k)
    cap = 2.0
    got = scores_from_score_mod(softcap_score_mod(cap), scores)
    torch.testing.assert_close(got, softcap(scores, cap), atol=0, rtol=0)
    # the mistakes: no tanh, the cap only outside or only inside
    for wrong in (scores, cap * torch.tanh(scores), torch.tanh(scores / cap), torch.tanh(scores) / cap):
        assert (wrong - got).abs().amax() > 0.1


def test_alibi_score_mod_adds_chapter_9s_bias(device):
    q, k, _ = qkv(2, 4, 5, 7, device=device)
    slopes = alibi_slopes(4, dtype=F64, device=device)
    scores = attention_scores(q, k)
    got = scores_from_score_mod(alibi_score_mod(slopes), scores)
    torch.testing.assert_close(got, scores + alibi_bias(5, 7, slopes), atol=1e-15, rtol=0)


def test_a_float32_score_keeps_its_dtype_with_float64_slopes():
    q, k, _ = qkv(1, 2, 4, 4, dtype=torch.float32)
    got = scores_from_score_mod(alibi_score_mod(alibi_slopes(2, dtype=F64)), attention_scores(q, k))
    assert got.dtype == torch.float32


def test_without_mods_it_is_the_courses_attention(device, dtype):
    q, k, v = qkv(2, 3, 5, 6, device=device, dtype=dtype)
    out, weights = attention_with_mods(q, k, v)
    expected, expected_weights = attention(q, k, v)
    assert out.dtype == dtype and weights.dtype == dtype
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=0, rtol=0)
    out, _ = attention_with_mods(q, k, v, mask_mod=causal_mask_mod, scale=0.3)
    torch.testing.assert_close(
        out, attention(q, k, v, mask=causal_mask(5, 6, device=device), scale=0.3)[0], atol=0, rtol=0
    )


def test_a_score_mod_then_the_mask_written_out(device):
    q, k, v = qkv(2, 2, 6, 6, device=device, spread=2.0)
    slopes = alibi_slopes(2, dtype=F64, device=device)
    out, weights = attention_with_mods(q, k, v, mask_mod=causal_mask_mod, score_mod=alibi_score_mod(slopes))
    bias = alibi_bias(6, 6, slopes).masked_fill(~causal_mask(6, device=device), -math.inf)
    expected, expected_weights = attention(q, k, v, mask=bias)
    torch.testing.assert_close(out, expected, atol=1e-15, rtol=1e-13)
    torch.testing.assert_close(weights, expected_weights, atol=1e-15, rtol=1e-13)
    # soft-capped: softmax(mask(c tanh(S / c))) V written with the formula
    out, _ = attention_with_mods(q, k, v, mask_mod=causal_mask_mod, score_mod=softcap_score_mod(1.5))
    s = 1.5 * torch.tanh(attention_scores(q, k) / 1.5)
    s = s.masked_fill(~causal_mask(6, device=device), -math.inf)
    torch.testing.assert_close(out, torch.softmax(s, dim=-1) @ v, atol=1e-15, rtol=1e-13)


def test_a_fully_masked_row_gives_zero_weights_and_output_with_a_score_mod():
    def first_query_sees_nothing(b, h, q_idx, kv_idx):
        return (q_idx > 0) & (kv_idx <= q_idx)

    q, k, v = qkv(1, 2, 5, 5)
    out, weights = attention_with_mods(q, k, v, mask_mod=first_query_sees_nothing, score_mod=softcap_score_mod(2.0))
    assert (out[..., 0, :] == 0).all() and (weights[..., 0, :] == 0).all()
    assert torch.isfinite(out).all()
    torch.testing.assert_close(weights[..., 1:, :].sum(-1), torch.ones(1, 2, 4, dtype=F64))


@UNCOMPILED
@pytest.mark.parametrize(
    "mod_name, mask_name", [("softcap", "none"), ("softcap", "document"), ("alibi", "causal"), ("alibi", "prefix")]
)
def test_flex_attention_equals_the_dense_reference(mod_name, mask_name):
    batch, heads, n = 2, 4, 11
    q, k, v = qkv(batch, heads, n, n, spread=2.0, seed=3)
    score_mod = softcap_score_mod(3.0) if mod_name == "softcap" else alibi_score_mod(alibi_slopes(heads, dtype=F64))
    mask_mod = {
        "none": None,
        "causal": causal_mask_mod,
        "document": document_mask_mod(document_ids_from_lengths([4, 1, 6])),
        "prefix": prefix_lm_mask_mod(5),
    }[mask_name]
    expected, _ = attention_with_mods(q, k, v, mask_mod=mask_mod, score_mod=score_mod)
    block_mask = None
    if mask_mod is not None:
        block_mask = flex.create_block_mask(mask_mod, batch, heads, n, n, device="cpu", BLOCK_SIZE=4)
    got = flex.flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    torch.testing.assert_close(got, expected, atol=1e-14, rtol=1e-12)
    # control: without the score_mod flex_attention gives another answer
    plain = flex.flex_attention(q, k, v, block_mask=block_mask)
    assert (plain - expected).abs().amax() > 1e-3


@UNCOMPILED
def test_the_score_mod_sees_the_scaled_score():
    # flex_attention hands the score_mod q.k * scale; so does the reference
    q, k, v = qkv(1, 1, 4, 4, spread=3.0)
    mod = softcap_score_mod(1.0)
    for scale in (None, 0.7):
        expected, _ = attention_with_mods(q, k, v, score_mod=mod, scale=scale)
        torch.testing.assert_close(
            flex.flex_attention(q, k, v, score_mod=mod, scale=scale), expected, atol=1e-14, rtol=1e-12
        )


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("cap", [0, -1.0, math.inf, math.nan, "5", True])
def test_a_bad_cap(cap):
    with pytest.raises(ValueError, match=r"cap must be a finite number > 0, got"):
        softcap(torch.ones(2), cap)
    with pytest.raises(ValueError, match=r"cap must be a finite number > 0"):
        softcap_score_mod(cap)


def test_softcap_needs_floating_scores():
    with pytest.raises(TypeError, match=r"scores must have a floating-point dtype, got torch.int64"):
        softcap(torch.ones(2, dtype=torch.int64), 2.0)


def test_a_score_mod_that_returns_the_wrong_thing():
    scores = torch.zeros(1, 2, 3, 3, dtype=F64)
    with pytest.raises(TypeError, match=r"score_mod must return a tensor of dtype torch.float64, got torch.float32"):
        scores_from_score_mod(lambda s, b, h, q, kv: s.float(), scores)
    with pytest.raises(ValueError, match=r"returned shape \(1, 2, 3, 2\)"):
        scores_from_score_mod(lambda s, b, h, q, kv: s[..., :2], scores)
    with pytest.raises(TypeError, match=r"must return a tensor"):
        scores_from_score_mod(lambda s, b, h, q, kv: 1.0, scores)
    with pytest.raises(TypeError, match=r"score_mod must be a function"):
        scores_from_score_mod(3.0, scores)
    with pytest.raises(
        ValueError, match=r"scores must have exactly 4 dimensions \(batch, heads, n, m\), got shape \(3, 3\)"
    ):
        scores_from_score_mod(softcap_score_mod(1.0), scores[0, 0])


def test_attention_with_mods_checks_its_inputs():
    q, k, v = qkv(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"4 dimensions"):
        attention_with_mods(q[0], k[0], v[0])
    with pytest.raises(ValueError, match=r"heads"):
        attention_with_mods(q, k[:, :1], v[:, :1])
    with pytest.raises(TypeError, match=r"one dtype"):
        attention_with_mods(q, k.float(), v)
    with pytest.raises(ValueError, match=r"slopes"):
        alibi_score_mod(torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"indexed out of range"):  # 2 slopes for 4 heads
        attention_with_mods(*qkv(1, 4, 3, 3), score_mod=alibi_score_mod(torch.ones(2, dtype=F64)))
    assert mask_from_mask_mod(causal_mask_mod, 3).shape == (1, 1, 3, 3)
