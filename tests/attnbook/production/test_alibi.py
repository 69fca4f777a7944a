"""ALiBi in ``transformers`` against the course (chapter 9): BLOOM's and MPT's slopes for 5, 6, 8, 12
and 16 heads are ``attnbook.alibi_slopes`` (the rule of ``get_slopes`` in the authors' code, written
out again below), and BLOOM's attention layer, whose bias is +μ_h j (the key's position) rather than
the course's -μ_h |i - j|, gives the same output: the two differ by μ_h i, constant along each row,
which the softmax ignores. The control is the paper's closed form 2^(-8h/H) taken for every H, which
differs from ``get_slopes`` when H is not a power of two."""

from __future__ import annotations

import math

import pytest
import torch

import attnbook

from .hf import (
    F64,
    U32,
    U64,
    assert_differs,
    assert_within,
    hidden_states,
    keep_passed,
    linear,
    merge_heads,
    one_call,
    output,
    random_ids,
    rounding_bound,
    skip_without_float64,
    tiny_config,
    tiny_model,
)

transformers = pytest.importorskip("transformers")
from transformers.models.bloom.modeling_bloom import _get_alibi_slopes  # noqa: E402
from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor  # noqa: E402

HEADS = [5, 6, 8, 12, 16]
N, BATCH, D = 10, 2, 4


def get_slopes(n: int) -> list[float]:
    """``get_slopes`` of ofirpress/attention_with_linear_biases (fairseq/models/transformer.py), as written there."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (
        get_slopes_power_of_2(closest_power_of_2) + get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
    )


def closed_form(n: int) -> torch.Tensor:
    """The paper's geometric sequence 2^(-8h/H), h = 1..H, applied to any H: the control."""
    return 2.0 ** (-8.0 * torch.arange(1, n + 1, dtype=F64) / n)


@pytest.mark.parametrize("heads", HEADS)
def test_bloom_and_mpt_slopes_are_get_slopes(heads):
    ours = attnbook.alibi_slopes(heads, dtype=F64)
    reference = torch.tensor(get_slopes(heads), dtype=F64)
    # get_slopes multiplies start by ratio**i with ratio = start rounded: relative error <= (i + 3) u
    torch.testing.assert_close(ours, reference, rtol=(heads + 2) * U64, atol=0)
    # BLOOM raises a float32 base (rounded: relative error u) to the powers 1..H: (k + 2) u for power k;
    # MPT takes 1 / 2^x with x = 8k / 2^ceil(log2 H) exact in float32: 2 u
    bloom = _get_alibi_slopes(heads, torch.device("cpu")).to(F64)
    mpt = build_mpt_alibi_tensor(heads, N)[:, 0, 0].to(F64) / (1 - N)  # (H, 1, n): mu_h (j - (n - 1))
    for name, theirs, limit in (("BLOOM", bloom, (heads + 2) * U32), ("MPT", mpt, 2 * U32)):
        error = ((theirs - ours).abs() / ours).amax().item()
        print(f"{name} slopes, {heads} heads: largest relative error {error:.1e} <= {limit:.1e}")
        assert error <= limit, f"{name} slopes for {heads} heads differ from get_slopes by {error:.2e} relative"
    if math.log2(heads).is_integer():
        torch.testing.assert_close(closed_form(heads), ours, rtol=2 * U64, atol=0)  # the same rule there
    else:
        assert_differs(closed_form(heads), ours, f"slopes 2^(-8h/H) for {heads} heads", fraction=0.05)


@pytest.mark.parametrize("heads", HEADS)
def test_mpt_bias_gives_the_course_weights(heads):
    """MPT's bias mu_h (j - (n - 1)) and the course's -mu_h |i - j| differ by a constant per row under the
    causal mask: the softmax of any scores plus either is the same."""
    scores = torch.randn(heads, N, N, generator=torch.Generator().manual_seed(heads), dtype=F64) * 3
    causal = attnbook.causal_mask(N)
    blocked = torch.full((), -torch.inf, dtype=F64)
    course = attnbook.alibi_bias(N, N, attnbook.alibi_slopes(heads, dtype=F64))  # (H, n, n)
    mpt = build_mpt_alibi_tensor(heads, N).to(F64)  # (H, 1, n)
    w_course = torch.softmax(torch.where(causal, scores + course, blocked), dim=-1)
    w_mpt = torch.softmax(torch.where(causal, scores + mpt, blocked), dim=-1)
    # MPT's bias is rounded to float32: |error| <= u32 (n - 1) max mu per score, and a weight's relative
    # error is at most twice the largest score error (plus float64 rounding)
    limit = w_course * (2 * U32 * (N - 1) + 8 * N * U64)
    assert_within(w_mpt, w_course, limit, f"MPT weights with its bias, {heads} heads")
    wrong = build_mpt_alibi_tensor(heads, N).flip(0).to(F64)  # control: the slopes given to the heads in reverse
    w_wrong = torch.softmax(torch.where(causal, scores + wrong, blocked), dim=-1)
    assert_differs(w_wrong, w_course, "MPT bias with the heads' slopes reversed")


@pytest.mark.parametrize("heads", HEADS)
def test_bloom_layer_is_causal_attention_with_the_alibi_bias(heads, device):
    skip_without_float64(device)
    config = tiny_config(
        transformers.BloomConfig, hidden_size=heads * D, n_head=heads, n_layer=1, bos_token_id=0, eos_token_id=0,
        pad_token_id=0,
    )  # fmt: skip
    model = tiny_model(transformers.BloomModel, config, device)
    attn = model.h[0].self_attention
    call = one_call(model, attn, random_ids(BATCH, N, 7, device))
    causal = attnbook.causal_mask(N, device=device)
    assert torch.equal(keep_passed(call), causal.expand(BATCH, N, N))
    x, residual = hidden_states(call), call["args"][1] if len(call["args"]) > 1 else call["kwargs"]["residual"]

    def course(slopes):
        qkv = linear(x, attn.query_key_value).unflatten(-1, (heads, 3, D))  # (batch, n, H, 3, d): per head q, k, v
        q, k, v = (qkv[..., c, :].transpose(1, 2) for c in range(3))  # (batch, H, n, d) each
        bias = attnbook.alibi_bias(N, N, slopes).masked_fill(~causal, -torch.inf)  # (H, n, n)
        o, w = attnbook.attention(q, k, v, mask=bias)  # (batch, H, n, d)
        return linear(merge_heads(o), attn.dense) + residual, (q, k, v, w)

    slopes = attnbook.alibi_slopes(heads, dtype=F64, device=device)
    ours, (q, k, v, w) = course(slopes)
    # BLOOM rounds its slopes to float32 (bias error <= u32 mu (n - 1)) and its softmax runs in float32
    limit = (
        rounding_bound(
            q, k, v, w, attn.dense.weight, scale=D**-0.5, u_softmax=U32, score_error=U32 * (N - 1) * slopes.max().item()
        )
        + 2 * U64 * residual.abs()
    )  # (batch, n, d_model): and the residual's addition
    assert_within(ours, output(call), limit, f"BLOOM layer, {heads} heads")
    control = closed_form(heads).to(device) if not math.log2(heads).is_integer() else slopes.flip(0)
    what = "2^(-8h/H) slopes" if not math.log2(heads).is_integer() else "the slopes reversed"
    assert_differs(course(control)[0], output(call), f"BLOOM with {what}, {heads} heads")
