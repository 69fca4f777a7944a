r"""The online softmax: a running maximum and a running sum over blocks of scores (chapter 8).

The softmax of a row :math:`s_1, \dots, s_m` needs two numbers before any weight can be written:
its maximum :math:`M = \max_j s_j` (for stability) and its normaliser
:math:`L = \sum_j e^{s_j - M}`. The online softmax computes both in one pass over blocks
:math:`\mathcal{B}_1, \mathcal{B}_2, \dots` of the row, keeping only a running maximum :math:`M_t` and a running sum
:math:`L_t` of the blocks seen so far:

.. math:: M_t = \max\bigl(M_{t-1}, \max_{j \in \mathcal{B}_t} s_j\bigr), \qquad
          L_t = e^{M_{t-1} - M_t} L_{t-1} + \sum_{j \in \mathcal{B}_t} e^{s_j - M_t},

starting from :math:`M_0 = -\infty`, :math:`L_0 = 0`. The factor :math:`e^{M_{t-1} - M_t} \le 1`
rescales the old sum to the new maximum. After the last block, :math:`M_T = M` and :math:`L_T = L`.

Masked entries are ``-inf`` and contribute 0. While every entry seen so far is masked the running
maximum is ``-inf``; the functions below then shift by 0 instead (:func:`safe_shift`), so that no
``(-inf) - (-inf) = nan`` appears, and a fully masked row ends with :math:`L = 0` and weights 0,
as :func:`attnbook.softmax` gives. Every function works on the last axis.
"""

from __future__ import annotations

import math

import torch

from ..validators import check_floating, check_sizes


def _check_block_size(block_size: object, name: str = "block_size") -> None:
    """Refuse anything but a positive int, None included (``check_sizes`` lets None through as optional)."""
    if block_size is None:
        raise TypeError(f"{name} must be an int, got NoneType")
    check_sizes(**{name: block_size})


# c = M if M > -inf else 0
def safe_shift(running_max: torch.Tensor) -> torch.Tensor:
    r"""The shift used in the exponentials: :math:`M` where it is finite, 0 where it is :math:`-\infty` (chapter 8).

    A row whose entries so far are all masked has :math:`M = -\infty`. Shifting by 0 there keeps
    :math:`e^{s_j - c} = e^{-\infty} = 0` for its (masked) entries instead of ``nan``.
    """
    return torch.where(running_max == -math.inf, torch.zeros_like(running_max), running_max)


# M_t = max(M_{t-1}, max_{j in block t} s_j)
def running_max(previous_max: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    r"""The running maximum :math:`M_t = \max(M_{t-1}, \max_{j \in \mathcal{B}_t} s_j)` (chapter 8).

    Args:
        previous_max: :math:`M_{t-1}`, shape (...,), ``-inf`` before the first block.
        block: the scores of block t, shape (..., block) (the keys are the last axis).

    Returns:
        :math:`M_t`, shape (...,).
    """
    return torch.maximum(previous_max, block.amax(dim=-1))


# alpha_t = exp(M_{t-1} - M_t)
def rescale_factor(previous_max: torch.Tensor, new_max: torch.Tensor) -> torch.Tensor:
    r"""The factor :math:`\alpha_t = e^{M_{t-1} - M_t} \in [0, 1]` that moves a sum to the new maximum (chapter 8).

    With :math:`M_t = -\infty` (nothing unmasked yet) the shift is 0 (:func:`safe_shift`), so
    :math:`\alpha_t = e^{-\infty} = 0`, which multiplies a sum that is 0 anyway.
    """
    return torch.exp(previous_max - safe_shift(new_max))


# p_j = exp(s_j - M_t)   for j in block t
def block_exponentials(block: torch.Tensor, new_max: torch.Tensor) -> torch.Tensor:
    r"""The unnormalised weights :math:`p_j = e^{s_j - M_t}` of one block, each in [0, 1] (chapter 8).

    Args:
        block: scores (..., block).
        new_max: :math:`M_t` (...,), the running maximum *including* this block.
    """
    return torch.exp(block - safe_shift(new_max).unsqueeze(-1))  # (..., block) - (..., 1)


# L_t = alpha_t L_{t-1} + sum_{j in block t} p_j
def running_sum(previous_sum: torch.Tensor, alpha: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    r"""The running normaliser :math:`L_t = \alpha_t L_{t-1} + \sum_{j \in \mathcal{B}_t} p_j` (chapter 8).

    Args:
        previous_sum: :math:`L_{t-1}` (...,), 0 before the first block.
        alpha: :func:`rescale_factor` (...,).
        p: :func:`block_exponentials` of block t, (..., block).
    """
    return alpha * previous_sum + p.sum(dim=-1)


# (M, L) = (M_T, L_T) after the last block
def online_normalizer(scores: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The maximum :math:`M` and normaliser :math:`L = \sum_j e^{s_j - M}` of each row in one pass of blocks (chapter 8).

    Runs the recurrence of :func:`running_max` and :func:`running_sum` over consecutive blocks of
    ``block_size`` entries of the last axis, holding only (...,) numbers between blocks.

    Args:
        scores: floating tensor (..., m).
        block_size: entries per block (the last block may be shorter).

    Returns:
        ``(M, L)``, both of shape (...,); for a fully masked row ``M = -inf`` and ``L = 0``.
    """
    check_floating("scores", scores)
    _check_block_size(block_size)
    m_t = torch.full(scores.shape[:-1], -math.inf, dtype=scores.dtype, device=scores.device)  # M_0
    l_t = torch.zeros(scores.shape[:-1], dtype=scores.dtype, device=scores.device)  # L_0
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]  # (..., block)
        new_max = running_max(m_t, block)
        l_t = running_sum(l_t, rescale_factor(m_t, new_max), block_exponentials(block, new_max))
        m_t = new_max
    return m_t, l_t


# softmax(s)_j = exp(s_j - M) / L,   and 0 where L = 0
def online_softmax(scores: torch.Tensor, dim: int = -1, *, block_size: int = 128) -> torch.Tensor:
    r"""Softmax along ``dim`` with :math:`M` and :math:`L` from the one-pass :func:`online_normalizer` (chapter 8).

    .. math:: \operatorname{softmax}(s)_j = \frac{e^{s_j - M}}{L}

    Equal to :func:`attnbook.softmax` (``beta = 1``), including zeros for a fully masked slice. It
    exists to check the recurrence; attention never needs the weights written out, see
    :func:`attnbook.tiled_attention`.
    """
    check_floating("scores", scores)
    moved = scores.movedim(dim, -1)  # (..., m): the softmax axis last
    m_t, l_t = online_normalizer(moved, block_size)  # (...,), (...,)
    weights = block_exponentials(moved, m_t) / torch.where(l_t > 0, l_t, torch.ones_like(l_t)).unsqueeze(-1)
    return weights.movedim(-1, dim)  # back to the layout of scores


# |a_j (computed) - a_j| <= a_j eps (m + 5 + (blocks + 1)(Delta + 3)),   Delta = max_j (M - s_j)
def softmax_rounding_bound(scores: torch.Tensor, dim: int = -1, *, blocks: int = 1) -> torch.Tensor:
    r"""A bound on the rounding error of each softmax weight computed in the dtype of ``scores`` (chapter 8).

    For one slice :math:`s_1, \dots, s_m` along ``dim``, with maximum :math:`M`, weights :math:`a_j`
    and :math:`\Delta = \max_j (M - s_j)` over the unmasked entries, any computation of
    :math:`a_j = e^{s_j - M} / L` that sums the :math:`m` terms in any order and rescales them at
    most ``blocks - 1`` times by a factor :math:`e^{M_{t-1} - M_t}` (the online softmax over
    ``blocks`` blocks; ``blocks = 1`` for the plain softmax) returns weights within

    .. math:: |\hat a_j - a_j| \le a_j\, \epsilon \,\bigl(m + 5 + (\text{blocks} + 1)(\Delta + 3)\bigr)

    of the exact weights of the given scores, to first order in the unit roundoff
    :math:`\epsilon` (``torch.finfo(dtype).eps / 2``). Each rounding is a relative error of at most :math:`\epsilon`:
    the subtraction :math:`s_j - M` moves the exponent by at most
    :math:`\epsilon \Delta`; ``exp`` is accurate to :math:`2\epsilon`; a sum of :math:`m` non-negative terms to
    :math:`(m - 1)\epsilon`; each rescaling factor to :math:`(\Delta + 2)\epsilon` and its product to :math:`\epsilon` more;
    the division to :math:`\epsilon`. Two computations then differ by at most the sum of their bounds.

    Masked entries (``-inf``) and fully masked slices get bound 0: both give exactly 0 there. The
    bound assumes no weight falls below the dtype's smallest normal number (``torch.finfo(dtype).tiny``),
    where relative accuracy is lost to underflow.

    Args:
        scores: floating tensor, e.g. (..., n, m).
        dim: the softmax axis.
        blocks: the number of blocks of the online softmax, an int >= 1.

    Returns:
        A tensor of the shape of ``scores``.
    """
    check_floating("scores", scores)
    _check_block_size(blocks, "blocks")
    eps = torch.finfo(scores.dtype).eps / 2  # the unit roundoff
    m = scores.shape[dim]
    weights = torch.softmax(scores.to(torch.float64), dim=dim).nan_to_num(0.0)  # a_j (0 where fully masked)
    top = scores.amax(dim=dim, keepdim=True)  # M
    spread = (top - scores).masked_fill(scores == -math.inf, 0.0).nan_to_num(0.0)  # |s_j - M|, 0 where masked
    Delta = spread.amax(dim=dim, keepdim=True).to(torch.float64)  # (..., 1, ...)
    return (weights * eps * (m + 5 + (blocks + 1) * (Delta + 3))).to(scores.dtype)
