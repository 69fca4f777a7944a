"""The test's side: the process a student's test runs in, cut off from everything but its candidate
(a session of its own, no inherited file descriptor, no shared memory, the callers' frames emptied,
and where the system allows it new user, mount, network, IPC and pid namespaces with empty private
folders), and the run of the test there."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from .forks import _PR_SET_DUMPABLE, _PR_SET_PDEATHSIG, GRACE, _max_fd, _prctl
from .wire import _send, describe, dumps, make_proxy

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = (
    0x00020000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 0x4000, 1 << 18
#: the folders a test's process gets empty and private (in its own mount namespace)
PRIVATE_FOLDERS = ("/tmp", "/dev/shm")


def _import_paths_inside(folder: str) -> list[str]:
    """The folders of ``sys.path`` that lie inside ``folder`` (outermost only): a Python environment
    or a checkout under /tmp, which an empty private /tmp would hide from the test's later imports."""
    root = os.path.realpath(folder).rstrip("/") + "/"
    inside = sorted(
        {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p) and os.path.realpath(p).startswith(root)},
        key=len,
    )
    keep: list[str] = []
    for path in inside:
        if not any(path.startswith(k.rstrip("/") + "/") for k in keep):
            keep.append(path)
    return keep


_NAMESPACES: bool | None = None  # whether this system gives a test's process its own namespaces


def _isolate_namespaces() -> bool:
    """Enter new user, mount, network, IPC and pid namespaces with empty private folders; a second
    user namespace leaves the process no power over those mounts. In the new pid namespace the
    caller forks: the child (pid 1 there) returns True, the parent waits and exits with it.
    False, with nothing changed, where the system refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWPID
    uid, gid = os.geteuid(), os.getegid()
    # writing our own id maps needs /proc/self owned by us: dumpable for these few lines (the
    # class grader has stopped every process of the notebook's meanwhile), then not again, so that
    # no process outside can read or trace this one
    _prctl(_PR_SET_DUMPABLE, 1)
    if libc.unshare(flags) != 0:
        _prctl(_PR_SET_DUMPABLE, 0)
        return False
    try:  # the same ids inside (a nested user namespace needs the caller's ids mapped)
        for name, text in (("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError:
        os._exit(3)
    finally:
        _prctl(_PR_SET_DUMPABLE, 0)
    libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None)
    for folder in PRIVATE_FOLDERS:
        if os.path.isdir(folder):
            # where the Python environment itself lies in the folder (a checkout under /tmp), it
            # comes back read-only at its own path: held open here, bound again after the mount
            kept = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in _import_paths_inside(folder)]
            if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=16m,mode=1777") != 0:
                os._exit(3)  # half isolated: run nothing
            for path, fd in kept:
                os.makedirs(path, exist_ok=True)
                if libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, _MS_BIND | _MS_REC, None) != 0:
                    os._exit(3)
                read_only = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
                libc.mount(
                    None, path.encode(), None, read_only, None
                )  # where allowed (a bound read-only view stays so)
                os.close(fd)
    if libc.unshare(_CLONE_NEWUSER) != 0:
        os._exit(3)
    outer = os.getpid()
    pid = os.fork()
    if pid:
        try:
            _, status = os.waitpid(pid, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        finally:
            os._exit(1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != outer and os.getpid() != 1:
        os._exit(1)
    work = "/tmp/work"
    os.makedirs(work, exist_ok=True)
    os.chdir(work)
    os.environ.update({"HOME": work, "TMPDIR": work})
    import tempfile

    tempfile.tempdir = work
    return True


def namespaces_available() -> bool:
    """Whether a test's process can get namespaces of its own here (probed once, in a fork)."""
    global _NAMESPACES
    if _NAMESPACES is None:
        if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
            _NAMESPACES = False
            return False
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                ok = _isolate_namespaces()
                os._exit(0 if ok else 2)
            finally:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        _NAMESPACES = os.waitstatus_to_exitcode(status) == 0
    return _NAMESPACES


def _privatize_shared_memory() -> None:
    """Make every writable shared mapping this process inherited (``mmap.mmap(-1, n)`` in a cell,
    say) a private copy, so that nothing the test writes there reaches another process."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for line in lines:
        fields = line.split()
        if len(fields) < 2 or len(fields[1]) < 4 or fields[1][3] != "s" or fields[1][1] != "w":
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        size = end - start
        readable = fields[1][0] == "r"
        data = ctypes.string_at(start, size) if readable else b""
        prot = 0x1 | 0x2  # PROT_READ | PROT_WRITE
        got = libc.mmap(start, size, prot, 0x02 | 0x20 | 0x10, -1, 0)  # MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED
        if got != start:
            os._exit(3)
        if data:
            ctypes.memmove(start, data, size)
        libc.mprotect(start, size, (0x1 if readable else 0) | 0x2 | (0x4 if fields[1][2] == "x" else 0))


def _snapshot(folders: list[str], limit: int = 2000) -> set[str]:
    """The entries of ``folders``, and of the folders in them while there are at most ``limit``."""
    seen: set[str] = set()
    for folder in folders:
        todo = [folder]
        while todo:
            current = todo.pop()
            try:
                entries = list(os.scandir(current))
            except OSError:
                continue
            for entry in entries:
                seen.add(entry.path)
                if len(seen) < limit and entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
    return seen


def _remove_new(folders: list[str], before: set[str]) -> None:
    import shutil

    for path in sorted(_snapshot(folders) - before, key=len):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def isolate_test_process(conn: socket.socket, isolated: bool, forget: bool = True, keep: tuple[int, ...] = ()) -> None:
    """Cut the test's process off from everything but its candidate: a session of its own, no file
    descriptor but ``conn``, no shared memory, the callers' frames emptied, and (``isolated``) new
    namespaces with empty private folders, or else no file contents written."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    kept = {0, 1, 2, conn.fileno(), *keep}
    for fd in range(3, _max_fd()):
        if fd not in kept:
            with contextlib.suppress(OSError):
                os.close(fd)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the process ends with os._exit
    if forget:  # where the callers held a candidate's source (not in the class grader's factory)
        _forget_callers(sys._getframe(2))  # the callers of the caller, which keeps what it needs
    _privatize_shared_memory()
    if isolated:
        if not _isolate_namespaces():
            os._exit(3)
    else:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # no file contents: nothing to read back
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        import torch

        torch.set_num_threads(1)


def _test_main(
    test: Callable[..., Any],
    conn: socket.socket,
    name: str,
    guard: Any,
    seconds: float,
    wall_factor: float,
    isolated: bool,
) -> None:
    """The test's process: cut it off (:func:`isolate_test_process`) and run the test."""
    isolate_test_process(conn, isolated)
    run_test_here(test, conn, name, guard, seconds, wall_factor)


def run_test_here(test: Any, conn: socket.socket, name: str, guard: Any, seconds: float, wall_factor: float) -> None:
    """Run ``test`` on the proxy for the candidate at the other end of ``conn``, tell the candidate's
    process how it went, and end this process."""
    if not callable(test):
        with contextlib.suppress(BaseException):
            _send(conn, dumps({"op": "done", "passed": False, "error": f"`{name}` is not defined as a function"}))
        os._exit(0)
    proxy = make_proxy(conn, name)

    def alarm(signum: int, frame: Any) -> None:
        raise TimeoutError("time limit reached")

    signal.signal(signal.SIGALRM, alarm)
    signal.signal(signal.SIGPROF, alarm)
    done: dict[str, Any] = {"op": "done", "passed": False}
    try:
        if guard is not None:
            guard.reset()
        signal.setitimer(signal.ITIMER_PROF, seconds)
        signal.setitimer(signal.ITIMER_REAL, seconds * wall_factor)
        try:
            if guard is not None:
                with guard.watch():
                    test(proxy)
            else:
                test(proxy)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
        done["passed"] = True
    except BaseException as exc:
        done["error"] = describe(exc)
    if guard is not None and getattr(guard, "hits", None):
        done["passed"] = False
        done["forbidden"] = [str(h) for h in list(guard.hits)[:5]]
        with contextlib.suppress(Exception):
            done["error"] = str(guard.message(name))
    tampered = list(getattr(guard, "tampered", []) or [])
    if tampered:
        done["tampered"] = [str(t) for t in tampered[:3]]
    with contextlib.suppress(BaseException):
        _send(conn, dumps(done))
    os._exit(0)


_FORGOTTEN: list[Any] = []


def _forget_callers(frame: Any) -> None:
    """Empty the local variables of every function that called this process's test (the grader's
    frames, which this process never returns to; a module's namespace is left alone): a test that
    walks up the stack finds no candidate's source there."""
    while frame is not None:
        if not frame.f_code.co_flags & 0x1:  # not a function's frame (CO_OPTIMIZED): a module's namespace
            frame = frame.f_back
            continue
        try:
            names = list(frame.f_locals)
            _FORGOTTEN.append(dict(frame.f_locals))  # kept alive: no object's finalizer runs here
            if sys.version_info >= (3, 13):
                for name in names:
                    frame.f_locals[name] = None
            else:
                local = frame.f_locals
                for name in names:
                    local[name] = None
                ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
        except Exception:
            pass
        frame = frame.f_back


def run_test(
    test: Callable[..., Any],
    conn: socket.socket,
    name: str,
    *,
    guard: Any = None,
    seconds: float = 10.0,
    wall_factor: float = 3.0,
    watched: list[str] | None = None,
) -> None:
    """Run ``test`` on the proxy for the candidate at the other end of ``conn``, in a fresh process
    forked from this one; return when it has ended (killed, with all it started, after ``seconds``
    of CPU or ``wall_factor`` times that of wall time, plus :data:`GRACE`). ``watched``: the folders whose new
    entries are deleted afterwards where namespaces are not available."""
    isolated = namespaces_available()
    folders = [f for f in (watched or []) if os.path.isdir(f)]
    before = _snapshot(folders) if not isolated and folders else set()
    pid = os.fork()
    if pid == 0:
        try:
            _test_main(test, conn, name, guard, seconds, wall_factor, isolated)
        finally:
            os._exit(1)
    conn.close()
    deadline = time.monotonic() + seconds * wall_factor + GRACE
    try:
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.001)
    finally:
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            with contextlib.suppress(OSError):
                target()
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        if not isolated and folders:
            _remove_new(folders, before)
