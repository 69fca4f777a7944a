"""What the worker does after each submission: kill every process the submission left in the
sandbox's pid namespace, empty the folders it could write to (leaving mounts alone), and remove its
System V IPC objects; and the child's working folder, which that empties."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import time

#: folders the sandbox may write to (tmpfs mounts, emptied after every submission)
WRITABLE = ("/tmp", "/dev/shm")

#: whether this worker runs in a sandbox of its own (False only with --unsafe-no-sandbox)
SANDBOXED = True


def workdir() -> str:
    """The child's working folder: in the sandbox's private /tmp, or (unsandboxed) the worker's own
    temporary folder, made when the worker starts."""
    return "/tmp/work" if SANDBOXED else UNSAFE_WORKDIR


UNSAFE_WORKDIR = ""


def other_pids() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]


def clean_up(child: int | None = None) -> None:
    """Kill whatever a submission left running, and empty the folders it could write to.

    Outside a sandbox (``--unsafe-no-sandbox``) only the child's own session and folder."""
    if not SANDBOXED:
        if child is not None:
            try:
                os.killpg(child, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(workdir(), ignore_errors=True)
        return
    for _ in range(200):
        pids = other_pids()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, os.WNOHANG)
            except OSError:
                pass
        time.sleep(0.002)
    keep = _mounts_within(WRITABLE)
    for folder in WRITABLE:
        _empty(folder, keep)
    _remove_ipc()


def mount_points(mountinfo: str) -> list[str]:
    """The mount points listed in ``/proc/self/mountinfo`` (its fifth field), with the kernel's octal
    escapes decoded: a space is written ``\\040``, a tab ``\\011``, a newline ``\\012`` and a
    backslash ``\\134`` (a checkout at ``/tmp/my course`` is mounted at ``/tmp/my\\040course``)."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


def _mounts_within(folders: tuple[str, ...]) -> set[str]:
    """Mount points inside ``folders`` and the folders above them (e.g. a Python installed under
    /tmp, mounted read-only on top of the private /tmp): the clean-up leaves those alone."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            points = mount_points(f.read())
    except OSError:
        return set()
    return folders_to_keep(points, folders)


def folders_to_keep(points: list[str], folders: tuple[str, ...]) -> set[str]:
    """The mount points among ``points`` that lie inside ``folders``, and every folder between
    them and that folder: what emptying ``folders`` must not delete or descend into."""
    keep: set[str] = set()
    for point in points:
        for folder in folders:
            if point.startswith(folder.rstrip("/") + "/"):
                path = point
                while path != folder and path not in keep:
                    keep.add(path)
                    path = os.path.dirname(path)
    return keep


def _empty(folder: str, keep: set[str]) -> None:
    """Delete everything in ``folder`` except the mounts in ``keep`` (and the folders above them)."""
    try:
        entries = os.listdir(folder)
    except OSError:
        return
    for entry in entries:
        path = os.path.join(folder, entry)
        try:
            if path in keep:
                if not os.path.ismount(path):
                    _empty(path, keep)
            elif os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


def _remove_ipc() -> None:
    """Remove System V shared memory, semaphores and message queues (the sandbox's own)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for table, rm in (("shm", libc.shmctl), ("sem", libc.semctl), ("msg", libc.msgctl)):
        try:
            with open(f"/proc/sysvipc/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and fields[1].lstrip("-").isdigit():
                ident = int(fields[1])
                if table == "sem":
                    rm(ident, 0, 0)  # IPC_RMID = 0
                else:
                    rm(ident, 0, None)
