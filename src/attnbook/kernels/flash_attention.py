r"""FlashAttention-2, forward and backward, written with PyTorch tiles (chapter 11).

The forward pass of :math:`O = \operatorname{softmax}(\text{scale} \cdot Q K^\top + M) V` never forms
the (n, m) weights: it computes one (block_q, block_k) tile of scores at a time with the online
softmax, and keeps, besides the output O, only the log-sum-exp of each query's scores,
:math:`L_i = \log \sum_j e^{S_{ij}}`, n numbers per head. The backward pass rebuilds each tile of
the weights from Q, K and L, :math:`P_{ij} = e^{S_{ij} - L_i}`, and applies the formulas of
:mod:`attnbook.kernels.attention_backward` to the tile.

Loop orders (Dao 2023, FlashAttention-2, Algorithms 1 and 2):

* forward: query blocks :math:`Q_i` outside, key blocks :math:`K_j, V_j` inside. Per query the
  running maximum ``m_i``, the running normaliser ``l_i`` and the unnormalised output ``acc`` stay
  in the outer block; after key block j

  .. math:: m' = \max(m_i, \operatorname{rowmax} S_{ij}), \quad \alpha = e^{m_i - m'}, \quad
            P_{ij} = e^{S_{ij} - m'}, \quad l_i \leftarrow \alpha l_i + \operatorname{rowsum} P_{ij},
            \quad \text{acc} \leftarrow \alpha\, \text{acc} + P_{ij} V_j, \quad m_i \leftarrow m',

  and after the last key block :math:`O_i = \text{acc} / l_i` (once) and :math:`L_i = m_i + \log l_i`.
* backward: :math:`D = \operatorname{rowsum}(dO \circ O)` once, up front; then key blocks outside,
  query blocks inside. :math:`dK_j` and :math:`dV_j` are accumulated in the outer block and written
  once; :math:`dQ_i` receives a contribution from every key block, so it is accumulated (``+=``)
  across the outer loop:

  .. math:: P_{ij} = e^{S_{ij} - L_i}, \quad dV_j \mathrel{+}= P_{ij}^\top dO_i, \quad
            dP_{ij} = dO_i V_j^\top, \quad dS_{ij} = P_{ij} \circ (dP_{ij} - D_i),

  .. math:: dQ_i \mathrel{+}= \text{scale} \cdot dS_{ij} K_j, \quad
            dK_j \mathrel{+}= \text{scale} \cdot dS_{ij}^\top Q_i.

Causal mask: key j is visible to query i iff :math:`j \le i`, the upper-left alignment of
:func:`attnbook.causal_mask` and ``scaled_dot_product_attention(is_causal=True)``, also when
n != m. A tile whose first key comes after its last query is entirely masked and is skipped in
both passes: the forward stops its inner loop at key :math:`\min(m, i_1)` for the query block
:math:`[i_0, i_1)`, the backward starts its inner loop at the query block that holds query
:math:`j_0` for the key block :math:`[j_0, j_1)` (a key block with :math:`j_0 \ge n` is seen by no
query: its loop is empty and its dK and dV are 0). :func:`flash_attention_tiles` lists the tiles each pass visits; the
loops below call the same two functions (:func:`key_blocks_end`, :func:`query_blocks_start`).

Fully masked rows cannot occur: with upper-left alignment query i always sees key 0, so every row
has at least one visible key when m >= 1, and its L is finite. An input with no key at all (m = 0)
is refused with a ``ValueError`` (its softmax is not defined); no query (n = 0) is allowed and gives
empty outputs.

Precision: float32 and float64 inputs compute in their own dtype; float16 and bfloat16 inputs
compute every tile in float32 (as fused kernels accumulate) and return O, dQ, dK and dV in the
input dtype; L is float32 for them and the input dtype otherwise.

Shape legend: ``...`` batch dimensions (batch, or batch and heads), ``n`` queries, ``m`` keys,
``d_k`` the width of queries and keys, ``d_v`` the width of values, ``B_q`` and ``B_k`` the rows of
a query block and of a key block.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..validators import check_floating, check_number, check_shapes, check_sizes, check_type
from .attention_backward import (
    _check_same_batch,
    backward_delta,
    grad_key,
    grad_query,
    grad_scores,
    grad_value,
    grad_weights,
    probabilities_from_lse,
)

__all__ = [
    "FlashAttention",
    "FlashTile",
    "flash_attention",
    "flash_attention_backward",
    "flash_attention_forward",
    "flash_attention_tiles",
    "key_blocks_end",
    "query_blocks_start",
]

BLOCK_Q = 64  # default rows of a query block
BLOCK_K = 64  # default rows of a key block


class FlashTile(NamedTuple):
    """One tile a pass visits: query rows ``queries``, key rows ``keys``.

    ``kind`` is ``"full"`` (no causal masking inside) or ``"diagonal"`` (the causal mask cuts
    through it, so it is masked entry by entry).
    """

    queries: slice
    keys: slice
    kind: str


# the query block [i0, i1) sees keys j < min(m, i1) under the causal mask (j <= i <= i1 - 1), all m otherwise
def key_blocks_end(i1: int, m: int, is_causal: bool) -> int:
    """Where the inner loop of the forward pass over key blocks stops, for the query block that ends at ``i1``.

    Causal: the last query i1 - 1 sees keys up to i1 - 1, so key blocks starting at or after
    ``min(m, i1)`` are entirely masked and are skipped. Otherwise: ``m``.
    """
    return min(m, i1) if is_causal else m


# the key block [j0, j1) is seen by queries i >= j0 under the causal mask: from the query block that holds j0
def query_blocks_start(j0: int, n: int, block_q: int, is_causal: bool) -> int:
    """Where the inner loop of the backward pass over the n queries starts, for the key block that starts at ``j0``.

    Causal: queries i < j0 see none of the keys j >= j0, so the query blocks that end before
    j0 are skipped and the loop starts at the block holding query j0; if j0 >= n no query sees
    the block, and the loop starts at n (it is empty). Otherwise: 0.
    """
    if not is_causal:
        return 0
    return (j0 // block_q) * block_q if j0 < n else n


def _tile_kind(i0: int, j1: int, is_causal: bool) -> str:
    """``"diagonal"`` when the causal mask hides some key of the tile from some query (its last key after its first query)."""
    return "diagonal" if is_causal and j1 - 1 > i0 else "full"


def flash_attention_tiles(
    n: int, m: int, *, block_q: int = BLOCK_Q, block_k: int = BLOCK_K, is_causal: bool = False, pass_: str = "forward"
) -> list[FlashTile]:
    r"""The tiles of the (n, m) scores that a pass of FlashAttention-2 visits, in its loop order (chapter 11).

    ``pass_="forward"``: query blocks outside, key blocks inside, up to :func:`key_blocks_end`
    (the order of :func:`flash_attention_forward`, and of the dQ kernel of
    :mod:`attnbook.kernels.flash_triton`). ``pass_="backward"``: key blocks outside, query blocks
    inside, from :func:`query_blocks_start` (the order of :func:`flash_attention_backward`). Both
    visit the same set of tiles: every tile with at least one visible (query, key) pair, and
    no other. For n = m = T B (square blocks of B) under the causal mask that is
    :math:`T(T+1)/2` of the :math:`T^2` tiles.
    """
    check_sizes(minimum=0, n=n, m=m)
    check_sizes(block_q=block_q, block_k=block_k)
    check_type("is_causal", is_causal, bool)
    if pass_ not in ("forward", "backward"):
        raise ValueError(f"pass_ must be 'forward' or 'backward', got {pass_!r}")
    tiles = []
    if pass_ == "forward":
        for i0 in range(0, n, block_q):
            i1 = min(i0 + block_q, n)
            for j0 in range(0, key_blocks_end(i1, m, is_causal), block_k):
                j1 = min(j0 + block_k, m)
                tiles.append(FlashTile(slice(i0, i1), slice(j0, j1), _tile_kind(i0, j1, is_causal)))
    else:
        for j0 in range(0, m, block_k):
            j1 = min(j0 + block_k, m)
            for i0 in range(query_blocks_start(j0, n, block_q, is_causal), n, block_q):
                i1 = min(i0 + block_q, n)
                tiles.append(FlashTile(slice(i0, i1), slice(j0, j1), _tile_kind(i0, j1, is_causal)))
    return tiles


# S_ij = scale * Q_i K_j^T,  and -inf where key j is after query i (causal, on a diagonal tile)
def tile_scores(q_i: torch.Tensor, k_j: torch.Tensor, scale: float, i0: int, j0: int, is_causal: bool) -> torch.Tensor:
    r"""One tile of masked scores :math:`S_{ij} = \text{scale} \cdot Q_i K_j^\top + M_{ij}` (chapter 11).

    Args:
        q_i: the query block that starts at query ``i0``, (..., B_q, d_k).
        k_j: the key block that starts at key ``j0``, (..., B_k, d_k).
        scale: factor on the scores.
        i0, j0: the index of the first query and of the first key of the tile.
        is_causal: hide key j from query i when j > i.

    Returns:
        :math:`S_{ij}`, (..., B_q, B_k).
    """
    s_ij = scale * (q_i @ k_j.transpose(-2, -1))  # (..., B_q, d_k) @ (..., d_k, B_k) -> (..., B_q, B_k)
    i1, j1 = i0 + q_i.shape[-2], j0 + k_j.shape[-2]
    if _tile_kind(i0, j1, is_causal) == "diagonal":
        i = torch.arange(i0, i1, device=q_i.device).unsqueeze(-1)  # (B_q, 1)
        j = torch.arange(j0, j1, device=q_i.device)  # (B_k,)
        s_ij = s_ij.masked_fill(j > i, -math.inf)  # key j after query i: hidden
    return s_ij


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16 and bfloat16 inputs (as fused kernels accumulate); the input dtype otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _check_flash_inputs(
    q: object, k: object, v: object, is_causal: object, block_q: object, block_k: object, scale: object
) -> None:
    """The argument checks shared by the forward and the backward pass."""
    check_shapes(q=(q, "(..., n, d_k)"), k=(k, "(..., m, d_k)"), v=(v, "(..., m, d_v)"))
    _check_same_batch(q=q, k=k, v=v)
    if k.shape[-2] == 0:
        raise ValueError(
            f"k and v must hold at least one key (m >= 1), got k {tuple(k.shape)} and v {tuple(v.shape)}: "
            f"a query with no key has no softmax"
        )
    check_type("is_causal", is_causal, bool)
    check_sizes(block_q=block_q, block_k=block_k)
    if scale is not None:
        check_number("scale", scale)


def _check_lse(L: object, q: torch.Tensor, name: str = "L") -> None:
    """The log-sum-exp (or D) handed to a backward pass: a floating tensor of shape (..., n) on the device of q."""
    check_floating(name, L)
    if L.shape != q.shape[:-1] or L.device != q.device:
        raise ValueError(
            f"{name} (..., n) must have shape {tuple(q.shape[:-1])} on {q.device} (q is {tuple(q.shape)}), "
            f"got {tuple(L.shape)} on {L.device}"
        )


def flash_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    *,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The forward pass of FlashAttention-2 in PyTorch tiles: the output O and the log-sum-exp L (chapter 11).

    .. math:: O = \operatorname{softmax}(S) V, \qquad L_i = \log \sum_j e^{S_{ij}}, \qquad
              S = \text{scale} \cdot Q K^\top + M

    Query blocks outside, key blocks inside, online softmax; see the module docstring.

    Args:
        q: (..., n, d_k).
        k: (..., m, d_k), m >= 1.
        v: (..., m, d_v).
        is_causal: hide key j from query i when j > i (upper-left alignment); the tiles entirely
            above the diagonal are skipped.
        block_q, block_k: rows of a query block and of a key block (positive ints; n and m need
            not be multiples of them).
        scale: factor on the scores; defaults to ``1 / sqrt(d_k)``.

    Returns:
        ``(O, L)``: O (..., n, d_v) in the dtype of the inputs, L (..., n) (float32 for float16
        and bfloat16 inputs).
    """
    _check_flash_inputs(q, k, v, is_causal, block_q, block_k, scale)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    *batch, n, _ = q.shape
    m, d_v = k.shape[-2], v.shape[-1]
    acc_dtype = _accumulation_dtype(q.dtype)
    like = {"dtype": acc_dtype, "device": q.device}
    O = torch.empty(*batch, n, d_v, dtype=q.dtype, device=q.device)  # (..., n, d_v)
    L = torch.empty(*batch, n, **like)  # (..., n)

    for i0 in range(0, n, block_q):  # outer loop: a block Q_i of queries
        i1 = min(i0 + block_q, n)
        q_i = q[..., i0:i1, :].to(acc_dtype)  # (..., B_q, d_k)
        m_i = torch.full((*batch, i1 - i0), -math.inf, **like)  # running maximum, (..., B_q)
        l_i = torch.zeros((*batch, i1 - i0), **like)  # running normaliser, (..., B_q)
        acc = torch.zeros((*batch, i1 - i0, d_v), **like)  # running unnormalised output, (..., B_q, d_v)
        for j0 in range(0, key_blocks_end(i1, m, is_causal), block_k):  # inner loop: K_j, V_j
            j1 = min(j0 + block_k, m)
            k_j = k[..., j0:j1, :].to(acc_dtype)  # (..., B_k, d_k)
            v_j = v[..., j0:j1, :].to(acc_dtype)  # (..., B_k, d_v)
            s_ij = tile_scores(q_i, k_j, scale, i0, j0, is_causal)  # (..., B_q, B_k)
            m_new = torch.maximum(m_i, s_ij.amax(dim=-1))  # m' = max(m_i, rowmax S_ij), (..., B_q)
            alpha = torch.exp(m_i - m_new)  # e^(m_i - m'), 0 on the first block (m_i = -inf)
            p_ij = torch.exp(s_ij - m_new.unsqueeze(-1))  # e^(S_ij - m'), (..., B_q, B_k)
            l_i = alpha * l_i + p_ij.sum(dim=-1)  # l_i = alpha l_i + rowsum P_ij
            acc = alpha.unsqueeze(-1) * acc + p_ij @ v_j  # (..., B_q, B_k) @ (..., B_k, d_v) -> (..., B_q, d_v)
            m_i = m_new
        O[..., i0:i1, :] = (acc / l_i.unsqueeze(-1)).to(q.dtype)  # O_i = acc / l_i, once, (..., B_q, d_v)
        L[..., i0:i1] = m_i + torch.log(l_i)  # L_i = m_i + log l_i, (..., B_q)
    return O, L


def flash_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    O: torch.Tensor,
    L: torch.Tensor,
    dO: torch.Tensor,
    is_causal: bool = False,
    *,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
    scale: float | None = None,
    delta: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The backward pass of FlashAttention-2 in PyTorch tiles: (dQ, dK, dV) from Q, K, V, O, L and dO (chapter 11).

    .. math:: D = \operatorname{rowsum}(dO \circ O); \qquad \text{per tile: } P_{ij} = e^{S_{ij} - L_i},
              \ dV_j \mathrel{+}= P_{ij}^\top dO_i, \ dS_{ij} = P_{ij} \circ (dO_i V_j^\top - D_i),
              \ dQ_i \mathrel{+}= \text{scale}\, dS_{ij} K_j, \ dK_j \mathrel{+}= \text{scale}\, dS_{ij}^\top Q_i

    Key blocks outside, query blocks inside; see the module docstring. Only one tile of P, dP and
    dS exists at a time.

    Args:
        q, k, v, is_causal, block_q, block_k, scale: as in :func:`flash_attention_forward` (the
            block sizes need not be those of the forward pass).
        O: the output of the forward pass, (..., n, d_v).
        L: the log-sum-exp of the forward pass, (..., n).
        dO: the gradient of the loss with respect to O, (..., n, d_v).
        delta: D = rowsum(dO o O) computed elsewhere, (..., n), e.g. from an output kept in higher
            precision than ``O`` (chapter 11 measures what the rounding of O costs the gradients
            this way); by default it is computed here from ``O`` and ``dO`` in the accumulation dtype.

    Returns:
        ``(dq, dk, dv)`` with the shapes and the dtype of ``q``, ``k``, ``v``.
    """
    _check_flash_inputs(q, k, v, is_causal, block_q, block_k, scale)
    check_shapes(q=(q, "(..., n, d_k)"), v=(v, "(..., m, d_v)"), O=(O, "(..., n, d_v)"), dO=(dO, "(..., n, d_v)"))
    _check_same_batch(q=q, O=O, dO=dO)
    _check_lse(L, q)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    n, m = q.shape[-2], k.shape[-2]
    acc_dtype = _accumulation_dtype(q.dtype)
    if delta is None:
        D = backward_delta(dO.to(acc_dtype), O.to(acc_dtype))  # D = rowsum(dO o O), once, (..., n)
    else:
        _check_lse(delta, q, "delta")  # a floating (..., n) tensor, as L
        D = delta.to(acc_dtype)
    L = L.to(acc_dtype)
    dq = torch.zeros(q.shape, dtype=acc_dtype, device=q.device)  # accumulated over key blocks, (..., n, d_k)
    dk = torch.empty_like(k)  # (..., m, d_k)
    dv = torch.empty_like(v)  # (..., m, d_v)

    for j0 in range(0, m, block_k):  # outer loop: a block K_j, V_j of keys and values
        j1 = min(j0 + block_k, m)
        k_j = k[..., j0:j1, :].to(acc_dtype)  # (..., B_k, d_k)
        v_j = v[..., j0:j1, :].to(acc_dtype)  # (..., B_k, d_v)
        dk_j = torch.zeros(k_j.shape, dtype=acc_dtype, device=q.device)  # (..., B_k, d_k)
        dv_j = torch.zeros(v_j.shape, dtype=acc_dtype, device=q.device)  # (..., B_k, d_v)
        for i0 in range(query_blocks_start(j0, n, block_q, is_causal), n, block_q):  # inner loop: Q_i, dO_i
            i1 = min(i0 + block_q, n)
            q_i = q[..., i0:i1, :].to(acc_dtype)  # (..., B_q, d_k)
            dO_i = dO[..., i0:i1, :].to(acc_dtype)  # (..., B_q, d_v)
            s_ij = tile_scores(q_i, k_j, scale, i0, j0, is_causal)  # (..., B_q, B_k)
            p_ij = probabilities_from_lse(s_ij, L[..., i0:i1])  # P_ij = e^(S_ij - L_i), rebuilt
            dv_j = dv_j + grad_value(p_ij, dO_i)  # dV_j += P_ij^T dO_i, (..., B_k, d_v)
            dp_ij = grad_weights(dO_i, v_j)  # dP_ij = dO_i V_j^T, (..., B_q, B_k)
            ds_ij = grad_scores(p_ij, dp_ij, D[..., i0:i1])  # dS_ij = P_ij o (dP_ij - D_i)
            dq[..., i0:i1, :] += grad_query(ds_ij, k_j, scale)  # dQ_i += scale dS_ij K_j, (..., B_q, d_k)
            dk_j = dk_j + grad_key(ds_ij, q_i, scale)  # dK_j += scale dS_ij^T Q_i, (..., B_k, d_k)
        dk[..., j0:j1, :] = dk_j.to(k.dtype)  # written once per key block
        dv[..., j0:j1, :] = dv_j.to(v.dtype)
    return dq.to(q.dtype), dk, dv


class FlashAttention(torch.autograd.Function):
    r"""Attention as an autograd function computed with PyTorch tiles: ``FlashAttention.apply(q, k, v, is_causal)`` (chapter 11).

    .. math:: O = \operatorname{softmax}(\text{scale} \cdot Q K^\top + M) V, \qquad \text{scale} = 1 / \sqrt{d_k}

    The forward pass is :func:`flash_attention_forward`; it saves exactly q, k, v, O and the
    log-sum-exp L (shape (..., n)) for the backward pass, :func:`flash_attention_backward`, which
    rebuilds the weights tile by tile. No (n, m) matrix is saved or formed.

    ``apply(q, k, v, is_causal=False, block_q=64, block_k=64)`` (positional arguments only, as
    every ``autograd.Function``): q (..., n, d_k), k (..., m, d_k), v (..., m, d_v) with the same
    batch dimensions, e.g. (batch, n, d) or (batch, heads, n, d); returns O (..., n, d_v).
    """

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False, block_q=BLOCK_Q, block_k=BLOCK_K):
        O, L = flash_attention_forward(q, k, v, is_causal, block_q=block_q, block_k=block_k)
        ctx.save_for_backward(q, k, v, O, L)
        ctx.is_causal, ctx.block_q, ctx.block_k = is_causal, block_q, block_k
        return O

    @staticmethod
    def backward(ctx, dO):
        q, k, v, O, L = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(
            q, k, v, O, L, dO, ctx.is_causal, block_q=ctx.block_q, block_k=ctx.block_k
        )
        return dq, dk, dv, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    *,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
) -> torch.Tensor:
    r"""Attention by FlashAttention-2 in PyTorch tiles, differentiable: :class:`FlashAttention` as a function (chapter 11).

    .. math:: O = \operatorname{softmax}(Q K^\top / \sqrt{d_k} + M) V

    Args:
        q: (..., n, d_k).
        k: (..., m, d_k), m >= 1.
        v: (..., m, d_v).
        is_causal: hide key j from query i when j > i (upper-left alignment, as
            :func:`attnbook.causal_mask`).
        block_q, block_k: rows of a query block and of a key block.

    Returns:
        O, (..., n, d_v).
    """
    _check_flash_inputs(q, k, v, is_causal, block_q, block_k, None)
    return FlashAttention.apply(q, k, v, is_causal, block_q, block_k)
