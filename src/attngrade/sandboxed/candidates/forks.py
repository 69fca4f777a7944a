"""What every process of a test-writing question's runs shares: one compute thread after a fork,
the ``prctl`` switches, closing inherited file descriptors, and the grace before a run's processes
are killed."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

#: seconds a run may take beyond its time limit before its processes are killed
GRACE = 2.0

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4


def _one_thread_after_fork() -> None:
    """Every child forked here computes on one thread. A notebook under ``grader.check`` or ``otter
    run`` has torch's default threads; once its torch has run an OpenMP parallel region, a forked
    child inherits libgomp's idea of a thread pool but none of its threads, and its next parallel
    region (``torch.tril`` on a mask, say) waits for them forever. With one thread libgomp makes no
    team. (The class grader's worker sets one thread before any fork anyway.)"""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


os.register_at_fork(after_in_child=_one_thread_after_fork)


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def _max_fd() -> int:
    try:
        return max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return 1024


def _close_all_but(keep: set[int]) -> None:
    for fd in range(3, _max_fd()):
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
