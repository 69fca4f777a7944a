"""What runs inside a bubblewrap sandbox: one worker, one forked child per submission.

The grader (:mod:`attngrade.grading.bubblewrap`) starts ``bwrap ... python -c <boot line> CTRL_FD``,
whose boot line calls :func:`worker_main`. The worker imports torch and the course package once (the
package as the sandbox sees it: the homework's reference implementations are stubs there, see
:mod:`attngrade.grading.view`), drops to an unprivileged user when it started as root, and then
serves jobs on its control socket, strictly one at a time (the child's side is :mod:`.child`):

1. a job arrives with one end of a fresh socket pair (SCM_RIGHTS) and the sandbox limits;
2. the worker forks a child, which closes the control socket, applies the limits, receives the
   key of test-writing questions and the notebook's code cells on its own socket, forks the
   candidate server and test factory (:mod:`.candidates`) before any cell runs, executes the cells
   and answers the grader's ``lookup``, ``call`` and ``run_test`` requests (:func:`serve`) until
   the grader says goodbye;
3. the worker waits for the child, kills every other process left in the sandbox's pid namespace,
   empties the writable folders and the System V IPC objects, and answers ``done``.

The worker never reads a notebook, a test or an answer, so nothing in its memory (which every
child inherits) belongs to another student. The child never sees a test or a reference answer:
the grader compares the data it sends back in its own process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

from . import cleanup, process_limits, protocol
from .child import child_main
from .warm_ups import WARM_UPS


def preload(forbidden_ops: list[str], warm: Sequence[str] = ()) -> Any:
    """Import and warm up what a homework uses, once, before any fork; return the guard.
    ``warm`` names WARM_UPS to call once too."""
    import numpy  # noqa: F401
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    # no score depends on uninitialised memory: torch.empty, empty_like, new_empty, ... are filled
    # with NaN (the largest integer for integer dtypes), so an answer that reads memory it never
    # wrote fails the same way on every run (warn_only: an operator with no deterministic version
    # still runs, with a warning in the notebook's output). The C++ switches that
    # torch.use_deterministic_algorithms sets: the Python function also imports inductor's config,
    # which imports triton, before a notebook can choose Triton's interpreter (homework 11)
    set_algorithms = getattr(torch._C, "_set_deterministic_algorithms", None)
    set_fill = getattr(torch._C, "_set_deterministic_fill_uninitialized_memory", None)
    if set_algorithms is not None and set_fill is not None:
        set_algorithms(True, warn_only=True)
        set_fill(True)
    else:  # pragma: no cover - a torch without them
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = True
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

    import attnbook

    x = torch.randn(4, 3, 8, generator=torch.Generator().manual_seed(0))
    (x.double() @ x.double().transpose(-2, -1)).softmax(-1)
    torch.nn.functional.linear(x, torch.ones(8, 8))
    for name in warm:
        if name in WARM_UPS:
            WARM_UPS[name](torch, x)
    for name in getattr(attnbook, "__all__", []):
        getattr(attnbook, name, None)
    try:
        from IPython.core.inputtransformer2 import TransformerManager  # noqa: F401
    except Exception:  # IPython is optional: magics are then stripped by hand
        pass
    refuse_kernels(forbidden_ops)
    guard = make_guard(forbidden_ops)
    # the guard's first watched call is slower than the next ones: made here once, so that no child makes it
    if guard is not None:
        with guard.watch():
            x.softmax(-1)
        guard.reset()
    return guard


_REFUSING: list[Any] = []  # the torch.library registrations below (kept alive)


def refuse_kernels(forbidden: list[str]) -> list[str]:
    """Replace the kernels of PyTorch's fused attention operators that ``forbidden`` names by
    kernels that raise, for every route to them (``torch.nn.functional``, ``torch._C._nn``,
    ``torch.ops.aten``, a fresh copy of a module): these built-ins have no source to leave out of
    the sandbox's view. Returns the operators refused."""
    try:
        import warnings

        import torch

        from .integrity import TORCH_OPS
    except ImportError:
        return []
    ops = sorted({op for name in forbidden for op in TORCH_OPS.get(name, ())})
    if not ops:
        return []
    lib = torch.library.Library("aten", "IMPL")
    _REFUSING.append(lib)
    refused = []
    for op in ops:
        message = (
            f"aten::{op} is PyTorch's fused implementation of what this homework asks you to "
            f"write; {protocol.REFERENCE_UNAVAILABLE}"
        )

        def refuse(*args: Any, _message: str = message, **kwargs: Any) -> Any:
            raise NotImplementedError(_message)

        for key in ("CPU", "CUDA", "CompositeImplicitAutograd", "CompositeExplicitAutograd"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    lib.impl(op, refuse, key)
                refused.append(op)
            except Exception:  # an operator this torch does not have, or a key it refuses
                continue
    return sorted(set(refused))


def make_guard(forbidden: list[str]) -> Any:
    """The run-time integrity guard (:mod:`.integrity`) for this homework, or None."""
    try:
        from .integrity import Guard
    except ImportError:
        return None
    return Guard(forbidden)


def worker_main(fd: int) -> None:
    ctrl = socket.socket(fileno=fd)
    hello = json.loads(ctrl.recv(1 << 16) or b"{}")
    cleanup.SANDBOXED = bool(hello.get("sandboxed", True))
    if not cleanup.SANDBOXED:
        import tempfile

        cleanup.UNSAFE_WORKDIR = tempfile.mkdtemp(prefix="attngrade-unsafe-")
    guard = preload(list(hello.get("forbidden", [])), [str(w) for w in hello.get("warm", [])])
    uid = hello.get("drop_uid")
    if os.getuid() == 0 and type(uid) is int and uid > 0:
        # the worker stays root inside the sandbox (so that no child can signal or trace it, and it
        # can kill and delete whatever a child leaves), with only the capabilities it needs; each
        # child becomes ``uid``
        process_limits.CHILD_UID = uid
        process_limits.keep_capabilities(process_limits.WORKER_CAPABILITIES)
    process_limits.prctl(process_limits.PR_SET_NO_NEW_PRIVS, 1)
    process_limits.prctl(process_limits.PR_SET_DUMPABLE, 0)  # a child may not read or trace the worker's memory
    ctrl.sendall(json.dumps({"ready": True, "uid": os.getuid(), "pid": os.getpid()}).encode())
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(ctrl, 1 << 16, 1)
        except OSError:
            break
        if not data:
            break
        try:
            job = json.loads(data)
        except ValueError:
            job = None
        if not isinstance(job, dict) or job.get("op") == "kill":
            for f in fds:
                os.close(f)
            cleanup.clean_up()
            ctrl.sendall(json.dumps({"done": None}).encode())
            continue
        if not fds:
            break
        pid = os.fork()
        if pid == 0:
            try:
                ctrl.close()
                child_main(socket.socket(fileno=fds[0]), job, guard)
            finally:
                os._exit(1)
        os.close(fds[0])
        ctrl.sendall(json.dumps({"started": job.get("job"), "pid": pid}).encode())
        # wait for the child, or for the grader to ask that it be killed (a call that hangs)
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            ctrl.settimeout(0.02)
            try:
                msg = ctrl.recv(1 << 10)
            except TimeoutError:
                continue
            except OSError:
                msg = b""
            finally:
                ctrl.settimeout(None)
            if not msg:  # the grader is gone
                os.kill(pid, signal.SIGKILL)
                cleanup.clean_up(pid)
                os._exit(0)
            os.kill(pid, signal.SIGKILL)  # any message while a child runs means: stop it
        cleanup.clean_up(pid)
        ctrl.sendall(json.dumps({"done": job.get("job")}).encode())
    cleanup.clean_up()
    os._exit(0)


if __name__ == "__main__":
    worker_main(int(sys.argv[1]))
