"""GPT-J in ``transformers`` against the course: rotary embeddings on neighbouring pairs
(``pairing="interleaved"``, the default), applied to the first ``rotary_dim`` features of each head
only, as GPT-J does (64 of 256 in the released model), under a causal mask (chapter 9)."""

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

H, D, R = 4, 8, 4  # heads, head width, rotated features per head
N, BATCH = 12, 2


def course_layer(attn, x, pairing):
    """GPT-J's layer recomputed by the course: the first R features of q and k rotated, causal attention."""
    positions = torch.arange(N, device=x.device)
    q = split_heads(linear(x, attn.q_proj), D)  # (batch, H, n, d)
    k = split_heads(linear(x, attn.k_proj), D)  # (batch, H, n, d)
    v = split_heads(linear(x, attn.v_proj), D)  # (batch, H, n, d)

    def rot(t):
        return torch.cat((attnbook.apply_rotary(t[..., :R], positions, pairing=pairing), t[..., R:]), dim=-1)

    q, k = rot(q), rot(k)  # (batch, H, n, d)
    o, w = attnbook.attention(q, k, v, mask=attnbook.causal_mask(N, device=x.device))  # (batch, H, n, d)
    return linear(merge_heads(o), attn.out_proj), (q, k, v, w)


def test_layer_rotates_neighbouring_pairs(device):
    skip_without_float64(device)
    config = tiny_config(
        transformers.GPTJConfig, n_embd=H * D, n_head=H, n_layer=1, rotary_dim=R, bos_token_id=0, eos_token_id=0
    )
    model = tiny_model(transformers.GPTJModel, config, device)
    attn = model.h[0].attn
    call = one_call(model, attn, random_ids(BATCH, N, 4, device))
    assert torch.equal(keep_passed(call), attnbook.causal_mask(N, device=device).expand(BATCH, N, N))
    x = hidden_states(call)
    ours, (q, k, v, w) = course_layer(attn, x, "interleaved")
    # GPT-J forms its sin/cos table in float32 (angles up to (n - 1) 10000^(-2/R) on the pairs j >= 1)
    # and its scores from q and k cast to float32
    limit = rounding_bound(
        q, k, v, w, attn.out_proj.weight, scale=D**-0.5, u_scores=U32, u_softmax=U32,
        rotation=rotary_error((N - 1) * 10000.0 ** (-2 / R)),
    )  # fmt: skip
    assert_within(ours, output(call), limit, "GPT-J layer (neighbour pairs, partial rotary)")
    assert_differs(course_layer(attn, x, "half")[0], output(call), "GPT-J with split-halves pairs")
