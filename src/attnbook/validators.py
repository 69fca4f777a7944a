r"""Argument checks for the public functions of attnbook: bad input becomes an error a student can read.

A public function calls a validator first, once, and then computes: a wrong shape, dtype or device
is reported with the names and shapes involved (``ValueError``/``TypeError``) instead of a
traceback from inside torch, and the rest of the function is its formula. The shape of each tensor
is written as in the docstrings' shape legends::

    check_shapes(query=(query, "(..., n, d_k)"), key=(key, "(..., m, d_k)"), value=(value, "(..., m, d_v)"))

A name is a size that must agree wherever it appears in one call, a number a fixed size,
``a * b`` a product of sizes, and a leading ``...`` any batch dimensions (they must broadcast).
Sizes known in advance are passed by name: ``check_shapes(x=(x, "(..., n, num_heads * d_head)"),
num_heads=4)``.

A function that has checked its inputs and then calls other public functions on tensors it made
itself (:class:`attnbook.MultiHeadAttention`) runs those calls inside :func:`skip_checks`, so
each input is checked once per call.

The validators:

* :func:`check_shapes`: tensors, their dtypes (floating, boolean or any), one dtype and one
  device for all, the number of dimensions, the sizes that must agree, broadcastable batches;
* :func:`check_sizes`, :func:`check_divisible`, :func:`check_index`: counts, widths and indices (ints);
* :func:`check_number`, :func:`check_reals`, :func:`check_dtype`, :func:`check_type`,
  :func:`check_one_of`, :func:`check_values`: other arguments;
* :func:`check_lengths`, :func:`check_permutation`: lists of indices;
* :func:`check_document_lengths`, :func:`check_cu_seqlens`, :func:`check_document_ids`,
  :func:`check_prefix_length`, :func:`check_mod_output`: packed documents and masks as programs (chapter 12);
* :func:`check_column_convention_heads`: the heads of :func:`attnbook.core.column_convention.mh_attention`;
* :func:`check_latent_width`, :func:`check_rotary_width`, :func:`check_sink_window`,
  :func:`check_sink_logits`: the sizes of chapter 13's latent attention, sinks and streaming cache;
* :func:`check_chunk_size`, :func:`check_log_gates`, :func:`check_gates`: chapter 14's chunks and
  gates (linear attention, decay, the delta rule);
* :func:`check_beta`: the step sizes of chapter 14's delta rule;
* :func:`skip_checks`: switch the validators off for the calls inside a block (:func:`checks_skipped`
  says whether they are off, for checks written elsewhere).

Checking a mask is :func:`attnbook.core.masks.check_mask` (masks have one home), and checking the
inputs of attention :func:`attnbook.core.attention.check_attention_inputs`.

``check_tensor``, ``check_floating``, ``check_ndim``, ``check_same_dtype_device`` and
``broadcast_batch`` are the pieces :func:`check_shapes` is made of, for checks it does not cover.
"""

from __future__ import annotations

import contextvars
import functools
import math
from collections.abc import Sequence

import torch

__all__ = [
    "check_shapes",
    "check_sizes",
    "check_divisible",
    "check_index",
    "check_number",
    "check_reals",
    "check_dtype",
    "check_type",
    "check_one_of",
    "check_values",
    "check_lengths",
    "check_permutation",
    "check_document_lengths",
    "check_cu_seqlens",
    "check_document_ids",
    "check_prefix_length",
    "check_mod_output",
    "check_column_convention_heads",
    "check_latent_width",
    "check_rotary_width",
    "check_sink_window",
    "check_sink_logits",
    "check_chunk_size",
    "check_log_gates",
    "check_gates",
    "check_beta",
    "skip_checks",
    "checks_skipped",
    # the pieces of check_shapes
    "check_tensor",
    "check_floating",
    "check_ndim",
    "check_same_dtype_device",
    "broadcast_batch",
]

_SKIPPING = contextvars.ContextVar("attnbook_skip_checks", default=False)


class skip_checks:
    """``with skip_checks():`` the tensor validators (:func:`check_shapes`,
    :func:`attnbook.core.masks.check_mask`, :func:`attnbook.core.attention.check_attention_inputs`) do nothing inside the block (in this thread or task).

    For a public function that has checked its own inputs and then calls other public functions
    on tensors it computed from them, whose shapes are right by construction.
    """

    def __enter__(self) -> None:
        self._token = _SKIPPING.set(True)

    def __exit__(self, *exc: object) -> None:
        _SKIPPING.reset(self._token)


def checks_skipped() -> bool:
    """Whether the calls now running are inside :func:`skip_checks` (in this thread or task)."""
    return _SKIPPING.get()


# ---------------------------------------------------------------- the pieces


def check_tensor(name: str, x: object) -> torch.Tensor:
    """Raise ``TypeError`` unless ``x`` is a ``torch.Tensor``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_floating(name: str, x: object) -> torch.Tensor:
    """Raise ``TypeError`` unless ``x`` is a tensor with a floating-point dtype."""
    check_tensor(name, x)
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating-point dtype, got {x.dtype} with shape {tuple(x.shape)}")
    return x


def check_ndim(name: str, x: torch.Tensor, ndim: int, layout: str, *, at_least: bool = False, hint: str = "") -> None:
    """Raise ``ValueError`` unless ``x`` has ``ndim`` dimensions (or at least that many)."""
    if x.ndim < ndim if at_least else x.ndim != ndim:
        need = "at least" if at_least else "exactly"
        raise ValueError(f"{name} must have {need} {ndim} dimensions {layout}, got shape {tuple(x.shape)}{hint}")


def check_same_dtype_device(**tensors: torch.Tensor | None) -> None:
    """Raise ``TypeError`` on mixed dtypes and ``ValueError`` on mixed devices (None is skipped)."""
    items = [(k, v) for k, v in tensors.items() if v is not None]
    if len({v.dtype for _, v in items}) > 1:
        listing = ", ".join(f"{k}: {v.dtype}" for k, v in items)
        raise TypeError(f"all inputs must share one dtype, got {listing}")
    _check_same_device(items)


def _check_same_device(items: list[tuple[str, torch.Tensor]]) -> None:
    if len({v.device for _, v in items}) > 1:
        listing = ", ".join(f"{k}: {v.device}" for k, v in items)
        raise ValueError(f"all inputs must be on one device, got {listing}")


def broadcast_batch(**shapes: Sequence[int]) -> torch.Size:
    """Broadcast the leading (batch) dimensions of several inputs, or say which ones clash."""
    try:
        return torch.broadcast_shapes(*shapes.values())
    except RuntimeError:
        listing = ", ".join(f"{k} batch dims {tuple(v)}" for k, v in shapes.items())
        raise ValueError(f"batch dimensions do not broadcast: {listing}") from None


# ---------------------------------------------------------------- shapes

# Words for the sizes whose letter alone says little in an error message.
_SIZE_NAMES = {"batch": "the same batch size", "m": "the same number m of tokens", "h": "the same hidden width h"}
_KINDS = ("floating", "bool", "any")


@functools.cache
def _parse(spec: str) -> tuple[bool, tuple[str | tuple[str | int, ...], ...]]:
    """``"(..., n, heads * d_head)"`` -> ``(True, ("n", ("heads", "d_head")))``: a name, or a product's factors."""
    items = [s.strip() for s in spec.strip().removeprefix("(").removesuffix(")").split(",")]
    items = [s for s in items if s]
    batch = bool(items) and items[0] == "..."
    dims = []
    for item in items[batch:]:
        factors = tuple(int(f) if f.isdigit() else f for f in (g.strip() for g in item.split("*")))
        dims.append(factors[0] if len(factors) == 1 and isinstance(factors[0], str) else factors)
    return batch, tuple(dims)


def check_shapes(**arguments: tuple | int | None) -> None:
    """Check tensors against shape specs and each other, in one call (see the module docstring).

    Each tensor argument is ``name=(tensor, spec)`` or ``name=(tensor, spec, kind)``, with kind
    ``"floating"`` (the default), ``"bool"`` or ``"any"``; a ``None`` tensor (an optional bias) is
    skipped. Each int argument ``name=size`` is a known size (a positive int). In this order:

    * ``TypeError`` unless each tensor is a ``torch.Tensor`` of its kind, and all floating ones
      share one dtype; ``ValueError`` unless all share one device;
    * ``ValueError`` unless each has the number of dimensions of its spec (at least, with ``...``),
      the batch dimensions of those with ``...`` broadcast, and each named size agrees everywhere.
    """
    if _SKIPPING.get():
        return
    tensors, known = [], {}
    for name, arg in arguments.items():
        if not isinstance(arg, tuple):
            known[name] = arg
        elif arg[0] is not None:
            x, spec, kind = (*arg, "floating")[:3]
            _check_kind(name, x, kind)
            tensors.append((name, x, spec))
    check_sizes(**known)
    if len({x.dtype for _, x, _ in tensors if x.is_floating_point()}) > 1:
        check_same_dtype_device(**{name: x for name, x, _ in tensors if x.is_floating_point()})
    if len({x.device for _, x, _ in tensors}) > 1:
        _check_same_device([(name, x) for name, x, _ in tensors])

    batches, sizes, source = {}, dict(known), {}
    for name, x, spec in tensors:
        has_batch, dims = _parse(spec)
        shape, ndim = tuple(x.shape), len(dims)
        if len(shape) < ndim if has_batch else len(shape) != ndim:
            one_short = dims and dims[0] == "batch" and len(shape) == ndim - 1
            hint = f"; for one sequence, add a batch axis: {name}[None]" if one_short else ""
            check_ndim(name, x, ndim, spec, at_least=has_batch, hint=hint)
        if has_batch:
            batches[name] = shape[: len(shape) - ndim]
        for d, size in zip(dims, shape[len(shape) - ndim :]):
            if not isinstance(d, str):
                _bind_product(d, size, name, x, spec, sizes, source, tensors)
            elif sizes.setdefault(d, size) != size:  # a named size: the first tensor that has it sets it
                _size_error(d, (d,), sizes[d], name, x, spec, source, tensors)
            else:
                source.setdefault(d, name)
    if len(batches) > 1 and len(set(batches.values())) > 1:
        broadcast_batch(**batches)


def _check_kind(name: str, x: object, kind: str) -> None:
    if kind == "floating":
        check_floating(name, x)
    elif kind == "bool":
        check_tensor(name, x)
        if x.dtype != torch.bool:
            raise TypeError(
                f"{name} must be a boolean tensor, got dtype {x.dtype} with shape {tuple(x.shape)}; a {{0, 1}} "
                f"mask becomes boolean with mask.bool(), an additive one with additive_to_keep"
            )
    elif kind == "any":
        check_tensor(name, x)
    else:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")


def _bind_product(factors, size, name, x, spec, sizes, source, tensors) -> None:
    """Check the size of an axis whose spec is a product (``heads * d_head``), or learn its one unknown factor."""
    label = " * ".join(map(str, factors))
    unknown = [f for f in factors if isinstance(f, str) and f not in sizes]
    known_part = math.prod(sizes.get(f, f) for f in factors if f not in unknown)
    if len(unknown) == 1 and known_part:
        if size % known_part:
            names = " * ".join(
                f"{f} = {sizes[f]}" if isinstance(f, str) else str(f) for f in factors if f not in unknown
            )
            raise ValueError(f"{name} {spec}: {label} = {size} is not divisible by {names}")
        sizes[unknown[0]], source[unknown[0]] = size // known_part, name
        return
    if unknown:  # several unknown factors: the product is a size of its own
        expected = sizes.setdefault(label, size)
        source.setdefault(label, name)
    else:
        expected = known_part
    if size != expected:
        _size_error(label, factors, expected, name, x, spec, source, tensors)


def _size_error(label, factors, expected, name, x, spec, source, tensors) -> None:
    """Raise the ``ValueError`` for an axis of ``x`` whose size is not the ``expected`` one."""
    meaning = f" ({_SIZE_NAMES[label]})" if label in _SIZE_NAMES else ""
    first = next((source[f] for f in (label, *factors) if f in source), None)
    if first is None:  # every factor was given by value
        raise ValueError(f"{name} {spec} must have {label} = {expected}{meaning}, got shape {tuple(x.shape)}")
    shown = label if len(factors) == 1 else f"{label} = {expected}"
    if first == name:
        raise ValueError(
            f"{name} {spec} must have the same {label} on each axis that has it, got shape {tuple(x.shape)}"
        )
    _, other, other_spec = next(t for t in tensors if t[0] == first)
    raise ValueError(
        f"{first} {other_spec} and {name} {spec} must share {shown}{meaning}, got {first} {tuple(other.shape)} "
        f"and {name} {tuple(x.shape)}"
    )


# ---------------------------------------------------------------- masks and attention


# ---------------------------------------------------------------- the cache at scale (chapter 13)


def check_latent_width(d_latent: object, d_model: object, name: str = "d_latent") -> None:
    """Raise ``ValueError`` unless the latent width is a positive int no wider than the model: a
    latent as wide as d_model compresses nothing, a wider one stores more than the input itself."""
    check_sizes(**{name: d_latent}, d_model=d_model)
    if d_latent > d_model:
        raise ValueError(
            f"{name} = {d_latent} is wider than the model (d_model = {d_model}); the latent compresses the "
            f"token's d_model features, so {name} must be at most {d_model}"
        )


def check_rotary_width(d_rope: object, d_head: object, name: str = "d_rope") -> None:
    """Raise ``ValueError`` unless the rotary width is a positive even int no wider than a head's
    width ``d_head`` (the rotary features are rotated in pairs and sit beside the head's own)."""
    check_sizes(**{name: d_rope}, d_head=d_head)
    if d_rope % 2:
        raise ValueError(f"{name} = {d_rope} is odd; rotary features are rotated in pairs, so {name} must be even")
    if d_rope > d_head:
        raise ValueError(
            f"{name} = {d_rope} is wider than a head (d_head = {d_head}); the rotary part of a query or key "
            f"is a small addition to the head's d_head features, at most {d_head} wide"
        )


def check_sink_window(window: object, num_sinks: object) -> None:
    """Raise ``ValueError`` unless ``window`` (the keys a query sees, sink tokens included) is larger
    than ``num_sinks`` (the first tokens kept for ever): the query itself needs a place beside them."""
    check_sizes(window=window)
    check_sizes(minimum=0, num_sinks=num_sinks)
    if window <= num_sinks:
        raise ValueError(
            f"window = {window} keys must exceed num_sinks = {num_sinks}: the window holds the {num_sinks} sink "
            f"tokens and at least the current token, so window >= {num_sinks + 1}"
        )


def check_sink_logits(sinks: object, num_heads: int, scores_shape: Sequence[int] | None = None) -> None:
    """Raise ``TypeError`` unless ``sinks`` is a floating tensor, ``ValueError`` unless it holds one
    logit per head, shape (num_heads,) (``scores_shape`` (..., H, n, m) names the scores it joins)."""
    check_floating("sinks", sinks)
    if tuple(sinks.shape) != (num_heads,):
        scores = f" for scores of shape {tuple(scores_shape)} (..., H, n, m)" if scores_shape is not None else ""
        raise ValueError(
            f"sinks must hold one logit per head, shape ({num_heads},){scores}, got shape {tuple(sinks.shape)}"
        )


# ---------------------------------------------------------------- packed documents (chapter 12)


def _shown(values: Sequence[int], limit: int = 16) -> str:
    """A list of ints for a message, cut after ``limit`` entries."""
    values = list(values)
    if len(values) <= limit:
        return str(values)
    return f"[{', '.join(map(str, values[:limit]))}, ...] ({len(values)} entries)"


def check_document_lengths(lengths: object, n: object = None) -> None:
    """Check the lengths of the documents packed into one row (chapter 12): a list of ints or a 1-D
    integer tensor, every length >= 1, summing to ``n`` when it is given.

    A zero or negative length is refused: a document holds at least one token (an empty one has no
    token to carry its id, and would give two equal offsets in ``cu_seqlens``); drop empty documents
    before packing. Lengths that do not sum to the row's ``n`` are refused too: packed documents fill
    their row exactly (pad with a document of its own).
    """
    _check_int_vector("lengths", lengths)
    values = lengths.tolist() if isinstance(lengths, torch.Tensor) else list(lengths)
    check_sizes(minimum=0, n=n)
    bad = [(d, x) for d, x in enumerate(values) if x < 1]
    if bad:
        d, x = bad[0]
        raise ValueError(
            f"every document length must be >= 1 (a document holds at least one token; drop empty documents "
            f"before packing), got lengths {_shown(values)} with lengths[{d}] = {x}"
        )
    if n is not None and sum(values) != n:
        fix = f" (pad the row with a document of its own: lengths + [{n - sum(values)}])" if sum(values) < n else ""
        raise ValueError(
            f"the document lengths {_shown(values)} sum to {sum(values)}, but the row has n = {n} tokens: packed "
            f"documents must fill the row exactly{fix}"
        )


def check_cu_seqlens(cu_seqlens: object, n: object = None) -> None:
    """Check cumulative sequence lengths, the variable-length layout of FlashAttention's varlen API
    (chapter 12): a 1-D int32 (or int64) tensor of D + 1 offsets, starting at 0 and strictly
    increasing (every document holds at least one token), ending at ``n`` when it is given."""
    if _SKIPPING.get():
        return
    check_tensor("cu_seqlens", cu_seqlens)
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(
            f"cu_seqlens must be an int32 tensor (the offsets of FlashAttention's varlen layout; int64 is "
            f"accepted too), got dtype {cu_seqlens.dtype} with shape {tuple(cu_seqlens.shape)}"
        )
    if cu_seqlens.ndim != 1 or cu_seqlens.numel() == 0:
        raise ValueError(
            f"cu_seqlens must be 1-D with D + 1 >= 1 entries (0, then the end of each of the D documents), "
            f"got shape {tuple(cu_seqlens.shape)}"
        )
    check_sizes(minimum=0, n=n)
    values = cu_seqlens.tolist()
    if values[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0 (the offset of the first document), got {_shown(values)}")
    for d in range(1, len(values)):
        if values[d] <= values[d - 1]:
            raise ValueError(
                f"cu_seqlens must increase strictly (every document holds at least one token), got "
                f"{_shown(values)}: cu_seqlens[{d}] = {values[d]} is not above cu_seqlens[{d - 1}] = {values[d - 1]}"
            )
    if n is not None and values[-1] != n:
        raise ValueError(f"cu_seqlens {_shown(values)} ends at {values[-1]}, but the row has n = {n} tokens")


def check_document_ids(document_ids: object) -> None:
    """Check document ids (chapter 12): an integer tensor (..., n), one id per token, in which every
    document is one contiguous run of tokens in each row (an id that reappears after another
    document is refused: the documents of a packed row do not interleave). The ids themselves may be
    any integers."""
    if _SKIPPING.get():
        return
    check_tensor("document_ids", document_ids)
    if document_ids.is_floating_point() or document_ids.is_complex() or document_ids.dtype == torch.bool:
        raise TypeError(
            f"document_ids must be an integer tensor (one document id per token), got dtype {document_ids.dtype} "
            f"with shape {tuple(document_ids.shape)}"
        )
    check_ndim("document_ids", document_ids, 1, "(..., n)", at_least=True)
    if document_ids.shape[-1] < 2:
        return
    changes = document_ids[..., 1:] != document_ids[..., :-1]  # (..., n - 1): a new run starts at i + 1
    runs = 1 + changes.sum(dim=-1)  # (...,)
    ordered = document_ids.sort(dim=-1).values  # (..., n)
    distinct = 1 + (ordered[..., 1:] != ordered[..., :-1]).sum(dim=-1)  # (...,)
    broken = (runs != distinct).nonzero()
    if len(broken):
        row = tuple(broken[0].tolist())
        ids = document_ids[row].tolist()
        seen, where = set(), ""
        for i, x in enumerate(ids):
            if x in seen and x != ids[i - 1]:
                where = f"document {x} appears again at position {i}, after document {ids[i - 1]}"
                break
            seen.add(x)
        in_row = f" in row {row[0] if len(row) == 1 else row}" if row else ""
        raise ValueError(
            f"document ids must be contiguous (each document one run of tokens), but{in_row} {where}: "
            f"ids {_shown(ids)} of shape {tuple(document_ids.shape)}"
        )


def check_prefix_length(prefix_length: object, n: object = None) -> None:
    """Check the prefix of a prefix-LM mask (chapter 12): an int in [0, n] (0 is the causal mask, n a
    bidirectional row)."""
    check_sizes(minimum=0, prefix_length=prefix_length)
    check_sizes(minimum=0, n=n)
    if n is not None and prefix_length > n:
        raise ValueError(f"prefix_length = {prefix_length} is longer than the row (n = {n} tokens)")


def check_mask_mods(combiner: str, mask_mods: Sequence[object]) -> None:
    """Raise ``ValueError`` unless ``combiner`` (``and_masks``, ``or_masks``) got at least one rule, and
    ``TypeError`` naming the first one that is not a function ``mask_mod(b, h, q_idx, kv_idx)``."""
    if not mask_mods:
        raise ValueError(f"{combiner} needs at least one mask_mod")
    for k, mod in enumerate(mask_mods):
        if not callable(mod):
            raise TypeError(
                f"mask_mods[{k}] must be a function mask_mod(b, h, q_idx, kv_idx), got {type(mod).__name__}"
            )


def check_mod_output(name: str, out: object, shape: Sequence[int], dtype: torch.dtype) -> None:
    """Check what a ``mask_mod`` or ``score_mod`` returned (chapter 12): a tensor of ``dtype`` (boolean
    for a mask_mod, the scores' dtype for a score_mod) that broadcasts to ``shape`` = (batch, heads,
    n, m) without enlarging it."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(
            f"{name} must return a tensor (it is called with index tensors b, h, q_idx, kv_idx and combines them "
            f"with tensor operations such as >=, & and |), got {type(out).__name__}"
        )
    if out.dtype != dtype:
        raise TypeError(f"{name} must return a tensor of dtype {dtype}, got {out.dtype} with shape {tuple(out.shape)}")
    fits = out.ndim <= len(shape) and all(a in (b, 1) for a, b in zip(reversed(out.shape), reversed(shape)))
    if not fits:
        raise ValueError(
            f"{name} returned shape {tuple(out.shape)}, which does not broadcast to (batch, heads, n, m) = "
            f"{tuple(shape)} without enlarging it"
        )


# ---------------------------------------------------------------- linear attention (chapter 14)


def check_chunk_size(chunk_size: object) -> None:
    """Raise ``TypeError`` unless ``chunk_size`` is an int (None refused), ``ValueError`` unless it is
    at least 1: the number of tokens per chunk of a chunkwise form (the last chunk may be shorter)."""
    if chunk_size is None:
        raise TypeError("chunk_size must be an int (tokens per chunk, >= 1), got NoneType")
    check_sizes(chunk_size=chunk_size)


def _first_bad(bad: torch.Tensor, x: torch.Tensor) -> str:
    """``"found 0.3 at index (1, 4)"``: the first entry of ``x`` where ``bad`` holds, for a message."""
    where = tuple(bad.nonzero()[0].tolist())
    count = int(bad.sum())
    more = f" ({count} entries in all)" if count > 1 else ""
    return f"found {x[where].item():.6g} at index {where}{more}"


def check_log_gates(log_gates: object, name: str = "log_gates") -> None:
    """Check log gates (chapter 14): a floating tensor (..., n) of log a_t with every gate
    a_t = exp(log a_t) in (0, 1], so every entry in (-inf, 0]; ``ValueError`` names the first
    entry that is NaN, positive (a gate above 1 makes the state grow without bound) or -inf (a gate of
    exactly 0; use a large negative finite log gate). Shapes are :func:`check_shapes`' business."""
    check_floating(name, log_gates)
    check_ndim(name, log_gates, 1, "(..., n)", at_least=True)
    if _SKIPPING.get():
        return
    for bad, what in (
        (torch.isnan(log_gates), "NaN"),
        (log_gates > 0, "a positive entry (a gate exp(log a_t) > 1)"),
        (log_gates == -math.inf, "-inf (a gate of exactly 0)"),
    ):
        if bool(bad.any()):
            raise ValueError(
                f"{name} (..., n) must lie in (-inf, 0] (gates a_t = exp({name}_t) in (0, 1]), but it holds "
                f"{what}: {_first_bad(bad, log_gates)} in shape {tuple(log_gates.shape)}"
            )


def check_gates(gates: object, name: str = "gates") -> None:
    """Check gates in linear space (chapter 14): a floating tensor (..., n) with every entry in (0, 1];
    ``ValueError`` names the first entry that is NaN, at most 0 or above 1."""
    check_floating(name, gates)
    check_ndim(name, gates, 1, "(..., n)", at_least=True)
    if _SKIPPING.get():
        return
    bad = torch.isnan(gates) | (gates <= 0) | (gates > 1)
    if bool(bad.any()):
        raise ValueError(
            f"{name} (..., n) must lie in (0, 1] (a decay per token), but {_first_bad(bad, gates)} in shape "
            f"{tuple(gates.shape)}"
        )


def check_beta(beta: object, name: str = "beta") -> None:
    r"""Check the step sizes of the delta rule (chapter 14): a floating tensor (...) or (..., n) with every
    entry in [0, 2]; ``ValueError`` names the first entry that is NaN or outside.

    Why [0, 2]: a delta-rule step is one gradient step on :math:`\frac12 \|kS - v\|^2`, whose curvature
    along k is :math:`|k|^2`; with a unit key (the l2-normalised keys of DeltaNet and Qwen3-Next) the
    step multiplies the state by :math:`I - \beta k^\top k`, with eigenvalues 1 and :math:`1 - \beta`.
    For :math:`\beta` in [0, 2] both lie in [-1, 1], so the step never amplifies the state (gradient
    descent on a quadratic is stable exactly for steps up to 2 / curvature); outside, the state can
    grow without bound. Models produce beta in (0, 1) (a sigmoid) or (0, 2) (2 sigmoid, to allow
    negative eigenvalues); 0 leaves the state unchanged and 1 overwrites the value stored at a unit key."""
    check_floating(name, beta)
    if _SKIPPING.get():
        return
    bad = torch.isnan(beta) | (beta < 0) | (beta > 2)
    if bool(bad.any()):
        raise ValueError(
            f"{name} must lie in [0, 2] (the step size of a delta-rule update: I - {name} k^T k must not "
            f"amplify the state for a unit key k), but {_first_bad(bad, beta)} in shape {tuple(beta.shape)}"
        )


# ---------------------------------------------------------------- other arguments


def check_sizes(*, minimum: int = 1, **sizes: object) -> None:
    """Raise ``TypeError`` unless each size (None is skipped) is an int, ``ValueError`` unless it is
    at least ``minimum`` (1: a positive int; 0: a count that may be empty)."""
    for name, value in sizes.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < minimum:
            need = "> 0 (a positive int)" if minimum == 1 else f">= {minimum}"
            raise ValueError(f"{name} must be {need}, got {value}")


def check_index(name: str, value: object, size: int, what: str = "an int") -> None:
    """Raise ``ValueError`` unless ``value`` is an int in [0, size) (a layer, a head, a token id)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
        raise ValueError(f"{name} must be {what} in [0, {size}), got {value!r}")


def check_divisible(name: str, value: int, by: int, by_name: str | None = None, why: str = "") -> None:
    """Raise ``ValueError`` unless ``by`` divides ``value`` (say ``why`` it must)."""
    if value % by:
        why = f" ({why})" if why else ""
        if by_name is None and by == 2:
            raise ValueError(f"{name} must be even{why}, got {value}")
        raise ValueError(f"{name} = {value} is not divisible by {by_name or by} = {by}{why}")


def check_number(name: str, value: object, *, minimum: float | None = None, positive: bool = False) -> float:
    """Raise ``ValueError`` unless ``value`` is a finite real number (``>= minimum``; ``> 0`` if
    ``positive``)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (minimum is None or value >= minimum) and (not positive or value > 0)
    if not ok:
        need = " > 0" if positive else "" if minimum is None else f" >= {minimum:g}"
        raise ValueError(f"{name} must be a finite number{need}, got {value!r}")
    return value


def check_reals(*, finite: bool = False, tensors: bool = True, **values: object) -> None:
    """Raise ``TypeError`` unless each value is a real number (finite if asked) or, if ``tensors``, a
    real (not boolean or complex) tensor; ``ValueError`` unless their shapes broadcast together."""
    for name, x in values.items():
        if isinstance(x, torch.Tensor) and tensors:
            if x.dtype == torch.bool or x.is_complex():
                raise TypeError(f"{name} must be a real tensor, got {x.dtype}")
        elif isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError(f"{name} must be a number{' or a tensor' if tensors else ''}, got {type(x).__name__}")
        elif finite and not math.isfinite(x):
            raise TypeError(f"{name} must be a finite number, got {x!r}")
    shapes = {name: tuple(getattr(x, "shape", ())) for name, x in values.items()}
    try:
        torch.broadcast_shapes(*shapes.values())
    except RuntimeError:
        raise ValueError(" and ".join(f"{k} {v}" for k, v in shapes.items()) + " do not broadcast") from None


def check_dtype(dtype: object, name: str = "dtype") -> None:
    """Raise ``TypeError`` unless ``dtype`` is None or a floating-point ``torch.dtype``."""
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"{name} must be a floating-point torch.dtype, got {dtype!r}")


def check_type(name: str, value: object, kind: type, what: str | None = None) -> None:
    """Raise ``TypeError`` unless ``value`` is a ``kind`` (called ``what`` in the message)."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be a {what or kind.__name__}, got {type(value).__name__}")


def check_one_of(name: str, value: object, choices: Sequence[object]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def check_values(name: str, x: torch.Tensor, allowed: Sequence[float], why: str = "") -> None:
    """Raise ``ValueError`` unless every entry of ``x`` is one of ``allowed`` (say ``why``)."""
    ok = torch.zeros_like(x, dtype=torch.bool)
    for a in allowed:
        ok |= x == a
    if not bool(ok.all()):
        listing = " and ".join(f"{a:g}" for a in allowed)
        raise ValueError(f"{name} must contain only {listing}{why}; found other values such as {x[~ok][:3].tolist()}")


def _check_int_vector(name: str, values: object) -> None:
    """Raise ``TypeError`` unless ``values`` is a 1-D integer tensor or a sequence of ints."""
    if isinstance(values, torch.Tensor):
        if values.ndim != 1 or values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
            raise TypeError(
                f"{name} must be a 1-D integer tensor or a list of ints, got dtype {values.dtype} "
                f"and shape {tuple(values.shape)}"
            )
    elif not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise TypeError(f"{name} must be a 1-D integer tensor or a list of ints, got {list(values)!r}")


def check_lengths(lengths: object, max_len: object) -> None:
    """Check the sequence lengths of a padding mask: a 1-D integer tensor or a list of ints, each
    in [0, max_len] (``max_len`` None: any)."""
    if isinstance(lengths, torch.Tensor):
        _check_int_vector("lengths", lengths)
        values = lengths.tolist()
    else:
        values = list(lengths)
        check_sizes(minimum=0, **{f"lengths[{b}]": x for b, x in enumerate(values)})
    check_sizes(minimum=0, max_len=max_len)
    if values and (min(values) < 0 or (max_len is not None and max(values) > max_len)):
        raise ValueError(f"every length must lie in [0, max_len={max_len}], got {values}")


def check_permutation(perm: object) -> None:
    """Raise ``TypeError`` unless ``perm`` is a 1-D integer tensor or a list of ints, ``ValueError``
    unless it holds each of 0..n-1 exactly once."""
    _check_int_vector("perm", perm)
    values = perm.tolist() if isinstance(perm, torch.Tensor) else list(perm)
    if sorted(values) != list(range(len(values))):
        raise ValueError(f"perm must contain each of 0..{len(values) - 1} exactly once, got {values}")


def check_column_convention_heads(heads: Sequence[Sequence[object]], W_o: object, b_o: object) -> None:
    """Check the heads of :func:`attnbook.core.column_convention.mh_attention`: H >= 1 tuples (W_q, b_q, W_k, b_k, W_v,
    b_v), whose W_v (d_mid_h, d_z) gives the value width of head h; W_o either the list of the H
    blocks (d_out, d_mid_h) or their concatenation (d_out, sum of d_mid_h); b_o (d_out,). (Each
    head's own weights are checked by :func:`attnbook.core.column_convention.attention`.)"""
    if not heads:
        raise ValueError("heads must hold at least one (W_q, b_q, W_k, b_k, W_v, b_v) tuple")
    for h, params in enumerate(heads):
        if len(params) != 6:
            raise ValueError(f"heads[{h}] must be (W_q, b_q, W_k, b_k, W_v, b_v), got {len(params)} items")
        check_shapes(**{f"heads[{h}] W_v": (params[4], "(d_mid, d_z)")})
    d_mid = [params[4].shape[0] for params in heads]
    if isinstance(W_o, torch.Tensor):
        check_shapes(W_o=(W_o, "(d_out, H * d_mid)"), b_o=(b_o, "(d_out,)"))
        if W_o.shape[1] != sum(d_mid):
            raise ValueError(
                f"W_o has shape {tuple(W_o.shape)} but the {len(heads)} heads output {sum(d_mid)} rows "
                f"in total (value widths {d_mid})"
            )
        return
    if len(W_o) != len(heads):
        raise ValueError(f"got {len(W_o)} output matrices W_o^h for {len(heads)} heads")
    check_shapes(
        b_o=(b_o, "(d_out,)"),
        **{f"W_o[{h}]": (W, f"(d_out, d_mid_{h})") for h, W in enumerate(W_o)},
        **{f"d_mid_{h}": d for h, d in enumerate(d_mid)},
    )
