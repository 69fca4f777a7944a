r"""The backward pass of softmax attention, one function per formula (chapter 11).

The forward pass, in the row convention, with an optional causal mask :math:`M` (``-inf`` where
key j is hidden from query i, 0 elsewhere):

.. math:: S = \text{scale} \cdot Q K^\top + M, \qquad P = \operatorname{softmax}(S), \qquad O = P V.

Given the gradient :math:`dO = \partial \mathcal{E} / \partial O` of a loss :math:`\mathcal{E}` (chapter 11's
letter; :math:`\ell` is the softmax's running sum there), the chain rule
through each of the three steps gives

.. math:: dV = P^\top dO, \qquad dP = dO\, V^\top, \qquad
          dS = P \circ (dP - D), \qquad D = \operatorname{rowsum}(dO \circ O),

.. math:: dQ = \text{scale} \cdot dS\, K, \qquad dK = \text{scale} \cdot dS^\top Q.

The softmax step: row i of :math:`P` depends on row i of :math:`S` only, with Jacobian
:math:`\partial P_{ij} / \partial S_{ik} = P_{ij} (\delta_{jk} - P_{ik})`, so
:math:`dS_{ik} = \sum_j dP_{ij} P_{ij} (\delta_{jk} - P_{ik}) = P_{ik} (dP_{ik} - \sum_j P_{ij} dP_{ij})`.
The sum is :math:`D_i = \sum_j P_{ij} dP_{ij} = \sum_j P_{ij} \sum_l dO_{il} V_{jl}
= \sum_l dO_{il} O_{il}`: a row of :math:`dO \circ O`, n numbers computed from two (n, d_v)
matrices instead of two (n, m) ones. A masked entry has :math:`P_{ij} = 0`, hence
:math:`dS_{ij} = 0`: the mask needs no gradient formula of its own.

Recomputation: the forward pass keeps, per query, only the log-sum-exp of its scores,
:math:`L_i = \log \sum_j e^{S_{ij}}` (:func:`log_sum_exp`), and the backward pass rebuilds
:math:`P_{ij} = e^{S_{ij} - L_i}` (:func:`probabilities_from_lse`) from :math:`Q`, :math:`K` and
:math:`L`, which is the softmax exactly in exact arithmetic.

Shape legend: ``...`` batch dimensions (batch, or batch and heads), ``n`` queries, ``m`` keys,
``d_k`` the width of queries and keys, ``d_v`` the width of values.

:func:`attention_backward` composes the formulas; :mod:`attnbook.kernels.flash_attention`
computes the same gradients tile by tile.
"""

from __future__ import annotations

import math

import torch

from ..core.masks import causal_mask
from ..core.softmax import softmax
from ..validators import check_number, check_shapes, check_type


# S = scale * Q K^T + M,   M_ij = -inf where key j is after query i (causal), 0 elsewhere
def attention_scores_masked(
    q: torch.Tensor, k: torch.Tensor, is_causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    r"""The masked scores :math:`S = \text{scale} \cdot Q K^\top + M` (chapter 11), shape (..., n, m).

    The causal mask :math:`M` hides key j from query i when :math:`j > i` (upper-left
    alignment, :func:`attnbook.causal_mask`), by ``-inf``.

    Args:
        q: (..., n, d_k).
        k: (..., m, d_k).
        is_causal: apply the causal mask.
        scale: factor on the scores; defaults to ``1 / sqrt(d_k)``.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = scale * (q @ k.transpose(-2, -1))  # (..., n, d_k) @ (..., d_k, m) -> (..., n, m)
    if is_causal:
        keep = causal_mask(q.shape[-2], k.shape[-2], device=q.device)  # (n, m), True = may attend
        scores = scores.masked_fill(~keep, -math.inf)
    return scores


# P = softmax(S)
def attention_probabilities(
    q: torch.Tensor, k: torch.Tensor, is_causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    r"""The attention weights :math:`P = \operatorname{softmax}(\text{scale} \cdot Q K^\top + M)` (chapter 11).

    Row i is a probability distribution over the m keys (0 on masked keys). Shapes as in
    :func:`attention_scores_masked`; returns (..., n, m).
    """
    return softmax(attention_scores_masked(q, k, is_causal, scale), dim=-1)  # (..., n, m)


# L_i = log sum_j exp(S_ij) = c_i + log sum_j exp(S_ij - c_i),   c_i = max_j S_ij
def log_sum_exp(scores: torch.Tensor) -> torch.Tensor:
    r"""The log-sum-exp of each row of scores, :math:`L_i = \log \sum_j e^{S_{ij}}` (chapter 11).

    .. math:: L_i = c_i + \log \sum_j e^{S_{ij} - c_i}, \qquad c_i = \max_j S_{ij}

    Shifting by the row maximum keeps every exponent at most 0 (no overflow) and the sum at least
    1 (no log of an underflowed 0). A row that is entirely ``-inf`` (a query with no visible key)
    gets :math:`L_i = -\infty`, and :func:`probabilities_from_lse` then gives it weights 0.

    Args:
        scores: (..., n, m).

    Returns:
        L, shape (..., n).
    """
    c = scores.amax(dim=-1)  # (..., n)
    c = torch.where(c == -math.inf, torch.zeros_like(c), c)  # a fully masked row: shift by 0, not -inf
    return c + torch.log(torch.exp(scores - c.unsqueeze(-1)).sum(dim=-1))  # (..., n); log 0 = -inf


# P_ij = exp(S_ij - L_i)
def probabilities_from_lse(scores: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
    r"""The weights rebuilt from the scores and the log-sum-exp, :math:`P_{ij} = e^{S_{ij} - L_i}` (chapter 11).

    Since :math:`e^{L_i} = \sum_j e^{S_{ij}}`, this is :math:`e^{S_{ij}} / \sum_u e^{S_{iu}}`, the
    softmax, exactly in exact arithmetic. A row with :math:`L_i = -\infty` (entirely masked) gets 0.

    Args:
        scores: S, (..., n, m).
        L: :func:`log_sum_exp` of S, (..., n).

    Returns:
        P, (..., n, m).
    """
    shift = torch.where(L == -math.inf, torch.zeros_like(L), L)  # a fully masked row: exp(-inf - 0) = 0
    return torch.exp(scores - shift.unsqueeze(-1))  # (..., n, m) - (..., n, 1)


# D_i = sum_l dO_il O_il
def backward_delta(dO: torch.Tensor, O: torch.Tensor) -> torch.Tensor:
    r""":math:`D = \operatorname{rowsum}(dO \circ O)`, which equals :math:`\operatorname{rowsum}(P \circ dP)` (chapter 11).

    .. math:: D_i = \sum_l dO_{il} O_{il} = \sum_j P_{ij} dP_{ij}

    Args:
        dO: (..., n, d_v).
        O: (..., n, d_v).

    Returns:
        D, shape (..., n).
    """
    return (dO * O).sum(dim=-1)  # (..., n, d_v) -> (..., n)


# dV = P^T dO
def grad_value(P: torch.Tensor, dO: torch.Tensor) -> torch.Tensor:
    r"""The gradient of the values, :math:`dV = P^\top dO` (chapter 11).

    Args:
        P: the weights (..., n, m).
        dO: (..., n, d_v).

    Returns:
        dV, (..., m, d_v).
    """
    return P.transpose(-2, -1) @ dO  # (..., m, n) @ (..., n, d_v) -> (..., m, d_v)


# dP = dO V^T
def grad_weights(dO: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    r"""The gradient of the weights, :math:`dP = dO\, V^\top` (chapter 11).

    Args:
        dO: (..., n, d_v).
        v: (..., m, d_v).

    Returns:
        dP, (..., n, m).
    """
    return dO @ v.transpose(-2, -1)  # (..., n, d_v) @ (..., d_v, m) -> (..., n, m)


# dS = P o (dP - D)
def grad_scores(P: torch.Tensor, dP: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    r"""The gradient of the scores through the softmax, :math:`dS = P \circ (dP - D)` (chapter 11).

    .. math:: dS_{ij} = P_{ij} (dP_{ij} - D_i)

    Args:
        P: (..., n, m).
        dP: (..., n, m).
        D: :func:`backward_delta`, (..., n).

    Returns:
        dS, (..., n, m); 0 wherever P is 0 (masked keys).
    """
    return P * (dP - D.unsqueeze(-1))  # (..., n, m) * ((..., n, m) - (..., n, 1))


# dQ = scale * dS K
def grad_query(dS: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    r"""The gradient of the queries, :math:`dQ = \text{scale} \cdot dS\, K` (chapter 11).

    Args:
        dS: (..., n, m).
        k: (..., m, d_k).
        scale: the factor on the scores in the forward pass.

    Returns:
        dQ, (..., n, d_k).
    """
    return scale * (dS @ k)  # (..., n, m) @ (..., m, d_k) -> (..., n, d_k)


# dK = scale * dS^T Q
def grad_key(dS: torch.Tensor, q: torch.Tensor, scale: float) -> torch.Tensor:
    r"""The gradient of the keys, :math:`dK = \text{scale} \cdot dS^\top Q` (chapter 11).

    Args:
        dS: (..., n, m).
        q: (..., n, d_k).
        scale: the factor on the scores in the forward pass.

    Returns:
        dK, (..., m, d_k).
    """
    return scale * (dS.transpose(-2, -1) @ q)  # (..., m, n) @ (..., n, d_k) -> (..., m, d_k)


def attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dO: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The gradients :math:`(dQ, dK, dV)` of :math:`O = \operatorname{softmax}(\text{scale}\, Q K^\top + M) V` (chapter 11).

    .. math:: dV = P^\top dO, \quad dP = dO\, V^\top, \quad dS = P \circ (dP - D), \quad
              dQ = \text{scale} \cdot dS\, K, \quad dK = \text{scale} \cdot dS^\top Q

    with :math:`D = \operatorname{rowsum}(dO \circ O)`. The whole (n, m) matrices P, dP and dS
    are formed: this is the formula, not the memory-saving kernel
    (:func:`attnbook.kernels.flash_attention_backward`).

    Args:
        q: (..., n, d_k).
        k: (..., m, d_k).
        v: (..., m, d_v).
        dO: the gradient of the loss with respect to the output, (..., n, d_v).
        is_causal: the forward pass used the causal mask (upper-left, :func:`attnbook.causal_mask`).
        scale: factor on the scores; defaults to ``1 / sqrt(d_k)``.

    Returns:
        ``(dq, dk, dv)`` of the shapes of ``q``, ``k``, ``v``. The batch dimensions of the inputs
        must be equal (no broadcasting).
    """
    check_shapes(q=(q, "(..., n, d_k)"), k=(k, "(..., m, d_k)"), v=(v, "(..., m, d_v)"), dO=(dO, "(..., n, d_v)"))
    _check_same_batch(q=q, k=k, v=v, dO=dO)
    check_type("is_causal", is_causal, bool)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    check_number("scale", scale)
    P = attention_probabilities(q, k, is_causal, scale)  # (..., n, m)
    O = P @ v  # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)
    D = backward_delta(dO, O)  # (..., n)
    dv = grad_value(P, dO)  # (..., m, d_v)
    dP = grad_weights(dO, v)  # (..., n, m)
    dS = grad_scores(P, dP, D)  # (..., n, m)
    return grad_query(dS, k, scale), grad_key(dS, q, scale), dv


def _check_same_batch(**tensors: torch.Tensor) -> None:
    """``ValueError`` unless every tensor has the same batch dimensions (all but the last two)."""
    batches = {name: tuple(x.shape[:-2]) for name, x in tensors.items()}
    if len(set(batches.values())) > 1:
        listing = ", ".join(f"{name} {tuple(x.shape)}" for name, x in tensors.items())
        raise ValueError(
            f"the inputs must have the same batch dimensions (no broadcasting: each gradient has its input's "
            f"shape), got {listing}"
        )
