"""Masks in the row convention, in one place (chapter 2): what a mask is, how it is read, how it is applied.

* **Positions.** :func:`key_distances` gives how far each key lies before each query, the
  quantity every position-dependent mask is a condition on.
* **Layouts.** A *keep-mask* is boolean, True where query i may attend to key j (the meaning of
  :func:`attnbook.attention` and of ``scaled_dot_product_attention``); a *block-mask* is its
  negation (``nn.MultiheadAttention``); an *additive* mask is a float tensor added to the scores,
  0 where allowed and ``-inf`` where blocked. :func:`causal_mask` and :func:`padding_mask` build
  keep-masks; :func:`keep_to_block`, :func:`block_to_keep`, :func:`keep_to_additive` and
  :func:`additive_to_keep` convert between the three.
* **Multi-head layouts.** A mask of multi-head attention is read by its number of dimensions:
  (n, m), (batch, n, m) or (batch, heads, n, m) (:func:`heads_mask`, used by
  :class:`attnbook.MultiHeadAttention` and the models of :mod:`attnbook.models`).
* **Meeting the scores.** :func:`mask_like_scores` gives a float mask the scores' dtype (a
  boolean one stays boolean) and :func:`apply_mask` applies either kind to the scores.

* **Checking.** :func:`check_mask` checks a mask's dtype, device and shape against the scores'.
* **Combining.** :func:`restrict_mask` keeps a mask (or a float bias) where a keep-mask allows.

The builders a chapter teaches stay with their topic and call these helpers: sliding windows and
block-sparse layouts in :mod:`attnbook.efficient.sliding_window`, the grouped layout in
:mod:`attnbook.heads.grouped_query`, the column-convention mask in :mod:`attnbook.core.column_convention`,
the models' per-block mask in :mod:`attnbook.models.interpretability`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..validators import (
    check_dtype,
    check_lengths,
    check_one_of,
    check_shapes,
    check_sizes,
    check_tensor,
    check_values,
    checks_skipped,
)

_ALIGNS = ("upper_left", "lower_right")


def _broadcasts_into(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` without enlarging it (each axis equal or 1)."""
    return len(shape) <= len(target) and all(a == b or a == 1 for a, b in zip(reversed(shape), reversed(target)))


def check_mask(mask: object, target: Sequence[int] | dict[str, Sequence[int]], device: torch.device) -> None:
    """Check an attention mask against the score shape (it only checks: :func:`mask_like_scores`
    converts the mask to the scores' dtype and :func:`apply_mask` applies it).

    A mask is boolean (True = may attend) or floating (added to the scores, in any floating
    dtype: :func:`attnbook.core.masks.mask_like_scores` casts it to theirs), on ``device``. It must broadcast to the
    score shape ``target`` = (..., n, m) without enlarging it. ``target`` may instead map layouts
    to shapes, one per number of dimensions, e.g. ``{"(n, m)": (4, 6), "(batch, heads, n, m)":
    (2, 8, 4, 6)}``: the mask is read in the layout of its number of dimensions.
    """
    if checks_skipped():
        return
    check_tensor("mask", mask)
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            f"mask must be boolean (True = may attend) or floating (added to the scores), got {mask.dtype}; "
            f"convert a {{0,1}} mask with mask.bool()"
        )
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but the inputs are on {device}")
    if isinstance(target, dict):
        layouts = {len(shape): (layout, tuple(shape)) for layout, shape in target.items()}
        if mask.ndim not in layouts:
            counts = ", ".join(map(str, list(layouts)[:-1])) + f" or {list(layouts)[-1]}"
            names = ", ".join(layout for layout, _ in list(layouts.values())[:-1])
            last, shape = list(layouts.values())[-1]
            raise ValueError(
                f"mask must have {counts} dimensions, {names} or {last} = {shape}, got shape {tuple(mask.shape)}"
            )
        layout, target = layouts[mask.ndim]
    else:
        layout, target = "(..., n, m)", tuple(target)
    if not _broadcasts_into(mask.shape, target):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the score shape {target} without "
            f"enlarging it (it is read as {layout} = {target}, n queries by m keys; size-1 axes broadcast)"
        )


# D[i, j] = (i + o) - j,   o = 0 (upper_left) or m - n (lower_right)
def key_distances(
    n: int,
    m: int | None = None,
    *,
    align: str = "upper_left",
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""How far key j lies before query i, an int64 tensor of shape (n, m): :math:`D_{ij} = (i + o) - j`.

    The position of query i among the keys is i + o, with ``align`` as in :func:`causal_mask`
    (``"upper_left"``: o = 0; ``"lower_right"``: o = m - n, the queries being the last n of the m
    tokens). The masks that depend on positions are built from it: :func:`causal_mask` is
    :math:`D \ge 0`, and :func:`attnbook.sliding_window_mask` bounds D on one or both sides.
    """
    check_sizes(minimum=0, n=n, m=m)
    check_one_of("align", align, _ALIGNS)
    m = n if m is None else m
    offset = 0 if align == "upper_left" else m - n
    i = torch.arange(n, device=device).unsqueeze(-1) + offset  # (n, 1): the position of query i
    j = torch.arange(m, device=device).unsqueeze(0)  # (1, m)
    return i - j  # (n, m)


# M[i, j] = 1  iff  j <= i + offset,   offset = 0 (upper_left) or m - n (lower_right)
def causal_mask(
    n: int,
    m: int | None = None,
    *,
    align: str = "upper_left",
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""Boolean causal keep-mask of shape (n, m): ``True`` where query i may see key j (chapter 2).

    .. math:: M_{ij} = [\, j \le i + o \,], \qquad o = 0 \text{ or } m - n

    With ``n == m`` (self-attention) this is the lower-triangular matrix of ones including the
    diagonal: query i sees keys 0..i. In this row convention (row = query, column = key) the mask
    is *lower* triangular; the column-convention mask of :func:`attnbook.core.column_convention.unidirectional_mask`
    is its transpose and upper triangular.

    When ``n != m`` two alignments are in use:

    * ``align="upper_left"`` (default): query i sees keys j <= i, the diagonal starting at the
      top-left corner. This is what ``scaled_dot_product_attention(..., is_causal=True)`` does.
    * ``align="lower_right"``: query i sees keys j <= i + (m - n), so the last query sees every
      key. This is the right mask when the n queries are the *last* n positions of the m keys, as
      when decoding with a key-value cache. When n > m the first n - m queries see no key at all.

    Args:
        n: number of queries.
        m: number of keys (defaults to ``n``).
        align: ``"upper_left"`` or ``"lower_right"``.
        device: where to create the mask.
    """
    return key_distances(n, m, align=align, device=device) >= 0  # (n, m): j <= i + o


# P[b, j] = 1  iff  j < length_b
def padding_mask(
    lengths: Sequence[int] | torch.Tensor,
    max_len: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Boolean key-padding keep-mask of shape (batch, max_len): ``True`` for real tokens (chapter 2).

    Sequence b has ``lengths[b]`` real tokens followed by padding. To use it as an attention mask
    for scores of shape (batch, n, m) add the query axis: ``padding_mask(lengths, m)[:, None, :]``
    (and ``[:, None, None, :]`` for (batch, heads, n, m)).

    Args:
        lengths: the true length of each sequence, a list of ints or a 1-D integer tensor.
        max_len: padded length; defaults to ``max(lengths)``.
        device: where to create the mask (defaults to the device of ``lengths`` if it is a tensor).
    """
    check_lengths(lengths, max_len)
    lengths = torch.as_tensor(lengths, dtype=torch.long, device=device)  # (batch,), on the device of a tensor
    if max_len is None:
        max_len = int(lengths.max()) if lengths.numel() else 0
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    return positions.unsqueeze(0) < lengths.unsqueeze(-1)  # (batch, max_len)


# Three conventions for the same information (chapter 2):
#   keep mask   K[i, j] = True  iff query i may attend to key j   (attnbook, scaled_dot_product_attention)
#   block mask  B[i, j] = True  iff query i may NOT attend to key j (nn.MultiheadAttention's attn_mask
#                                                                    and key_padding_mask)
#   additive    A[i, j] = 0 where allowed, -inf where blocked      (added to the scores)


# B = not K
def keep_to_block(keep: torch.Tensor) -> torch.Tensor:
    r"""Keep-mask to block-mask, :math:`B = \lnot K` (chapter 2).

    ``keep`` is True where a query may attend (the meaning of :func:`attnbook.attention` and of
    ``scaled_dot_product_attention``); the result is True where it may **not**, the meaning of the
    ``attn_mask`` and ``key_padding_mask`` of ``torch.nn.MultiheadAttention``.
    """
    check_shapes(keep=(keep, "(...)", "bool"))
    return ~keep


# K = not B
def block_to_keep(block: torch.Tensor) -> torch.Tensor:
    r"""Block-mask to keep-mask, :math:`K = \lnot B` (chapter 2); the inverse of :func:`keep_to_block`."""
    check_shapes(block=(block, "(...)", "bool"))
    return ~block


# A[i, j] = 0 if K[i, j] else -inf
def keep_to_additive(keep: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    r"""Keep-mask to additive float mask, :math:`A_{ij} = 0` if :math:`K_{ij}`, else :math:`-\infty` (chapter 2).

    Adding ``A`` to the scores before the softmax has the effect of the keep-mask: a blocked key gets
    score ``-inf`` and weight exactly 0. The blocked entries are ``-inf``, not a large negative number
    such as ``-1e9``, which does not exist in float16 and gives a fully masked row uniform weights
    instead of none (chapter 2, *numerical stability*).

    Args:
        keep: boolean mask, True = may attend.
        dtype: a floating dtype for the result (use the dtype of the scores).
    """
    check_shapes(keep=(keep, "(...)", "bool"))
    check_dtype(dtype)
    zero = torch.zeros((), dtype=dtype, device=keep.device)
    minus_inf = torch.full((), float("-inf"), dtype=dtype, device=keep.device)
    return torch.where(keep, zero, minus_inf)


# K[i, j] = (A[i, j] != -inf)        for A with entries in {0, -inf}
def additive_to_keep(additive: torch.Tensor) -> torch.Tensor:
    r"""Additive mask with entries 0 and :math:`-\infty` to keep-mask, :math:`K_{ij} = [A_{ij} \ne -\infty]` (chapter 2).

    Only a mask whose entries are all 0 or ``-inf`` can be converted: any other value (a finite
    bias such as ``-1e9`` or a relative-position bias) changes the scores in a way a boolean mask
    cannot express, so it raises ``ValueError`` instead of silently dropping it.
    """
    check_shapes(additive=(additive, "(...)"))
    check_values(
        "additive",
        additive,
        (0, -math.inf),
        " to become a boolean mask (a finite bias cannot be expressed as a keep-mask)",
    )
    blocked = additive == -math.inf
    return ~blocked


# ---------------------------------------------------------------- a mask meets the scores


# M -> M (a boolean keep-mask),   M -> M in the dtype of the scores (an additive float mask)
def mask_like_scores(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The mask ready to be applied to scores of ``dtype`` (chapter 2): a boolean keep-mask as it is,
    a float mask cast to ``dtype`` (so that adding it leaves the scores in their own dtype).

    Args:
        mask: None, a boolean keep-mask or an additive float mask (checked by
            :func:`check_mask`).
        dtype: the floating dtype of the scores (that of the queries).
    """
    if mask is None or mask.dtype == torch.bool:
        return mask
    return mask.to(dtype)


# mask_M(S)_ij = S_ij if M_ij else -inf     (bool keep-mask)
# mask_M(S)_ij = S_ij + M_ij                (additive float mask)
def apply_mask(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    r"""Masked scores (chapter 2): ``-inf`` where a boolean keep-mask is False; ``+ mask`` for a float mask.

    .. math:: \operatorname{mask}_M(S)_{ij} = \begin{cases} S_{ij} & M_{ij} \\ -\infty & \lnot M_{ij}
              \end{cases} \quad\text{(keep-mask)}, \qquad \operatorname{mask}_A(S) = S + A
              \quad\text{(additive)}

    scores (..., n, m); mask broadcastable to (..., n, m), or None (the scores unchanged).
    """
    if mask is None:
        return scores
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, -math.inf)
    return scores + mask


# M' = M and K  (a keep-mask M),   M' = M where K, else -inf  (an additive mask M)
def restrict_mask(mask: torch.Tensor | None, keep: torch.Tensor) -> torch.Tensor:
    """A mask that allows what both ``mask`` and the keep-mask ``keep`` allow (chapter 2): their
    "and" for a boolean ``mask``, ``-inf`` where ``keep`` is False for an additive one, ``keep``
    itself when ``mask`` is None. The shapes broadcast, e.g. a causal (n, n) against
    (batch, heads, n, n)."""
    if mask is None:
        return keep
    if mask.dtype == torch.bool:
        return mask & keep
    return mask.masked_fill(~keep, -math.inf)


# (n, m) -> (1, 1, n, m),   (batch, n, m) -> (batch, 1, n, m),   (batch, heads, n, m) as it is
def heads_mask(
    mask: torch.Tensor | None, batch: int, heads: int, n: int, m: int, like: torch.Tensor
) -> torch.Tensor | None:
    """A mask of multi-head attention, read by its number of dimensions, checked and returned with
    four (chapter 3): ``(batch or 1, heads or 1, n, m)``, in the dtype of ``like`` if floating.

    The three layouts: (n, m) for every sequence and head; (batch, n, m) per sequence, shared by
    the heads (a padding mask is ``padding_mask(lengths)[:, None, :]``); (batch, heads, n, m) per
    sequence and head. Size-1 axes broadcast. A 3-D mask is never read as (heads, n, m). This is
    the one place that rule lives: :class:`attnbook.MultiHeadAttention` and the models of
    :mod:`attnbook.models` read their masks through it.

    Args:
        mask: None (returned as it is), a boolean keep-mask or an additive float mask.
        batch, heads, n, m: the sizes of the scores (batch, heads, n, m).
        like: a tensor with the dtype and device of the scores (the queries).
    """
    if mask is None:
        return None
    layouts = {"(n, m)": (n, m), "(batch, n, m)": (batch, n, m), "(batch, heads, n, m)": (batch, heads, n, m)}
    check_mask(mask, layouts, like.device)
    mask = mask_like_scores(mask, like.dtype)
    if mask.ndim == 2:
        return mask[None, None]  # (1, 1, n, m): the same for every sequence and head
    if mask.ndim == 3:
        return mask.unsqueeze(1)  # (batch, 1, n, m): the same for every head
    return mask  # (batch, heads, n, m)
