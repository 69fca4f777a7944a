"""Masks in the row convention: True means "this query may attend to this key" (chapter 2)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

_ALIGNS = ("upper_left", "lower_right")


def _check_length(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


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
    is *lower* triangular; the column-convention mask of :func:`attnbook.formal.unidirectional_mask`
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
    n = _check_length("n", n)
    m = n if m is None else _check_length("m", m)
    if align not in _ALIGNS:
        raise ValueError(f"align must be one of {_ALIGNS}, got {align!r}")
    offset = 0 if align == "upper_left" else m - n
    i = torch.arange(n, device=device).unsqueeze(-1)  # (n, 1)
    j = torch.arange(m, device=device).unsqueeze(0)  # (1, m)
    return j <= i + offset  # (n, m)


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
    if isinstance(lengths, torch.Tensor):
        if lengths.ndim != 1 or lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise TypeError(
                f"lengths must be a 1-D integer tensor, got dtype {lengths.dtype} and shape {tuple(lengths.shape)}"
            )
        device = lengths.device if device is None else device
        lengths = lengths.to(device=device, dtype=torch.long)
    else:
        lengths = [_check_length(f"lengths[{b}]", x) for b, x in enumerate(lengths)]
        lengths = torch.tensor(lengths, dtype=torch.long, device=device)
    if max_len is None:
        max_len = int(lengths.max()) if lengths.numel() else 0
    max_len = _check_length("max_len", max_len)
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > max_len):
        raise ValueError(f"every length must lie in [0, max_len={max_len}], got {lengths.tolist()}")
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    return positions.unsqueeze(0) < lengths.unsqueeze(-1)  # (batch, max_len)
