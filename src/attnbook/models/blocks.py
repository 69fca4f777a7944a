r"""The pieces the course's models are built from (chapters 4 and 7).

Every piece is a few lines on top of :class:`attnbook.MultiHeadAttention`, the scoring functions
of chapter 4, ALiBi (chapter 9) and :class:`attnbook.KVCache`. Row convention, batch first: token
ids (batch, n), hidden states (batch, n, d_model), attention weights (batch, heads, n, m).

* :class:`FeedForward`: the position-wise MLP.
* :class:`ScoredAttention`: multi-head attention with the additive (Bahdanau) or the general
  (Luong) score instead of the scaled dot product (chapter 4); :func:`cross_attention_module`
  picks it or :class:`attnbook.MultiHeadAttention` by score.
* :class:`EncoderBlock`: self-attention and an MLP with residual connections, pre- or post-norm;
  ``causal=True`` makes it a decoder-only (GPT-style) block.
* :class:`AttentionOnlyBlock`: the same without the MLP.
* :class:`DecoderBlock`: causal self-attention, cross-attention to an encoder, an MLP.
* the token embedding with optional sinusoidal positions, and the input checks the models share.

Blocks return ``(output, weights)`` like :class:`attnbook.MultiHeadAttention` (the decoder block
``(output, self_weights, cross_weights)``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.attention import attention
from ..core.masks import apply_mask, causal_mask, heads_mask, restrict_mask
from ..core.scoring import additive_scores, general_scores
from ..core.softmax import softmax
from ..efficient.kv_cache import KVCache
from ..heads.multi_head import MultiHeadAttention, concat_then_project, project_heads
from ..positions.alibi import alibi_bias, alibi_slopes
from ..positions.sinusoidal import sinusoidal_encoding
from ..validators import (
    check_divisible,
    check_one_of,
    check_shapes,
    check_sizes,
    check_type,
    skip_checks,
)
from .configs import NORMS, SCORES

_INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _check_tokens(name: str, tokens: object, vocab_size: int, max_len: int) -> None:
    """Token ids: an integer tensor (batch, n) with 0 <= id < vocab_size and n <= max_len."""
    check_shapes(**{name: (tokens, "(batch, n)", "any")})
    if tokens.dtype not in _INTEGER_DTYPES:
        raise TypeError(
            f"{name} must hold integer token ids, got dtype {tokens.dtype} with shape {tuple(tokens.shape)}"
        )
    if tokens.shape[1] > max_len:
        raise ValueError(f"{name} has n = {tokens.shape[1]} tokens but the model was built for max_len = {max_len}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"{name} must hold ids in [0, {vocab_size}), got values from {int(tokens.min())} to {int(tokens.max())}"
        )


def _check_states(name: str, x: object, d_model: int, parameter: torch.Tensor) -> None:
    """Hidden states (batch, n, d_model) in the dtype and on the device of the block's parameters."""
    check_shapes(**{name: (x, "(batch, n, d_model)"), "parameters": (parameter, "(d_model, d_model)")}, d_model=d_model)


def _check_source_mask(source_mask, source: torch.Tensor) -> torch.Tensor | None:
    """A padding mask (batch, m) of the source, True = real token, as a mask (batch, 1, m) for
    every query."""
    if source_mask is None:
        return None
    check_shapes(source=(source, "(batch, m)", "any"), source_mask=(source_mask, "(batch, m)", "bool"))
    return source_mask[:, None, :]  # (batch, 1, m)


def _layer_norm(d_model: int, norm: str | None, factory: dict) -> nn.Module:
    return nn.Identity() if norm is None else nn.LayerNorm(d_model, **factory)


# FFN(x) = W_2 relu(W_1 x + b_1) + b_2, applied to every token (row) separately
class FeedForward(nn.Module):
    r"""The position-wise feed-forward network of a transformer block (chapter 7).

    .. math:: \operatorname{FFN}(x) = W_2 \max(0, W_1 x + b_1) + b_2

    It acts on each row (token) separately, so it commutes with reordering the tokens (chapter 6).
    Input and output (..., n, d_model); hidden width ``d_ff``.
    """

    def __init__(self, d_model: int, d_ff: int, *, device=None, dtype=None) -> None:
        super().__init__()
        check_sizes(d_model=d_model, d_ff=d_ff)
        factory = {"device": device, "dtype": dtype}
        self.linear1 = nn.Linear(d_model, d_ff, **factory)
        self.linear2 = nn.Linear(d_ff, d_model, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(torch.relu(self.linear1(x)))  # (..., n, d_ff) -> (..., n, d_model)


class ScoredAttention(nn.Module):
    r"""Multi-head attention that scores with the additive (Bahdanau) or the general (Luong)
    score instead of the dot product of projections (chapters 4 and 7).

    Head h scores query token x_i (a row of the queries X) against context token z_j (a row of
    the keys Z) directly, with its own parameters:

    * ``"additive"`` (Bahdanau): :math:`e^h_{ij} = w_h^\top \tanh(U^h_q x_i + U^h_k z_j)`, with
      :math:`U^h_q` (hidden_dim, embed_dim), :math:`U^h_k` (hidden_dim, kdim), :math:`w_h`
      (hidden_dim,) (:func:`attnbook.additive_scores`);
    * ``"general"`` (Luong): :math:`e^h_{ij} = x_i^\top W^h z_j`, with :math:`W^h`
      (embed_dim, kdim) (:func:`attnbook.general_scores`).

    The rest is multi-head attention as in :class:`attnbook.MultiHeadAttention`: softmax over the
    keys, a weighted sum of head h's values :math:`Z W_v^{h\top} + b_v^h`, concatenation, output
    projection. The dot-product head of :class:`attnbook.MultiHeadAttention` is the general score
    with the low-rank matrix :math:`W^h = W_q^{h\top} W_k^h / \sqrt{d_\text{head}}` (chapter 4).

    Parameters: ``score_U_q`` (heads, hidden_dim, embed_dim), ``score_U_k`` (heads, hidden_dim,
    kdim) and ``score_w`` (heads, hidden_dim) for the additive score; ``score_W`` (heads,
    embed_dim, kdim) for the general one; ``v_proj`` and ``out_proj`` as in
    :class:`attnbook.MultiHeadAttention`. ``forward`` has the signature, shapes and mask meaning of
    :meth:`attnbook.MultiHeadAttention.forward`.

    Args:
        embed_dim, num_heads, kdim, vdim, bias, device, dtype: as for
            :class:`attnbook.MultiHeadAttention`.
        score: ``"additive"`` or ``"general"``.
        hidden_dim: the hidden width of the additive score (default d_head = embed_dim / num_heads).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        score: str = "additive",
        hidden_dim: int | None = None,
        kdim: int | None = None,
        vdim: int | None = None,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_one_of("score", score, ("additive", "general"))
        check_sizes(embed_dim=embed_dim, num_heads=num_heads, hidden_dim=hidden_dim, kdim=kdim, vdim=vdim)
        check_divisible(
            "embed_dim",
            embed_dim,
            num_heads,
            "num_heads",
            why="every head needs d_head = embed_dim / num_heads features",
        )
        check_type("bias", bias, bool)
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.score = score
        H, factory = num_heads, {"device": device, "dtype": dtype}
        if score == "additive":
            self.hidden_dim = self.head_dim if hidden_dim is None else hidden_dim
            self.score_U_q = nn.Parameter(torch.empty(H, self.hidden_dim, embed_dim, **factory))
            self.score_U_k = nn.Parameter(torch.empty(H, self.hidden_dim, self.kdim, **factory))
            self.score_w = nn.Parameter(torch.empty(H, self.hidden_dim, **factory))
        else:
            self.score_W = nn.Parameter(torch.empty(H, embed_dim, self.kdim, **factory))
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias, **factory)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections and zero biases as :class:`attnbook.MultiHeadAttention`; score
        parameters scaled so that the first scores are of order 1."""
        nn.init.xavier_uniform_(self.v_proj.weight)
        for proj in (self.v_proj, self.out_proj):
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)
        if self.score == "additive":
            for h in range(self.num_heads):
                nn.init.xavier_uniform_(self.score_U_q[h])
                nn.init.xavier_uniform_(self.score_U_k[h])
            bound = 1.0 / math.sqrt(self.hidden_dim)
            nn.init.uniform_(self.score_w, -bound, bound)
        else:
            # x^T W z with unit-variance x (embed_dim entries) and z (kdim entries): variance 1
            nn.init.normal_(self.score_W, std=1.0 / math.sqrt(self.embed_dim * self.kdim))

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
            f"kdim={self.kdim}, vdim={self.vdim}, score={self.score!r}"
        )

    # e^h_ij = score_h(x_i, z_j), one (n, m) matrix per head
    def scores(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        """The scores of every head, (batch, heads, n, m), of query (batch, n, embed_dim) against
        key (batch, m, kdim) (chapter 4)."""
        per_head = []
        for h in range(self.num_heads):
            if self.score == "general":
                e = general_scores(query, key, self.score_W[h])  # (batch, n, m)
            else:
                e = additive_scores(query, key, self.score_U_q[h], self.score_U_k[h], self.score_w[h])  # (batch, n, m)
            per_head.append(e)
        return torch.stack(per_head, dim=1)  # (batch, heads, n, m)

    # O^h = softmax(mask(e^h)) (Z W_v^h^T + b_v^h);  output = [O^1 | ... | O^H] W_o^T + b_o
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of the queries over the keys and values with this module's score function.

        Args and shapes as :meth:`attnbook.MultiHeadAttention.forward`: query (batch, n,
        embed_dim), key (batch, m, kdim), value (batch, m, vdim), mask (n, m), (batch, n, m) or
        (batch, heads, n, m), True = may attend. Returns ``(output (batch, n, embed_dim), weights
        (batch, heads, n, m) or None)``.
        """
        check_shapes(
            query=(query, "(batch, n, embed_dim)"),
            key=(key, "(batch, m, kdim)"),
            value=(value, "(batch, m, vdim)"),
            parameters=(self.out_proj.weight, "(embed_dim, embed_dim)"),
            embed_dim=self.embed_dim,
            kdim=self.kdim,
            vdim=self.vdim,
        )
        mask = heads_mask(mask, query.shape[0], self.num_heads, query.shape[1], key.shape[1], like=query)
        with skip_checks():  # checked above; the formulas below need not check again
            v = project_heads(value, self.v_proj.weight, self.v_proj.bias, self.num_heads)  # (batch, heads, m, d_head)
            weights = softmax(apply_mask(self.scores(query, key), mask), dim=-1)  # (batch, heads, n, m)
            heads_out = weights @ v  # (batch, heads, n, m) @ (batch, heads, m, d_head) -> (batch, heads, n, d_head)
            output = concat_then_project(heads_out, self.out_proj.weight, self.out_proj.bias)  # (batch, n, embed_dim)
        return output, (weights if need_weights else None)


def cross_attention_module(d_model: int, num_heads: int, score: str = "dot", *, device=None, dtype=None) -> nn.Module:
    """The cross-attention of a :class:`DecoderBlock` with score function ``score``:
    :class:`attnbook.MultiHeadAttention` for ``"dot"``, :class:`ScoredAttention` for ``"additive"``
    and ``"general"`` (chapter 4)."""
    check_one_of("score", score, SCORES)
    if score == "dot":
        return MultiHeadAttention(d_model, num_heads, device=device, dtype=dtype)
    return ScoredAttention(d_model, num_heads, score=score, device=device, dtype=dtype)


# the self-attention of one step with a cache: append k_t, v_t, attend with q_t (chapter 8)
def cached_self_attention(
    mha: MultiHeadAttention,
    x: torch.Tensor,
    cache: KVCache,
    need_weights: bool = False,
    *,
    slopes: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Causal self-attention of the t new tokens x (batch, t, d_model) over everything in ``cache``
    (chapter 8): their keys and values are appended first. With ALiBi ``slopes`` (heads,) the
    scores get :func:`attnbook.alibi_bias` of the new tokens, the last t positions (chapter 9).
    Returns ``(output (batch, t, d_model), weights (batch, heads, t, len(cache)) or None)``."""
    check_type("cache", cache, KVCache, "attnbook.KVCache")
    H = mha.num_heads
    q = project_heads(x, mha.q_proj.weight, mha.q_proj.bias, H)  # (batch, heads, t, d_head)
    k = project_heads(x, mha.k_proj.weight, mha.k_proj.bias, H)  # (batch, heads, t, d_head)
    v = project_heads(x, mha.v_proj.weight, mha.v_proj.bias, H)  # (batch, heads, t, d_head)
    if slopes is None:
        heads_out, weights = cache.step(q, k, v, need_weights=need_weights)  # (batch, heads, t, d_head)
    else:
        cache.append(k, v)
        t, length = x.shape[1], len(cache)
        keep = causal_mask(t, length, align="lower_right", device=x.device)  # (t, len(cache))
        bias = restrict_mask(alibi_bias(t, length, slopes, align="lower_right"), keep)  # (heads, t, len(cache))
        keys, values = cache.keys, cache.values  # (batch, heads, len(cache), d_head)
        heads_out, weights = attention(q, keys, values, bias, need_weights=need_weights)  # (batch, heads, t, d_head)
    return concat_then_project(heads_out, mha.out_proj.weight, mha.out_proj.bias), weights  # (batch, t, d_model)


# pre-norm:  x + f(LN(x))        post-norm:  LN(x + f(x))        none:  x + f(x)
def _residual(x: torch.Tensor, norm: nn.Module, sublayer, pre: bool):
    """Apply ``sublayer`` (which returns (output, *extras)) with a residual connection."""
    out, *extras = sublayer(norm(x) if pre else x)
    y = x + out
    return (y if pre else norm(y)), *extras


class EncoderBlock(nn.Module):
    r"""A transformer encoder block: self-attention, then an MLP, each with a residual connection
    (chapters 4 and 7).

    .. math:: \text{pre-norm:}\quad H = X + \operatorname{MHA}(\operatorname{LN}(X)), \quad
              Y = H + \operatorname{FFN}(\operatorname{LN}(H))

    post-norm: :math:`H = \operatorname{LN}(X + \operatorname{MHA}(X))`,
    :math:`Y = \operatorname{LN}(H + \operatorname{FFN}(H))`; ``norm=None`` drops the layer norms.
    Without a mask every part acts on rows or is multi-head self-attention, so the block is
    permutation equivariant (chapter 6). ``causal=True`` applies :func:`attnbook.causal_mask` and
    makes it the block of a decoder-only model; only then can it decode with a
    :class:`attnbook.KVCache`. ``alibi=True`` adds the ALiBi bias of chapter 9 to the scores of
    head h, :math:`B_{h,ij} = -\mu_h |i - j|` (:func:`attnbook.alibi_bias` with
    :func:`attnbook.alibi_slopes`), before any mask.

    Args:
        d_model: width of the tokens. num_heads: H, must divide d_model.
        d_ff: hidden width of the MLP (default 4 * d_model).
        norm: ``"pre"`` (default), ``"post"`` or None.
        mlp: False for an attention-only block (see :class:`AttentionOnlyBlock`).
        causal: whether token i sees only tokens j <= i.
        alibi: whether to add the ALiBi bias to the self-attention scores (fixed slopes, not
            trained; the buffer ``alibi_slopes`` (heads,), None without ALiBi).

    Submodules: ``self_attn`` (:class:`attnbook.MultiHeadAttention`), ``mlp``
    (:class:`FeedForward` or None), ``norm1``, ``norm2`` (``nn.LayerNorm`` or ``nn.Identity``).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int | None = None,
        *,
        norm: str | None = "pre",
        mlp: bool = True,
        causal: bool = False,
        alibi: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_one_of("norm", norm, NORMS)
        check_sizes(d_model=d_model, d_ff=d_ff)
        check_type("alibi", alibi, bool)
        factory = {"device": device, "dtype": dtype}
        self.d_model, self.norm, self.causal, self.alibi = d_model, norm, bool(causal), alibi
        self.self_attn = MultiHeadAttention(d_model, num_heads, **factory)
        self.norm1 = _layer_norm(d_model, norm, factory)
        self.mlp = FeedForward(d_model, 4 * d_model if d_ff is None else d_ff, **factory) if mlp else None
        self.norm2 = _layer_norm(d_model, norm, factory) if mlp else None
        # a buffer, not a parameter: it moves with .to() but is never trained (nor saved)
        slopes = alibi_slopes(num_heads, **factory) if alibi else None
        self.register_buffer("alibi_slopes", slopes, persistent=False)

    def extra_repr(self) -> str:
        return f"norm={self.norm!r}, causal={self.causal}" + (", alibi=True" if self.alibi else "")

    def _self_attention(self, x, mask, need_weights, cache):
        if cache is not None:
            return cached_self_attention(self.self_attn, x, cache, need_weights, slopes=self.alibi_slopes)
        if self.alibi:
            n = x.shape[1]
            bias = alibi_bias(n, n, self.alibi_slopes)[None]  # (1, heads, n, n)
            mask = bias if mask is None else apply_mask(bias, mask)  # the bias, then the caller's mask
        if self.causal:
            keep = causal_mask(x.shape[1], device=x.device)  # (n, n), True = may attend
            mask = restrict_mask(mask, keep)  # (batch or 1, heads or 1, n, n): both must allow it
        return self.self_attn(x, x, x, mask=mask, need_weights=need_weights)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One block on x (batch, n, d_model).

        Args:
            mask: optional attention mask as for :class:`attnbook.MultiHeadAttention` (e.g. a
                padding mask ``padding_mask(lengths)[:, None, :]``); combined with the causal mask
                when ``causal``.
            need_weights: return the self-attention weights (batch, heads, n, n).
            cache: only for ``causal`` blocks: x holds the *new* tokens, which attend to everything
                the cache holds after their keys and values are appended (chapter 8).

        Returns:
            ``(y (batch, n, d_model), weights (batch, heads, n, m) or None)``.
        """
        _check_states("x", x, self.d_model, self.self_attn.q_proj.weight)
        if cache is not None and not self.causal:
            raise ValueError("a KVCache decodes token by token, which only a causal block (causal=True) can do")
        if cache is not None and mask is not None:
            raise ValueError("decoding with a cache takes no extra mask")
        mask = heads_mask(mask, x.shape[0], self.self_attn.num_heads, x.shape[1], x.shape[1], like=x)
        pre = self.norm == "pre"
        with skip_checks():
            x, weights = _residual(x, self.norm1, lambda h: self._self_attention(h, mask, need_weights, cache), pre)
            if self.mlp is not None:
                (x,) = _residual(x, self.norm2, lambda h: (self.mlp(h),), pre)
        return x, weights


class AttentionOnlyBlock(EncoderBlock):
    """An encoder block without the MLP: self-attention and a residual connection only (chapter 7).

    ``AttentionOnlyBlock(d_model, num_heads, norm=..., causal=...)`` is
    ``EncoderBlock(d_model, num_heads, mlp=False, ...)``. Whatever such a stack computes, it
    computes by moving information between tokens with attention and mixing it linearly.
    """

    def __init__(
        self, d_model: int, num_heads: int, *, norm: str | None = "pre", causal: bool = False, device=None, dtype=None
    ) -> None:
        super().__init__(d_model, num_heads, norm=norm, mlp=False, causal=causal, device=device, dtype=dtype)


class DecoderBlock(nn.Module):
    r"""A transformer decoder block: causal self-attention, cross-attention to the encoder, an MLP
    (chapters 2, 4 and 7).

    .. math:: \text{pre-norm:}\quad
              H_1 = Y + \operatorname{MHA}_C(\operatorname{LN}(Y)), \quad
              H_2 = H_1 + \operatorname{CrossAttn}(\operatorname{LN}(H_1), Z), \quad
              \operatorname{out} = H_2 + \operatorname{FFN}(\operatorname{LN}(H_2))

    where :math:`\operatorname{MHA}_C` is multi-head self-attention under the causal mask (token i
    sees targets 0..i) and the cross-attention takes its queries from the decoder and its keys
    and values from the encoder output Z ("memory"), unmasked except for an optional
    ``memory_mask``. Post-norm puts each LN after its residual sum; ``norm=None`` drops them.

    Args:
        d_model, num_heads, d_ff, norm, mlp: as for :class:`EncoderBlock`.
        score: the cross-attention's score function, ``"dot"``, ``"additive"`` or ``"general"``
            (:func:`cross_attention_module`).

    Submodules: ``self_attn`` (:class:`attnbook.MultiHeadAttention`), ``cross_attn``
    (:class:`attnbook.MultiHeadAttention` for ``score="dot"``, else
    :class:`ScoredAttention`), ``mlp``, ``norm1``, ``norm2``, ``norm3``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int | None = None,
        *,
        norm: str | None = "pre",
        mlp: bool = True,
        score: str = "dot",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_one_of("norm", norm, NORMS)
        check_sizes(d_model=d_model, d_ff=d_ff)
        factory = {"device": device, "dtype": dtype}
        self.d_model, self.norm, self.score = d_model, norm, score
        self.self_attn = MultiHeadAttention(d_model, num_heads, **factory)
        self.cross_attn = cross_attention_module(d_model, num_heads, score, **factory)
        self.norm1 = _layer_norm(d_model, norm, factory)
        self.norm2 = _layer_norm(d_model, norm, factory)
        self.mlp = FeedForward(d_model, 4 * d_model if d_ff is None else d_ff, **factory) if mlp else None
        self.norm3 = _layer_norm(d_model, norm, factory) if mlp else None

    def extra_repr(self) -> str:
        return f"norm={self.norm!r}, score={self.score!r}"

    # MHA_C(Y) = MultiHead(Y, Y) under the causal mask
    def masked_self_attention(
        self, y: torch.Tensor, *, need_weights: bool = False, cache: KVCache | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The causal self-attention sublayer alone (no residual, no norm) on y (batch, n, d_model).

        Returns ``(output (batch, n, d_model), weights (batch, heads, n, n) or None)``; with a
        ``cache`` the n new tokens attend over all cached ones and the weights are (batch, heads, n,
        len(cache)).
        """
        if cache is not None:
            return cached_self_attention(self.self_attn, y, cache, need_weights)
        mask = causal_mask(y.shape[1], device=y.device)  # (n, n), True = may attend
        return self.self_attn(y, y, y, mask=mask, need_weights=need_weights)

    # CrossAttn(Y, Z) = MultiHead(Y, Z) with queries from Y and keys and values from Z
    def cross_attention(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The cross-attention sublayer alone (no residual, no norm): queries y (batch, n, d_model),
        keys and values the encoder output ``memory`` (batch, m, d_model).

        Returns ``(output (batch, n, d_model), weights (batch, heads, n, m) or None)``.
        """
        return self.cross_attn(y, memory, memory, mask=memory_mask, need_weights=need_weights)

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """One block on the decoder states y (batch, n, d_model) given the encoder output
        ``memory`` (batch, m, d_model).

        Args:
            memory_mask: optional mask of the cross-attention, (n, m), (batch, n, m) or
                (batch, 1, m) for padded sources (``padding_mask(lengths)[:, None, :]``).
            need_weights: return the weights of both attentions.
            cache: a :class:`attnbook.KVCache` for this block's self-attention: y holds only the new
                tokens (chapter 8).

        Returns:
            ``(out (batch, n, d_model), self_weights (batch, heads, n, n) or None,
            cross_weights (batch, heads, n, m) or None)``.
        """
        check_shapes(
            y=(y, "(batch, n, d_model)"),
            memory=(memory, "(batch, m, d_model)"),
            parameters=(self.self_attn.q_proj.weight, "(d_model, d_model)"),
            d_model=self.d_model,
        )
        heads = self.self_attn.num_heads
        memory_mask = heads_mask(memory_mask, y.shape[0], heads, y.shape[1], memory.shape[1], like=y)
        pre = self.norm == "pre"
        with skip_checks():
            y, self_weights = _residual(
                y, self.norm1, lambda h: self.masked_self_attention(h, need_weights=need_weights, cache=cache), pre
            )
            y, cross_weights = _residual(
                y, self.norm2, lambda h: self.cross_attention(h, memory, memory_mask, need_weights=need_weights), pre
            )
            if self.mlp is not None:
                (y,) = _residual(y, self.norm3, lambda h: (self.mlp(h),), pre)
        return y, self_weights, cross_weights


class _Embedding(nn.Module):
    """Token embedding plus (optionally) the sinusoidal encoding of the positions (chapter 5).
    With ``bounded=False`` (ALiBi, whose biases need no table) sequences may exceed ``max_len``."""

    def __init__(
        self, vocab_size: int, d_model: int, max_len: int, positional: bool, factory: dict, *, bounded: bool = True
    ) -> None:
        super().__init__()
        check_sizes(vocab_size=vocab_size, max_len=max_len)
        self.vocab_size, self.max_len = vocab_size, max_len
        self.positional, self.bounded = bool(positional), bool(bounded)
        self.token = nn.Embedding(vocab_size, d_model, **factory)
        # a buffer, not a parameter: it moves with .to() but is never trained; built only when it is
        # added (the table needs an even d_model, which a model without it does not)
        table = sinusoidal_encoding(max_len, d_model, **factory) if self.positional else None
        self.register_buffer("encoding", table, persistent=False)

    @property
    def limit(self) -> float:
        """The longest sequence this embedding accepts: ``max_len``, or no limit when unbounded."""
        return self.max_len if self.bounded else math.inf

    # x_i = E[token_i] + p_{offset + i}
    def forward(self, tokens: torch.Tensor, offset: int = 0, name: str = "tokens") -> torch.Tensor:
        _check_tokens(name, tokens, self.vocab_size, self.limit - offset)
        x = self.token(tokens)  # (batch, n, d_model)
        if self.positional:
            x = x + self.encoding[offset : offset + tokens.shape[1]]  # (n, d_model), the same for every sequence
        return x
