r"""Local (sliding-window) and block-sparse keep-masks, and attention computed on the window only (chapter 9).

All masks here are boolean keep-masks in the row convention, ``True`` where query i may attend to
key j, like :func:`attnbook.causal_mask` and :func:`attnbook.padding_mask`; they combine with
those by ``&`` (a key is kept only if every mask keeps it).

* :func:`sliding_window_mask`: query i sees the ``window`` keys i - window + 1, ..., i (causal, as
  Hugging Face's masks count a ``sliding_window``), or every key with :math:`|i - j| < \text{window}`.
* :func:`block_sparse_mask`: a boolean layout over blocks of ``block_size`` queries and keys, each
  block kept or dropped whole (Sparse Transformer, BigBird); :func:`block_layout` goes back from a
  mask to the blocks that hold at least one kept entry, the blocks a block-sparse kernel such as
  PyTorch's ``flex_attention`` visits.
* :func:`sliding_window_attention`: causal sliding-window self-attention computed block by block on
  the band of the score matrix only, with memory that grows like n times the window instead of n².
"""

from __future__ import annotations

import math

import torch

from ..core.attention import attention
from ..core.masks import key_distances
from ..validators import check_shapes, check_sizes, check_type, skip_checks


# causal:        M[i, j] = [0 <= (i + o) - j < window]
# bidirectional: M[i, j] = [|(i + o) - j| < window],      o = 0 (upper_left) or m - n (lower_right)
def sliding_window_mask(
    n: int,
    window: int,
    m: int | None = None,
    *,
    causal: bool = True,
    align: str = "upper_left",
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""Boolean sliding-window keep-mask of shape (n, m): query i sees the keys near it (chapter 9).

    .. math:: M_{ij} = [\,0 \le (i + o) - j < w\,] \quad\text{(causal)}, \qquad
              M_{ij} = [\,|(i + o) - j| < w\,] \quad\text{(bidirectional)}

    With ``causal=True`` (default) query i sees the w keys i - w + 1, ..., i, itself included
    (fewer near the start): the convention of Hugging Face's masks, where ``sliding_window = w``
    keeps w keys. Mistral's reference code keeps :math:`i - j \le W` for its ``sliding_window`` W,
    that is W + 1 keys: the same mask with w = W + 1. With ``causal=False`` it sees the 2w - 1
    keys with :math:`|i - j| < w`, and ``sliding_window_mask(n, w, causal=False) & causal_mask(n)``
    equals ``sliding_window_mask(n, w)``.

    Args:
        n: number of queries.
        window: w >= 1, the number of keys a query sees (causal), or one more than the number it
            sees on each side (bidirectional).
        m: number of keys (defaults to ``n``).
        align: where query i stands among the keys when n != m, as in :func:`attnbook.causal_mask`:
            ``"upper_left"`` puts it at position i, ``"lower_right"`` at i + m - n (the queries are
            the last n of the m tokens, as when decoding with a key-value cache).
        device: where to create the mask.
    """
    check_sizes(window=window)
    check_type("causal", causal, bool)
    distance = key_distances(n, m, align=align, device=device)  # (n, m): how far key j lies before query i
    if causal:
        return (distance >= 0) & (distance < window)  # (n, m)
    return distance.abs() < window  # (n, m)


# M[..., i, j] = L[..., i // B, j // B]
def block_sparse_mask(
    layout: torch.Tensor, block_size: int, n: int | None = None, m: int | None = None
) -> torch.Tensor:
    r"""Expand a boolean block layout into a keep-mask: :math:`M_{ij} = L_{\lfloor i/B \rfloor, \lfloor j/B \rfloor}` (chapter 9).

    Block (a, b) of the layout covers queries aB, ..., aB + B - 1 and keys bB, ..., bB + B - 1; a
    kept block keeps all its entries, a dropped one none.

    Args:
        layout: boolean (..., N_q, N_k), True = block kept.
        block_size: B >= 1, rows and columns per block.
        n, m: the size of the mask, to cut the last block of queries or keys short; default
            N_q B and N_k B. They must satisfy (N_q - 1) B < n <= N_q B (and the same for m).

    Returns:
        A boolean keep-mask (..., n, m) on the device of ``layout``.
    """
    check_shapes(layout=(layout, "(..., N_q, N_k)", "bool"))
    check_sizes(block_size=block_size)
    check_sizes(minimum=0, n=n, m=m)
    n_q, n_k = layout.shape[-2], layout.shape[-1]
    n = n_q * block_size if n is None else n
    m = n_k * block_size if m is None else m
    for name, size, blocks in (("n", n, n_q), ("m", m, n_k)):
        if math.ceil(size / block_size) != blocks:
            raise ValueError(
                f"{name} = {size} needs ceil({name} / block_size) = {math.ceil(size / block_size)} blocks of "
                f"{block_size}, but the layout {tuple(layout.shape)} has {blocks}"
            )
    mask = layout.repeat_interleave(block_size, dim=-2)  # (..., N_q B, N_k)
    mask = mask.repeat_interleave(block_size, dim=-1)  # (..., N_q B, N_k B)
    return mask[..., :n, :m]  # (..., n, m)


# L[..., a, b] = any(M[..., aB:(a+1)B, bB:(b+1)B])
def block_layout(keep: torch.Tensor, block_size: int) -> torch.Tensor:
    r"""The blocks of a keep-mask that hold at least one kept entry (chapter 9).

    .. math:: L_{ab} = \bigvee_{i \in \text{block } a,\ j \in \text{block } b} M_{ij}

    These are the tiles a block-sparse kernel computes; the others are skipped. It is the dense
    form of the block structure of PyTorch's ``flex_attention.create_block_mask`` (its partial and
    full blocks together). ``block_sparse_mask(block_layout(keep, B), B, n, m) & keep == keep``.

    Args:
        keep: boolean keep-mask (..., n, m).
        block_size: B >= 1.

    Returns:
        Boolean (..., ceil(n / B), ceil(m / B)).
    """
    check_shapes(keep=(keep, "(..., n, m)", "bool"))
    check_sizes(block_size=block_size)
    n, m = keep.shape[-2], keep.shape[-1]
    n_q, n_k = math.ceil(n / block_size), math.ceil(m / block_size)
    padded = keep.new_zeros(*keep.shape[:-2], n_q * block_size, n_k * block_size)  # (..., N_q B, N_k B)
    padded[..., :n, :m] = keep
    blocks = padded.unflatten(-1, (n_k, block_size)).unflatten(-3, (n_q, block_size))  # (..., N_q, B, N_k, B)
    return blocks.any(dim=-1).any(dim=-2)  # (..., N_q, N_k)


# o_i = softmax_j(q_i k_j^T * scale, i - w < j <= i) V,   one block of B queries against its B + w - 1 keys at a time
def sliding_window_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    window: int,
    *,
    block_size: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    r"""Causal sliding-window self-attention that computes only the band of the score matrix (chapter 9).

    The same output as ``attnbook.attention(query, key, value, mask=sliding_window_mask(n, window))``
    (to rounding), but the queries are taken in blocks of B: queries a, ..., a + B - 1 need only
    the keys a - w + 1, ..., a + B - 1, so each step forms a (B, B + w - 1) block of scores. Time
    and memory grow like n (B + w) instead of n²: only one block of scores and its weights exist at
    a time.

    Args:
        query: (..., n, d_k).
        key: (..., n, d_k), the keys of the same n tokens (self-attention).
        value: (..., n, d_v).
        window: w >= 1, as in :func:`sliding_window_mask` (causal): query i sees keys i - w + 1, ..., i.
        block_size: queries per block, default ``window``.
        scale: factor on the scores; defaults to ``1 / sqrt(d_k)``.

    Returns:
        The output (..., n, d_v).
    """
    check_shapes(query=(query, "(..., n, d_k)"), key=(key, "(..., n, d_k)"), value=(value, "(..., n, d_v)"))
    check_sizes(window=window, block_size=block_size)
    n = query.shape[-2]
    block_size = window if block_size is None else block_size
    batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])  # checked above
    output = query.new_empty(*batch, n, value.shape[-1])  # (..., n, d_v)
    with skip_checks():  # every block is right by construction
        for start in range(0, n, block_size):
            stop = min(start + block_size, n)
            first_key = max(0, start - window + 1)  # keys before it are outside every window of the block
            local = sliding_window_mask(
                stop - start, window, stop - first_key, align="lower_right", device=query.device
            )
            output[..., start:stop, :] = attention(  # (..., B, d_v) from a (..., B, B + w - 1) block of scores
                query[..., start:stop, :],
                key[..., first_key:stop, :],
                value[..., first_key:stop, :],
                mask=local,
                scale=scale,
            )[0]
    return output
