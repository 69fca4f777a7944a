"""The zygote: a clean process that has imported torch once and forks one sandbox per submission.

Starting Python and importing torch costs about 1.5 s; forking a process that has already done it
costs a few milliseconds. The grader starts one zygote (``python -m attnbook.grading.zygote FD``)
that imports torch, numpy, matplotlib and attnbook, warms them up with torch limited to one thread
(so no thread pool exists at fork time), and then waits for jobs on a SOCK_SEQPACKET control
socket. A job is a small JSON message carrying, as ancillary data, one end of a socket pair; the
zygote forks, the child runs :func:`attnbook.grading.sandbox.run_child` on that socket, and the
zygote answers with the child's pid. The zygote never runs student code itself, and the grader
talks to each child directly, so a child that dies, hangs or kills the zygote cannot touch any
other submission (the grader starts a new zygote when needed).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def preload() -> None:
    """Import and warm up everything a homework uses, once, before any fork."""
    import numpy  # noqa: F401
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

    import attnbook
    from attnbook import plotting  # noqa: F401

    x = torch.randn(4, 3, 8, generator=torch.Generator().manual_seed(0))
    attnbook.attention(x, x, x, mask=attnbook.causal_mask(3))
    attnbook.attention(x, x, x, need_weights=False)
    attnbook.softmax(x, beta=2.0)
    (x.double() @ x.double().transpose(-2, -1)).softmax(-1)
    torch.nn.functional.linear(x, torch.ones(8, 8))
    for name in getattr(attnbook, "__all__", []):
        getattr(attnbook, name, None)


def main(fd: int) -> None:
    ctrl = socket.socket(fileno=fd)
    preload()
    from . import sandbox

    # children are reaped automatically; the grader watches them through their sockets
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    ctrl.sendall(b'{"ready": true}')
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(ctrl, 1 << 16, 1)
        except OSError:
            break
        if not data:
            break
        try:
            config = json.loads(data)
        except ValueError:
            for f in fds:
                os.close(f)
            continue
        if not fds:
            continue
        child_sock = socket.socket(fileno=fds[0])
        pid = os.fork()
        if pid == 0:
            try:
                ctrl.close()
                os.setsid()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                sandbox.run_child(child_sock, config)
            finally:
                os._exit(1)
        child_sock.close()
        try:
            ctrl.sendall(json.dumps({"job": config.get("job"), "pid": pid}).encode())
        except OSError:
            break
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
