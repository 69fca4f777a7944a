"""The grader's side of the sandboxes: starting bubblewrap workers and handing them jobs.

A :class:`Worker` is one ``bwrap`` sandbox running :mod:`attngrade.sandboxed.worker` (its own pid, network, ipc, uts
and mount namespaces, a read-only view of the Python environment and of the course package, a
private size-limited ``/tmp``; as root, an unprivileged user id of its own). It imports torch once
and then grades submissions one after another, forking a fresh child for each and killing and
wiping everything the child left before the next one starts (see :mod:`attngrade.sandboxed.worker`).

One submission in a worker is a :class:`attngrade.grading.session.Session`.

Failures are told apart: :class:`SandboxError` is the student's code failing (it raised, crashed,
ran out of time or memory); :class:`InfrastructureError` is the sandbox failing for a reason the
student's code did not cause (bubblewrap could not start, the worker did not answer before any
student code ran). The grader retries the latter once and then marks the row ``status=error``.

CPU time: a sandbox's processes are not waited for by the grader's process (bubblewrap's outer
process learns its pid 1's exit status from an event file descriptor and exits without reaping
it), so the kernel's count of the grader's children leaves them out. Each :class:`Worker` reads
their CPU time from ``/proc`` (:func:`sandbox_cpu_seconds`) after each submission and when it
ends, keeps the total in ``cpu_seconds``, and appends each ended sandbox's seconds to the file
named by the environment variable ``ATTNGRADE_SANDBOX_CPU_LOG`` when it is set (the test suite's
time table adds them to each test's CPU time: tests/plugins/time_table.py).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from .view import MOUNT, View, bwrap_arguments, instructor_paths

#: uids handed to sandboxes when the grader runs as root (a random one per worker)
UID_RANGE = (2_000_000_000, 2_100_000_000)

_BOOT = (
    "import os, site, sys; "
    "[site.addsitedir(d) for d in os.environ.pop('ATTNGRADE_USER_SITE', '').split(os.pathsep) if d]; "
    "sys.path.insert(0, {mount!r}); from attngrade.sandboxed.worker import worker_main; worker_main(int(sys.argv[1]))"
)


#: the environment variable naming a file to which every sandbox's CPU seconds are appended, one
#: number a line, when it ends (unset: nothing is written)
CPU_LOG_VARIABLE = "ATTNGRADE_SANDBOX_CPU_LOG"

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int | str) -> tuple[int, str, float] | None:
    """(parent pid, start time, CPU seconds) of a process from ``/proc/<pid>/stat``: its user and
    system time and those of the children it has waited for (fields 14 to 17); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the fields after the command's name, which is in parentheses and may hold anything
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[1]), fields[19].decode(), sum(int(v) for v in fields[11:15]) / _CLOCK_TICKS
    except (IndexError, ValueError):
        return None


def processes_below(root: int) -> dict[int, tuple[str, float]]:
    """Every process below ``root``: pid -> (start time, CPU seconds, as :func:`_stat`)."""
    children: dict[int, list[tuple[int, str, float]]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for name in names:
        if name.isdigit() and (stat := _stat(name)) is not None:
            children.setdefault(stat[0], []).append((int(name), stat[1], stat[2]))
    found, below = {}, [root]
    while below:
        for pid, started, seconds in children.get(below.pop(), ()):
            found[pid] = (started, seconds)
            below.append(pid)
    return found


def sandbox_cpu_seconds(root: int) -> float:
    """The CPU seconds used so far by the processes below ``root`` (bubblewrap's outer process,
    which the grader waits for itself, so that its own time is in the grader's count and left out
    here). A process that ended and was waited for inside the sandbox is in its parent's count (the
    worker waits for each submission's child; bubblewrap's pid 1 for the orphans)."""
    return sum(seconds for _, seconds in processes_below(root).values())


class SandboxError(Exception):
    """The student's code failed: it raised, crashed its process, or ran out of time.

    The message reads as the end of a sentence about the call ("raised TypeError: ...", "did not
    return in time ..."); :func:`attngrade.checks.call` puts the call in front of it.
    """

    student_error = True


class InfrastructureError(RuntimeError):
    """The sandbox failed for a reason the student's code did not cause."""


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces on this machine."""


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install "
    "bubblewrap), or pass --unsafe-no-sandbox to grade without isolation in a trusted setting"
)


class Worker:
    """One sandbox process; not thread-safe (one grading thread owns one worker)."""

    def __init__(
        self,
        view: View,
        *,
        hide: list[str],
        forbidden: list[str],
        warm: Sequence[str] = (),
        sandbox: bool = True,
        startup_timeout: float = 180.0,
        tmp_mb: int = 64,
    ):
        self.view = view
        self.hide = hide
        self.forbidden = forbidden
        self.warm = list(warm)
        self.sandbox = sandbox
        self.startup_timeout = startup_timeout
        self.tmp_mb = tmp_mb
        self.proc: subprocess.Popen | None = None
        self.ctrl: socket.socket | None = None
        self.uid: int | None = None
        self.jobs = 0
        self.cpu_seconds = 0.0  # the CPU time of this worker's sandboxes that have ended
        self._cpu_now = 0.0  # that of the running one, when last read
        self._processes: dict[int, str] = {}  # its processes when last read: pid -> start time

    # -- life cycle -----------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.ctrl is not None

    def start(self) -> None:
        """Start the sandbox and wait until the worker has imported torch; InfrastructureError if not."""
        self.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fd = theirs.fileno()
        as_root = running_as_root()
        python = sys.executable
        command = [
            python,
            "-s",
            "-B",
            "-c",
            _BOOT.format(mount=MOUNT if self.sandbox else str(self.view.root / "lib")),
            str(fd),
        ]
        if self.sandbox:
            bwrap = find_bwrap()
            if bwrap is None:
                raise SandboxUnavailable("bubblewrap (bwrap) is not installed: " + INSTALL_HINT)
            command = [
                bwrap,
                *bwrap_arguments(self.view, hide=self.hide, as_root=as_root, tmp_mb=self.tmp_mb),
                *command,
            ]
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": "/tmp",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
        }
        for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # this machine's OpenBLAS needs them
            if key in os.environ:
                env[key] = os.environ[key]
        # the instructor's packages outside the installation, in the same roles as on the host
        # (mounted read-only by bwrap_arguments): PYTHONPATH entries, and the user site-packages,
        # which Python's -s leaves out and the boot line adds back with its .pth files
        entries, users = instructor_paths()
        if entries:
            env["PYTHONPATH"] = os.pathsep.join(entries)
        if users:
            env["ATTNGRADE_USER_SITE"] = os.pathsep.join(users)
        try:
            self.proc = subprocess.Popen(
                command,
                pass_fds=[fd],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            theirs.close()
            ours.close()
            raise InfrastructureError(f"could not start the sandbox: {exc}") from None
        theirs.close()
        self.ctrl = ours
        self.uid = secrets.randbelow(UID_RANGE[1] - UID_RANGE[0]) + UID_RANGE[0] if as_root and self.sandbox else None
        hello = {"forbidden": self.forbidden, "warm": self.warm, "drop_uid": self.uid, "sandboxed": self.sandbox}
        try:
            ours.settimeout(self.startup_timeout)
            ours.send(json.dumps(hello).encode())
            ready = json.loads(ours.recv(1 << 12) or b"null")
            if not (isinstance(ready, dict) and ready.get("ready")):
                raise OSError("no ready message")
        except (OSError, ValueError) as exc:
            err = self._stderr()
            self.close()
            if self.sandbox and ("bwrap" in err or "namespace" in err.lower()):
                raise SandboxUnavailable(f"bubblewrap could not start a sandbox: {err.strip()[-1500:]}") from None
            raise InfrastructureError(f"the sandbox did not start ({exc}): {err.strip()[-1500:]}") from None
        ours.settimeout(None)

    @property
    def cpu_used(self) -> float:
        """CPU seconds used by this worker's sandboxes: those that ended, and the running one as
        read after its last submission (a sandbox's processes are not the grader's children, so
        ``os.times`` leaves them out)."""
        return self.cpu_seconds + self._cpu_now

    def _read_cpu(self, *, between_jobs: bool = False) -> None:
        """Read the running sandbox's CPU time (it only grows: a smaller reading means that some
        of its processes are gone unreaped, and the last reading stands). ``between_jobs``: the
        worker has just cleaned up after a submission, so its processes are the ones found after
        the last job; only those are read again while each is still there (/proc holds other
        users' processes too: reading them all after every submission would cost more)."""
        if self.proc is None or not self.sandbox:
            return
        again = {pid: _stat(pid) for pid in self._processes} if between_jobs and self._processes else None
        if again and all(stat is not None and stat[1] == self._processes[pid] for pid, stat in again.items()):
            seconds = sum(stat[2] for stat in again.values())
        else:
            found = processes_below(self.proc.pid)
            self._processes = {pid: started for pid, (started, _) in found.items()}
            seconds = sum(s for _, s in found.values())
        self._cpu_now = max(self._cpu_now, seconds)

    def _ended(self) -> None:
        """Count the ended sandbox's CPU time, and log it (CPU_LOG_VARIABLE)."""
        seconds, self._cpu_now, self._processes = self._cpu_now, 0.0, {}
        self.cpu_seconds += seconds
        log = os.environ.get(CPU_LOG_VARIABLE)
        if log and self.sandbox:
            try:  # one short write in append mode: whole lines, whoever else writes
                with open(log, "a", encoding="utf-8") as f:
                    f.write(f"{seconds:.3f}\n")
            except OSError:
                pass

    def _stderr(self) -> str:
        if self.proc is None:
            return ""
        self._read_cpu()
        try:
            self.proc.kill()
            return (self.proc.communicate(timeout=5)[1] or b"").decode(errors="replace")
        except Exception:
            return ""

    def close(self) -> None:
        self._read_cpu()  # the worker is idle between submissions: everything it ran is counted
        if self.ctrl is not None:
            try:
                self.ctrl.close()
            except OSError:
                pass
            self.ctrl = None
        if self.proc is not None:
            try:  # a worker whose control socket closes cleans up and ends by itself
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            try:  # bubblewrap's outer process first, so that it never waits for its pid 1 (whose
                # CPU time would then count twice: in _cpu_now and in the grader's children)
                self.proc.kill()
            except Exception:
                pass
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.communicate(timeout=10)
            except Exception:
                pass
            self.proc = None
            self._ended()

    # -- jobs -------------------------------------------------------------------------------
    def _recv(self, timeout: float) -> dict[str, Any]:
        assert self.ctrl is not None
        self.ctrl.settimeout(max(timeout, 0.001))
        try:
            data = self.ctrl.recv(1 << 12)
        finally:
            if self.ctrl is not None:
                self.ctrl.settimeout(None)
        if not data:
            raise EOFError("the sandbox's worker is gone")
        msg = json.loads(data)
        if not isinstance(msg, dict):
            raise ValueError("bad message")
        return msg

    def spawn(self, job: dict[str, Any]) -> socket.socket:
        """Fork a child for one submission; the socket to talk to it. InfrastructureError if the
        worker does not answer (no student code has run in this worker since it was cleaned)."""
        if not self.alive():
            self.start()
        self.jobs += 1
        ident = self.jobs
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            socket.send_fds(self.ctrl, [json.dumps({**job, "job": ident}).encode()], [theirs.fileno()])
            theirs.close()
            deadline = time.monotonic() + 30
            while True:
                msg = self._recv(deadline - time.monotonic())
                if msg.get("started") == ident:
                    break
        except (OSError, ValueError, EOFError) as exc:
            theirs.close()
            ours.close()
            self.close()
            raise InfrastructureError(f"the sandbox did not start a process for the notebook ({exc})") from None
        return _JobSocket(ours, ident)

    def finish(self, sock: socket.socket, *, kill: bool) -> bool:
        """End a child (killing it if ``kill``) and wait until the worker has cleaned up after it.
        False (and the worker is closed) if the worker does not come back."""
        ident = getattr(sock, "job", None)
        try:
            sock.close()
        except OSError:
            pass
        if not self.alive():
            self.close()
            return False
        try:
            if kill:
                self.ctrl.send(json.dumps({"op": "kill"}).encode())
            deadline = time.monotonic() + 15
            while True:
                msg = self._recv(deadline - time.monotonic())
                if "done" in msg and msg["done"] == ident:
                    self._read_cpu(between_jobs=True)
                    return True
        except (OSError, ValueError, EOFError):
            self.close()
            return False


class _JobSocket(socket.socket):
    """The socket to one child, remembering which job it belongs to."""

    def __init__(self, sock: socket.socket, job: int):
        super().__init__(sock.family, sock.type, sock.proto, fileno=sock.detach())
        self.job = job
