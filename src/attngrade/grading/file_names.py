"""Safe names for a run's output files: a student's feedback file is named after the submission,
any name a file system gave us, made safe for every file system and distinct from every other
student's (:func:`unique_filenames`).
"""

from __future__ import annotations

import hashlib
import os
import unicodedata

MAX_FILENAME_BYTES = 150
"""The longest name (in UTF-8 bytes) :func:`safe_filename` returns."""
_KEEP = set(" -_.,+()@")
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, at a character boundary and not between a
    letter and its combining marks."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    cut = data[:limit].decode("utf-8", "ignore")
    while cut and unicodedata.category(text[len(cut)]).startswith("M"):
        cut = cut[:-1]
    return cut


def safe_filename(name: str) -> str:
    """A file name (no extension) for ``name`` that every file system accepts and a person can
    read: letters of any script, digits, and `` -_.,+()@`` are kept, everything else (path
    separators, control and bidirectional characters, quotes, ``<>:|?*``) becomes ``_``; at most
    :data:`MAX_FILENAME_BYTES` UTF-8 bytes. A name that is already safe is returned as is; any
    other gets ``-`` and 8 hex digits of a hash of the original, so that two names never give the
    same file name (except by case, see :func:`unique_filenames`)."""
    text = unicodedata.normalize("NFC", os.fsencode(name).decode("utf-8", "backslashreplace"))
    cleaned = "".join(c if unicodedata.category(c)[0] in "LMN" or c in _KEEP else "_" for c in text)
    while "__" in cleaned:
        cleaned = cleaned.replace("__", "_")
    cleaned = cleaned.strip(" ._")
    if cleaned.split(".")[0].upper().strip() in _RESERVED:
        cleaned = "_" + cleaned
    if cleaned and cleaned == name and len(cleaned.encode("utf-8")) <= MAX_FILENAME_BYTES:
        return cleaned
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    base = _cut(cleaned, MAX_FILENAME_BYTES - 9).rstrip(" ._") or "submission"
    return f"{base}-{digest}"


def unique_filenames(names: list[str]) -> list[str]:
    """Safe file names for ``names`` (in the same order), distinct even on a file system that
    ignores case or Unicode normalisation: where two collide, the one that sorts later gets
    ``-2``, ``-3``, ... The result depends only on the set of names, not on their order."""
    taken: set[str] = set()
    chosen: dict[int, str] = {}
    for i in sorted(range(len(names)), key=lambda k: (names[k], k)):
        base = safe_filename(names[i])
        candidate, n = base, 1
        while unicodedata.normalize("NFC", candidate).casefold() in taken:
            n += 1
            suffix = f"-{n}"
            candidate = _cut(base, MAX_FILENAME_BYTES - len(suffix)) + suffix
        taken.add(unicodedata.normalize("NFC", candidate).casefold())
        chosen[i] = candidate
    return [chosen[i] for i in range(len(names))]
