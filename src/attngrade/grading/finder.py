"""Finding the submissions in a class folder, and whose each one is: the only code that decides a
student's name (:mod:`.notebook` reads what it finds; the name travels with it to the gradebook).

It runs in the grader's own process on a folder nobody has checked, so it only lists folders: it
never opens a file, never follows a symbolic link and never descends more than one level.

**What is a submission** (:func:`find_submissions`): in the class folder,

* every ``*.ipynb`` and ``*.zip`` file (suffix in any case); the student's name is the file name
  without that suffix, exactly as given (``Anna Lee, "A".ipynb`` is ``Anna Lee, "A"``), so
  instructors collect one file per student and name it after the student: ``alice.zip``,
  ``bob.zip``, ... even if every zip holds ``hw02.ipynb``;
* every sub-folder that directly holds at least one ``*.ipynb`` or ``*.zip``: a folder per student
  (``alice/hw02.ipynb``, ``bob/hw02.zip``), the student's name being the folder's name. A student
  folder must hold exactly one notebook or zip; with two or more, that student's row is an error
  that names them (:mod:`.notebook` says so when it reads the folder). Folders without any (the
  ``--out`` folder, for instance) are not submissions.

Hidden names (``.x``, which includes ``.ipynb_checkpoints``) and ``__MACOSX`` are skipped. Symbolic
links and special files with a submission's name are listed, so that their row says why they
could not be read, but are never followed or opened; a link to a folder is not a student
folder. Two submissions with one name (``alice.ipynb`` and ``alice.zip``, or ``alice.zip`` and
``alice/``) are a :class:`ValueError` for the whole run. A name that is not UTF-8 is written with
``\\xNN`` escapes (:func:`decoded_name`), so that it can be written anywhere.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SUFFIXES = (".ipynb", ".zip")


@dataclass(frozen=True)
class Entry:
    """One submission of a class folder: whose it is and where it lies."""

    name: str
    """The student's name: the file's name without ``.ipynb``/``.zip``, or the student's folder."""
    path: Path
    """The file, or the student's folder."""


# -- names --------------------------------------------------------------------------------------


def shown(name: str, limit: int = 80) -> str:
    """A file or entry name as it may be shown in feedback: quoted, control and bidirectional
    characters escaped, cut to ``limit`` characters."""
    text = "".join(
        c if c.isprintable() and not _is_bidi(c) else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
        for c in name[:limit]
    )
    return f"'{text}{'...' if len(name) > limit else ''}'"


def _is_bidi(c: str) -> bool:
    return c in "\u061c\u200e\u200f" or "\u202a" <= c <= "\u202e" or "\u2066" <= c <= "\u2069"


def decoded_name(name: str) -> str:
    """A file name as text that can be written anywhere: bytes that were not UTF-8 (kept by
    Python as lone surrogates) are written ``\\xNN``."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")


def has_suffix(name: str) -> bool:
    """Whether ``name`` ends like a submission file (``.ipynb`` or ``.zip``, in any case)."""
    return name.lower().endswith(SUFFIXES)


def _stem(name: str) -> str:
    for suffix in SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _skipped(name: str) -> bool:
    return name.startswith(".") or name == "__MACOSX"


def entry_at(path: str | os.PathLike[str]) -> Entry:
    """The submission at ``path`` with its student's name: a folder's name, or a file's name
    without its suffix (the one place a name is derived from a path)."""
    path = Path(path)
    name = path.name
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            return Entry(decoded_name(name), path)
    except OSError:
        pass
    return Entry(decoded_name(_stem(name)), path)


# -- finding ------------------------------------------------------------------------------------


def candidates(entries: Iterable[os.DirEntry]) -> list[os.DirEntry]:
    """The entries of a folder that may be a submission file: suffix, not hidden, not a folder
    (symbolic links and special files are kept, to be refused with a reason)."""
    out = []
    for e in entries:
        if _skipped(e.name) or not has_suffix(e.name):
            continue
        try:
            if e.is_dir(follow_symlinks=False):
                continue
        except OSError:
            pass
        out.append(e)
    return out


def find_submissions(folder: str | os.PathLike[str], only: Iterable[str] | None = None) -> list[Entry]:
    """The submissions in ``folder``, sorted by path: its ``*.ipynb`` and ``*.zip`` files, and its
    sub-folders that hold one (one folder per student), each with its student's name; see the
    module's documentation. With ``only`` (student names, the command line's ``--only``), just theirs.

    Raises :class:`NotADirectoryError` if ``folder`` is not a folder and :class:`ValueError` if two
    submissions have one student name, or if a name in ``only`` has no submission."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder of submitted notebooks")
    paths: list[Path] = []
    with os.scandir(folder) as it:
        entries = list(it)
    paths.extend(Path(e.path) for e in candidates(entries))
    for e in entries:
        if _skipped(e.name):
            continue
        try:
            if not e.is_dir(follow_symlinks=False):
                continue
            with os.scandir(e.path) as inner:
                if candidates(inner):
                    paths.append(Path(e.path))
        except OSError:
            continue  # a folder we may not list is not a submission
    found = [entry_at(p) for p in sorted(paths)]
    by_name: dict[str, list[str]] = {}
    for entry in found:
        by_name.setdefault(entry.name, []).append(entry.path.name)
    twice = {n: ps for n, ps in by_name.items() if len(ps) > 1}
    if twice:
        listing = "; ".join(" and ".join(map(shown, ps)) for ps in twice.values())
        raise ValueError(f"{folder}: two submissions for one student: {listing}; keep one submission per student")
    if only is not None:
        wanted = set(only)
        missing = wanted - set(by_name)
        if missing:
            raise ValueError(f"no submission named {sorted(missing)} in {folder}")
        found = [entry for entry in found if entry.name in wanted]
    return found


def ignored_entries(folder: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """What :func:`find_submissions` leaves out of ``folder``, as (name, reason) pairs, sorted, so
    that no file vanishes from a class without a word: hidden files, files that are neither
    ``.ipynb`` nor ``.zip``, and folders that hold no submission."""
    folder = Path(folder)
    kept = {entry.path.name for entry in find_submissions(folder)}
    out = []
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name in kept:
            continue
        try:
            is_dir = e.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if e.name == "__MACOSX":
            reason = "macOS's archive metadata"
        elif e.name.startswith("."):
            reason = "a hidden " + ("folder" if is_dir else "file") + " (its name starts with '.')"
        elif is_dir:
            reason = "a folder with no .ipynb or .zip file in it"
        else:
            reason = "not a .ipynb or .zip file"
        out.append((shown(decoded_name(e.name)), reason))
    return out
