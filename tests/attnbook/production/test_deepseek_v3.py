r"""DeepSeek-V3's multi-head latent attention in ``transformers`` against the course's (chapter 13).

A tiny random ``DeepseekV3Model`` (one dense layer, eager, float64) runs on a batch of tokens; its
attention layer's weights are copied into :class:`attnbook.MultiHeadLatentAttention`, which then
recomputes the layer's output from the same hidden states, by the naive path, the absorbed path and
the absorbed path decoding token by token with a :class:`attnbook.LatentCache`.

The layer's weights map onto the course's as follows (``nn.Linear`` layout, out x in):
``kv_a_proj_with_mqa`` = [W_DKV; W_KR] (d_c + d_R rows), ``kv_b_proj`` = per head [W_UK^h; W_UV^h]
(d_h + d_v rows each), ``q_a_proj`` = W_DQ, ``q_b_proj`` = per head [W_UQ^h; W_QR^h] (or ``q_proj``
from the hidden state when ``q_lora_rank`` is None), ``o_proj`` = W_O, ``kv_a_layernorm`` and
``q_a_layernorm`` the RMSNorm gains. With ``rope_interleave`` the layer rotates neighbouring pairs
(and writes them de-interleaved, which changes no dot product): the course's ``pairing="interleaved"``;
without it, ``rotate_half``: ``pairing="half"``. The control is the other pairing.

**Tolerance.** Inside the float64 model the layer computes three things in float32: both RMSNorms
(input cast to float32, mean of squares, rsqrt, product), the rotary cos/sin (angles formed in
float32) and the softmax. The course computes all in float64. The bound, entry by entry:

* the RMSNorm of a latent of width d: a relative error at most ``((d + 2) / 2 + 5) u32`` per entry
  (the cast, the d-term mean of squares and its half through rsqrt, rsqrt's own rounding, the
  product, the cast back), times 2 for second order: :math:`\delta c`;
* through the up-projections: :math:`|\Delta k^C| \le |\delta c|\,|W_{UK}|^\top`, likewise for the
  values and for the queries from :math:`\delta c^Q` (the rotary queries with a factor 2 for the
  rotation's mixing of a pair), so each score moves by at most
  :math:`\text{scale}(|\Delta q| \cdot |k| + |q| \cdot |\Delta k|)` (``score_error`` of
  :func:`hf.rounding_bound`) and each head output by :math:`\sum_j w_{ij} |\Delta v_j|`;
* the rotation and the float32 softmax: :func:`hf.rounding_bound` with ``u_softmax = u32`` and
  ``rotation = rotary_error(max angle)``;
* every projection's own float64 rounding in either computation, :math:`d\,u_{64}\,|x|\,|W|^\top` for a
  product of width d, carried the same way;
* the absorbed path adds :func:`latent_bounds.absorption_bound` (float64 regrouping).

The bound is first order and assumes no cancellation, so it lies far above the errors seen (2.4e-7
to 3.2e-7 against bounds of 4e-4 to 2e-3). The second test lifts the three islands to float64
(the same formulas, monkeypatched to run in the dtype of the model) and checks the same outputs
against the same derivation with u = 2^-53: errors of 6e-16 to 1.2e-15.
"""

from __future__ import annotations

import pytest
import torch

import attnbook
from attnbook import LatentCache, MultiHeadLatentAttention, causal_mask

from ..latent_bounds import absorption_bound
from .hf import (
    STD,
    U32,
    assert_differs,
    assert_within,
    hidden_states,
    merge_heads,
    one_call,
    output,
    random_ids,
    rotary_error,
    rounding_bound,
    skip_without_float64,
    tiny_config,
    tiny_model,
)

transformers = pytest.importorskip("transformers")

H, D_H, D_R, D_V, D_C, D_CQ, D_MODEL = 4, 6, 4, 5, 12, 16, 32
N, BATCH = 9, 2


def config(*, rope_interleave: bool, q_lora_rank: int | None, attention_bias: bool = False):
    return tiny_config(
        transformers.DeepseekV3Config, hidden_size=D_MODEL, num_attention_heads=H, num_key_value_heads=H,
        kv_lora_rank=D_C, q_lora_rank=q_lora_rank, qk_rope_head_dim=D_R, qk_nope_head_dim=D_H, v_head_dim=D_V,
        num_hidden_layers=1, intermediate_size=16, moe_intermediate_size=8, n_routed_experts=4,
        num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
        attention_bias=attention_bias, rope_interleave=rope_interleave,
    )  # fmt: skip


def course_layer(attn, cfg, pairing: str) -> MultiHeadLatentAttention:
    """The course's latent attention with the weights of a ``DeepseekV3Attention`` copied in."""
    theta = float(cfg.rope_parameters["rope_theta"])
    mla = MultiHeadLatentAttention(
        D_MODEL, H, D_C, D_H, D_R, d_value=D_V, d_query_latent=cfg.q_lora_rank, rope_base=theta, pairing=pairing,
        norm_eps=attn.kv_a_layernorm.variance_epsilon, bias=cfg.attention_bias, scale=attn.scaling,
    )  # fmt: skip
    mla = mla.to(dtype=torch.float64, device=attn.o_proj.weight.device)
    with torch.no_grad():
        kv_a = attn.kv_a_proj_with_mqa  # (d_c + d_R, d_model): [W_DKV; W_KR]
        mla.w_dkv.weight.copy_(kv_a.weight[:D_C])
        mla.w_kr.weight.copy_(kv_a.weight[D_C:])
        kv_b = attn.kv_b_proj.weight.unflatten(0, (H, D_H + D_V))  # (H, d_h + d_v, d_c): [W_UK^h; W_UV^h]
        mla.w_uk.weight.copy_(kv_b[:, :D_H].flatten(0, 1))  # (H d_h, d_c)
        mla.w_uv.weight.copy_(kv_b[:, D_H:].flatten(0, 1))  # (H d_v, d_c)
        q_b = attn.q_proj if cfg.q_lora_rank is None else attn.q_b_proj
        q_b = q_b.weight.unflatten(0, (H, D_H + D_R))  # (H, d_h + d_R, d_cq or d_model): [W_UQ^h; W_QR^h]
        mla.w_uq.weight.copy_(q_b[:, :D_H].flatten(0, 1))
        mla.w_qr.weight.copy_(q_b[:, D_H:].flatten(0, 1))
        mla.w_o.weight.copy_(attn.o_proj.weight)
        mla.kv_norm.copy_(attn.kv_a_layernorm.weight)
        if cfg.q_lora_rank is not None:
            mla.w_dq.weight.copy_(attn.q_a_proj.weight)
            mla.q_norm.copy_(attn.q_a_layernorm.weight)
        if cfg.attention_bias:
            mla.w_dkv.bias.copy_(kv_a.bias[:D_C])
            mla.w_kr.bias.copy_(kv_a.bias[D_C:])
            mla.w_o.bias.copy_(attn.o_proj.bias)
            if cfg.q_lora_rank is not None:
                mla.w_dq.bias.copy_(attn.q_a_proj.bias)
    return mla


def latent_error(x: torch.Tensor, w: torch.Tensor, gain: torch.Tensor, eps: float, u: float) -> torch.Tensor:
    """Entrywise bound on the difference of two computations of y = RMSNorm(x W^T) (..., d), one with the
    norm in a format of unit roundoff u (the layer's float32 island, or float64), the other in float64:
    the projection's rounding in each, e = d_model u_64 (|x| |W|^T), carried through the norm
    (|g| (e_i + |y_i / g_i| max_l e_l) / rms), and the norm's own, ((d + 2) / 2 + 5) u |y| (the cast,
    the d-term mean of squares and its half through rsqrt, rsqrt's rounding, the product, the cast back)."""
    u64 = 2.0**-53
    pre = x @ w.T  # (..., n, d)
    rms = torch.sqrt(pre.pow(2).mean(-1, keepdim=True) + eps)  # (..., n, 1)
    y = pre / rms * gain  # (..., n, d)
    e = 2 * w.shape[-1] * u64 * (x.abs() @ w.abs().T)  # (..., n, d): both computations' projections
    carried = gain.abs() * (e + (pre / rms).abs() * e.amax(-1, keepdim=True)) / rms
    d = y.shape[-1]
    return 2 * (carried + ((d + 2) / 2 + 5) * (u + u64) * y.abs())  # times 2 for second order


def derived_bound(mla: MultiHeadLatentAttention, x: torch.Tensor, *, absorbed: bool, u: float = U32) -> torch.Tensor:
    """The tolerance of the module docstring for the layer's output (batch, n, d_model), with the
    layer's islands (RMSNorm, rotary cos/sin, softmax) in unit roundoff u (float32: U32; lifted: 2^-53);
    every up-projection of width d also rounds to d u_64 (|c| |W|^T) in each computation."""
    u64 = 2.0**-53
    n = x.shape[-2]
    pos = torch.arange(n, device=x.device)
    q_nope, q_rope, latent, k_rope = mla.project(x, pos)
    w_uk, w_uv = mla.w_uk.weight.detach(), mla.w_uv.weight.detach()
    k_nope = attnbook.up_project(latent, w_uk, H)  # (batch, H, n, d_h)
    value = attnbook.up_project(latent, w_uv, H)  # (batch, H, n, d_v)
    q = torch.cat((q_nope, q_rope), dim=-1)  # (batch, H, n, d_h + d_R)
    k = torch.cat((k_nope, k_rope.expand(-1, H, -1, -1)), dim=-1)  # (batch, H, n, d_h + d_R)
    _, weights = attnbook.attention(q, k, value, mask=causal_mask(n, device=x.device))

    def carried(d_c, c, w, factor=1.0):  # |delta c| |W|^T plus the up-projection's own rounding, per head
        return factor * attnbook.up_project(d_c + 2 * c.shape[-1] * u64 * c.abs(), w.abs(), H)

    d_lat = latent_error(x, mla.w_dkv.weight, mla.kv_norm, mla.norm_eps, u)  # (batch, n, d_c)
    k_r_err = 2 * D_MODEL * u64 * (x.abs() @ mla.w_kr.weight.abs().T)  # (batch, n, d_R): its projection
    dk = torch.cat((carried(d_lat, latent, w_uk), 2 * k_r_err.unsqueeze(-3).expand(-1, H, -1, -1)), -1)
    dv = carried(d_lat, latent, w_uv)  # (batch, H, n, d_v)
    if mla.w_dq is not None:
        latent_q = attnbook.rms_norm(attnbook.down_project(x, mla.w_dq.weight), mla.q_norm, mla.norm_eps)
        d_q = latent_error(x, mla.w_dq.weight, mla.q_norm, mla.norm_eps, u)  # (batch, n, d_cq)
    else:
        latent_q, d_q = x, torch.zeros_like(x)
    # a rotation mixes each pair: factor 2 on the rotary queries' error
    dq = torch.cat((carried(d_q, latent_q, mla.w_uq.weight), carried(d_q, latent_q, mla.w_qr.weight, 2.0)), dim=-1)
    score_error = mla.scale * (dq @ k.abs().transpose(-2, -1) + q.abs() @ dk.transpose(-2, -1))  # (batch, H, n, n)
    rotation = rotary_error((n - 1) * mla.rope_base ** (-2 / D_R), u)  # the largest angle of pairs j >= 1
    bound = rounding_bound(
        q, k, value, weights, mla.w_o.weight, scale=mla.scale, u_softmax=u, rotation=rotation, score_error=score_error
    )
    bound = bound + 2 * merge_heads(weights @ dv) @ mla.w_o.weight.abs().T  # (batch, n, d_model): the values' error
    if absorbed:
        bound = bound + absorption_bound(
            q_nope, q_rope, latent, k_rope, w_uk, w_uv, weights, scale=mla.scale, w_o=mla.w_o.weight
        )
    return bound.detach()


CASES = [
    pytest.param(True, D_CQ, False, id="interleaved-q_lora"),
    pytest.param(False, D_CQ, False, id="half-q_lora"),
    pytest.param(True, None, True, id="interleaved-no_q_lora-bias"),
]


@pytest.mark.parametrize("rope_interleave, q_lora_rank, attention_bias", CASES)
def test_latent_attention_equals_deepseek_v3(rope_interleave, q_lora_rank, attention_bias, device):
    skip_without_float64(device)
    cfg = config(rope_interleave=rope_interleave, q_lora_rank=q_lora_rank, attention_bias=attention_bias)
    model = tiny_model(transformers.DeepseekV3Model, cfg, device)
    attn = model.layers[0].self_attn
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():  # RMSNorm gains away from 1, so a gain copied to the wrong place shows
        for norm in (attn.kv_a_layernorm, getattr(attn, "q_a_layernorm", None)):
            if norm is not None:
                norm.weight.copy_(1 + STD * torch.randn(norm.weight.shape, generator=generator, dtype=torch.float64))
    with torch.no_grad():
        call = one_call(model, attn, random_ids(BATCH, N, 5, device))
    x, expected = hidden_states(call), output(call)
    pairing = "interleaved" if rope_interleave else "half"
    mla = course_layer(attn, cfg, pairing)
    name = f"DeepSeek-V3 layer (rope_interleave={rope_interleave}, q_lora_rank={q_lora_rank}, bias={attention_bias})"
    mask = causal_mask(N, device=device)
    with torch.no_grad():
        naive, _ = mla(x, mask)
        absorbed, _ = mla(x, mask, absorb=True)
        cache = LatentCache(N)
        decoded = torch.cat([mla(x[:, t : t + 1], cache=cache, absorb=True)[0] for t in range(N)], dim=1)
        assert_within(naive, expected, derived_bound(mla, x, absorbed=False), f"{name}, naive")
        absorbed_bound = derived_bound(mla, x, absorbed=True)
        assert_within(absorbed, expected, absorbed_bound, f"{name}, absorbed")
        assert_within(decoded, expected, absorbed_bound, f"{name}, absorbed, decoded token by token")
        other = "half" if rope_interleave else "interleaved"
        control, _ = course_layer(attn, cfg, other)(x, mask)
        assert_differs(control, expected, f"{name} with pairing={other!r}")


def float64_islands(monkeypatch, cfg):
    """Run the layer's three float32 islands in float64 instead (the same formulas, only the precision):
    the RMSNorm, the rotary cos/sin (inverse frequencies formed in float64 too) and the softmax."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    def rms_norm(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    base, dim = float(cfg.rope_parameters["rope_theta"]), cfg.qk_rope_head_dim

    def rotary(self, x, position_ids):
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64, device=x.device) / dim))
        freqs = position_ids[..., None].to(torch.float64) * inv_freq  # (batch, n, d_R / 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    original = ds.eager_attention_forward

    def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        softmax = torch.nn.functional.softmax

        def same_dtype_softmax(x, dim=None, dtype=None, **kw):
            return softmax(x, dim=dim, **kw)  # the dtype of the scores, float64 here

        monkeypatch.setattr(torch.nn.functional, "softmax", same_dtype_softmax)
        try:
            return original(module, query, key, value, attention_mask, scaling, dropout, **kwargs)
        finally:
            monkeypatch.setattr(torch.nn.functional, "softmax", softmax)

    monkeypatch.setattr(ds.DeepseekV3RMSNorm, "forward", rms_norm)
    monkeypatch.setattr(ds.DeepseekV3RotaryEmbedding, "forward", rotary)
    monkeypatch.setattr(ds, "eager_attention_forward", eager)


@pytest.mark.parametrize("rope_interleave", [True, False], ids=["interleaved", "half"])
def test_latent_attention_equals_deepseek_v3_in_float64(rope_interleave, device, monkeypatch):
    """With the float32 islands lifted to float64 the layer and the course agree to float64 rounding:
    :func:`derived_bound` with u = 2^-53 (no float32 term anywhere)."""
    skip_without_float64(device)
    cfg = config(rope_interleave=rope_interleave, q_lora_rank=D_CQ)
    model = tiny_model(transformers.DeepseekV3Model, cfg, device)
    attn = model.layers[0].self_attn
    float64_islands(monkeypatch, cfg)
    with torch.no_grad():
        call = one_call(model, attn, random_ids(BATCH, N, 6, device))
    x, expected = hidden_states(call), output(call)
    mla = course_layer(attn, cfg, "interleaved" if rope_interleave else "half")
    mask = causal_mask(N, device=device)
    with torch.no_grad():
        bound = derived_bound(mla, x, absorbed=False, u=2.0**-53)
        absorbed_bound = derived_bound(mla, x, absorbed=True, u=2.0**-53)
        cache = LatentCache(N)
        decoded = torch.cat([mla(x[:, t : t + 1], cache=cache, absorb=True)[0] for t in range(N)], dim=1)
        name = f"DeepSeek-V3 layer in float64 (rope_interleave={rope_interleave})"
        assert_within(mla(x, mask)[0], expected, bound, f"{name}, naive")
        assert_within(mla(x, mask, absorb=True)[0], expected, absorbed_bound, f"{name}, absorbed")
        assert_within(decoded, expected, absorbed_bound, f"{name}, absorbed, decoded token by token")
