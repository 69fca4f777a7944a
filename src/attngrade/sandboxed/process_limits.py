"""A process's limits and privileges in the sandbox: the child's resource limits, the capabilities
the worker keeps when it runs as root, the user each child becomes, and the ``prctl`` switches
(no new privileges, not dumpable)."""

from __future__ import annotations

import ctypes
import os
import resource
from typing import Any

PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4

CHILD_UID: int | None = None
#: CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_KILL, CAP_SETGID, CAP_SETUID
WORKER_CAPABILITIES = (0, 1, 2, 3, 5, 6, 7)
_PR_CAPBSET_DROP = 24


def keep_capabilities(keep: tuple[int, ...]) -> None:
    """Drop every other capability from the bounding set (nothing executed later can gain them)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        if cap not in keep:
            libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)


def drop_privileges(uid: int) -> None:
    """Become ``uid`` (the grader started the sandbox as root), with no capabilities left."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("could not drop privileges")


def prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def apply_limits(limits: dict[str, Any]) -> None:
    """Resource limits of the child (inherited by anything it starts)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    mem = int(limits.get("memory_bytes", 0))
    if mem > 0:
        # the address space torch already maps, plus the student's allowance
        cap = _vm_size() + mem
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    cpu = int(limits.get("cpu_seconds", 0))
    if cpu > 0:
        used = int(sum(os.times()[:2]))
        resource.setrlimit(resource.RLIMIT_CPU, (used + cpu, used + cpu + 2))
    fsize = int(limits.get("file_bytes", 0))
    if fsize > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    nproc = int(limits.get("nproc", 0))
    if nproc > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _vm_size() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
