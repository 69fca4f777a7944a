r"""Scoring functions other than the scaled dot product (chapter 4).

A scoring function turns a query q_i and a key k_j into a number e_ij; the softmax of each row of
scores gives the attention weights exactly as for dot-product attention. Two classic choices:

* additive (Bahdanau et al., 2015): :math:`e_{ij} = w_v^\top \tanh(W_q q_i + W_k k_j)`;
* Luong's *general* score (Luong et al., 2015): :math:`e_{ij} = q_i^\top W k_j`.

Both take queries and keys of different widths d_q and d_k. Row convention: query (..., n, d_q),
key (..., m, d_k), scores (..., n, m).
"""

from __future__ import annotations

import torch

from ._checks import broadcast_batch, check_floating, check_ndim, check_same_dtype_device


def _check_query_key(query: torch.Tensor, key: torch.Tensor) -> None:
    check_floating("query", query)
    check_floating("key", key)
    check_ndim("query", query, 2, "(..., n, d_q)", at_least=True)
    check_ndim("key", key, 2, "(..., m, d_k)", at_least=True)
    broadcast_batch(query=query.shape[:-2], key=key.shape[:-2])


# e_ij = w_v^T tanh(W_q q_i + W_k k_j)
def additive_scores(
    query: torch.Tensor, key: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor, w_v: torch.Tensor
) -> torch.Tensor:
    r"""Additive (Bahdanau) attention scores (chapter 4, eq. *additive*).

    .. math:: e_{ij} = w_v^\top \tanh\left(W_q q_i + W_k k_j\right)

    The query and the key are projected into a common hidden width h, added for **every pair**
    (i, j), passed through tanh, and the projection vector w_v turns each hidden vector into one
    number. Without w_v (as some notes write it) the result would be a hidden vector per pair,
    not a score.

    Args:
        query: (..., n, d_q). key: (..., m, d_k).
        W_q: (h, d_q). W_k: (h, d_k). w_v: (h,).

    Returns:
        Scores (..., n, m).
    """
    _check_query_key(query, key)
    for name, x in (("W_q", W_q), ("W_k", W_k), ("w_v", w_v)):
        check_floating(name, x)
    check_same_dtype_device(query=query, key=key, W_q=W_q, W_k=W_k, w_v=w_v)
    check_ndim("W_q", W_q, 2, "(h, d_q)")
    check_ndim("W_k", W_k, 2, "(h, d_k)")
    check_ndim("w_v", w_v, 1, "(h,)")
    if W_q.shape[1] != query.shape[-1] or W_k.shape[1] != key.shape[-1]:
        raise ValueError(
            f"W_q must be (h, d_q) and W_k (h, d_k): got W_q {tuple(W_q.shape)} for query {tuple(query.shape)} "
            f"and W_k {tuple(W_k.shape)} for key {tuple(key.shape)}"
        )
    if not W_q.shape[0] == W_k.shape[0] == w_v.shape[0]:
        raise ValueError(
            f"W_q (h, d_q), W_k (h, d_k) and w_v (h,) must share the hidden width h, got "
            f"{tuple(W_q.shape)}, {tuple(W_k.shape)} and {tuple(w_v.shape)}"
        )
    q = query @ W_q.T  # (..., n, d_q) @ (d_q, h) -> (..., n, h)
    k = key @ W_k.T  # (..., m, d_k) @ (d_k, h) -> (..., m, h)
    hidden = (q.unsqueeze(-2) + k.unsqueeze(-3)).tanh()  # (..., n, 1, h) + (..., 1, m, h) -> (..., n, m, h)
    return hidden @ w_v  # (..., n, m, h) @ (h,) -> (..., n, m)


# e_ij = q_i^T W k_j
def general_scores(query: torch.Tensor, key: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    r"""Luong's *general* (bilinear) attention scores (chapter 4, eq. *general*).

    .. math:: e_{ij} = q_i^\top W k_j, \qquad E = Q W K^\top

    With W the identity this is the plain dot product, and with W = I / sqrt(d_k) the scaled dot
    product of :func:`attnbook.attention_scores`.

    Args:
        query: (..., n, d_q). key: (..., m, d_k). W: (d_q, d_k).

    Returns:
        Scores (..., n, m).
    """
    _check_query_key(query, key)
    check_floating("W", W)
    check_same_dtype_device(query=query, key=key, W=W)
    check_ndim("W", W, 2, "(d_q, d_k)")
    if W.shape != (query.shape[-1], key.shape[-1]):
        raise ValueError(
            f"W must have shape (d_q, d_k) = ({query.shape[-1]}, {key.shape[-1]}) for query "
            f"{tuple(query.shape)} and key {tuple(key.shape)}, got {tuple(W.shape)}"
        )
    # (..., n, d_q) @ (d_q, d_k) -> (..., n, d_k);  @ (..., d_k, m) -> (..., n, m)
    return (query @ W) @ key.transpose(-2, -1)
