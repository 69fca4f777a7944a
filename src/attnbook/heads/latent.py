r"""Multi-head latent attention (MLA, DeepSeek-V2 and V3): keys and values from one small cached latent (chapter 13).

Grouped-query attention (chapter 9) shrinks the cache by sharing key-value heads. Latent attention
caches, per token, one vector :math:`c^{KV}_t` of width :math:`d_c` (DeepSeek-V3: 512, against
:math:`2 \cdot 128 \cdot 128` numbers of multi-head attention) from which every head's key and value
are made again (DeepSeek-V2, eqs. 9 to 19, in the row convention, :math:`h_t` the token's hidden state):

.. math::
    c^{KV}_t = h_t W_{DKV}^\top, \qquad k^C_{t,h} = c^{KV}_t W_{UK}^{h\top}, \qquad v^C_{t,h} = c^{KV}_t W_{UV}^{h\top},

    c^Q_t = h_t W_{DQ}^\top, \qquad q^C_{t,h} = c^Q_t W_{UQ}^{h\top},

    k^R_t = \operatorname{RoPE}(h_t W_{KR}^\top,\ t), \qquad q^R_{t,h} = \operatorname{RoPE}(c^Q_t W_{QR}^{h\top},\ t),

    k_{t,h} = [k^C_{t,h};\ k^R_t], \qquad q_{t,h} = [q^C_{t,h};\ q^R_{t,h}], \qquad
    o_{t,h} = \sum_j \operatorname{softmax}_j\!\Big(\frac{q_{t,h} \cdot k_{j,h}}{\sqrt{d_h + d_R}}\Big)\, v^C_{j,h},
    \qquad u_t = [o_{t,1}; \dots; o_{t,H}]\, W_O^\top.

DeepSeek's code normalises both latents with an RMSNorm (:func:`rms_norm`) before their
up-projections; the cache holds the normalised :math:`c^{KV}_t` and the rotated :math:`k^R_t`,
:math:`d_c + d_R` numbers per token and layer (:class:`LatentCache`).

**Absorption.** The score of the compressed parts is
:math:`q^C_{t,h} \cdot k^C_{j,h} = (q^C_{t,h} W^h_{UK}) \cdot c^{KV}_j`: multiply the query by
:math:`W^h_{UK}` once (:func:`absorb_query`) and score it against the cached latents directly;
likewise :math:`\sum_j w_j v^C_{j,h} = (\sum_j w_j c^{KV}_j) W^{h\top}_{UV}`, so the weighted sum runs over
the latents and :math:`W_{UV}` joins the output projection (:func:`absorbed_output_weight`).
:func:`latent_attention_absorbed` never forms a key or a value of a cached token;
:func:`latent_attention_naive` forms them all. They are equal in exact arithmetic.

**Why the rotary part is decoupled.** Rotary positions applied to the keys made from the latent
would put a rotation :math:`R_i R_j^\top = R_{i-j}` between the query and :math:`W_{UK}`:
:math:`\operatorname{rot}(q, i) \cdot \operatorname{rot}(c_j W_{UK}^\top, j) = q\, R_{i-j}\, W_{UK}\, c_j^\top`,
a matrix that changes with the offset, so no fixed matrix can be absorbed into the query
(:func:`rotary_on_latent_keys_scores` against :func:`absorbed_rotary_scores`, the counterexample).
DeepSeek rotates a separate small key :math:`k^R_t`, one for all heads, instead.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.attention import attention
from ..core.masks import apply_mask, causal_mask, check_mask, mask_like_scores
from ..core.softmax import softmax
from ..positions.rotary import PAIRINGS, apply_rotary
from ..validators import (
    check_floating,
    check_latent_width,
    check_ndim,
    check_number,
    check_one_of,
    check_rotary_width,
    check_same_dtype_device,
    check_shapes,
    check_sizes,
    check_type,
    skip_checks,
)


# RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g
def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    r"""Root-mean-square normalisation :math:`x / \sqrt{\operatorname{mean}(x^2) + \epsilon} \odot g` over the last axis (chapter 13).

    DeepSeek applies it to both latents :math:`c^{KV}_t` and :math:`c^Q_t` before their up-projections.
    x (..., d), weight g (d,) or None (no gain).
    """
    check_shapes(x=(x, "(..., d)"), weight=(weight, "(d,)"))
    check_number("eps", eps, minimum=0)
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)  # (..., d) * (..., 1)
    return y if weight is None else y * weight  # (..., d)


# c_t = h_t W_D^T  (the down-projection to a latent: c^KV with W_DKV, c^Q with W_DQ)
def down_project(x: torch.Tensor, w_down: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    r"""The down-projection to a latent, :math:`c^{KV}_t = h_t W_{DKV}^\top` (or :math:`c^Q_t = h_t W_{DQ}^\top`) (chapter 13).

    x (..., n, d_model), w_down (d_c, d_model) stored as in ``nn.Linear``, bias (d_c,) or None;
    returns the latents (..., n, d_c). Raises ``ValueError`` if d_c > d_model.
    """
    check_shapes(x=(x, "(..., n, d_model)"), w_down=(w_down, "(d_c, d_model)"), bias=(bias, "(d_c,)"))
    check_latent_width(w_down.shape[0], w_down.shape[1], "the latent width d_c of w_down (d_c, d_model)")
    c = x @ w_down.T  # (..., n, d_model) @ (d_model, d_c) -> (..., n, d_c)
    return c if bias is None else c + bias


# X^h_t = c_t W_U^{h T} for every head h  (k^C with W_UK, v^C with W_UV, q^C with W_UQ)
def up_project(latent: torch.Tensor, w_up: torch.Tensor, num_heads: int) -> torch.Tensor:
    r"""An up-projection from a latent to every head, :math:`k^C_{t,h} = c^{KV}_t W_{UK}^{h\top}` (chapter 13).

    The same formula makes the values (:math:`W_{UV}`) and the compressed queries (:math:`W_{UQ}`).
    latent (..., n, d_c), w_up (H * d, d_c) with head h's block :math:`W^h_U` in rows
    h d to (h + 1) d - 1; returns (..., H, n, d).
    """
    check_shapes(latent=(latent, "(..., n, d_c)"), w_up=(w_up, "(num_heads * d, d_c)"), num_heads=num_heads)
    y = latent @ w_up.T  # (..., n, d_c) @ (d_c, H d) -> (..., n, H d)
    return y.unflatten(-1, (num_heads, -1)).transpose(-3, -2)  # (..., n, H, d) -> (..., H, n, d)


# k^R_t = RoPE(h_t W_KR^T, t): one rotary key per token, shared by the heads
def rotary_key(
    x: torch.Tensor,
    w_kr: torch.Tensor,
    positions: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    base: float = 10000.0,
    pairing: str = "interleaved",
) -> torch.Tensor:
    r"""The decoupled rotary key :math:`k^R_t = \operatorname{RoPE}(h_t W_{KR}^\top, t)`, one for all heads (chapter 13).

    x (..., n, d_model), w_kr (d_R, d_model), positions (n,) or broadcastable to (..., n); returns
    (..., 1, n, d_R): a head axis of size one, broadcast against every query head.
    """
    check_shapes(x=(x, "(..., n, d_model)"), w_kr=(w_kr, "(d_R, d_model)"), bias=(bias, "(d_R,)"))
    k = x @ w_kr.T  # (..., n, d_model) @ (d_model, d_R) -> (..., n, d_R)
    if bias is not None:
        k = k + bias
    return apply_rotary(k, positions, pairing=pairing, base=base).unsqueeze(-3)  # (..., 1, n, d_R)


# q^R_{t,h} = RoPE(c^Q_t W_QR^{h T}, t)
def rotary_queries(
    latent_q: torch.Tensor,
    w_qr: torch.Tensor,
    num_heads: int,
    positions: torch.Tensor,
    *,
    base: float = 10000.0,
    pairing: str = "interleaved",
) -> torch.Tensor:
    r"""The rotary part of each head's query, :math:`q^R_{t,h} = \operatorname{RoPE}(c^Q_t W_{QR}^{h\top}, t)` (chapter 13).

    latent_q (..., n, d_cq) (the query latent, or the hidden state when queries are not
    compressed), w_qr (H * d_R, d_cq), positions (n,); returns (..., H, n, d_R).
    """
    q = up_project(latent_q, w_qr, num_heads)  # (..., H, n, d_R)
    return apply_rotary(q, positions, pairing=pairing, base=base)  # (..., H, n, d_R)


def _check_latent_inputs(q_nope, q_rope, latent, k_rope, w_uk, w_uv, mask):
    check_shapes(
        q_nope=(q_nope, "(..., H, n, d_h)"),
        q_rope=(q_rope, "(..., H, n, d_R)"),
        latent=(latent, "(..., m, d_c)"),
        k_rope=(k_rope, "(..., one, m, d_R)"),
        w_uk=(w_uk, "(H * d_h, d_c)"),
        w_uv=(w_uv, "(H * d_v, d_c)"),
    )
    if k_rope.shape[-3] != 1:
        raise ValueError(
            f"k_rope (..., 1, m, d_R) is one rotary key per token shared by the heads, got shape {tuple(k_rope.shape)}"
        )
    h, n, m = q_nope.shape[-3], q_nope.shape[-2], latent.shape[-2]
    batch = torch.broadcast_shapes(q_nope.shape[:-3], q_rope.shape[:-3], latent.shape[:-2], k_rope.shape[:-3])
    if mask is not None:
        check_mask(mask, (*batch, h, n, m), q_nope.device)
    return mask_like_scores(mask, q_nope.dtype)


# o_{t,h} = softmax([q^C; q^R] [c W_UK^{hT}; k^R]^T * scale) (c W_UV^{hT})
def latent_attention_naive(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    latent: torch.Tensor,
    k_rope: torch.Tensor,
    w_uk: torch.Tensor,
    w_uv: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Latent attention computed as written: every head's keys and values made from the latents, then attention (chapter 13).

    .. math:: k_{j,h} = [c_j W_{UK}^{h\top};\ k^R_j], \qquad v_{j,h} = c_j W_{UV}^{h\top}, \qquad
              o_{t,h} = \operatorname{softmax}_j\big(\text{scale}\; q_{t,h} \cdot k_{j,h}\big)\, v_{j,h}

    Args:
        q_nope: (..., H, n, d_h), the compressed part of the queries :math:`q^C`.
        q_rope: (..., H, n, d_R), their rotary part :math:`q^R` (already rotated).
        latent: (..., m, d_c), the cached latents :math:`c^{KV}_j`.
        k_rope: (..., 1, m, d_R), the cached rotary keys :math:`k^R_j` (already rotated).
        w_uk: (H * d_h, d_c); w_uv: (H * d_v, d_c), the up-projections.
        mask: optional, broadcastable to (..., H, n, m), as in :func:`attnbook.attention`.
        scale: defaults to ``1 / sqrt(d_h + d_R)``.

    Returns:
        ``(output, weights)``: the heads' outputs (..., H, n, d_v) and weights (..., H, n, m).
    """
    mask = _check_latent_inputs(q_nope, q_rope, latent, k_rope, w_uk, w_uv, mask)
    h, m = q_nope.shape[-3], latent.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(q_nope.shape[-1] + q_rope.shape[-1])
    with skip_checks():  # shapes checked above
        k_nope = up_project(latent, w_uk, h)  # (..., H, m, d_h): the keys, materialised
        value = up_project(latent, w_uv, h)  # (..., H, m, d_v): the values, materialised
        k_rope = k_rope.expand(*k_rope.shape[:-3], h, m, k_rope.shape[-1])  # (..., H, m, d_R): shared by the heads
        batch = torch.broadcast_shapes(k_nope.shape[:-3], k_rope.shape[:-3])
        key = torch.cat(
            (k_nope.expand(*batch, h, m, -1), k_rope.expand(*batch, h, m, -1)), dim=-1
        )  # (..., H, m, d_h + d_R)
        batch_q = torch.broadcast_shapes(q_nope.shape[:-3], q_rope.shape[:-3])
        query = torch.cat(
            (q_nope.expand(*batch_q, *q_nope.shape[-3:]), q_rope.expand(*batch_q, *q_rope.shape[-3:])), dim=-1
        )  # (..., H, n, d_h + d_R)
        return attention(query, key, value, mask=mask, scale=scale)  # (..., H, n, d_v), (..., H, n, m)


# q~^C_{t,h} = q^C_{t,h} W_UK^h: the key up-projection absorbed into the query
def absorb_query(q_nope: torch.Tensor, w_uk: torch.Tensor) -> torch.Tensor:
    r"""Absorb the key up-projection into the query: :math:`\tilde q_{t,h} = q^C_{t,h} W^h_{UK}` (chapter 13).

    Then :math:`\tilde q_{t,h} \cdot c_j = q^C_{t,h} \cdot (c_j W_{UK}^{h\top}) = q^C_{t,h} \cdot k^C_{j,h}`
    for every cached latent :math:`c_j`, without forming :math:`k^C_{j,h}`.
    q_nope (..., H, n, d_h), w_uk (H * d_h, d_c); returns (..., H, n, d_c).
    """
    check_shapes(q_nope=(q_nope, "(..., H, n, d_h)"), w_uk=(w_uk, "(H * d_h, d_c)"))
    h, d_h = q_nope.shape[-3], q_nope.shape[-1]
    w = w_uk.unflatten(0, (h, d_h))  # (H, d_h, d_c): W_UK^h
    return q_nope @ w  # (..., H, n, d_h) @ (H, d_h, d_c) -> (..., H, n, d_c)


# W_UQK^h = W_UK^{h T} W_UQ^h:  q~_{t,h} = c^Q_t W_UQK^{h T}
def absorbed_query_weight(w_uq: torch.Tensor, w_uk: torch.Tensor, num_heads: int) -> torch.Tensor:
    r"""The query and key up-projections merged into one matrix per head, :math:`W^h_{UQK} = W_{UK}^{h\top} W^h_{UQ}` (chapter 13).

    :math:`\tilde q_{t,h} = c^Q_t W_{UQK}^{h\top}` goes from the query latent straight to the key
    latent's space. w_uq (H * d_h, d_cq), w_uk (H * d_h, d_c); returns (H * d_c, d_cq), stored as in
    ``nn.Linear`` so that :func:`up_project` applies it.
    """
    check_shapes(w_uq=(w_uq, "(num_heads * d_h, d_cq)"), w_uk=(w_uk, "(num_heads * d_h, d_c)"), num_heads=num_heads)
    uq = w_uq.unflatten(0, (num_heads, -1))  # (H, d_h, d_cq)
    uk = w_uk.unflatten(0, (num_heads, -1))  # (H, d_h, d_c)
    return (uk.transpose(-2, -1) @ uq).flatten(
        0, 1
    )  # (H, d_c, d_h) @ (H, d_h, d_cq) -> (H, d_c, d_cq) -> (H d_c, d_cq)


# W_OUV = [W_O^1 W_UV^1 | ... | W_O^H W_UV^H]:  u_t = [z_{t,1}; ...; z_{t,H}] W_OUV^T
def absorbed_output_weight(w_uv: torch.Tensor, w_o: torch.Tensor, num_heads: int) -> torch.Tensor:
    r"""The value up-projection absorbed into the output projection, :math:`W^h_{OUV} = W^h_O W^h_{UV}` (chapter 13).

    :math:`W^h_O` (d_model, d_v) is head h's block of columns of :math:`W_O`. The output
    :math:`u_t = \sum_h o_{t,h} W_O^{h\top} = \sum_h z_{t,h} W_{OUV}^{h\top}` with
    :math:`z_{t,h} = \sum_j w_{tj} c_j` the weighted sum of the latents. w_uv (H * d_v, d_c),
    w_o (d_model, H * d_v); returns (d_model, H * d_c), the blocks side by side.
    """
    check_shapes(w_uv=(w_uv, "(num_heads * d_v, d_c)"), w_o=(w_o, "(d_model, num_heads * d_v)"), num_heads=num_heads)
    uv = w_uv.unflatten(0, (num_heads, -1))  # (H, d_v, d_c)
    o = w_o.unflatten(1, (num_heads, -1)).transpose(0, 1)  # (d_model, H, d_v) -> (H, d_model, d_v)
    merged = o @ uv  # (H, d_model, d_v) @ (H, d_v, d_c) -> (H, d_model, d_c)
    return merged.transpose(0, 1).flatten(1)  # (d_model, H, d_c) -> (d_model, H d_c)


# s_{tj,h} = (q~_{t,h} . c_j + q^R_{t,h} . k^R_j) * scale,  z_{t,h} = sum_j w_{tj,h} c_j,  o_{t,h} = z_{t,h} W_UV^{hT}
def latent_attention_absorbed(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    latent: torch.Tensor,
    k_rope: torch.Tensor,
    w_uk: torch.Tensor,
    w_uv: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Latent attention with the up-projections absorbed: no key or value of a cached token is ever formed (chapter 13).

    .. math:: s_{tj,h} = \text{scale}\,\big(\tilde q_{t,h} \cdot c_j + q^R_{t,h} \cdot k^R_j\big), \quad
              \tilde q_{t,h} = q^C_{t,h} W^h_{UK}, \qquad
              z_{t,h} = \sum_j \operatorname{softmax}_j(s_{t\cdot,h})\, c_j, \qquad o_{t,h} = z_{t,h} W_{UV}^{h\top}

    The scores are those of :func:`latent_attention_naive` (the products regrouped), and so are the
    outputs; what is read per cached token is its latent and rotary key, :math:`d_c + d_R` numbers,
    for every head. The arguments and returns are those of :func:`latent_attention_naive`.
    """
    mask = _check_latent_inputs(q_nope, q_rope, latent, k_rope, w_uk, w_uv, mask)
    h = q_nope.shape[-3]
    if scale is None:
        scale = 1.0 / math.sqrt(q_nope.shape[-1] + q_rope.shape[-1])
    with skip_checks():
        q_abs = absorb_query(q_nope, w_uk)  # (..., H, n, d_c)
    # every head scores against the same latents: stack the H heads' queries as H n rows (as
    # grouped-query attention stacks a group), so each latent is read once, never copied per head
    n = q_nope.shape[-2]
    rows = q_abs.flatten(-3, -2)  # (..., H n, d_c)
    rows_rope = q_rope.flatten(-3, -2)  # (..., H n, d_R)
    scores = rows @ latent.transpose(-2, -1)  # (..., H n, d_c) @ (..., d_c, m) -> (..., H n, m)
    scores = scores + rows_rope @ k_rope.squeeze(-3).transpose(-2, -1)  # (..., H n, d_R) @ (..., d_R, m)
    scores = apply_mask(scores.unflatten(-2, (h, n)) * scale, mask)  # (..., H, n, m), -inf where a keep-mask blocks
    weights = softmax(scores)  # (..., H, n, m)
    z = (
        weights.flatten(-3, -2) @ latent
    )  # (..., H n, m) @ (..., m, d_c) -> (..., H n, d_c): the weighted sum of latents
    z = z.unflatten(-2, (h, n))  # (..., H, n, d_c)
    uv = w_uv.unflatten(0, (h, -1))  # (H, d_v, d_c): W_UV^h
    return z @ uv.transpose(-2, -1), weights  # (..., H, n, d_c) @ (H, d_c, d_v) -> (..., H, n, d_v)


# s_{ij,h} = scale * rot(q_{i,h}, i) . rot(c_j W_UK^{hT}, j) = scale * q_{i,h} R_{i-j} W_UK^h c_j^T
def rotary_on_latent_keys_scores(
    q_nope: torch.Tensor,
    latent: torch.Tensor,
    w_uk: torch.Tensor,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    *,
    scale: float | None = None,
    base: float = 10000.0,
    pairing: str = "interleaved",
) -> torch.Tensor:
    r"""The scores if rotary positions were applied to the keys made from the latent (the design DeepSeek rejected; chapter 13).

    .. math:: s_{ij,h} = \text{scale}\;\operatorname{rot}(q_{i,h}, i) \cdot \operatorname{rot}(c_j W_{UK}^{h\top}, j)
              = \text{scale}\; q_{i,h}\, R_{i}\, R_{j}^\top\, W^h_{UK}\, c_j^\top

    The rotation :math:`R_i R_j^\top = R_{i - j}` sits between the query and :math:`W_{UK}`, so
    absorbing :math:`W_{UK}` into the query (:func:`absorbed_rotary_scores`) cannot give these scores.
    q_nope (..., H, n, d_h) with d_h even, latent (..., m, d_c), w_uk (H * d_h, d_c), q_positions (n,),
    k_positions (m,); returns (..., H, n, m).
    """
    check_shapes(q_nope=(q_nope, "(..., H, n, d_h)"), latent=(latent, "(..., m, d_c)"), w_uk=(w_uk, "(H * d_h, d_c)"))
    h, d_h = q_nope.shape[-3], q_nope.shape[-1]
    check_rotary_width(d_h, d_h, "the head width d_h of q_nope (..., H, n, d_h)")
    if scale is None:
        scale = 1.0 / math.sqrt(d_h)
    with skip_checks():
        k = up_project(latent, w_uk, h)  # (..., H, m, d_h): the keys made from the latents
    q = apply_rotary(q_nope, q_positions, pairing=pairing, base=base)  # (..., H, n, d_h)
    k = apply_rotary(k, k_positions, pairing=pairing, base=base)  # (..., H, m, d_h)
    return q @ k.transpose(-2, -1) * scale  # (..., H, n, d_h) @ (..., H, d_h, m) -> (..., H, n, m)


# s~_{ij,h} = scale * (rot(q_{i,h}, i) W_UK^h) . c_j: all that absorption can compute from a cache of latents
def absorbed_rotary_scores(
    q_nope: torch.Tensor,
    latent: torch.Tensor,
    w_uk: torch.Tensor,
    q_positions: torch.Tensor,
    *,
    scale: float | None = None,
    base: float = 10000.0,
    pairing: str = "interleaved",
) -> torch.Tensor:
    r"""Absorption tried with rotary positions on the keys made from the latent: the counterexample (chapter 13).

    .. math:: \tilde s_{ij,h} = \text{scale}\; \big(\operatorname{rot}(q_{i,h}, i)\, W^h_{UK}\big) \cdot c_j
              = \text{scale}\; q_{i,h}\, R_i\, W^h_{UK}\, c_j^\top

    The cache holds :math:`c_j` and no rotation can be folded into it that :math:`W_{UK}` would carry
    to :math:`R_j` on the key side (the rotation acts on the d_h features of a head, the latent has
    d_c), so the key's rotation :math:`R_j^\top` is lost: :math:`\tilde s_{ij} = s_{ij}` of
    :func:`rotary_on_latent_keys_scores` when :math:`R_j = I` (key position 0), and in general
    :math:`s_{ij} - \tilde s_{ij} = \text{scale}\,\operatorname{rot}(q_{i,h}, i) \cdot (\operatorname{rot}(k_j, j) - k_j)`,
    :math:`k_j = c_j W_{UK}^{h\top}`.
    Arguments as in :func:`rotary_on_latent_keys_scores`; returns (..., H, n, m).
    """
    check_shapes(q_nope=(q_nope, "(..., H, n, d_h)"), latent=(latent, "(..., m, d_c)"), w_uk=(w_uk, "(H * d_h, d_c)"))
    d_h = q_nope.shape[-1]
    check_rotary_width(d_h, d_h, "the head width d_h of q_nope (..., H, n, d_h)")
    if scale is None:
        scale = 1.0 / math.sqrt(d_h)
    q = apply_rotary(q_nope, q_positions, pairing=pairing, base=base)  # (..., H, n, d_h)
    with skip_checks():
        q_abs = absorb_query(q, w_uk)  # (..., H, n, d_c)
    return (
        q_abs @ latent.unsqueeze(-3).transpose(-2, -1) * scale
    )  # (..., H, n, d_c) @ (..., 1, d_c, m) -> (..., H, n, m)


class LatentCache:
    r"""The cache of latent attention: per token the latent :math:`c^{KV}_t` (d_c) and the rotary key :math:`k^R_t` (d_R) (chapter 13).

    Preallocated for ``max_len`` tokens on the first :meth:`append`, like :class:`attnbook.KVCache`
    (whose keys and values it replaces): :math:`d_c + d_R` numbers per token and layer, for all heads.
    :attr:`latents` (..., L, d_c) and :attr:`rope_keys` (..., 1, L, d_R) are views of the filled part;
    :attr:`nbytes` is the size of the buffers.
    """

    def __init__(self, max_len: int) -> None:
        check_sizes(max_len=max_len)
        self.max_len = max_len
        self.length = 0
        self._latents: torch.Tensor | None = None  # (..., max_len, d_c)
        self._rope_keys: torch.Tensor | None = None  # (..., max_len, d_R)

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        shape = (
            "unallocated"
            if self._latents is None
            else f"latents {tuple(self._latents.shape)}, rope keys {tuple(self._rope_keys.shape)}"
        )
        return f"LatentCache(length={self.length}, max_len={self.max_len}, {shape})"

    def _filled(self, buffer: torch.Tensor | None) -> torch.Tensor:
        if buffer is None:
            raise ValueError("the cache is empty: append latents and rotary keys first")
        return buffer[..., : self.length, :]  # (..., L, d)

    @property
    def latents(self) -> torch.Tensor:
        """The stored latents (..., L, d_c), a view of the buffer."""
        return self._filled(self._latents)

    @property
    def rope_keys(self) -> torch.Tensor:
        """The stored rotary keys (..., 1, L, d_R), a view of the buffer with a head axis of size one."""
        return self._filled(self._rope_keys).unsqueeze(-3)  # (..., 1, L, d_R)

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers (0 before the first append)."""
        if self._latents is None:
            return 0
        return sum(b.numel() * b.element_size() for b in (self._latents, self._rope_keys))

    def reset(self) -> None:
        """Forget the stored tokens (the buffers are kept)."""
        self.length = 0

    # C_{0:L+t} = [C_{0:L}; C_new],  K^R_{0:L+t} = [K^R_{0:L}; K^R_new]
    def append(self, latent: torch.Tensor, rope_key: torch.Tensor) -> None:
        """Store the latents (..., t, d_c) and rotary keys (..., 1, t, d_R) of the next t tokens."""
        check_floating("latent", latent)
        check_floating("rope_key", rope_key)
        check_same_dtype_device(latent=latent, rope_key=rope_key)
        check_ndim("latent", latent, 2, "(..., t, d_c)", at_least=True)
        check_ndim("rope_key", rope_key, 3, "(..., 1, t, d_R)", at_least=True)
        if (
            rope_key.shape[-3] != 1
            or rope_key.shape[:-3] != latent.shape[:-2]
            or rope_key.shape[-2] != latent.shape[-2]
        ):
            raise ValueError(
                f"latent (..., t, d_c) and rope_key (..., 1, t, d_R) must agree in the batch and t, got latent "
                f"{tuple(latent.shape)} and rope_key {tuple(rope_key.shape)}"
            )
        rope_key = rope_key.squeeze(-3)  # (..., t, d_R)
        t = latent.shape[-2]
        if self.length + t > self.max_len:
            raise ValueError(
                f"the cache holds at most max_len = {self.max_len} tokens; it has {self.length} and {t} more were appended"
            )
        if self._latents is None:
            batch = latent.shape[:-2]
            self._latents = latent.new_empty(*batch, self.max_len, latent.shape[-1])  # (..., max_len, d_c)
            self._rope_keys = rope_key.new_empty(*batch, self.max_len, rope_key.shape[-1])  # (..., max_len, d_R)
        else:
            want_c = (*self._latents.shape[:-2], t, self._latents.shape[-1])
            want_r = (*self._rope_keys.shape[:-2], t, self._rope_keys.shape[-1])
            if tuple(latent.shape) != want_c or tuple(rope_key.shape) != want_r:
                raise ValueError(
                    f"the cache holds latents {tuple(self._latents.shape)} and rotary keys {tuple(self._rope_keys.shape)}; "
                    f"appending t = {t} tokens needs latent {want_c} and rope_key {want_r[:-2] + (1,) + want_r[-2:]}, "
                    f"got latent {tuple(latent.shape)} and rope_key {tuple(rope_key.unsqueeze(-3).shape)}"
                )
            check_same_dtype_device(cached=self._latents, latent=latent)
        self._latents[..., self.length : self.length + t, :] = latent  # (..., t, d_c) into the buffer
        self._rope_keys[..., self.length : self.length + t, :] = rope_key  # (..., t, d_R)
        self.length += t


def _linear(in_features: int, out_features: int, bias: bool) -> nn.Linear:
    return nn.Linear(in_features, out_features, bias=bias)


class MultiHeadLatentAttention(nn.Module):
    r"""Multi-head latent attention (DeepSeek-V2/V3) with a naive and an absorbed path and a cache of latents (chapter 13).

    Args:
        d_model: the width of the hidden states.
        num_heads: H.
        d_latent: d_c, the width of the cached latent :math:`c^{KV}` (at most d_model).
        d_head: d_h, the width of each head's compressed query and key part.
        d_rope: d_R, the width of the rotary part (even, at most d_head).
        d_value: d_v, each head's value width (default d_head).
        d_query_latent: d_cq, the width of the query latent :math:`c^Q` (at most d_model), or None
            for queries projected from the hidden state directly (DeepSeek-V2-Lite).
        rope_base: the rotary base.
        pairing: ``"interleaved"`` (DeepSeek's layout, pairs of neighbours) or ``"half"``.
        norm_eps: the RMSNorm epsilon on the latents (DeepSeek: 1e-6), or None for no norm.
        bias: biases on the down-projections and the output projection (DeepSeek: none).
        scale: the softmax scale, default ``1 / sqrt(d_head + d_rope)``.

    The weights, stored as in ``nn.Linear`` (out, in): ``w_dkv`` (d_c, d_model), ``w_kr`` (d_R, d_model),
    ``w_uk`` (H d_h, d_c), ``w_uv`` (H d_v, d_c), ``w_dq`` (d_cq, d_model) or None, ``w_uq``
    (H d_h, d_cq or d_model), ``w_qr`` (H d_R, d_cq or d_model), ``w_o`` (d_model, H d_v); the
    RMSNorm gains ``kv_norm`` (d_c,) and ``q_norm`` (d_cq,) (or None).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_latent: int,
        d_head: int,
        d_rope: int,
        *,
        d_value: int | None = None,
        d_query_latent: int | None = None,
        rope_base: float = 10000.0,
        pairing: str = "interleaved",
        norm_eps: float | None = 1e-6,
        bias: bool = False,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d_model=d_model, num_heads=num_heads, d_head=d_head, d_value=d_value)
        check_latent_width(d_latent, d_model)
        if d_query_latent is not None:
            check_latent_width(d_query_latent, d_model, "d_query_latent")
        check_rotary_width(d_rope, d_head)
        check_number("rope_base", rope_base, positive=True)
        check_one_of("pairing", pairing, PAIRINGS)
        if norm_eps is not None:
            check_number("norm_eps", norm_eps, minimum=0)
        check_type("bias", bias, bool)
        if scale is not None:
            check_number("scale", scale, positive=True)
        d_value = d_head if d_value is None else d_value
        self.d_model, self.num_heads, self.d_latent = d_model, num_heads, d_latent
        self.d_head, self.d_rope, self.d_value, self.d_query_latent = d_head, d_rope, d_value, d_query_latent
        self.rope_base, self.pairing, self.norm_eps = rope_base, pairing, norm_eps
        self.scale = 1.0 / math.sqrt(d_head + d_rope) if scale is None else scale
        self.w_dkv = _linear(d_model, d_latent, bias)  # c^KV = h W_DKV^T
        self.w_kr = _linear(d_model, d_rope, bias)  # k^R = RoPE(h W_KR^T)
        self.w_uk = _linear(d_latent, num_heads * d_head, False)  # k^C = c^KV W_UK^T
        self.w_uv = _linear(d_latent, num_heads * d_value, False)  # v^C = c^KV W_UV^T
        d_q_in = d_model if d_query_latent is None else d_query_latent
        self.w_dq = None if d_query_latent is None else _linear(d_model, d_query_latent, bias)  # c^Q = h W_DQ^T
        self.w_uq = _linear(d_q_in, num_heads * d_head, False)  # q^C = c^Q W_UQ^T
        self.w_qr = _linear(d_q_in, num_heads * d_rope, False)  # q^R = RoPE(c^Q W_QR^T)
        self.w_o = _linear(num_heads * d_value, d_model, bias)  # u = [o_1; ...; o_H] W_O^T
        with_norm = norm_eps is not None
        self.kv_norm = nn.Parameter(torch.ones(d_latent)) if with_norm else None
        self.q_norm = nn.Parameter(torch.ones(d_query_latent)) if with_norm and d_query_latent is not None else None

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, d_latent={self.d_latent}, d_head={self.d_head}, "
            f"d_rope={self.d_rope}, d_value={self.d_value}, d_query_latent={self.d_query_latent}, pairing={self.pairing!r}"
        )

    def project(
        self, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        r"""The projections of the hidden states x (..., n, d_model) at ``positions`` (n,).

        Returns ``(q_nope, q_rope, latent, k_rope)``: :math:`q^C` (..., H, n, d_h), :math:`q^R`
        (..., H, n, d_R) rotated, :math:`c^{KV}` (..., n, d_c) normalised, and :math:`k^R` (..., 1, n, d_R) rotated.
        """
        rope = dict(base=self.rope_base, pairing=self.pairing)
        latent = down_project(x, self.w_dkv.weight, self.w_dkv.bias)  # (..., n, d_c)
        if self.kv_norm is not None:
            latent = rms_norm(latent, self.kv_norm, self.norm_eps)  # (..., n, d_c)
        k_rope = rotary_key(x, self.w_kr.weight, positions, bias=self.w_kr.bias, **rope)  # (..., 1, n, d_R)
        latent_q = x
        if self.w_dq is not None:
            latent_q = down_project(x, self.w_dq.weight, self.w_dq.bias)  # (..., n, d_cq)
            if self.q_norm is not None:
                latent_q = rms_norm(latent_q, self.q_norm, self.norm_eps)
        q_nope = up_project(latent_q, self.w_uq.weight, self.num_heads)  # (..., H, n, d_h)
        q_rope = rotary_queries(latent_q, self.w_qr.weight, self.num_heads, positions, **rope)  # (..., H, n, d_R)
        return q_nope, q_rope, latent, k_rope

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        positions: torch.Tensor | None = None,
        cache: LatentCache | None = None,
        absorb: bool = False,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""Latent self-attention of the tokens x (..., n, d_model); returns ``(output (..., n, d_model), weights or None)``.

        Args:
            x: the hidden states (..., n, d_model).
            mask: broadcastable to (..., H, n, m) as in :func:`attnbook.attention` (m = n without a
                cache). Without a mask there is none; with a cache and n > 1 the default is the
                lower-right causal mask (the n new tokens see the cache and each other causally).
            positions: the tokens' positions (n,), default ``len(cache) + arange(n)`` (0, ..., n - 1
                without a cache).
            cache: a :class:`LatentCache`; the new latents and rotary keys are appended and the
                queries attend over every stored token.
            absorb: False computes :func:`latent_attention_naive` (keys and values formed), True
                :func:`latent_attention_absorbed` (never formed); the outputs agree.
            need_weights: return the weights (..., H, n, m).
        """
        check_shapes(x=(x, "(..., n, d_model)"), d_model=self.d_model)
        check_type("absorb", absorb, bool)
        check_type("need_weights", need_weights, bool)
        if cache is not None:
            check_type("cache", cache, LatentCache)
        n = x.shape[-2]
        start = 0 if cache is None else len(cache)
        if positions is None:
            positions = torch.arange(start, start + n, device=x.device)  # (n,)
        q_nope, q_rope, latent, k_rope = self.project(x, positions)
        if cache is not None:
            cache.append(latent, k_rope)
            latent, k_rope = cache.latents, cache.rope_keys  # (..., m, d_c), (..., 1, m, d_R)
            if mask is None and n > 1:
                mask = causal_mask(n, len(cache), align="lower_right", device=x.device)  # (n, m)
        path = latent_attention_absorbed if absorb else latent_attention_naive
        o, weights = path(q_nope, q_rope, latent, k_rope, self.w_uk.weight, self.w_uv.weight, mask, self.scale)
        o = o.transpose(-3, -2).flatten(-2)  # (..., H, n, d_v) -> (..., n, H, d_v) -> (..., n, H d_v)
        return self.w_o(o), (
            weights if need_weights else None
        )  # (..., n, H d_v) @ (H d_v, d_model) -> (..., n, d_model)


# naive:    2 m d_c H (d_h + d_v) + 2 H m (d_h + d_R) + 2 H m d_v
# absorbed: 2 H d_h d_c + 2 H m (d_c + d_R) + 2 H m d_c + 2 H d_c d_v
def latent_decode_flops(
    m: int,
    *,
    num_heads: int,
    d_latent: int,
    d_head: int,
    d_rope: int,
    d_value: int | None = None,
    absorbed: bool,
) -> int:
    r"""Multiply-add FLOPs (2 per product) of one decoded token's attention over m cached tokens, naive or absorbed (chapter 13).

    Given the token's :math:`q^C, q^R` and the cache (the projections of the new token are the same
    for both paths and not counted):

    * naive (:func:`latent_attention_naive`): the keys :math:`2 m d_c H d_h` and values
      :math:`2 m d_c H d_v` of every cached token, the scores :math:`2 H m (d_h + d_R)`, the
      weighted sum :math:`2 H m d_v`;
    * absorbed (:func:`latent_attention_absorbed`): the absorbed query :math:`2 H d_h d_c`, the
      scores :math:`2 H m (d_c + d_R)`, the weighted sum of latents :math:`2 H m d_c`, the value
      up-projection of the result :math:`2 H d_c d_v`.

    The naive path grows like :math:`m d_c H (d_h + d_v)`, the absorbed one like :math:`m H (2 d_c + d_R)`.
    """
    d_value = d_head if d_value is None else d_value
    check_sizes(minimum=0, m=m)
    check_sizes(num_heads=num_heads, d_latent=d_latent, d_head=d_head, d_rope=d_rope, d_value=d_value)
    check_type("absorbed", absorbed, bool)
    h = num_heads
    if absorbed:
        return (
            2 * h * d_head * d_latent
            + 2 * h * m * (d_latent + d_rope)
            + 2 * h * m * d_latent
            + 2 * h * d_latent * d_value
        )
    return 2 * m * d_latent * h * (d_head + d_value) + 2 * h * m * (d_head + d_rope) + 2 * h * m * d_value
