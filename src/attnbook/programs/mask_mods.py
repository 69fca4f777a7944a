r"""Masks as functions: ``mask_mod(b, h, q_idx, kv_idx)``, in the signature of PyTorch's FlexAttention (chapter 12).

A mask is a rule that says, for sequence b, head h, query q_idx and key kv_idx, whether the query
may attend to the key (True) or not. Written as a function, the same rule serves twice: evaluated
on every (b, h, q, kv) it gives the dense keep-mask (:func:`mask_from_mask_mod`), and handed to
``torch.nn.attention.flex_attention`` it tells the kernel which tiles to skip
(:mod:`attnbook.programs.block_masks`).

The functions here use only tensor operations (``>=``, ``&``, ``|``, indexing a tensor by an
index tensor), never Python's ``and``, ``or`` or ``if`` on their arguments: FlexAttention calls a
mask_mod with scalar index tensors under ``torch.vmap``, and :func:`mask_from_mask_mod` calls it
once with index tensors shaped to broadcast, b (batch, 1, 1, 1), h (1, heads, 1, 1), q_idx
(1, 1, n, 1) and kv_idx (1, 1, 1, m).

* :func:`causal_mask_mod`: :math:`j \le i`;
* :func:`document_mask_mod`: :math:`\mathrm{doc}(i) = \mathrm{doc}(j) \wedge j \le i` (packed documents);
* :func:`sliding_window_mask_mod`: :math:`0 \le i - j < w` (Hugging Face's count, as :func:`attnbook.sliding_window_mask`);
* :func:`prefix_lm_mask_mod`: :math:`j < p \vee j \le i` (bidirectional over a prefix of p tokens, causal after);
* :func:`and_masks`, :func:`or_masks`: a key kept by every one, by any one of several rules.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..validators import (
    check_document_ids,
    check_mask_mods,
    check_mod_output,
    check_prefix_length,
    check_sizes,
)

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


# M(b, h, i, j) = [j <= i]
def causal_mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
    r"""The causal mask as a function, :math:`M(b, h, i, j) = [\,j \le i\,]` (chapter 12): the dense
    form is :func:`attnbook.causal_mask` (upper-left aligned)."""
    return q_idx >= kv_idx


# M(b, h, i, j) = [doc_b(i) = doc_b(j)] and [j <= i]
def document_mask_mod(document_ids: torch.Tensor) -> MaskMod:
    r"""The document-causal mask of packed rows as a function (chapter 12):
    :math:`M(b, h, i, j) = [\mathrm{doc}_b(i) = \mathrm{doc}_b(j)] \wedge [j \le i]`.

    The dense form is :func:`attnbook.programs.documents.document_causal_mask`.

    Args:
        document_ids: an integer tensor (n,), one row shared by every sequence of the batch, or
            (batch, n), one row per sequence; each document one contiguous run.

    Returns:
        A ``mask_mod(b, h, q_idx, kv_idx)`` for n queries and n keys.
    """
    check_document_ids(document_ids)
    if document_ids.ndim > 2:
        raise ValueError(f"document_ids must be (n,) or (batch, n), got shape {tuple(document_ids.shape)}")

    if document_ids.ndim == 1:

        def document_causal(b, h, q_idx, kv_idx):
            return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)

    else:

        def document_causal(b, h, q_idx, kv_idx):
            return (document_ids[b, q_idx] == document_ids[b, kv_idx]) & (q_idx >= kv_idx)

    return document_causal


# M(b, h, i, j) = [0 <= i - j < w]
def sliding_window_mask_mod(window: int) -> MaskMod:
    r"""Causal sliding-window mask as a function, :math:`M(b, h, i, j) = [\,0 \le i - j < w\,]` (chapter 12).

    Query i sees the w keys i - w + 1, ..., i (itself included): Hugging Face's count of a
    ``sliding_window``, and the dense :func:`attnbook.sliding_window_mask` (``causal=True``).
    Mistral's reference code keeps :math:`i - j \le W`: the same mask with w = W + 1.
    """
    check_sizes(window=window)

    def sliding_window(b, h, q_idx, kv_idx):
        distance = q_idx - kv_idx  # how far key j lies before query i
        return (distance >= 0) & (distance < window)

    return sliding_window


# M(b, h, i, j) = [j < p] or [j <= i]
def prefix_lm_mask_mod(prefix_length: int, n: int | None = None) -> MaskMod:
    r"""Prefix-LM mask as a function, :math:`M(b, h, i, j) = [\,j < p\,] \vee [\,j \le i\,]` (chapter 12).

    The first p tokens (the prefix, e.g. a prompt or an image) attend to each other in both
    directions; every later token attends causally, to the whole prefix and to the tokens up to
    itself. p = 0 gives the causal mask, p = n a bidirectional row.

    Args:
        prefix_length: p >= 0.
        n: the length of the rows, if it is known: then p <= n is checked.
    """
    check_prefix_length(prefix_length, n)

    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx < prefix_length) | (q_idx >= kv_idx)

    return prefix_lm


def and_masks(*mask_mods: MaskMod) -> MaskMod:
    r"""The rule that keeps a key when every one of ``mask_mods`` keeps it, :math:`M = M_1 \wedge M_2 \wedge \dots` (chapter 12)."""
    check_mask_mods("and_masks", mask_mods)

    def all_of(b, h, q_idx, kv_idx):
        keep = mask_mods[0](b, h, q_idx, kv_idx)
        for mod in mask_mods[1:]:
            keep = keep & mod(b, h, q_idx, kv_idx)
        return keep

    return all_of


def or_masks(*mask_mods: MaskMod) -> MaskMod:
    r"""The rule that keeps a key when any one of ``mask_mods`` keeps it, :math:`M = M_1 \vee M_2 \vee \dots` (chapter 12)."""
    check_mask_mods("or_masks", mask_mods)

    def any_of(b, h, q_idx, kv_idx):
        keep = mask_mods[0](b, h, q_idx, kv_idx)
        for mod in mask_mods[1:]:
            keep = keep | mod(b, h, q_idx, kv_idx)
        return keep

    return any_of


def mod_indices(
    batch: int, heads: int, n: int, m: int, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The index tensors a mod is called with densely (chapter 12): b (batch, 1, 1, 1), h (1, heads, 1, 1),
    q_idx (1, 1, n, 1) and kv_idx (1, 1, 1, m), int64, which broadcast to (batch, heads, n, m)."""
    b = torch.arange(batch, device=device)[:, None, None, None]  # (batch, 1, 1, 1)
    h = torch.arange(heads, device=device)[None, :, None, None]  # (1, heads, 1, 1)
    q_idx = torch.arange(n, device=device)[None, None, :, None]  # (1, 1, n, 1)
    kv_idx = torch.arange(m, device=device)[None, None, None, :]  # (1, 1, 1, m)
    return b, h, q_idx, kv_idx


def call_mod(name: str, mod: Callable, *args: torch.Tensor, sizes: tuple[int, ...]) -> object:
    """Call a mask_mod or score_mod on broadcasting index tensors, turning the errors a rule written
    for scalars raises into ones that say what went wrong (chapter 12)."""
    batch, heads, n, m = sizes
    try:
        return mod(*args)
    except IndexError as error:
        raise ValueError(
            f"{name} indexed out of range when called for batch = {batch}, heads = {heads}, n = {n} queries and "
            f"m = {m} keys (does a tensor it holds, such as document ids, cover that many tokens and sequences?): "
            f"{error}"
        ) from error
    except RuntimeError as error:
        if "ambiguous" not in str(error):
            raise
        raise TypeError(
            f"{name} used Python's and / or / if on its index tensors; combine them with tensor operations "
            f"(&, |, ~, torch.where) so that it works on whole tensors: {error}"
        ) from error


# M[b, h, i, j] = mask_mod(b, h, i, j)
def mask_from_mask_mod(
    mask_mod: MaskMod,
    n: int,
    m: int | None = None,
    *,
    batch: int = 1,
    heads: int = 1,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""The dense keep-mask of a mask function, :math:`M_{bhij} = \mathrm{mask\_mod}(b, h, i, j)` (chapter 12).

    ``mask_mod`` is called once, with index tensors shaped to broadcast (:func:`mod_indices`), as
    FlexAttention's ``create_mask`` does with ``torch.vmap``; the result is expanded to the full
    shape.

    Args:
        mask_mod: a function ``(b, h, q_idx, kv_idx) -> bool tensor``, True = may attend.
        n: number of queries.
        m: number of keys (defaults to ``n``).
        batch, heads: the sizes of the batch and head axes.
        device: where to evaluate the rule.

    Returns:
        A boolean tensor (batch, heads, n, m).
    """
    if not callable(mask_mod):
        raise TypeError(f"mask_mod must be a function mask_mod(b, h, q_idx, kv_idx), got {type(mask_mod).__name__}")
    m = n if m is None else m
    check_sizes(minimum=0, n=n, m=m)
    check_sizes(batch=batch, heads=heads)
    sizes = (batch, heads, n, m)
    keep = call_mod("mask_mod", mask_mod, *mod_indices(batch, heads, n, m, device), sizes=sizes)
    check_mod_output("mask_mod", keep, sizes, torch.bool)
    return keep.expand(sizes).clone()  # (batch, heads, n, m)


# M[..., i, j] = [j < p] or [j <= i]
def prefix_lm_mask(n: int, prefix_length: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    r"""The dense prefix-LM keep-mask (n, n), :math:`M_{ij} = [\,j < p\,] \vee [\,j \le i\,]` (chapter 12).

    The mask of :func:`prefix_lm_mask_mod`; ``prefix_length`` must lie in [0, n].
    """
    check_prefix_length(prefix_length, n)
    i = torch.arange(n, device=device)[:, None]  # (n, 1)
    j = torch.arange(n, device=device)[None, :]  # (1, n)
    return (j < prefix_length) | (j <= i)  # (n, n)
