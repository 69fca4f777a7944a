"""The grader's side of the sandboxes: starting the zygote, and one session per submission.

:class:`Zygote` starts and restarts the zygote process (:mod:`.zygote`) and asks it for sandbox
children. :class:`Sandbox` is one submission's session: it has a child execute the notebook, looks
names up, and calls the student's functions on the grader's inputs, each call with a deadline. A
child that dies, hangs or sends garbage is killed (its whole process group, and when the grader
runs as root every process of the child's private user id) and, while the submission's budget
lasts, replaced by a fresh one that executes the notebook again, so one crashing answer costs
only the tests that triggered it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from . import protocol

#: first user id handed to sandboxes when the grader runs as root (one id per parallel slot)
UID_BASE = 2_100_000_000


class SandboxError(Exception):
    """The student's code failed: it raised, crashed its process, or ran out of time.

    The message reads as the end of a sentence about the call ("raised TypeError: ...", "did not
    return in time ..."); :func:`attnbook.grading.checks.call` puts the call in front of it.
    """

    student_error = True


class Zygote:
    """A running zygote process, restarted on demand; :meth:`spawn` is thread-safe."""

    def __init__(self, python: str | None = None, startup_timeout: float = 120.0):
        self.python = python or sys.executable
        self.startup_timeout = startup_timeout
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._ctrl: socket.socket | None = None
        self._jobs = 0

    def _start(self) -> None:
        self._stop()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
                    "PYTHONDONTWRITEBYTECODE": "1"})
        self._proc = subprocess.Popen(
            [self.python, "-m", "attnbook.grading.zygote", str(child.fileno())],
            pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=env, start_new_session=True,
        )
        child.close()
        parent.settimeout(self.startup_timeout)
        try:
            ready = parent.recv(1024)
        except (socket.timeout, OSError):
            ready = b""
        if not ready:
            err = b""
            try:
                self._proc.kill()
                err = self._proc.communicate(timeout=5)[1] or b""
            except Exception:
                pass
            raise RuntimeError(f"the grading zygote did not start: {err.decode(errors='replace')[-2000:]}")
        parent.settimeout(30.0)
        self._ctrl = parent

    def _stop(self) -> None:
        if self._ctrl is not None:
            self._ctrl.close()
            self._ctrl = None
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self._proc.wait(timeout=5)
            except Exception:
                pass
            self._proc = None

    def spawn(self, config: dict[str, Any]) -> tuple[int, socket.socket]:
        """Fork a sandbox child with ``config``; return its pid and the socket to talk to it."""
        with self._lock:
            for attempt in range(2):
                if self._ctrl is None or self._proc is None or self._proc.poll() is not None:
                    self._start()
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                self._jobs += 1
                message = json.dumps({**config, "job": self._jobs}).encode()
                try:
                    socket.send_fds(self._ctrl, [message], [theirs.fileno()])
                    reply = json.loads(self._ctrl.recv(1024) or b"null")
                    pid = int(reply["pid"])
                except (OSError, ValueError, TypeError, KeyError):
                    ours.close()
                    theirs.close()
                    self._stop()
                    if attempt:
                        raise RuntimeError("the grading zygote failed twice in a row")
                    continue
                theirs.close()
                return pid, ours
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            self._stop()

    def __enter__(self) -> "Zygote":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _pids_of_uid(uid: int) -> list[int]:
    """Live (not zombie) processes whose real user id is ``uid``, from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) == uid and not fields.get("State", "").strip().startswith(("Z", "X")):
                pids.append(int(entry))
        except (OSError, ValueError, KeyError, IndexError):
            continue
    return pids


def kill_uid(uid: int, rounds: int = 50) -> None:
    """Kill every process running as ``uid`` (the grader is root here), until none is left.

    A sandbox's user id is its own, so this ends whatever it left behind, even processes that
    left its process group. Repeated, because a process may fork while the first round runs
    (the number of processes a sandbox may have is limited).
    """
    for _ in range(rounds):
        pids = _pids_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)


class Sandbox:
    """One submission's sandbox session (see the module docstring)."""

    def __init__(self, zygote: Zygote, cells: list[str], *, forbidden: list[str], limits: dict[str, Any],
                 workroot: Path, slot: int, isolate_uid: bool | None = None, max_restarts: int = 4):
        self.zygote = zygote
        self.cells = cells
        self.forbidden = forbidden
        self.limits = limits
        self.workroot = workroot
        self.slot = slot
        self.uid = UID_BASE + slot if (running_as_root() if isolate_uid is None else isolate_uid) else None
        self.max_restarts = max_restarts
        self.deadline = time.monotonic() + float(limits["submission_timeout"])
        self.pid: int | None = None
        self.sock: socket.socket | None = None
        self.starts = 0
        self.execution_errors: list[dict[str, Any]] = []
        self.child_uid: int | None = None
        self.broken: str | None = None  # why the notebook cannot run; then every request fails
        self.events: list[str] = []
        self._kinds: dict[str, str] = {}
        self._values: dict[str, Any] = {}
        self._workdir: Path | None = None

    # -- life cycle -------------------------------------------------------------------------
    def _left(self) -> float:
        return self.deadline - time.monotonic()

    def start(self) -> bool:
        """Start a child and execute the notebook; False if it could not (see ``broken``).

        Running the notebook is deterministic enough that a notebook which once failed to run
        (it exited, looped or crashed while executing) is not run again.
        """
        if self.broken is not None:
            return False
        if self.starts > self.max_restarts:
            self.broken = "its process was restarted too often; the remaining tests fail"
            self.events.append(self.broken)
            return False
        if self._left() <= 0:
            self.broken = "the submission's time budget is spent; the remaining tests fail"
            self.events.append(self.broken)
            return False
        self.starts += 1
        self._workdir = Path(tempfile.mkdtemp(prefix=f"s{self.slot}-", dir=self.workroot))
        if self.uid is not None:
            os.chown(self._workdir, self.uid, self.uid)
        os.chmod(self._workdir, 0o700)
        lim = self.limits
        config = {
            "workdir": str(self._workdir),
            "uid": self.uid,
            "gid": self.uid,
            "forbidden": self.forbidden,
            "cell_timeout": float(lim["cell_timeout"]),
            "call_timeout": float(lim["call_timeout"]),
            "limits": {
                "memory_bytes": int(lim["memory_mb"]) * 2**20,
                "cpu_seconds": int(lim["cpu_seconds"]),
                "file_bytes": int(lim["file_mb"]) * 2**20,
                "nproc": 64 if self.uid is not None else 0,
            },
        }
        self.pid, self.sock = self.zygote.spawn(config)
        try:
            protocol.send_value(self.sock, {"op": "run", "cells": self.cells})
            budget = min(self._left(), float(lim["exec_timeout"]))
            reply = protocol.recv_value(self.sock, deadline=time.monotonic() + budget, as_torch=False)
            if not (isinstance(reply, dict) and reply.get("op") == "executed"):
                raise protocol.ProtocolError("unexpected reply")
            errors = reply.get("errors", [])
            self.child_uid = reply.get("uid") if type(reply.get("uid")) is int else None
            self.execution_errors = [
                {"cell": int(e.get("cell", -1)), "error": str(e.get("error", ""))[:2000]}
                for e in errors[:50] if isinstance(e, dict)
            ]
            return True
        except TimeoutError:
            self.broken = "running the notebook took longer than its time limit (an endless loop?)"
        except EOFError:
            self.broken = "the notebook's process ended while running it (os._exit, a crash, or the memory limit)"
        except (protocol.ProtocolError, OSError) as exc:
            self.broken = f"the notebook's process broke the grading protocol ({exc})"
        self.events.append(self.broken)
        self._kill()
        return False

    def _kill(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
        if self.pid is not None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self.pid = None
        if self.uid is not None:
            kill_uid(self.uid)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def close(self) -> None:
        if self.sock is not None:
            try:
                protocol.send_value(self.sock, {"op": "bye"})
            except OSError:
                pass
        self._kill()

    # -- requests ---------------------------------------------------------------------------
    def _request(self, message: dict[str, Any], timeout: float) -> Any:
        if self.sock is None and not self.start():
            raise SandboxError(f"could not be run: {self.broken}")
        deadline = time.monotonic() + max(0.0, min(timeout, self._left()))
        try:
            protocol.send_value(self.sock, message)
            return protocol.recv_value(self.sock, deadline=deadline)
        except TimeoutError:
            reason = "did not return in time (an endless loop, or far too slow)"
        except EOFError:
            reason = "ended its process (sys.exit/os._exit, a crash, or the memory limit)"
        except protocol.ProtocolError as exc:
            reason = f"sent back something the grader cannot read ({exc})"
        except OSError as exc:
            reason = f"broke the connection to the grader ({exc})"
        self.events.append(f"{message.get('op')} {message.get('name')}: {reason}")
        self._kill()
        raise SandboxError(reason)

    def lookup(self, name: str) -> tuple[str, Any]:
        """('callable', None), ('value', value) or ('missing', None) for a notebook name."""
        if name not in self._kinds:
            reply = self._request({"op": "lookup", "name": name},
                                  float(self.limits["call_timeout"]) + float(self.limits["call_grace"]))
            kind = reply.get("kind") if isinstance(reply, dict) else None
            if kind not in ("callable", "value", "missing"):
                raise SandboxError("the sandbox answered a lookup with nonsense")
            self._kinds[name] = kind
            if kind == "value":
                self._values[name] = reply.get("value")
        return self._kinds[name], self._values.get(name)

    def call(self, name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        """The student's ``name(*args, **kwargs)``, computed in the sandbox, returned as data."""
        reply = self._request({"op": "call", "name": name, "args": list(args), "kwargs": dict(kwargs)},
                              float(self.limits["call_timeout"]) + float(self.limits["call_grace"]))
        if not isinstance(reply, dict) or "ok" not in reply:
            raise SandboxError("the sandbox answered a call with nonsense")
        if not reply["ok"]:
            raise SandboxError("raised " + str(reply.get("error", "an error"))[:2000])
        return reply.get("value")

    def proxy(self, name: str) -> "StudentFunction":
        return StudentFunction(self, name)


class StudentFunction:
    """Stands for a student's function in the grader: calling it runs the function in the sandbox."""

    def __init__(self, sandbox: Sandbox, name: str):
        self._sandbox = sandbox
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._sandbox.call(self.__name__, args, kwargs)

    def __repr__(self) -> str:
        return f"<student function {self.__name__}>"
