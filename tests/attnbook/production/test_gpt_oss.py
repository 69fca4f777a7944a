r"""gpt-oss's attention sinks in ``transformers`` against the course's :func:`attnbook.sink_attention` (chapter 13).

A tiny random ``GptOssModel`` with two layers (float64, eager, experts eager): layer 0 is a sliding
layer (``layer_types[0] == "sliding_attention"``, even index: a query sees itself and W - 1
earlier keys, :func:`attnbook.sliding_window_mask`), layer 1 a full causal one. Each layer has one
learned sink logit per query head (``self_attn.sinks``, drawn here with standard deviation 2 so
that the sink takes a visible share), grouped-query heads, biases, and rotary positions in the
split-halves layout (``pairing="half"``; the default rotary type here, not YaRN, since the course
has no YaRN scaling). The course recomputes each layer's output from its recorded hidden states:
projections, :func:`attnbook.apply_rotary`, :func:`attnbook.sink_attention` with the layer's sinks
and mask, the output projection.

**Tolerance.** gpt-oss forms the rotary angles, cos and sin in float32 (the rest, the softmax
included, runs in float64): :func:`hf.rounding_bound` with ``rotation = rotary_error(max angle)``
and float64 elsewhere. The sink logit enters the softmax exactly in both, so it adds no error
term. **Controls**: the same layer without its sinks (plain grouped-query attention) must differ,
and for the sliding layer the full causal mask instead of the window must differ too.
"""

from __future__ import annotations

import pytest
import torch

import attnbook

from .hf import (
    assert_differs,
    assert_within,
    hidden_states,
    keep_passed,
    linear,
    merge_heads,
    one_call,
    output,
    random_ids,
    rotary_error,
    rounding_bound,
    skip_without_float64,
    split_heads,
    tiny_config,
    tiny_model,
)

transformers = pytest.importorskip("transformers")

H_Q, H_KV, D, W, THETA = 4, 2, 8, 3, 10000.0
G = H_Q // H_KV
N, BATCH = 10, 2
SINK_STD = 2.0


def model(device):
    config = tiny_config(
        transformers.GptOssConfig, hidden_size=H_Q * D, num_attention_heads=H_Q, num_key_value_heads=H_KV,
        head_dim=D, num_hidden_layers=2, intermediate_size=16, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=W, rope_parameters={"rope_type": "default", "rope_theta": THETA},
    )  # fmt: skip
    config._experts_implementation = "eager"  # the float64 forward needs the plain experts
    assert config.layer_types == ["sliding_attention", "full_attention"]
    gpt = tiny_model(transformers.GptOssModel, config, device)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for layer in gpt.layers:
            sinks = layer.self_attn.sinks
            sinks.copy_(SINK_STD * torch.randn(sinks.shape, generator=generator, dtype=torch.float64))
    return gpt


@pytest.mark.parametrize("layer_index", [0, 1], ids=["sliding layer", "full layer"])
def test_sinks_equal_sink_attention(layer_index, device):
    skip_without_float64(device)
    gpt = model(device)
    attn = gpt.layers[layer_index].self_attn
    assert tuple(attn.sinks.shape) == (H_Q,)  # one sink logit per query head
    with torch.no_grad():
        call = one_call(gpt, attn, random_ids(BATCH, N, 5, device))
    sliding = layer_index % 2 == 0
    keep = keep_passed(call)  # (batch, n, n)
    window = attnbook.sliding_window_mask(N, W, device=device)  # (n, n): 0 <= i - j < W
    causal = attnbook.causal_mask(N, device=device)
    assert torch.equal(keep, (window if sliding else causal).expand(BATCH, N, N))
    x = hidden_states(call)
    positions = torch.arange(N, device=device)
    sinks = attn.sinks.detach()

    def course(mask, with_sinks=True):
        q = attnbook.apply_rotary(split_heads(linear(x, attn.q_proj), D), positions, pairing="half", base=THETA)
        k = attnbook.apply_rotary(split_heads(linear(x, attn.k_proj), D), positions, pairing="half", base=THETA)
        v = split_heads(linear(x, attn.v_proj), D)  # (batch, H_kv, n, d)
        if with_sinks:
            o, w = attnbook.sink_attention(q, k, v, sinks, mask=mask)  # (batch, H_q, n, d)
        else:
            o, w = attnbook.grouped_query_attention(q, k, v, mask=mask)
        return linear(merge_heads(o), attn.o_proj), (q, k, v, w)

    mask = window if sliding else causal
    with torch.no_grad():
        ours, (q, k, v, w) = course(mask)
        assert (1 - w.sum(-1)).amax() > 0.1  # the sinks take a visible share of some rows
        limit = rounding_bound(
            q, k.repeat_interleave(G, dim=-3), v.repeat_interleave(G, dim=-3), w, attn.o_proj.weight,
            scale=D**-0.5, rotation=rotary_error((N - 1) * THETA ** (-2 / D)),
        )  # fmt: skip
        what = f"gpt-oss {'sliding (W = 3)' if sliding else 'full'} layer with sinks"
        assert_within(ours, output(call), limit, what)
        assert_differs(course(mask, with_sinks=False)[0], output(call), f"{what}, the sinks left out")
        if sliding:
            assert_differs(course(causal)[0], output(call), f"{what}, the window left out")
        # the sink is a virtual key of value zero: the same output through plain attention
        q_v, k_v, v_v, mask_v, scale = attnbook.sinks_as_virtual_key(q, k, v, sinks, mask=mask)
        virtual, _ = attnbook.attention(q_v, k_v, v_v, mask=mask_v, scale=scale)  # (batch, H_q, n, d)
        assert_within(linear(merge_heads(virtual), attn.o_proj), output(call), 2 * limit, f"{what}, as a virtual key")


def test_the_sink_softmax_equals_gpt_oss_eager_attention_in_float64(device):
    """gpt-oss's own ``eager_attention_forward`` (its softmax runs in the inputs' dtype) on the course's
    float64 queries, keys and values, with its own additive mask: the same weights and outputs as
    :func:`attnbook.sink_attention` to float64 rounding (:func:`attnbook.efficient.tiled_attention.attention_rounding_bound`
    of the virtual-key form, for each of the two computations)."""
    skip_without_float64(device)
    from transformers.models.gpt_oss import modeling_gpt_oss

    from attnbook.efficient.tiled_attention import attention_rounding_bound

    gpt = model(device)
    generator = torch.Generator().manual_seed(11)
    q, k, v = (
        torch.randn(BATCH, h, N, D, generator=generator, dtype=torch.float64).to(device) * 1.5
        for h in (H_Q, H_KV, H_KV)
    )
    for layer_index, mask in ((0, attnbook.sliding_window_mask(N, W, device=device)), (1, None)):
        attn = gpt.layers[layer_index].self_attn
        keep = attnbook.causal_mask(N, device=device) if mask is None else mask
        additive = torch.zeros(N, N, dtype=torch.float64, device=device).masked_fill(
            ~keep, torch.finfo(torch.float64).min
        )
        with torch.no_grad():
            theirs, their_weights = modeling_gpt_oss.eager_attention_forward(
                attn, q, k, v, additive[None, None], D**-0.5
            )
            ours, weights = attnbook.sink_attention(q, k, v, attn.sinks.detach(), mask=keep)
        # each weight, in either computation, is within u (d + 2 |s|max + m + 6) of the exact one (a dot
        # product of length d, the max subtracted, exp, a sum of m + 1 terms, a division), |s|max a bound on the row's scores
        k_rep = k.repeat_interleave(G, dim=-3).abs()  # (batch, H_q, n, d)
        s_max = (D**-0.5 * q.abs() @ k_rep.transpose(-2, -1)).amax(-1, keepdim=True)  # (batch, H_q, n, 1)
        s_max = torch.maximum(s_max, attn.sinks.detach().abs()[:, None, None])
        assert_within(
            their_weights, weights, 2 * 2.0**-53 * (D + 2 * s_max + N + 6), f"gpt-oss weights, layer {layer_index}"
        )
        q_v, k_v, v_v, mask_v, scale = attnbook.sinks_as_virtual_key(q, k, v, attn.sinks.detach(), mask=keep)
        bound = 2 * attention_rounding_bound(q_v, k_v, v_v, mask_v, scale=scale)  # (batch, H_q, n, 1)
        assert_within(ours, theirs.transpose(1, 2), bound, f"gpt-oss eager attention, layer {layer_index}, float64")
