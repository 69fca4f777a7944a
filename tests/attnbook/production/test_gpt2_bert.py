"""GPT-2 and BERT in ``transformers`` against the course (chapters 2, 3 and 8): GPT-2's causal
self-attention, also decoded token by token with a key-value cache (``attnbook.KVCache``), and
BERT's attention with a key-padding mask (``attnbook.padding_mask``). Both run entirely in float64,
so the tolerances are float64 rounding bounds."""

from __future__ import annotations

import pytest
import torch

import attnbook

from .hf import (
    F64,
    assert_differs,
    assert_within,
    hidden_states,
    keep_passed,
    linear,
    merge_heads,
    one_call,
    output,
    random_ids,
    recording,
    rounding_bound,
    skip_without_float64,
    split_heads,
    tiny_config,
    tiny_model,
)

transformers = pytest.importorskip("transformers")

H, D = 4, 8
N, BATCH = 10, 2


def gpt2_qkv(attn, x):
    """GPT-2's fused c_attn (a Conv1D: x W + b) split into q, k, v of H heads."""
    q, k, v = linear(x, attn.c_attn).split(H * D, dim=-1)  # (batch, n, H d) each
    return split_heads(q, D), split_heads(k, D), split_heads(v, D)  # (batch, H, n, d) each


def test_gpt2_causal_attention_and_cache(device):
    skip_without_float64(device)
    config = tiny_config(transformers.GPT2Config, n_embd=H * D, n_head=H, n_layer=1, bos_token_id=0, eos_token_id=0)
    model = tiny_model(transformers.GPT2Model, config, device)
    attn = model.h[0].attn
    ids = random_ids(BATCH, N, 8, device)
    prompt = 7  # then 3 steps of one token
    call = one_call(model, attn, ids)
    with recording(attn) as steps:
        cache = model(ids[:, :prompt], use_cache=True).cache
        for t in range(prompt, N):
            cache = model(ids[:, t : t + 1], cache=cache, use_cache=True).cache
    causal = attnbook.causal_mask(N, device=device)
    assert torch.equal(keep_passed(call), causal.expand(BATCH, N, N))
    x = hidden_states(call)
    q, k, v = gpt2_qkv(attn, x)
    o, w = attnbook.attention(q, k, v, mask=causal)  # (batch, H, n, d)
    ours = linear(merge_heads(o), attn.c_proj)  # (batch, n, d_model)
    w_out = attn.c_proj.weight.T  # Conv1D stores (d_in, d_out)
    limit = rounding_bound(q, k, v, w, w_out, scale=D**-0.5)  # float64 throughout
    assert_within(ours, output(call), limit, "GPT-2 layer, causal")
    o_all, _ = attnbook.attention(q, k, v)  # control: no causal mask
    assert_differs(linear(merge_heads(o_all), attn.c_proj), output(call), "GPT-2 without the causal mask")

    hf_decoded = torch.cat([output(c) for c in steps], dim=-2)  # (batch, n, d_model)
    assert_within(hf_decoded, output(call), 2 * limit, "GPT-2: HF cached decoding vs HF full forward")

    def decode(keep_past: bool):
        kv = attnbook.KVCache(max_len=N)
        rows = []
        for start, stop in [(0, prompt)] + [(t, t + 1) for t in range(prompt, N)]:
            q_t, k_t, v_t = gpt2_qkv(attn, x[:, start:stop])  # (batch, H, t, d)
            if not keep_past:
                kv.reset()  # control: the cache forgotten, each step sees only its own tokens
            o_t, _ = kv.step(q_t, k_t, v_t, need_weights=True)  # (batch, H, t, d)
            rows.append(linear(merge_heads(o_t), attn.c_proj))
        return torch.cat(rows, dim=-2)  # (batch, n, d_model)

    assert_within(decode(True), hf_decoded, limit, "GPT-2: course's KVCache decoding vs HF's")
    assert_differs(decode(False), hf_decoded, "GPT-2 decoding without the cached keys")


def test_bert_key_padding(device):
    skip_without_float64(device)
    config = tiny_config(
        transformers.BertConfig, hidden_size=H * D, num_attention_heads=H, num_hidden_layers=1, intermediate_size=16
    )
    model = tiny_model(transformers.BertModel, config, device)
    attn = model.encoder.layer[0].attention.self  # q, k, v and the attention; the output projection is next
    ids = random_ids(BATCH, N, 9, device)
    lengths = [N, 6]
    attention_mask = torch.ones(BATCH, N, dtype=torch.long, device=device)  # (batch, n): 1 = real token
    attention_mask[1, lengths[1] :] = 0  # written by hand, not with the function under test
    call = one_call(model, attn, ids, attention_mask=attention_mask)
    keys = attnbook.padding_mask(lengths, N, device=device)[:, None, :]  # (batch, 1, n): every query, real keys
    assert torch.equal(keep_passed(call), keys.expand(BATCH, N, N))
    x = hidden_states(call)
    q = split_heads(linear(x, attn.query), D)  # (batch, H, n, d)
    k = split_heads(linear(x, attn.key), D)
    v = split_heads(linear(x, attn.value), D)
    o, w = attnbook.attention(q, k, v, mask=keys[:, None])  # (batch, H, n, d): mask (batch, 1, 1, n)
    ours = merge_heads(o)  # (batch, n, H d): BertSelfAttention returns the heads concatenated
    identity = torch.eye(H * D, dtype=F64, device=device)
    limit = rounding_bound(q, k, v, w, identity, scale=D**-0.5)
    assert_within(ours, output(call), limit, "BERT self-attention, key padding")
    # control: the padding mask on the wrong axis (padded queries blocked instead of padded keys)
    queries = attnbook.padding_mask(lengths, N, device=device)[:, None, :, None]  # (batch, 1, n, 1)
    assert_differs(merge_heads(attnbook.attention(q, k, v, mask=queries)[0]), output(call), "BERT mask on queries")
