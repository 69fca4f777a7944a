r"""Attention in the column convention of *Formal Algorithms for Transformers* (chapter 0).

Phuong & Hutter (2022) write tokens as **columns**: a primary sequence is X in R^{d_x x l_x}, a
context sequence is Z in R^{d_z x l_z}, a weight matrix acts from the left (q = W_q x + b_q), the
scores are K^T Q of shape (l_z, l_x), the softmax normalises each **column** (over the context
tokens, ``dim=-2``), and a mask M in {0, 1}^{l_z x l_x} is indexed [context token, primary token].

These functions follow that notation literally, so the chapters can put the paper's equations and
PyTorch's row convention side by side and check that they agree: every function here equals the
row-convention function of :mod:`attnbook` after transposing inputs, weights and outputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..validators import check_column_convention_heads, check_shapes, check_values
from .masks import causal_mask
from .softmax import softmax


# q = W_q x + b_q,  k_t = W_k z_t + b_k,  v_t = W_v z_t + b_v
# Attention(x, z_{1:T}) = sum_t softmax_t(q^T k_t / sqrt(d_attn)) v_t
def single_query_attention(
    x: torch.Tensor,
    z: torch.Tensor,
    W_q: torch.Tensor,
    b_q: torch.Tensor,
    W_k: torch.Tensor,
    b_k: torch.Tensor,
    W_v: torch.Tensor,
    b_v: torch.Tensor,
) -> torch.Tensor:
    r"""Single-query attention of one primary token over T context tokens (chapter 1).

    .. math:: \tilde v = \sum_{t=1}^{T} \frac{\exp(q^\top k_t/\sqrt{d_\text{attn}})}
              {\sum_{u=1}^{T}\exp(q^\top k_u/\sqrt{d_\text{attn}})}\, v_t

    Args:
        x: the primary token, (d_x,).
        z: the context tokens as columns, (d_z, T).
        W_q, b_q: (d_attn, d_x), (d_attn,).
        W_k, b_k: (d_attn, d_z), (d_attn,).
        W_v, b_v: (d_out, d_z), (d_out,).

    Returns:
        The output vector, (d_out,).
    """
    check_shapes(
        x=(x, "(d_x,)"),
        z=(z, "(d_z, T)"),
        W_q=(W_q, "(d_attn, d_x)"),
        b_q=(b_q, "(d_attn,)"),
        W_k=(W_k, "(d_attn, d_z)"),
        b_k=(b_k, "(d_attn,)"),
        W_v=(W_v, "(d_out, d_z)"),
        b_v=(b_v, "(d_out,)"),
    )
    q = W_q @ x + b_q  # (d_attn, d_x) @ (d_x,) -> (d_attn,)
    k = W_k @ z + b_k[:, None]  # (d_attn, d_z) @ (d_z, T) -> (d_attn, T), column t is k_t
    v = W_v @ z + b_v[:, None]  # (d_out, d_z) @ (d_z, T) -> (d_out, T), column t is v_t
    a = softmax(k.T @ q / math.sqrt(q.shape[0]), dim=0)  # (T, d_attn) @ (d_attn,) -> (T,)
    return v @ a  # (d_out, T) @ (T,) -> (d_out,)


# Q = W_q X + b_q 1^T,  K = W_k Z + b_k 1^T,  V = W_v Z + b_v 1^T
# Attention(X, Z | M) = V softmax(mask_M(K^T Q) / sqrt(d_attn))     (softmax over each column)
def attention(
    X: torch.Tensor,
    Z: torch.Tensor,
    W_q: torch.Tensor,
    b_q: torch.Tensor,
    W_k: torch.Tensor,
    b_k: torch.Tensor,
    W_v: torch.Tensor,
    b_v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Attention of a primary sequence X over a context sequence Z, column convention (chapter 0).

    .. math:: \operatorname{Attention}(X, Z \mid M) = V \operatorname{softmax}\!\left(
              \frac{\operatorname{mask}_M(K^\top Q)}{\sqrt{d_\text{attn}}}\right)

    Args:
        X: primary tokens as columns, (d_x, l_x).
        Z: context tokens as columns, (d_z, l_z).
        W_q, b_q: (d_attn, d_x), (d_attn,).
        W_k, b_k: (d_attn, d_z), (d_attn,).
        W_v, b_v: (d_out, d_z), (d_out,).
        mask: optional {0, 1} (or boolean) matrix of shape (l_z, l_x); ``mask[t, t'] = 1`` means
            primary token t' may attend to context token t. A primary token with no context token
            to attend to gets output 0.

    Returns:
        (d_out, l_x): column t' is the output for primary token t'.
    """
    check_shapes(
        X=(X, "(d_x, l_x)"),
        Z=(Z, "(d_z, l_z)"),
        W_q=(W_q, "(d_attn, d_x)"),
        b_q=(b_q, "(d_attn,)"),
        W_k=(W_k, "(d_attn, d_z)"),
        b_k=(b_k, "(d_attn,)"),
        W_v=(W_v, "(d_out, d_z)"),
        b_v=(b_v, "(d_out,)"),
        mask=(mask, "(l_z, l_x)", "any"),
    )
    if mask is not None:
        check_values("mask", mask, (0, 1), " (1 = the context token may be attended to)")
    Q = W_q @ X + b_q[:, None]  # (d_attn, d_x) @ (d_x, l_x) -> (d_attn, l_x)
    K = W_k @ Z + b_k[:, None]  # (d_attn, d_z) @ (d_z, l_z) -> (d_attn, l_z)
    V = W_v @ Z + b_v[:, None]  # (d_out, d_z) @ (d_z, l_z) -> (d_out, l_z)
    S = K.T @ Q / math.sqrt(Q.shape[0])  # (l_z, d_attn) @ (d_attn, l_x) -> (l_z, l_x)
    if mask is not None:
        S = S.masked_fill(mask == 0, -math.inf)  # (l_z, l_x): M_tt' = 0 blocks context token t for primary token t'
    A = softmax(S, dim=0)  # (l_z, l_x), each column sums to 1
    return V @ A  # (d_out, l_z) @ (l_z, l_x) -> (d_out, l_x)


# MH-Attention(X, Z | M) = sum_h W_o^h Attention(X, Z | W^h_qkv, M) + b_o 1^T
def mh_attention(
    X: torch.Tensor,
    Z: torch.Tensor,
    heads: Sequence[Sequence[torch.Tensor]],
    W_o: torch.Tensor | Sequence[torch.Tensor],
    b_o: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Multi-head attention as a sum over heads, column convention (chapter 3).

    .. math:: \operatorname{MHAttention}(X, Z \mid M) = \sum_{h=1}^{H} W_o^h
              \operatorname{Attention}(X, Z \mid W^h_{qkv}, M) + b_o \mathbf{1}^\top

    Args:
        X: (d_x, l_x). Z: (d_z, l_z).
        heads: H tuples ``(W_q, b_q, W_k, b_k, W_v, b_v)``, one per head, shaped as in
            :func:`attention`, each head with value width d_mid.
        W_o: either the list of H matrices W_o^h of shape (d_out, d_mid), or their concatenation
            [W_o^1 | ... | W_o^H] of shape (d_out, H * d_mid).
        b_o: (d_out,).
        mask: optional {0, 1} matrix (l_z, l_x), shared by all heads.

    Returns:
        (d_out, l_x).
    """
    heads, W_o = list(heads), W_o if isinstance(W_o, torch.Tensor) else list(W_o)
    check_column_convention_heads(heads, W_o, b_o)
    d_mid = [params[4].shape[0] for params in heads]  # the value width of each head: W_v is (d_mid, d_z)
    blocks = torch.split(W_o, d_mid, dim=1) if isinstance(W_o, torch.Tensor) else W_o  # H blocks W_o^h (d_out, d_mid)
    out = b_o[:, None]  # (d_out, 1), broadcast over the l_x columns
    for params, W_oh in zip(heads, blocks):
        out = out + W_oh @ attention(X, Z, *params, mask=mask)  # (d_out, d_mid) @ (d_mid, l_x) -> (d_out, l_x)
    return out


# M[t, t'] = 1  iff  t <= t'       (row = context token t, column = primary token t')
def unidirectional_mask(length: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    r"""The unidirectional (causal) mask in the column convention, shape (l, l) (chapter 2).

    :math:`M_{t t'} = 1 \iff t \le t'`: primary token t' may attend to context tokens up to
    itself. Indexed [context, primary], this matrix is **upper** triangular. It is the transpose of
    the row-convention :func:`attnbook.causal_mask`, which is lower triangular. (Some notes call
    this mask lower triangular while indexing it as here; that is a slip.)
    """
    return causal_mask(length, device=device).T  # (l_z, l_x) = (context, primary)
