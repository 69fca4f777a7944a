"""The homework's list where its tests run (``grader.check``, otter's autograder): where it comes
from (:func:`configure`, the environment variable, the :data:`INTEGRITY_FILE`), the guard for it
(:func:`current_guard`), and one call of the student's function watched (:func:`watch_call`), with
uninitialised memory filled as in the class grader."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .guard import ForbiddenReference, Guard

#: The file (JSON ``{"homework": ..., "forbidden": [...]}``) that carries a homework's forbidden
#: list to where its tests run.
INTEGRITY_FILE = "attngrade_integrity.json"
#: Where :func:`current_guard` looks for it, relative to the working directory, besides the copy
#: inside the ``attngrade`` package (``_integrity.json``, written only into the shipped copy).
SEARCH_PATHS = (INTEGRITY_FILE, os.path.join("attnbook_pkg", INTEGRITY_FILE))
#: (in ``attngrade/sandboxed/``, where the homework builder writes it: :mod:`attngrade.authoring.assign`)
_PACKAGE_FILE = Path(__file__).parent.with_name("_integrity.json")
ENV_VAR = "ATTNGRADE_FORBIDDEN"


_configured: list[str] | None = None
_cache: dict[str, Any] = {"key": None, "guard": None}
_cache_lock = threading.Lock()


def configure(forbidden: list[str] | None) -> None:
    """Set (or with ``None`` clear) the forbidden list for this process, besides any found on disk."""
    global _configured
    _configured = None if forbidden is None else list(forbidden)


def _read_list(path: Path) -> list[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    names = data.get("forbidden") if isinstance(data, dict) else data
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def _sources() -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    if _configured is not None:
        found.append(("configure", tuple(_configured)))
    env = os.environ.get(ENV_VAR)
    if env:
        found.append(("env", env))
    for path in (*(Path.cwd() / p for p in SEARCH_PATHS), _PACKAGE_FILE) if _cwd_ok() else (_PACKAGE_FILE,):
        try:
            st = path.stat()
        except OSError:
            continue
        found.append((str(path), (st.st_mtime_ns, st.st_size)))
    return found


def _cwd_ok() -> bool:
    try:
        Path.cwd()
        return True
    except OSError:
        return False


def forbidden_from_environment() -> list[str]:
    """The forbidden list that applies here: the union of every source :func:`current_guard` reads."""
    names: list[str] = []
    for source, value in _sources():
        if source == "configure":
            names.extend(value)
        elif source == "env":
            try:
                data = json.loads(value)
            except ValueError:
                data = [v.strip() for v in value.split(",")]
            names.extend(n for n in (data if isinstance(data, list) else []) if isinstance(n, str) and n)
        else:
            names.extend(_read_list(Path(source)))
    return list(dict.fromkeys(names))


def current_guard() -> Guard | None:
    """A :class:`Guard` for this process's homework, or ``None`` where no forbidden list is found."""
    key = tuple(_sources())
    with _cache_lock:
        if _cache["key"] == key:
            return _cache["guard"]
        names = forbidden_from_environment()
        guard = Guard(names) if names else None
        _cache["key"], _cache["guard"] = key, guard
        return guard


@contextlib.contextmanager
def watch_call(name: str, guard: Guard | None = None) -> Iterator[Guard | None]:
    """Watch one call of the student's function ``name``; raise :class:`ForbiddenReference` after
    it if it ran a forbidden reference (even if the call itself raised)."""
    guard = current_guard() if guard is None else guard
    if guard is None:
        yield None
        return
    guard.reset()
    failed = None
    try:
        with guard.watch(), uninitialised_memory_filled():
            yield guard
    except BaseException as exc:  # the student's own error: the forbidden reference says more
        failed = exc
    if guard.hits:
        raise ForbiddenReference(guard.message(name), guard.hits) from None
    if failed is not None:
        raise failed


@contextlib.contextmanager
def uninitialised_memory_filled() -> Iterator[None]:
    """While the block runs, the memory that ``torch.empty`` and its kin hand out is filled with NaN
    (the largest integer for integer dtypes), as the sandbox does for all of grading
    (:func:`attngrade.sandboxed.worker.preload`): an answer that reads memory it never wrote gets the
    same score on every run, and in ``grader.check`` and otter's autograder (:func:`watch_call`) the
    score the class grader gives. PyTorch's C++ switches (``torch.use_deterministic_algorithms``
    also imports inductor's config, and with it triton); a caller's own deterministic mode is kept,
    and every switch is put back after."""
    switches = getattr(sys.modules.get("torch"), "_C", None)
    try:
        saved = (
            switches._get_deterministic_algorithms(),
            switches._get_deterministic_algorithms_warn_only(),
            switches._get_deterministic_fill_uninitialized_memory(),
        )
    except AttributeError:  # torch is not imported (nothing to fill), or has no such switches
        yield
        return
    switches._set_deterministic_algorithms(True, warn_only=saved[1] if saved[0] else True)
    switches._set_deterministic_fill_uninitialized_memory(True)
    try:
        yield
    finally:
        switches._set_deterministic_algorithms(saved[0], warn_only=saved[1])
        switches._set_deterministic_fill_uninitialized_memory(saved[2])
