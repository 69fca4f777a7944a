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

from ..validators import check_shapes


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
    check_shapes(
        query=(query, "(..., n, d_q)"),
        key=(key, "(..., m, d_k)"),
        W_q=(W_q, "(h, d_q)"),
        W_k=(W_k, "(h, d_k)"),
        w_v=(w_v, "(h,)"),
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
    check_shapes(query=(query, "(..., n, d_q)"), key=(key, "(..., m, d_k)"), W=(W, "(d_q, d_k)"))
    # (..., n, d_q) @ (d_q, d_k) -> (..., n, d_k);  @ (..., d_k, m) -> (..., n, m)
    return (query @ W) @ key.transpose(-2, -1)
