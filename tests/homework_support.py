"""Shared helpers for the homework and grader tests (not a test module).

Building the homework (``otter assign``) costs seconds, so it happens once per test session,
whichever test module asks first: :func:`homework` builds the homework it is asked for and
every other one that is not built or is stale, in one process;
builds are serialized across processes with a lock file (two ``otter assign`` runs on one
homework folder would delete each other's files).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import zipfile
from pathlib import Path

from attngrade.authoring.assign import LIGHT_MODULES, build
from attngrade.homework import Homework, all_homework
from attngrade.sandboxed.integrity import INTEGRITY_FILE

_lock = threading.Lock()
_built: list[Homework] | None = None
_one: dict[str, Homework] = {}
_LOCK_FILE = Path(tempfile.gettempdir()) / "attnbook-homework-build.lock"


@contextlib.contextmanager
def _build_lock():
    with _lock, open(_LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _build(stale: list[Homework]) -> None:
    # under pytest-xdist the other worker keeps the second core busy: one otter process builds them all
    jobs = 1 if os.environ.get("PYTEST_XDIST_WORKER") else None
    problems = build(stale, jobs=jobs, verify=False, otter_tests=False)
    if problems:  # another process may have been building the same folder: once more, alone
        still = [hw for hw in stale if not is_current(hw)]
        problems = build(still, jobs=jobs, verify=False, otter_tests=False) if still else []
    assert not problems, "\n".join(problems)


def built_homework() -> list[Homework]:
    """Every homework, built if its dist/ is missing or older than its master.

    otter's own run of the solutions is skipped here (it is what ``make assignments`` adds); the
    class grader grades the solutions in tests/homework/test_mutations.py with the same tests.
    """
    global _built
    with _build_lock():
        if _built is None:
            homeworks = all_homework()
            stale = [hw for hw in homeworks if not is_current(hw)]
            if stale:
                _build(stale)
            _built = homeworks
        return _built


def homework(name: str) -> Homework:
    """One homework, built (only it) if its dist/ is missing or stale."""
    if _built is not None:
        for hw in _built:
            if hw.name == name:
                return hw
    with _build_lock():
        if name not in _one:
            matches = [hw for hw in all_homework() if hw.name == name]
            if not matches:
                raise KeyError(name)
            hw = matches[0]
            if not is_current(hw):  # and every other stale homework with it: importing otter is
                # most of a build's cost, so one process builds them all (a fresh checkout has none)
                _build([other for other in all_homework() if other.name == name or not is_current(other)])
            _one[name] = hw
        return _one[name]


# -- bubblewrap and ordinary users ------------------------------------------------------------


def bwrap_available() -> str | None:
    """The reason bubblewrap cannot make a sandbox here, or None when it can."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    try:
        proc = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--proc", "/proc", "--dev", "/dev", "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap does not run: {exc}"
    if proc.returncode != 0:
        return f"bwrap cannot create namespaces here: {proc.stderr.strip()[-300:]}"
    return None


def user_namespace_available() -> str | None:
    """The reason an unprivileged user namespace (as uid 1000) cannot be made here, or None."""
    why = bwrap_available()
    if why:
        return why
    proc = subprocess.run(
        [
            "bwrap",
            "--unshare-user",
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "id",
            "-u",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode != 0 or proc.stdout.strip() != "1000":
        return f"user namespaces are not available: {proc.stderr.strip()[-300:]}"
    return None


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def autograder_zip(hw: Homework) -> Path | None:
    zips = sorted((hw.dist / "autograder").glob(f"{hw.name}-autograder_*.zip"))
    return zips[-1] if zips else None


def is_current(hw: Homework) -> bool:
    """Built (dist/ newer than the master and grading.yml), and its autograder zip ships the
    integrity list and today's copy of every module of attngrade it carries (LIGHT_MODULES). One
    criterion for every worker: a homework found stale is rebuilt once, under the lock, before
    anyone grades with it."""
    if not hw.is_built():
        return False
    path = autograder_zip(hw)
    if path is None:
        return False
    src = Path(__file__).resolve().parents[1] / "src" / "attngrade"
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        if f"files/attnbook_pkg/{INTEGRITY_FILE}" not in names:
            return False
        for module in LIGHT_MODULES:
            name = f"files/attnbook_pkg/src/attngrade/{module}"
            if name not in names or z.read(name) != (src / module).read_bytes():
                return False
        listed = json.loads(z.read(f"files/attnbook_pkg/{INTEGRITY_FILE}"))["forbidden"]
    return listed == hw.forbidden
