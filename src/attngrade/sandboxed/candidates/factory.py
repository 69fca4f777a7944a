"""The class grader's test factory: a process forked before the notebook's first cell runs, which
never holds a candidate or a key, and forks each test's process (:mod:`.isolation`) on the
candidate server's order."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from .forks import _PR_SET_DUMPABLE, GRACE, _prctl
from .isolation import _remove_new, _snapshot, isolate_test_process, namespaces_available


def _factory(sock: socket.socket, runner: Callable[[socket.socket, dict[str, Any]], None], watched: list[str]) -> None:
    """The test factory of the class grader: for each order from the candidate server (a test's
    name, a time budget, and the test's end of a candidate's connection), fork the test's process,
    which is cut off (:func:`isolate_test_process`) and calls ``runner(connection, order)``; kill it
    and all it started when its time is up. This process never holds a candidate or a key, so
    neither does any test's process."""
    _prctl(_PR_SET_DUMPABLE, 0)
    folders = [f for f in watched if os.path.isdir(f)]
    isolated = None  # probed at the first order: a homework with no test to run never pays for it
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, 1)
        except OSError:
            return
        if not data:
            return
        if not fds:
            continue
        conn = socket.socket(fileno=fds[0])
        try:
            order = json.loads(data)
            seconds = float(order.get("seconds", 10.0))
        except (ValueError, AttributeError, TypeError):
            conn.close()
            continue
        if isolated is None:
            isolated = namespaces_available()
        before = _snapshot(folders) if not isolated and folders else set()
        ready_read, ready_write = os.pipe()  # the test's process writes a byte when its cells have run
        order["ready"] = ready_write
        test_seconds = float(order.get("test_seconds", seconds))
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                os.close(ready_read)
                _tester(conn, order, runner, isolated)
            finally:
                os._exit(1)
        conn.close()
        os.close(ready_write)
        os.set_blocking(ready_read, False)
        deadline = time.monotonic() + seconds + GRACE
        cells_done = False
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if not cells_done:
                with contextlib.suppress(BlockingIOError, OSError):
                    if os.read(ready_read, 1):  # from now on, only the test's own time limit
                        cells_done = True
                        deadline = min(deadline, time.monotonic() + test_seconds + GRACE)
            time.sleep(0.001)
        os.close(ready_read)
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):
                kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        if not isolated and folders:
            _remove_new(folders, before)
        with contextlib.suppress(OSError):
            sock.send(b"done")


def _tester(
    conn: socket.socket, order: dict[str, Any], runner: Callable[[socket.socket, dict[str, Any]], None], isolated: bool
) -> None:
    isolate_test_process(conn, isolated, forget=False, keep=(int(order["ready"]),))
    runner(conn, order)
