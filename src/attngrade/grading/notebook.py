"""Reading submitted notebooks: the only code of the grader that opens the files students sent.

It runs in the grader's own process (as root or as an ordinary user), before any sandbox, on files
nobody has checked, so it never executes anything, never follows a symbolic link, never opens
anything but a regular file (opening a fifo would block forever), never writes to disk (zips are
read in memory, nothing is extracted) and never reads or inflates more than :data:`MAX_BYTES`.
Everything a file can get wrong raises :class:`SubmissionError`, whose message goes into that
student's feedback: it names the file (never the instructor's folders) and what is wrong with it.

Which files are submissions, and whose each is, is :mod:`.finder`'s business: the reader takes
an :class:`~.finder.Entry` (name and path) and reads it.

**Reading** (:func:`read_submission`): a notebook is UTF-8 JSON (a byte-order mark is accepted,
UTF-16 with a byte-order mark too), nbformat 4 (``cells``) or 3 (``worksheets[].cells`` with
``input``); a zip (whatever its suffix: a file that starts like a zip is read as one) must hold
exactly one notebook, not counting hidden files, ``__MACOSX/``, ``.ipynb_checkpoints/``, symbolic
link entries and entries whose name is absolute or climbs out with ``..`` (all ignored: nothing is
extracted, so they cannot do harm, but they are not the submission either); other files (the PDF
and ``.OTTER_LOG`` of otter's export) are ignored. A zip holding no notebook but exactly one zip
is opened once more (a zipped export). Entries must be stored or deflated (what every zip tool
writes by default; bzip2 and LZMA can inflate without bound in one step, so they are refused with
a message asking for an ordinary zip), not encrypted, and inflate to at most :data:`MAX_BYTES`,
counted while inflating (the header's size is not trusted).

**Cells**: the source of each code cell, in order, with ``\\r\\n`` and ``\\r`` turned into ``\\n``; a
list of strings is joined, a string is taken as is. Markdown, raw and heading cells are not code.
A cell that is not a JSON object, or a code cell whose source is anything else (``null``, numbers,
nested lists, an object), is read as an *empty* code cell and a note says so
(:attr:`Submission.notes`): such a cell holds no code Jupyter could run, and grading the other
cells never gives a student less than rejecting the whole notebook would. An empty cell keeps its
place, so cell numbers in the feedback match the notebook's code cells.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .finder import Entry, candidates, decoded_name, entry_at, has_suffix
from .finder import shown as _show

MAX_BYTES = 64 * 2**20
"""The most bytes a notebook may have once its outputs are removed (the notebook inflated from a
zip: with them)."""
MAX_FILE_BYTES = 512 * 2**20
"""The most bytes a submitted notebook file may have with its outputs (which are removed before
the limit of :data:`MAX_BYTES` applies: outputs never count against a notebook)."""
MAX_ZIP_ENTRIES = 10_000
"""The most entries a submitted zip may list."""
MAX_ZIP_DIRECTORY_BYTES = 4 * 2**20
"""The largest central directory of a submitted zip (bounds what reading its listing allocates)."""
MAX_JSON_CONTAINERS = 2_000_000
"""At most this many ``{`` and ``[`` in a notebook (bounds what parsing it allocates)."""
MAX_CELLS = 20_000
"""The most cells a notebook may have."""
MAX_NOTES = 10
"""Notes about odd cells kept per submission (the rest are counted)."""

_CHUNK = 2**20
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


class SubmissionError(ValueError):
    """A submission that cannot be read; the message says what is wrong with which file and is
    written into that student's feedback."""


@dataclass
class Submission:
    name: str
    """The student's name, as the finder gave it (:attr:`.finder.Entry.name`)."""
    path: Path | None
    """The file that was read (inside the student's folder, if there is one); None for code
    given as text (``Grader.grade_sources``)."""
    cells: list[str]
    """The code cells' source, in order."""
    notes: list[str] = field(default_factory=list)
    """What was odd but not fatal (cells read as empty), for the student's feedback."""


# -- reading bytes ------------------------------------------------------------------------------


def _kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISFIFO, "a fifo (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def _size(n: int) -> str:
    return f"{n} bytes" if n < 2**20 else f"{n / 2**20:.1f} MiB ({n} bytes)"


def _read_file(path: Path, shown: str, dir_fd: int | None = None, limit: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file, refusing links, special files and files over ``limit`` bytes."""
    name = path.name if dir_fd is not None else path
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        raise SubmissionError(f"{shown} does not exist (it was removed while grading)") from None
    except OSError as exc:
        raise SubmissionError(f"{shown} could not be read ({exc.strerror or type(exc).__name__})") from None
    if stat.S_ISLNK(st.st_mode):
        raise SubmissionError(
            f"{shown} is a symbolic link; a submission must be a regular file (the link was not followed)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise SubmissionError(f"{shown} is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise SubmissionError(
            f"{shown} is {_size(st.st_size)}, more than the {_size(limit)} allowed "
            "(clear the notebook's outputs and submit it again)"
        )
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise SubmissionError(f"{shown} could not be opened ({exc.strerror or type(exc).__name__})") from None
    try:
        st2 = os.fstat(fd)
        if not stat.S_ISREG(st2.st_mode) or (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
            raise SubmissionError(f"{shown} changed while it was being read")
        chunks, total = [], 0
        while total <= limit:
            try:
                chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
            except BlockingIOError:
                raise SubmissionError(f"{shown} is not a regular file") from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise SubmissionError(f"{shown} could not be read ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
    if total > limit:
        raise SubmissionError(f"{shown} is more than the {_size(limit)} allowed")
    return b"".join(chunks)


# -- notebooks ----------------------------------------------------------------------------------


def _decode(data: bytes, shown: str) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise SubmissionError(
            f"{shown} is not UTF-8 text (invalid byte at offset {exc.start}); a notebook saved by Jupyter is UTF-8"
        ) from None


def _clean_text(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from "\ud800" escapes: replaced, pairs kept
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _cell_source(value: object) -> str | None:
    """A code cell's source as text, or None if it is not a string or a list of strings."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "".join(value)
    return None


def _parse(text: str, shown: str) -> object:
    containers = text.count("{") + text.count("[")
    if containers > MAX_JSON_CONTAINERS:
        raise SubmissionError(
            f"{shown} holds {containers} JSON objects and lists, more than the "
            f"{MAX_JSON_CONTAINERS} allowed (clear the notebook's outputs and submit it again)"
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SubmissionError(
            f"{shown} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg}); is it a notebook saved by Jupyter?"
        ) from None
    except RecursionError:
        raise SubmissionError(f"{shown} is JSON nested too deeply to be a notebook") from None
    except (ValueError, MemoryError) as exc:  # e.g. integers too long to convert
        raise SubmissionError(f"{shown} could not be parsed as JSON ({type(exc).__name__})") from None


def notebook_cells(nb: object, shown: str) -> tuple[list[str], list[str]]:
    """(code cells, notes) of a parsed notebook (nbformat 4, or 3 with worksheets)."""
    if not isinstance(nb, dict):
        raise SubmissionError(
            f"{shown} is JSON but not a Jupyter notebook: it is {_describe(nb)}, not an object with cells"
        )
    notes: list[str] = []
    if "cells" in nb:
        cells = nb["cells"]
        if not isinstance(cells, list):
            raise SubmissionError(f"{shown} is not a Jupyter notebook: its cells are {_describe(cells)}, not a list")
    elif "worksheets" in nb:  # nbformat 3 (and 2)
        sheets = nb["worksheets"]
        if not isinstance(sheets, list):
            raise SubmissionError(
                f"{shown} is not a Jupyter notebook: its worksheets are {_describe(sheets)}, not a list"
            )
        cells = []
        for i, sheet in enumerate(sheets):
            inner = sheet.get("cells") if isinstance(sheet, dict) else None
            if isinstance(inner, list):
                cells.extend(inner)
            else:
                notes.append(f"worksheet {i + 1} of {shown} has no list of cells; it was skipped")
    else:
        raise SubmissionError(f"{shown} is JSON but not a Jupyter notebook (it has no cells)")
    if len(cells) > MAX_CELLS:
        raise SubmissionError(f"{shown} has {len(cells)} cells, more than the {MAX_CELLS} allowed")
    out: list[str] = []
    odd = 0
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict):
            out.append("")
            odd += 1
            if odd <= MAX_NOTES:
                notes.append(
                    f"cell {i + 1} of {shown} is {_describe(cell)}, not a notebook cell; "
                    f"it was read as an empty code cell (code cell {len(out)})"
                )
            continue
        if cell.get("cell_type") != "code":
            continue
        value = cell["source"] if "source" in cell else cell.get("input", "")
        src = _cell_source(value)
        if src is None:
            odd += 1
            if odd <= MAX_NOTES:
                notes.append(
                    f"code cell {len(out) + 1} of {shown} has a source that is {_describe(value)}"
                    f"{' (not only strings)' if isinstance(value, list) else ''}, not text; "
                    "it was read as an empty cell"
                )
            src = ""
        out.append(_clean_text(src))
    if odd > MAX_NOTES:
        notes.append(f"... and {odd - MAX_NOTES} more cells of {shown} read as empty")
    return out, notes


_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')  # a string, or a bracket
_OUTPUTS_KEY = re.compile(rb'"outputs"\s*:\s*\[')


def strip_outputs(data: bytes) -> bytes:
    """A notebook's JSON with the value of every ``"outputs"`` key replaced by ``[]``, without
    parsing it (so that a notebook with hundreds of megabytes of outputs is read in its code's
    size). Bytes that are not such JSON come back unchanged, for the parser to refuse."""
    pieces, kept_from = [], 0
    tokens = _JSON_TOKEN.finditer(data)
    for token in tokens:
        if token.group() != b'"outputs"':
            continue
        key = _OUTPUTS_KEY.match(data, token.start())
        if key is None:
            continue
        depth = 0
        for inner in tokens:  # from the opening "[" to its match, strings skipped whole
            mark = inner.group()
            depth += 1 if mark in (b"[", b"{") else -1 if mark in (b"]", b"}") else 0
            if depth == 0:
                break
        else:
            return data  # unterminated: not a notebook
        pieces += [data[kept_from : key.end() - 1], b"[]"]
        kept_from = inner.end()
    if not pieces:
        return data
    return b"".join(pieces) + data[kept_from:]


def _notebook_from_bytes(data: bytes, shown: str) -> tuple[list[str], list[str]]:
    if not data.strip():
        raise SubmissionError(f"{shown} is empty" if not data else f"{shown} holds only white space")
    notes = []
    if len(data) > MAX_BYTES or data.count(b"{") + data.count(b"[") > MAX_JSON_CONTAINERS:
        stripped = strip_outputs(data)
        if len(stripped) < len(data):
            notes.append(
                f"{shown}: its outputs ({_size(len(data) - len(stripped))}) were left out; outputs are not graded"
            )
        data = stripped
        if len(data) > MAX_BYTES:
            raise SubmissionError(
                f"{shown} is {_size(len(data))} without its outputs, more than the {_size(MAX_BYTES)} allowed"
            )
    cells, more = notebook_cells(_parse(_decode(data, shown), shown), shown)
    return cells, notes + more


# -- zips ---------------------------------------------------------------------------------------


def _unsafe_entry(name: str) -> bool:
    parts = name.replace("\\", "/").split("/")
    return name.startswith(("/", "\\")) or ".." in parts or "\x00" in name or (len(name) > 1 and name[1] == ":")


def _ignored_entry(name: str) -> bool:
    parts = [p for p in name.replace("\\", "/").split("/") if p]
    return not parts or parts[0] == "__MACOSX" or any(p.startswith(".") for p in parts)


def _is_symlink_entry(info: zipfile.ZipInfo) -> bool:
    return info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16)


def _check_directory(data: bytes, shown: str) -> None:
    """Refuse zips whose listing is too large before :mod:`zipfile` parses all of it."""
    end = getattr(zipfile, "_EndRecData", None)
    if end is None:
        return
    try:
        rec = end(io.BytesIO(data))
    except Exception:
        return  # zipfile will say what is wrong
    if not rec:
        return
    entries, size = rec[getattr(zipfile, "_ECD_ENTRIES_TOTAL", 4)], rec[getattr(zipfile, "_ECD_SIZE", 5)]
    if entries > MAX_ZIP_ENTRIES or size > MAX_ZIP_DIRECTORY_BYTES:
        raise SubmissionError(
            f"{shown} lists {entries} entries ({_size(size)} of listing), more than "
            f"the {MAX_ZIP_ENTRIES} entries allowed"
        )


def _entry_bytes(archive: zipfile.ZipFile, info: zipfile.ZipInfo, shown: str) -> bytes:
    if info.flag_bits & 0x1:
        raise SubmissionError(f"{shown} is encrypted (password-protected); submit a zip without a password")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        method = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "LZMA", 9: "deflate64"}.get(
            info.compress_type, f"number {info.compress_type}"
        )
        raise SubmissionError(
            f"{shown} is compressed with method {method}, which the grader does not "
            "read; zip it again with the ordinary (deflate) compression"
        )
    if info.file_size > MAX_BYTES:
        raise SubmissionError(f"{shown} inflates to {_size(info.file_size)}, more than the {_size(MAX_BYTES)} allowed")
    chunks, total = [], 0
    try:
        with archive.open(info) as f:
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > MAX_BYTES:
                    raise SubmissionError(f"{shown} inflates to more than the {_size(MAX_BYTES)} allowed")
                chunks.append(chunk)
    except SubmissionError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise SubmissionError(f"{shown} is corrupt ({_zip_reason(exc)})") from None
    except Exception as exc:  # anything else zipfile may raise on crafted headers
        raise SubmissionError(f"{shown} could not be read ({type(exc).__name__})") from None
    return b"".join(chunks)


def _zip_reason(exc: BaseException) -> str:
    text = str(exc)
    if "CRC" in text:
        return "its checksum does not match: the data is damaged"
    if isinstance(exc, zlib.error):
        return "its compressed data is damaged"
    return _show(text, 120).strip("'") if text else type(exc).__name__


def _zip_cells(data: bytes, shown: str, depth: int = 0) -> tuple[list[str], list[str], str]:
    """(cells, notes, name of the notebook read) of the one notebook in a zip."""
    _check_directory(data, shown)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise SubmissionError(f"{shown} is not a valid zip file ({_zip_reason(exc)})") from None
    except Exception as exc:  # crafted headers: ValueError, struct.error, UnicodeDecodeError, ...
        raise SubmissionError(f"{shown} is not a readable zip file ({type(exc).__name__})") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_ZIP_ENTRIES:
            raise SubmissionError(f"{shown} holds {len(infos)} entries, more than the {MAX_ZIP_ENTRIES} allowed")
        notebooks, zips, passed_over = [], [], []
        for info in infos:
            name = info.filename
            if info.is_dir():
                continue
            if _unsafe_entry(name) or _is_symlink_entry(info):
                if has_suffix(name):
                    passed_over.append(name)
                continue
            if _ignored_entry(name):
                continue
            if name.lower().endswith(".ipynb"):
                notebooks.append(info)
            elif name.lower().endswith(".zip"):
                zips.append(info)
        if not notebooks and len(zips) == 1 and depth == 0:
            inner = zips[0]
            inner_shown = f"{_show(inner.filename)} in {shown}"
            cells, notes, read = _zip_cells(_entry_bytes(archive, inner, inner_shown), inner_shown, depth + 1)
            return cells, notes, read
        if len(notebooks) != 1:
            names = [i.filename for i in notebooks]
            listing = ", ".join(_show(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            why = f"{shown} must hold exactly one notebook (.ipynb), it holds {len(names)}" + (
                f": {listing}" if names else ""
            )
            if passed_over:
                why += f" (ignored as links or unsafe names: {', '.join(_show(n) for n in passed_over[:5])})"
            raise SubmissionError(why)
        info = notebooks[0]
        inner_shown = f"{_show(info.filename)} in {shown}"
        cells, notes = _notebook_from_bytes(_entry_bytes(archive, info, inner_shown), inner_shown)
        return cells, notes, info.filename


# -- submissions --------------------------------------------------------------------------------


def _read_folder(path: Path, name: str) -> Submission:
    shown = _show(decoded_name(path.name))
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        dfd = os.open(path, flags)
    except OSError as exc:
        raise SubmissionError(
            f"the folder {shown} could not be opened ({exc.strerror or type(exc).__name__})"
        ) from None
    try:
        try:
            with os.scandir(dfd) as it:
                found = sorted(e.name for e in candidates(it))
        except OSError as exc:
            raise SubmissionError(
                f"the folder {shown} could not be listed ({exc.strerror or type(exc).__name__})"
            ) from None
        if len(found) != 1:
            listing = ", ".join(_show(decoded_name(n)) for n in found[:5])
            raise SubmissionError(
                f"the folder {shown} must hold exactly one notebook (.ipynb) or zip, "
                f"it holds {len(found)}" + (f": {listing}" if found else "")
            )
        inner = path / found[0]
        inner_shown = _show(decoded_name(f"{path.name}/{found[0]}"))
        data = _read_file(inner, inner_shown, dir_fd=dfd, limit=MAX_FILE_BYTES)
    finally:
        os.close(dfd)
    return _from_bytes(data, inner, name, inner_shown)


def _from_bytes(data: bytes, path: Path, name: str, shown: str) -> Submission:
    if data.startswith(_ZIP_MAGIC) or (path.name.lower().endswith(".zip") and data.strip()):
        cells, notes, _ = _zip_cells(data, shown)
    else:
        cells, notes = _notebook_from_bytes(data, shown)
    return Submission(name=name, path=path, cells=cells, notes=notes)


def read_submission(entry: Entry | str | os.PathLike[str]) -> Submission:
    """Read one submission (a notebook, a zip holding one, or a student's folder holding either)
    under the name the finder gave it (a bare path is named by :func:`.finder.entry_at`);
    :class:`SubmissionError` says why it cannot be read."""
    if not isinstance(entry, Entry):
        entry = entry_at(entry)
    path, name = entry.path, entry.name
    shown = _show(decoded_name(path.name))
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise SubmissionError(f"{shown} could not be read ({exc.strerror or type(exc).__name__})") from None
    if stat.S_ISDIR(st.st_mode):
        return _read_folder(path, name)
    data = _read_file(path, shown, limit=MAX_FILE_BYTES)
    if len(data) > MAX_BYTES and data.startswith(_ZIP_MAGIC):
        raise SubmissionError(f"{shown} is {_size(len(data))}, more than the {_size(MAX_BYTES)} a zip may have")
    return _from_bytes(data, path, name, shown)


def read_cells(path: str | os.PathLike[str]) -> list[str]:
    """The code cells of a submission (see :func:`read_submission`)."""
    return read_submission(path).cells
