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
* :func:`check_formal_heads`: the heads of :func:`attnbook.core.formal.mh_attention`;
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
    "check_formal_heads",
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


def check_formal_heads(heads: Sequence[Sequence[object]], W_o: object, b_o: object) -> None:
    """Check the heads of :func:`attnbook.core.formal.mh_attention`: H >= 1 tuples (W_q, b_q, W_k, b_k, W_v,
    b_v), whose W_v (d_mid_h, d_z) gives the value width of head h; W_o either the list of the H
    blocks (d_out, d_mid_h) or their concatenation (d_out, sum of d_mid_h); b_o (d_out,). (Each
    head's own weights are checked by :func:`attnbook.core.formal.attention`.)"""
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
