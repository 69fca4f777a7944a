"""Peak memory of one call, measured on the device it runs on (chapter 8 and ``attnbook.lab.bench``).

What is measured: the largest number of bytes of tensor storage that PyTorch's allocator holds
during the call *beyond what was allocated when the call started*. Tensors that exist before the
call (the inputs) are not counted; every intermediate is, and so is the result (which is still
allocated when the call returns).

* CUDA: ``torch.cuda.max_memory_allocated`` after ``torch.cuda.reset_peak_memory_stats``, minus
  ``torch.cuda.memory_allocated`` before the call.
* CPU: ``tracemalloc`` does not see torch's allocations, and the resident
  set size of the process also moves with the C library's caching of freed memory, so neither is
  used. Instead the call runs under ``torch.profiler`` with ``profile_memory=True``, which records
  every allocation and free of the CPU allocator in time order; the peak is the largest running
  sum of those sizes. The profiler slows the call down, so this is for measuring memory, never
  for timing.

The two count alike but not to the byte: the CUDA caching allocator rounds every block up (to a
multiple of 512 bytes), a GPU library may allocate a workspace on its first call, and another
PyTorch version may keep one temporary more or less. Compare the numbers with a theory's ratios
within margins around what was measured (chapter 8 asserts its ratios so, e.g. the explicit path's
peak at 2.5 to 3.5 score matrices), never to the byte.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

import torch


@contextlib.contextmanager
def _stderr_silenced():
    """Send file descriptor 2 to /dev/null for a moment: the profiler's C++ side prints a line to it
    at every start and stop, which would clutter a notebook's output."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _peak_from_profiler(fn: Callable[[], object], device: torch.device) -> int:
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _stderr_silenced():
        prof.start()
    try:
        result = fn()  # (the call itself runs with stderr as it is)
        del result
    finally:
        with _stderr_silenced():
            prof.stop()
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == device.type:
            events.append((event.start_time_ns, event.extra_fields.alloc_size))
        stack.extend(event.children)
    events.sort()
    total = peak = 0
    for _, size in events:
        total += size
        peak = max(peak, total)
    return peak


def peak_memory_bytes(fn: Callable[[], object], device: torch.device | str) -> int:
    """Peak bytes allocated on ``device`` while ``fn()`` runs, beyond those allocated before it.

    See the module docstring for what is measured on each device. The result of ``fn`` is
    counted (it is allocated at its end) and then dropped.

    Args:
        fn: a function of no arguments, e.g. ``lambda: attention(q, k, v)``.
        device: the device whose allocations are counted (where ``fn`` computes).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return peak
    if device.type != "cpu":
        raise ValueError(f"peak memory is measured on cpu and cuda devices, got {device}")
    return _peak_from_profiler(fn, device)
