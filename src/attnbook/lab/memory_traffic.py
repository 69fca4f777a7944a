r"""Bytes moved by one call, counted op by op at PyTorch's dispatcher (chapter 9).

:mod:`attnbook.lab.memory` measures the memory a call *holds* at its peak. This module counts the
bytes it *moves*: every ATen operation that runs during the call is taken to read each of its
input tensors once and to write each of its outputs once, and the bytes are summed,

.. math:: \text{read} = \sum_{\text{ops}} \sum_{\text{inputs } x} \operatorname{bytes}(x), \qquad
          \text{written} = \sum_{\text{ops}} \sum_{\text{outputs } y} \operatorname{bytes}(y).

That is the traffic between the kernels and memory when nothing stays in a cache between two
operations, the usual first-order model of a memory-bound step such as decoding one token.

What it counts and what it does not:

* A view (``view``, ``transpose``, ``expand``, ``unsqueeze``, ...) moves nothing: its output shares
  the storage of its input. An operation counts as a view when PyTorch marks it as one, or when
  every output shares storage with an input and the operation is not in-place (``_unsafe_view``).
* An input that is an ``expand`` of a smaller tensor (a stride of 0) is counted at the size of the
  memory it addresses, not at its broadcast size (:func:`tensor_bytes`).
* It sees ATen operations, below autograd and after composite operations such as ``matmul`` or
  ``repeat_interleave`` have been decomposed; what one kernel does inside (re-reading a tile,
  caching) is invisible. A fused kernel counts once for its inputs and outputs, which is what it
  is designed to do.

The counter is a :class:`torch.utils._python_dispatch.TorchDispatchMode`, a private but long-lived
PyTorch interface (the one ``FlopCounterMode`` builds on); it works on any device and dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["ByteCounter", "OpTraffic", "Traffic", "bytes_moved", "tensor_bytes"]


# bytes(x) = element size * prod(size_d for every axis d with stride_d != 0)
def tensor_bytes(tensor: torch.Tensor) -> int:
    """The bytes of memory a tensor addresses: its elements times their size, except that an axis
    with stride 0 (an ``expand``, a broadcast) counts once.

    A tensor (n, d) expanded to (b, n, d) addresses the n d elements of the original, not b n d.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.numel() == 0:
        return 0
    elements = 1
    for size, stride in zip(tensor.shape, tensor.stride()):
        if stride != 0:
            elements *= size
    return elements * tensor.element_size()


@dataclass(frozen=True)
class OpTraffic:
    """The bytes one ATen operation read (all its inputs) and wrote (all its outputs)."""

    op: str
    read: int
    written: int


@dataclass(frozen=True)
class Traffic:
    """The bytes a call moved: ``read``, ``written``, their sum ``total``, and ``ops``, one
    :class:`OpTraffic` per operation that moved data, in the order they ran (views left out)."""

    read: int
    written: int
    ops: tuple[OpTraffic, ...]

    @property
    def total(self) -> int:
        return self.read + self.written


def _storage_id(tensor: torch.Tensor) -> int | None:
    """The identity of the storage a tensor lives in (the same for a tensor and its views, also on
    the meta device, where every data pointer is 0); None for a tensor without storage."""
    try:
        return tensor.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):  # e.g. some tensor subclasses
        return None


def _is_view(func, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> bool:
    """True when ``func`` only re-describes memory: marked as a view, or every output aliases an
    input and the operation writes nothing in place."""
    if getattr(func, "is_view", False):
        return True
    if not outputs or func._schema.is_mutable:
        return False
    storages = {_storage_id(x) for x in inputs} - {None}
    return all(_storage_id(y) in storages for y in outputs)


class ByteCounter(TorchDispatchMode):
    """A dispatch mode that records, for every ATen operation run under it, the bytes of its
    inputs (read) and outputs (written); views move nothing. See the module docstring.

    ``with ByteCounter() as counter: fn()``, then ``counter.traffic()``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[OpTraffic] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = {} if kwargs is None else kwargs
        out = func(*args, **kwargs)
        inputs = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        outputs = [y for y in tree_leaves(out) if isinstance(y, torch.Tensor)]
        if not _is_view(func, inputs, outputs):
            read = sum(tensor_bytes(x) for x in inputs)
            written = sum(tensor_bytes(y) for y in outputs)
            self.ops.append(OpTraffic(str(func.overloadpacket.__name__), read, written))
        return out

    def traffic(self) -> Traffic:
        """The bytes counted so far."""
        return Traffic(sum(op.read for op in self.ops), sum(op.written for op in self.ops), tuple(self.ops))


def bytes_moved(fn: Callable[[], object]) -> Traffic:
    """The bytes ``fn()`` reads and writes, summed over the ATen operations it runs (chapter 9).

    Shape legend for the chapter's use: one decoding step of attention, a query (batch, H_q, 1,
    d_head) against a cache of keys and values (batch, H_kv, m, d_head); the result counts every
    read of the cache, of any copy of it, and of the scores (batch, H_q, 1, m).

    Args:
        fn: a function of no arguments, e.g. ``lambda: grouped_query_attention(q, k, v)``.

    Returns:
        A :class:`Traffic`: ``read``, ``written``, ``total`` bytes and the operations.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with ByteCounter() as counter:
        fn()
    return counter.traffic()
