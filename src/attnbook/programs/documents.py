r"""Packed documents: several documents in one row, their masks and their positions (chapter 12).

A row of n tokens holds D documents one after the other, with no padding. Three layouts say where
each document lies, and the functions here convert between them:

* **lengths** :math:`\ell_0, \dots, \ell_{D-1}`, every :math:`\ell_d \ge 1`, summing to n (a document
  has at least one token: a zero or negative length is refused, see
  :func:`attnbook.validators.check_document_lengths`);
* **cu_seqlens**, the cumulative sequence lengths of FlashAttention's variable-length ("varlen")
  API: the D + 1 offsets :math:`c_0 = 0 < c_1 < \dots < c_D = n`, document d being the tokens
  :math:`c_d \le i < c_{d+1}` (int32, as that API takes them);
* **document ids** :math:`\mathrm{doc}(i)`, one per token (int64), each document one contiguous run.

The document-causal mask keeps :math:`\mathrm{doc}(i) = \mathrm{doc}(j)` and :math:`j \le i`: a
block-diagonal matrix whose blocks are causal. Positions restart at 0 in each document,
:math:`\mathrm{pos}(i) = i - c_{\mathrm{doc}(i)}`, so that a document packed anywhere in a row
gets the positions it would have alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..core.masks import causal_mask
from ..validators import check_cu_seqlens, check_document_ids, check_document_lengths


def _as_lengths(lengths: Sequence[int] | torch.Tensor, device: torch.device | str | None) -> torch.Tensor:
    """The lengths as an int64 tensor, on ``device`` or else on the device of a tensor ``lengths``."""
    if isinstance(lengths, torch.Tensor):
        return lengths.to(dtype=torch.int64, device=lengths.device if device is None else device)
    return torch.tensor(list(lengths), dtype=torch.int64, device=device)


# c_0 = 0,  c_{d+1} = c_d + l_d
def cu_seqlens_from_lengths(
    lengths: Sequence[int] | torch.Tensor, *, n: int | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    r"""The cumulative sequence lengths :math:`c_0 = 0,\ c_{d+1} = c_d + \ell_d` of packed documents (chapter 12).

    The layout FlashAttention's varlen API takes (``cu_seqlens_q``, ``cu_seqlens_k``): D + 1 int32
    offsets, document d being the tokens :math:`c_d \le i < c_{d+1}`.

    Args:
        lengths: the D document lengths, each >= 1, a list of ints or a 1-D integer tensor.
        n: the length of the row, if it must be checked (the lengths must sum to it).
        device: where to create the offsets (default: the device of a tensor ``lengths``, else the CPU).

    Returns:
        An int32 tensor (D + 1,).
    """
    check_document_lengths(lengths, n)
    lengths = _as_lengths(lengths, device)  # (D,)
    zero = lengths.new_zeros(1)  # (1,)
    return torch.cat((zero, lengths.cumsum(0))).to(torch.int32)  # (D + 1,)


# doc(i) = d  for  c_d <= i < c_{d+1}
def document_ids_from_lengths(
    lengths: Sequence[int] | torch.Tensor, *, n: int | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    r"""The document id of each token of a packed row, :math:`\mathrm{doc}(i) = d` for the :math:`\ell_d` tokens of document d (chapter 12).

    Args:
        lengths: the D document lengths, each >= 1, a list of ints or a 1-D integer tensor.
        n: the length of the row, if it must be checked (the lengths must sum to it).
        device: where to create the ids (default: the device of a tensor ``lengths``, else the CPU).

    Returns:
        An int64 tensor (n,) holding 0 (:math:`\ell_0` times), 1 (:math:`\ell_1` times), ...
    """
    check_document_lengths(lengths, n)
    lengths = _as_lengths(lengths, device)  # (D,)
    documents = torch.arange(len(lengths), device=lengths.device)  # (D,)
    return documents.repeat_interleave(lengths)  # (n,)


# doc(i) = d  for  c_d <= i < c_{d+1}
def document_ids_from_cu_seqlens(cu_seqlens: torch.Tensor) -> torch.Tensor:
    r"""Document ids from the varlen offsets: :math:`\mathrm{doc}(i) = d` for :math:`c_d \le i < c_{d+1}` (chapter 12).

    Args:
        cu_seqlens: int32 (or int64) (D + 1,), starting at 0 and strictly increasing.

    Returns:
        An int64 tensor (n,), n = ``cu_seqlens[-1]``, on the device of ``cu_seqlens``.
    """
    check_cu_seqlens(cu_seqlens)
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.int64)  # (D,)
    documents = torch.arange(len(lengths), device=cu_seqlens.device)  # (D,)
    return documents.repeat_interleave(lengths)  # (n,)


# c_0 = 0,  c_{d+1} = (the first i with doc(i) != doc(c_d)),  c_D = n
def cu_seqlens_from_document_ids(document_ids: torch.Tensor) -> torch.Tensor:
    r"""The varlen offsets of a row of document ids: 0, each i where a new document starts, and n (chapter 12).

    The ids need not be 0, 1, 2, ...: each run of equal ids is a document. The inverse of
    :func:`document_ids_from_cu_seqlens` when the ids are 0, 1, ..., D - 1 in order.

    Args:
        document_ids: an integer tensor (n,), each document one contiguous run (a batch of rows has
            one ``cu_seqlens`` per row: call this once per row).

    Returns:
        An int32 tensor (D + 1,) on the device of ``document_ids``.
    """
    check_document_ids(document_ids)
    if document_ids.ndim != 1:
        raise ValueError(
            f"cu_seqlens_from_document_ids takes one row of ids (n,), got shape {tuple(document_ids.shape)}; "
            f"call it once per row"
        )
    n = document_ids.shape[0]
    starts = (document_ids[1:] != document_ids[:-1]).nonzero().flatten() + 1  # (D - 1,): where a new run starts
    zero = torch.zeros(1, dtype=starts.dtype, device=starts.device)  # (1,)
    end = torch.full((1,), n, dtype=starts.dtype, device=starts.device)  # (1,)
    if n == 0:
        return zero.to(torch.int32)  # (1,): no document
    return torch.cat((zero, starts, end)).to(torch.int32)  # (D + 1,)


# pos(i) = i - (the first token of i's document)
def position_ids_from_document_ids(document_ids: torch.Tensor) -> torch.Tensor:
    r"""Positions that restart at 0 in each document, :math:`\mathrm{pos}(i) = i - c_{\mathrm{doc}(i)}` (chapter 12).

    The position ids a model gets for a packed row (Hugging Face's ``position_ids``): document d's
    tokens are numbered 0, 1, ..., :math:`\ell_d - 1`, as if it were alone.

    Args:
        document_ids: an integer tensor (..., n), each document one contiguous run in each row.

    Returns:
        An int64 tensor (..., n) on the device of ``document_ids``.
    """
    check_document_ids(document_ids)
    n = document_ids.shape[-1]
    i = torch.arange(n, device=document_ids.device).expand(document_ids.shape)  # (..., n)
    starts = torch.ones_like(document_ids, dtype=torch.bool)  # (..., n): True where a document starts
    starts[..., 1:] = document_ids[..., 1:] != document_ids[..., :-1]
    first = torch.where(starts, i, torch.zeros_like(i))  # (..., n): i at the start of a document, else 0
    first = first.cummax(dim=-1).values if n else first  # (..., n): the first token of i's document
    return i - first  # (..., n)


# pos(i) = i - c_{doc(i)}
def position_ids_from_cu_seqlens(cu_seqlens: torch.Tensor) -> torch.Tensor:
    r"""Positions that restart at 0 in each document, :math:`\mathrm{pos}(i) = i - c_{\mathrm{doc}(i)}`, from the varlen offsets (chapter 12).

    Args:
        cu_seqlens: int32 (or int64) (D + 1,), starting at 0 and strictly increasing.

    Returns:
        An int64 tensor (n,), n = ``cu_seqlens[-1]``, on the device of ``cu_seqlens``.
    """
    documents = document_ids_from_cu_seqlens(cu_seqlens)  # (n,)
    i = torch.arange(len(documents), device=cu_seqlens.device)  # (n,)
    return i - cu_seqlens.to(torch.int64)[documents]  # (n,)


# M[..., i, j] = [doc(i) = doc(j)] and [j <= i]
def document_causal_mask(document_ids: torch.Tensor) -> torch.Tensor:
    r"""The document-causal keep-mask of packed rows, :math:`M_{ij} = [\mathrm{doc}(i) = \mathrm{doc}(j)] \wedge [j \le i]` (chapter 12).

    True where query i may attend to key j: a block-diagonal matrix with one causal block per
    document. Pass it as the ``mask`` of :func:`attnbook.attention` (add a head axis for
    (batch, heads, n, n) scores: ``mask[:, None]``).

    Args:
        document_ids: an integer tensor (..., n), each document one contiguous run in each row.

    Returns:
        A boolean tensor (..., n, n) on the device of ``document_ids``.
    """
    check_document_ids(document_ids)
    n = document_ids.shape[-1]
    same = document_ids.unsqueeze(-1) == document_ids.unsqueeze(-2)  # (..., n, 1) == (..., 1, n) -> (..., n, n)
    return same & causal_mask(n, device=document_ids.device)  # (..., n, n)


# M[i, j] = [doc(i) = doc(j)] and [j <= i],   doc from cu_seqlens
def document_causal_mask_from_cu_seqlens(cu_seqlens: torch.Tensor) -> torch.Tensor:
    r"""The document-causal keep-mask (n, n) of the documents that ``cu_seqlens`` lays out (chapter 12).

    Equal to ``document_causal_mask(document_ids_from_cu_seqlens(cu_seqlens))``.

    Args:
        cu_seqlens: int32 (or int64) (D + 1,), starting at 0 and strictly increasing.

    Returns:
        A boolean tensor (n, n), n = ``cu_seqlens[-1]``, on the device of ``cu_seqlens``.
    """
    return document_causal_mask(document_ids_from_cu_seqlens(cu_seqlens))  # (n, n)
