r"""Scores changed by functions: ``score_mod(score, b, h, q_idx, kv_idx)``, FlexAttention's signature (chapter 12).

A ``score_mod`` receives the scaled score :math:`s = q_i \cdot k_j \cdot \text{scale}` of sequence
b, head h, query q_idx and key kv_idx, and returns the score the softmax sees: a bias that depends
on the positions (ALiBi, chapter 9), or a squashing of large scores (soft-capping, Gemma 2). The
mask comes after it: FlexAttention and :func:`attention_with_mods` compute

.. math:: O = \operatorname{softmax}\!\big(\operatorname{mask}_M(\mathrm{score\_mod}(S))\big)\, V,
          \qquad S = Q K^\top \cdot \text{scale},

with :math:`M` the keep-mask of a ``mask_mod`` (:mod:`attnbook.programs.mask_mods`).

* :func:`softcap`: :math:`c \tanh(s / c)`, and :func:`softcap_score_mod`, the same as a score_mod;
* :func:`alibi_score_mod`: :math:`s - \mu_h |i - j|`, the bias of :func:`attnbook.alibi_bias`;
* :func:`scores_from_score_mod`: a score_mod applied to a whole (batch, heads, n, m) tensor of scores;
* :func:`attention_with_mods`: the dense reference of ``flex_attention``, built on the course's
  own scores, mask application and softmax (:mod:`attnbook.core`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..core.attention import attention, attention_scores
from ..core.masks import apply_mask
from ..core.softmax import softmax
from ..validators import check_floating, check_mod_output, check_number, check_shapes, check_sizes
from .mask_mods import MaskMod, call_mod, mask_from_mask_mod, mod_indices

ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


# softcap_c(s) = c tanh(s / c)
def softcap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    r"""Soft-capping, :math:`\operatorname{softcap}_c(s) = c \tanh(s / c)` (chapter 12; Gemma 2).

    It bounds every score to :math:`(-c, c)` while keeping small ones almost unchanged
    (:math:`c \tanh(s / c) = s - s^3 / (3 c^2) + \dots`), and it is increasing, so the order of the
    scores, and the argmax of each row, stays. Gemma 2 caps the attention scores with
    ``attn_logit_softcapping`` (c = 50) and the final logits with ``final_logit_softcapping`` (c = 30).

    Args:
        scores: a floating tensor of any shape.
        cap: c > 0, a finite number.

    Returns:
        A tensor of the shape and dtype of ``scores``.
    """
    check_floating("scores", scores)
    check_number("cap", cap, positive=True)
    return cap * torch.tanh(scores / cap)


def softcap_score_mod(cap: float) -> ScoreMod:
    r"""Soft-capping as a score_mod, :math:`\mathrm{score\_mod}(s, b, h, i, j) = c \tanh(s / c)` (chapter 12).

    Args:
        cap: c > 0, a finite number.
    """
    check_number("cap", cap, positive=True)

    def soft_cap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return soft_cap


# score_mod(s, b, h, i, j) = s - mu_h |i - j|
def alibi_score_mod(slopes: torch.Tensor) -> ScoreMod:
    r"""ALiBi as a score_mod, :math:`\mathrm{score\_mod}(s, b, h, i, j) = s - \mu_h\,|i - j|` (chapter 12).

    The bias of :func:`attnbook.alibi_bias` (chapter 9), added to the score of head h; the bias is
    formed in the slopes' dtype and added in the score's.

    Args:
        slopes: (H,), one slope per head, e.g. :func:`attnbook.alibi_slopes`.
    """
    check_shapes(slopes=(slopes, "(H,)"))

    def alibi(score, b, h, q_idx, kv_idx):
        distance = (q_idx - kv_idx).abs().to(slopes.dtype)  # |i - j|
        return score + (-slopes[h] * distance).to(score.dtype)

    return alibi


# S'[b, h, i, j] = score_mod(S[b, h, i, j], b, h, i, j)
def scores_from_score_mod(score_mod: ScoreMod, scores: torch.Tensor) -> torch.Tensor:
    r"""A score_mod applied to every score, :math:`S'_{bhij} = \mathrm{score\_mod}(S_{bhij}, b, h, i, j)` (chapter 12).

    ``score_mod`` is called once, with the whole tensor of scores and index tensors shaped to
    broadcast with it (:func:`attnbook.programs.mask_mods.mod_indices`).

    Args:
        score_mod: a function ``(score, b, h, q_idx, kv_idx) -> score``.
        scores: floating (batch, heads, n, m).

    Returns:
        A tensor (batch, heads, n, m) of the dtype of ``scores``.
    """
    if not callable(score_mod):
        raise TypeError(
            f"score_mod must be a function score_mod(score, b, h, q_idx, kv_idx), got {type(score_mod).__name__}"
        )
    check_shapes(scores=(scores, "(batch, heads, n, m)"))
    sizes = tuple(scores.shape)
    modified = call_mod("score_mod", score_mod, scores, *mod_indices(*sizes, device=scores.device), sizes=sizes)
    check_mod_output("score_mod", modified, sizes, scores.dtype)
    return modified.expand(sizes)  # (batch, heads, n, m)


# O = softmax(mask_M(score_mod(Q K^T * scale))) V
def attention_with_mods(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    mask_mod: MaskMod | None = None,
    score_mod: ScoreMod | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention with a mask function and a score function, the dense reference of ``flex_attention`` (chapter 12).

    .. math:: O = \operatorname{softmax}\!\big(\operatorname{mask}_M(\mathrm{score\_mod}(Q K^\top \cdot \text{scale}))\big)\, V

    The score_mod acts first, then the keep-mask :math:`M` of the mask_mod sets blocked scores to
    ``-inf`` (:func:`attnbook.apply_mask`), and :func:`attnbook.softmax` gives a query that sees no
    key weights 0 and output 0 (as :func:`attnbook.attention` and ``flex_attention`` do). Without a
    score_mod this is :func:`attnbook.attention` with the dense mask.

    Args:
        query: (batch, heads, n, d_k).
        key: (batch, heads, m, d_k).
        value: (batch, heads, m, d_v).
        mask_mod: ``(b, h, q_idx, kv_idx) -> bool`` (True = may attend), or None (no mask).
        score_mod: ``(score, b, h, q_idx, kv_idx) -> score``, or None.
        scale: factor on the scores; defaults to ``1 / sqrt(d_k)``.

    Returns:
        ``(output, weights)``: output (batch, heads, n, d_v), weights (batch, heads, n, m).
    """
    check_shapes(
        query=(query, "(batch, heads, n, d_k)"),
        key=(key, "(batch, heads, m, d_k)"),
        value=(value, "(batch, heads, m, d_v)"),
    )
    if scale is not None:
        check_number("scale", scale)
    batch, heads, n, m = query.shape[0], query.shape[1], query.shape[2], key.shape[2]
    check_sizes(batch=batch, heads=heads)
    mask = None
    if mask_mod is not None:
        mask = mask_from_mask_mod(mask_mod, n, m, batch=batch, heads=heads, device=query.device)  # (batch, heads, n, m)
    if score_mod is None:
        return attention(query, key, value, mask=mask, scale=scale)
    scores = attention_scores(query, key, scale)  # (batch, heads, n, m)
    scores = apply_mask(scores_from_score_mod(score_mod, scores), mask)  # (batch, heads, n, m)
    weights = softmax(scores, dim=-1)  # (batch, heads, n, m): each row sums to 1, or is 0 if fully masked
    output = weights @ value  # (batch, heads, n, m) @ (batch, heads, m, d_v) -> (batch, heads, n, d_v)
    return output, weights
