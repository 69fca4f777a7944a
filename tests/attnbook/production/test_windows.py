"""Sliding windows in ``transformers`` against the course (chapter 9).

* Mistral, Qwen2 and Gemma 2 (causal): a ``sliding_window`` of W keeps the W keys with
  0 <= i - j < W, ``attnbook.sliding_window_mask(n, W)``; the control is Mistral's reference-code
  reading, W + 1 keys (``sliding_window_mask(n, W + 1)``).
* ModernBERT (bidirectional): ``transformers.masking_utils.sliding_window_bidirectional_overlay`` keeps
  |i - j| <= W, inclusive, so 2W + 1 keys, which is ``sliding_window_mask(n, W + 1, causal=False)``;
  the control is the course's own bidirectional reading of the same number, |i - j| < W.
"""

from __future__ import annotations

import pytest
import torch

import attnbook

from .hf import (
    U32,
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

H_Q, H_KV, D, W = 4, 2, 8, 3  # query heads, key-value heads, head width, the configs' sliding_window
G = H_Q // H_KV
N, BATCH = 12, 2
COMMON = dict(
    hidden_size=H_Q * D, num_attention_heads=H_Q, num_key_value_heads=H_KV, head_dim=D, num_hidden_layers=1,
    intermediate_size=16, sliding_window=W,
)  # fmt: skip


def mistral():
    return transformers.MistralModel, tiny_config(transformers.MistralConfig, **COMMON)


def qwen2():
    config = tiny_config(transformers.Qwen2Config, **COMMON, use_sliding_window=True, max_window_layers=0)
    assert config.layer_types == ["sliding_attention"]
    return transformers.Qwen2Model, config


def gemma2():
    # no logit soft-capping (the course has none); scores scaled by 1/sqrt(d) as everywhere else
    config = tiny_config(
        transformers.Gemma2Config,
        **COMMON,
        layer_types=["sliding_attention"],
        attn_logit_softcapping=None,
        query_pre_attn_scalar=D,
    )
    return transformers.Gemma2Model, config


def rope_theta(config) -> float:
    parameters = config.rope_parameters
    parameters = parameters.get("sliding_attention", parameters)
    return float(parameters["rope_theta"])


@pytest.mark.parametrize("family", [mistral, qwen2, gemma2], ids=["mistral", "qwen2", "gemma2"])
def test_causal_window_keeps_w_keys(family, device):
    skip_without_float64(device)
    model_class, config = family()
    model = tiny_model(model_class, config, device)
    attn = model.layers[0].self_attn
    call = one_call(model, attn, random_ids(BATCH, N, 5, device))
    keep = keep_passed(call)  # (batch, n, n)
    window = attnbook.sliding_window_mask(N, W, device=device)  # (n, n): 0 <= i - j < W
    assert torch.equal(keep, window.expand(BATCH, N, N))
    assert (keep.sum(-1)[:, W - 1 :] == W).all()  # W keys once the window is full
    assert not torch.equal(keep[0], attnbook.sliding_window_mask(N, W + 1, device=device))

    theta = rope_theta(config)
    x = hidden_states(call)

    def course(mask):
        positions = torch.arange(N, device=device)
        q = attnbook.apply_rotary(split_heads(linear(x, attn.q_proj), D), positions, pairing="half", base=theta)
        k = attnbook.apply_rotary(split_heads(linear(x, attn.k_proj), D), positions, pairing="half", base=theta)
        v = split_heads(linear(x, attn.v_proj), D)  # (batch, H_kv, n, d)
        o, w = attnbook.grouped_query_attention(q, k, v, mask=mask)  # (batch, H_q, n, d)
        return linear(merge_heads(o), attn.o_proj), (q, k, v, w)

    ours, (q, k, v, w) = course(window)
    limit = rounding_bound(
        q, k.repeat_interleave(G, dim=-3), v.repeat_interleave(G, dim=-3), w, attn.o_proj.weight,
        scale=D**-0.5, u_softmax=U32, rotation=rotary_error((N - 1) * theta ** (-2 / D)),
    )  # fmt: skip
    name = model_class.__name__.removesuffix("Model")
    assert_within(ours, output(call), limit, f"{name} layer, sliding_window {W}")
    control, _ = course(attnbook.sliding_window_mask(N, W + 1, device=device))  # W + 1 keys
    assert_differs(control, output(call), f"{name} with W + 1 keys")


def test_bidirectional_window_is_inclusive(device):
    """ModernBERT's local layers: ``local_attention`` = 2W, ``sliding_window`` = W, and a query sees
    the 2W + 1 keys with |i - j| <= W (``sliding_window_bidirectional_overlay``)."""
    skip_without_float64(device)
    H, d = 4, 8
    config = tiny_config(
        transformers.ModernBertConfig, hidden_size=H * d, num_attention_heads=H, num_hidden_layers=2,
        intermediate_size=16, local_attention=2 * W, layer_types=["full_attention", "sliding_attention"],
        pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
    )  # fmt: skip
    assert config.sliding_window == W
    model = tiny_model(transformers.ModernBertModel, config, device)
    attn = model.layers[1].attn  # the sliding layer
    call = one_call(model, attn, random_ids(BATCH, N, 6, device))
    keep = keep_passed(call)  # (batch, n, n)
    inclusive = attnbook.sliding_window_mask(N, W + 1, causal=False, device=device)  # |i - j| < W + 1
    i, j = torch.meshgrid(torch.arange(N), torch.arange(N), indexing="ij")
    assert torch.equal(inclusive.cpu(), (i - j).abs() <= W)
    assert torch.equal(keep, inclusive.expand(BATCH, N, N))
    assert (keep.sum(-1)[:, W : N - W] == 2 * W + 1).all()  # 2W + 1 keys away from the ends
    exclusive = attnbook.sliding_window_mask(N, W, causal=False, device=device)  # |i - j| < W: 2W - 1 keys
    assert not torch.equal(keep[0], exclusive)

    # the layer: fused q, k, v (batch, n, 3, H, d), split-halves rotary at the local base, no mask but the window
    theta = float(config.rope_parameters["sliding_attention"]["rope_theta"])
    x = hidden_states(call)

    def course(mask):
        positions = torch.arange(N, device=device)
        qkv = linear(x, attn.Wqkv).unflatten(-1, (3, H, d))  # (batch, n, 3, H, d)
        q, k, v = (qkv[:, :, c].transpose(1, 2) for c in range(3))  # (batch, H, n, d) each
        q = attnbook.apply_rotary(q, positions, pairing="half", base=theta)
        k = attnbook.apply_rotary(k, positions, pairing="half", base=theta)
        o, w = attnbook.attention(q, k, v, mask=mask)  # (batch, H, n, d)
        return linear(merge_heads(o), attn.Wo), (q, k, v, w)

    ours, (q, k, v, w) = course(inclusive)
    # ModernBERT rotates q and k cast to float32 (3 more roundings) and runs the softmax in float32
    limit = rounding_bound(
        q, k, v, w, attn.Wo.weight, scale=d**-0.5, u_softmax=U32,
        rotation=rotary_error((N - 1) * theta ** (-2 / d)) + 3 * U32,
    )  # fmt: skip
    assert_within(ours, output(call), limit, f"ModernBERT local layer, sliding_window {W} (|i - j| <= W)")
    assert_differs(course(exclusive)[0], output(call), "ModernBERT with |i - j| < W")
