"""The submission finder and reader (attngrade.grading.finder, attngrade.grading.notebook): every
malformed file is that student's problem only (a SubmissionError that says what is wrong), every
honest habit is read as Jupyter would, and each submission carries the name the finder gave it."""

from __future__ import annotations

import io
import json
import os
import stat
import struct
import threading
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from attngrade.grading import notebook
from attngrade.grading.file_names import MAX_FILENAME_BYTES, safe_filename, unique_filenames
from attngrade.grading.finder import Entry, find_submissions
from attngrade.grading.notebook import (
    MAX_BYTES,
    MAX_FILE_BYTES,
    Submission,
    SubmissionError,
    read_cells,
    read_submission,
)

CODE = ["import torch\n", "def f(x):\n", "    return x + 1\n"]


def nb(*cells, **extra) -> dict:
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": list(cells), **extra}


def code(source, **extra) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source, **extra}


def md(source) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": source}


def dumps(obj) -> bytes:
    return json.dumps(obj, indent=1, ensure_ascii=False).encode("utf-8")


def write(path: Path, data: bytes | dict) -> Path:
    path.write_bytes(dumps(data) if isinstance(data, dict) else data)
    return path


def zip_bytes(entries: dict[str, bytes | dict], method=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in entries.items():
            z.writestr(name, dumps(data) if isinstance(data, dict) else data)
    return buf.getvalue()


def patch_headers(data: bytes, **fields) -> bytes:
    """``data`` (a one-entry zip) with fields of both the local and the central header replaced:
    flags, method, crc, file_size (little-endian, as in the format)."""
    local = {"flags": (6, "<H"), "method": (8, "<H"), "crc": (14, "<L"), "file_size": (22, "<L")}
    central = {"flags": (8, "<H"), "method": (10, "<H"), "crc": (16, "<L"), "file_size": (24, "<L")}
    out = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        (info,) = z.infolist()
        start_dir = z.start_dir
    assert out[info.header_offset : info.header_offset + 4] == b"PK\x03\x04"
    assert out[start_dir : start_dir + 4] == b"PK\x01\x02"
    for key, value in fields.items():
        for base, table in ((info.header_offset, local), (start_dir, central)):
            off, fmt = table[key]
            struct.pack_into(fmt, out, base + off, value)
    return bytes(out)


def good_nb() -> dict:
    return nb(md("# hw02\n"), code(CODE), code("answer = f(1)\n"))


GOOD_CELLS = ["import torch\ndef f(x):\n    return x + 1\n", "answer = f(1)\n"]


def refused(path: Path, *words: str) -> str:
    with pytest.raises(SubmissionError) as info:
        read_submission(path)
    msg = str(info.value)
    for w in words:
        assert w.lower() in msg.lower(), msg
    assert str(path.parent) not in msg, "the message must not show the instructor's folders"
    return msg


# -- files that are not regular files ----------------------------------------------------------


def test_symlink_is_refused_and_not_followed(tmp_path):
    target = write(tmp_path / "secret_solutions.ipynb", good_nb())
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "mallory.ipynb").symlink_to(target)
    assert find_submissions(folder) == [Entry("mallory", folder / "mallory.ipynb")]  # listed, so its row says why
    msg = refused(folder / "mallory.ipynb", "symbolic link", "mallory.ipynb")
    assert "secret" not in msg


def test_symlinked_student_folder_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    write(tmp_path / "real" / "hw02.ipynb", good_nb())
    (tmp_path / "eve").symlink_to(tmp_path / "real")
    refused(tmp_path / "eve", "symbolic link")


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "bob.ipynb"
    os.mkfifo(fifo)
    assert find_submissions(tmp_path) == [Entry("bob", fifo)]
    result = {}

    def go():
        try:
            read_submission(fifo)
        except SubmissionError as exc:
            result["msg"] = str(exc)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "reading a fifo blocked"
    assert "fifo" in result["msg"] and "not a regular file" in result["msg"]


def test_missing_file(tmp_path):
    refused(tmp_path / "gone.ipynb", "gone.ipynb")


def test_too_large_is_refused_before_reading(tmp_path):
    big = tmp_path / "big.ipynb"
    with open(big, "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: nothing is written, nothing must be read
    refused(big, "big.ipynb", "MiB", "allowed")


# -- outputs never count against a notebook ----------------------------------------------------


def with_outputs(n_bytes: int) -> dict:
    """The good notebook, its first code cell carrying about ``n_bytes`` of outputs: a stream, an
    image and JSON whose strings hold brackets, quotes, escapes and the word "outputs"."""
    tricky = 'a "quoted" ] } [ { \\ "outputs": [ string\n'
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": [tricky] * 4},
        {"output_type": "display_data", "metadata": {}, "data": {"image/png": "iVBOR" + "A" * n_bytes}},
        {
            "output_type": "execute_result",
            "metadata": {},
            "execution_count": 1,
            "data": {"application/json": {"outputs": [[{"x": "]]"}]], "y": [1, {"z": []}]}},
        },
    ]
    return nb(md("# hw02\n"), code(CODE, outputs=outputs), code("answer = f(1)\n", outputs=[]))


def test_strip_outputs_empties_every_outputs_list_and_keeps_the_rest():
    data = dumps(with_outputs(1000))
    stripped = notebook.strip_outputs(data)
    parsed = json.loads(stripped)
    assert [c.get("outputs") for c in parsed["cells"]] == [None, [], []]
    original = json.loads(data)
    for cell in original["cells"]:
        if "outputs" in cell:
            cell["outputs"] = []
    assert parsed == original
    assert notebook.strip_outputs(b'{"cells": [{"outputs": [1, 2') == b'{"cells": [{"outputs": [1, 2'  # unterminated
    no_outputs_key = b'{"source": "outputs", "x": ["outputs"]}'  # the word as a value, never as a key
    assert notebook.strip_outputs(no_outputs_key) == no_outputs_key


def test_an_honest_notebook_with_outputs_over_the_limit_is_read_without_them(tmp_path, monkeypatch):
    monkeypatch.setattr(notebook, "MAX_BYTES", 50_000)
    path = write(tmp_path / "alice.ipynb", with_outputs(200_000))
    assert path.stat().st_size > 200_000
    sub = read_submission(path)
    assert sub.cells == GOOD_CELLS
    assert any("outputs" in note and "not graded" in note for note in sub.notes), sub.notes


def test_outputs_made_of_many_json_objects_do_not_count_either(tmp_path, monkeypatch):
    monkeypatch.setattr(notebook, "MAX_JSON_CONTAINERS", 1000)
    many = nb(
        code(CODE, outputs=[{"output_type": "stream", "name": "stdout", "text": ["x"]}] * 2000), code("answer = f(1)\n")
    )
    assert read_submission(write(tmp_path / "bob.ipynb", many)).cells == GOOD_CELLS


def test_code_over_the_limit_without_its_outputs_is_refused_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(notebook, "MAX_BYTES", 50_000)
    big_code = nb(
        code(
            "x = '" + "y" * 60_000 + "'\n",
            outputs=[{"output_type": "stream", "name": "stdout", "text": ["z" * 10_000]}],
        )
    )
    refused(write(tmp_path / "carol.ipynb", big_code), "carol.ipynb", "without its outputs", "allowed")


# -- notebooks that are not notebooks ------------------------------------------------------------


@pytest.mark.parametrize(
    "data, words",
    [
        (b"", ["empty"]),
        (b"  \r\n\t", ["white space"]),
        (b'{"cells": [], "x": "caf\xe9"}', ["not UTF-8"]),
        (b"import torch\nprint(1)\n", ["not valid JSON", "line 1"]),
        (b'{"cells": [', ["not valid JSON"]),
        (b"[" * 100_000 + b"]" * 100_000, ["nested too deeply"]),
        (b"{" + b'"a":{' * 50_000 + b"}" * 50_001, ["nested too deeply"]),
        (b'{"cells": [], "n": ' + b"9" * 5000 + b"}", ["could not be parsed"]),
        (b"[1, 2, 3]", ["not a Jupyter notebook", "a list"]),
        (b'"cells"', ["not a Jupyter notebook", "a string"]),
        (b"null", ["not a Jupyter notebook", "null"]),
        (b'{"metadata": {}, "nbformat": 4}', ["no cells"]),
        (b'{"cells": {"0": {}}}', ["cells are an object"]),
        (b'{"cells": "print(1)"}', ["cells are a string"]),
        (b'{"worksheets": 3}', ["worksheets are a number"]),
    ],
)
def test_not_a_notebook(tmp_path, data, words):
    refused(write(tmp_path / "carol.ipynb", data), "carol.ipynb", *words)


def test_too_many_json_containers(tmp_path, monkeypatch):
    monkeypatch.setattr(notebook, "MAX_JSON_CONTAINERS", 1000)
    refused(write(tmp_path / "wide.ipynb", b'{"cells": [' + b"{}," * 2000 + b"{}]}"), "JSON objects", "clear")


def test_too_many_cells(tmp_path, monkeypatch):
    monkeypatch.setattr(notebook, "MAX_CELLS", 100)
    refused(write(tmp_path / "many.ipynb", nb(*[code("x = 1\n")] * 101)), "101 cells")


@pytest.mark.parametrize(
    "bad, what",
    [
        ([1, 2, 3], "a list (not only strings)"),
        (["x = 1\n", ["nested"]], "a list (not only strings)"),
        (["x = 1\n", None], "a list (not only strings)"),
        (None, "null"),
        ({"text": "x = 1"}, "an object"),
        (42, "a number"),
    ],
)
def test_odd_source_is_an_empty_cell_and_the_rest_is_graded(tmp_path, bad, what):
    sub = read_submission(write(tmp_path / "dan.ipynb", nb(code(CODE), code(bad), code("answer = f(1)\n"))))
    assert sub.cells == [GOOD_CELLS[0], "", GOOD_CELLS[1]]  # numbering of code cells kept
    (note,) = sub.notes
    assert "code cell 2" in note and what in note and "empty" in note


@pytest.mark.parametrize("bad", [1, "code", None, [code("x = 1\n")]])
def test_cell_that_is_not_an_object_is_an_empty_cell(tmp_path, bad):
    sub = read_submission(write(tmp_path / "erin.ipynb", nb(code(CODE), bad, code("answer = f(1)\n"))))
    assert sub.cells == [GOOD_CELLS[0], "", GOOD_CELLS[1]]
    assert len(sub.notes) == 1 and "cell 2" in sub.notes[0] and "not a notebook cell" in sub.notes[0]


def test_notes_are_capped(tmp_path):
    sub = read_submission(write(tmp_path / "x.ipynb", nb(*[code([1])] * 500)))
    assert sub.cells == [""] * 500
    assert len(sub.notes) == notebook.MAX_NOTES + 1 and "490 more" in sub.notes[-1]


def test_lone_surrogate_in_source_is_replaced(tmp_path):
    sub = read_submission(
        write(tmp_path / "x.ipynb", b'{"cells": [{"cell_type": "code", "source": "s = \\"\\ud800\\"\\n"}]}')
    )
    assert sub.cells == ['s = "\ufffd"\n']
    sub.cells[0].encode("utf-8")


# -- honest habits -------------------------------------------------------------------------------


def test_plain_notebook(tmp_path):
    sub = read_submission(write(tmp_path / "alice.ipynb", good_nb()))
    assert sub == Submission("alice", tmp_path / "alice.ipynb", GOOD_CELLS, [])
    assert read_cells(tmp_path / "alice.ipynb") == GOOD_CELLS


def test_crlf_json_and_sources_and_bom(tmp_path):
    text = json.dumps(
        nb(code(["import torch\r\n", "def f(x):\r\n", "    return x + 1\r\n"]), code("a = 1\rb = 2\r\n")), indent=1
    ).replace("\n", "\r\n")
    sub = read_submission(write(tmp_path / "win.ipynb", b"\xef\xbb\xbf" + text.encode("utf-8")))
    assert sub.cells == [GOOD_CELLS[0], "a = 1\nb = 2\n"]


def test_utf16_with_bom(tmp_path):
    sub = read_submission(write(tmp_path / "w16.ipynb", json.dumps(good_nb()).encode("utf-16")))
    assert sub.cells == GOOD_CELLS


def test_bom_inside_a_cell_is_dropped(tmp_path):
    assert read_cells(write(tmp_path / "x.ipynb", nb(code("\ufeffx = 1\n")))) == ["x = 1\n"]


def test_markdown_raw_ignored_and_string_source(tmp_path):
    cells = read_cells(
        write(
            tmp_path / "x.ipynb",
            nb(
                md(["# Title\n", "text"]),
                {"cell_type": "raw", "metadata": {}, "source": "raw"},
                code("x = 1\ny = 2"),
                {"cell_type": "code", "metadata": {}},  # no source at all: empty
                {"source": "no type"},
                code([]),
            ),
        )
    )
    assert cells == ["x = 1\ny = 2", "", ""]


def test_notebook_saved_after_export(tmp_path):
    """outputs (including an error and an image), widget state, attachments, execution counts."""
    saved = nb(
        md(["![img](attachment:a.png)"]) | {"attachments": {"a.png": {"image/png": "iVBORw0KGgo="}}},
        code(
            CODE,
            execution_count=3,
            outputs=[
                {"output_type": "stream", "name": "stdout", "text": ["ok\n"]},
                {
                    "output_type": "display_data",
                    "data": {"image/png": "iVBORw0KGgo=", "text/plain": ["<Figure>"]},
                    "metadata": {},
                },
                {"output_type": "error", "ename": "AssertionError", "evalue": "", "traceback": ["\x1b[31m..."]},
            ],
        ),
        code(
            "grader.export(pdf=False)\n",
            execution_count=4,
            outputs=[
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {
                        "application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2},
                        "text/html": "<a href='hw02.zip'>download</a>",
                    },
                }
            ],
        ),
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3"},
            "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {"abc": {}}}},
            "otter": {"OK_FORMAT": True},
        },
    )
    cells = read_cells(write(tmp_path / "x.ipynb", saved))
    assert cells == [GOOD_CELLS[0], "grader.export(pdf=False)\n"]


def test_nbformat3(tmp_path):
    v3 = {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {"name": ""},
        "worksheets": [
            {
                "cells": [
                    {"cell_type": "heading", "level": 1, "source": ["hw02"]},
                    {"cell_type": "code", "language": "python", "input": CODE, "outputs": [], "prompt_number": 1},
                    {"cell_type": "markdown", "source": "text"},
                ],
                "metadata": {},
            },
            {"cells": [{"cell_type": "code", "language": "python", "input": "answer = f(1)\n", "outputs": []}]},
            "not a worksheet",
        ],
    }
    sub = read_submission(write(tmp_path / "old.ipynb", v3))
    assert sub.cells == GOOD_CELLS
    assert len(sub.notes) == 1 and "worksheet 3" in sub.notes[0]


@pytest.mark.parametrize(
    "stem",
    [
        "Anna Lee",
        "Lee, Anna",
        'O\'Brien "Jo"',
        "Zoë Ñúñez",
        "李小龍",
        "محمد",
        "a;b&c$(x)`y`",
        "é" * 110,  # 220 bytes + suffix: near the 255-byte limit of file names
    ],
)
def test_names_are_kept_exactly(tmp_path, stem):
    path = write(tmp_path / f"{stem}.ipynb", good_nb())
    assert find_submissions(tmp_path) == [Entry(stem, path)]
    sub = read_submission(path)
    assert sub.name == stem and sub.cells == GOOD_CELLS


def test_undecodable_file_name_is_readable(tmp_path):
    raw = os.path.join(os.fsencode(tmp_path), b"bad\xffname.ipynb")
    with open(raw, "wb") as f:
        f.write(dumps(good_nb()))
    (entry,) = find_submissions(tmp_path)
    sub = read_submission(entry)
    assert entry.name == sub.name == "bad\\xffname" and sub.cells == GOOD_CELLS
    sub.name.encode("utf-8")


# -- zips ---------------------------------------------------------------------------------------


def test_otter_export_zip(tmp_path):
    path = write(
        tmp_path / "alice.zip",
        zip_bytes(
            {
                "hw02.ipynb": good_nb(),
                "hw02.pdf": b"%PDF-1.4 ...",
                ".OTTER_LOG": b"\x80\x04binary",
                "__MACOSX/._hw02.ipynb": b"\x00\x05\x16\x07",
                ".ipynb_checkpoints/hw02-checkpoint.ipynb": good_nb(),
                "data/": b"",
            }
        ),
    )
    sub = read_submission(path)
    assert (sub.name, sub.path, sub.cells) == ("alice", path, GOOD_CELLS)


def test_zip_in_subfolder_stored_and_upper_case(tmp_path):
    path = write(tmp_path / "BOB.ZIP", zip_bytes({"submission/HW02.IPYNB": good_nb()}, zipfile.ZIP_STORED))
    assert find_submissions(tmp_path) == [Entry("BOB", path)]
    assert read_submission(path).name == "BOB" and read_cells(path) == GOOD_CELLS


def test_zipped_export_zip_is_opened(tmp_path):
    inner = zip_bytes({"hw02.ipynb": good_nb(), "hw02.pdf": b"%PDF"})
    assert read_cells(write(tmp_path / "c.zip", zip_bytes({"hw02.zip": inner}))) == GOOD_CELLS


def test_zip_named_ipynb_is_read_as_zip(tmp_path):
    assert read_cells(write(tmp_path / "d.ipynb", zip_bytes({"hw02.ipynb": good_nb()}))) == GOOD_CELLS


@pytest.mark.parametrize(
    "data, words",
    [
        (b"this is not a zip", ["not a valid zip"]),
        (zip_bytes({"hw02.ipynb": good_nb()})[:-30], ["not a valid zip"]),  # cut: no end record
        (zip_bytes({}), ["exactly one notebook", "holds 0"]),
        (zip_bytes({"hw02.pdf": b"%PDF", ".hidden.ipynb": good_nb(), "__MACOSX/hw02.ipynb": good_nb()}), ["holds 0"]),
        (
            zip_bytes({"a/hw02.ipynb": good_nb(), "b/hw02.ipynb": good_nb()}),
            ["holds 2", "a/hw02.ipynb", "b/hw02.ipynb"],
        ),
        (zip_bytes({"hw02.ipynb": b"[[[["}), ["'hw02.ipynb' in 'e.zip'", "not valid JSON"]),
        (zip_bytes({"hw02.ipynb": b""}), ["'hw02.ipynb' in 'e.zip' is empty"]),
    ],
)
def test_bad_zips(tmp_path, data, words):
    refused(write(tmp_path / "e.zip", data), "e.zip", *words)


def test_encrypted_entry(tmp_path):
    data = patch_headers(zip_bytes({"hw02.ipynb": good_nb()}), flags=0x1)
    refused(write(tmp_path / "f.zip", data), "encrypted", "hw02.ipynb")


@pytest.mark.parametrize(
    "method, name", [(99, "number 99"), (zipfile.ZIP_LZMA, "LZMA"), (zipfile.ZIP_BZIP2, "bzip2"), (9, "deflate64")]
)
def test_unknown_compression_method(tmp_path, method, name):
    data = patch_headers(zip_bytes({"hw02.ipynb": good_nb()}), method=method)
    refused(write(tmp_path / "g.zip", data), "compressed with method", name)


def test_corrupt_deflate_data(tmp_path):
    data = bytearray(zip_bytes({"hw02.ipynb": good_nb()}))
    start = 30 + len("hw02.ipynb")
    data[start] = 0xFF  # block type 3: invalid
    refused(write(tmp_path / "h.zip", bytes(data)), "corrupt", "damaged")


def test_header_size_too_large_but_data_intact(tmp_path):
    data = patch_headers(zip_bytes({"hw02.ipynb": good_nb()}), file_size=10**6)
    assert read_cells(write(tmp_path / "h.zip", data)) == GOOD_CELLS  # checksum matches: intact


def test_cut_deflate_data(tmp_path):
    data = zip_bytes({"hw02.ipynb": nb(code("x = '" + "y" * 5000 + "'\n"))})
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        (info,) = z.infolist()
        start_dir = z.start_dir
    cut = data[: 30 + len("hw02.ipynb") + info.compress_size // 2]
    damaged = cut + b"\x00" * (start_dir - len(cut)) + data[start_dir:]
    refused(write(tmp_path / "h2.zip", damaged), "corrupt")


def test_crc_mismatch(tmp_path):
    data = patch_headers(zip_bytes({"hw02.ipynb": good_nb()}), crc=12345)
    refused(write(tmp_path / "i.zip", data), "corrupt", "checksum")


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """A real deflate bomb: ~70 KB of zip that inflates to MAX_BYTES + 1 MiB of spaces."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        with z.open("hw02.ipynb", "w") as f:
            f.write(b'{"cells": [], "pad": "')
            chunk = b" " * 2**20
            for _ in range(MAX_BYTES // 2**20 + 1):
                f.write(chunk)
            f.write(b'"}')
    data = buf.getvalue()
    assert len(data) < 500_000
    return data


def _peak(func) -> int:
    tracemalloc.start()
    try:
        func()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_zip_bomb_with_honest_header(tmp_path, bomb):
    path = write(tmp_path / "j.zip", bomb)
    assert _peak(lambda: refused(path, "inflates to", "allowed")) < 8 * 2**20


def test_zip_bomb_with_lying_header(tmp_path, bomb):
    """The header claims 1 MiB: inflating stops there and the data is found damaged."""
    path = write(tmp_path / "k.zip", patch_headers(bomb, file_size=2**20))
    assert _peak(lambda: refused(path, "corrupt")) < 8 * 2**20


def test_path_traversal_names_are_never_extracted(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    only_evil = write(folder / "m.zip", zip_bytes({"../../evil.ipynb": good_nb(), "/abs/x.ipynb": good_nb()}))
    refused(only_evil, "holds 0", "unsafe names", "../../evil.ipynb")
    both = write(folder / "n.zip", zip_bytes({"../../evil.ipynb": nb(code("evil = 1\n")), "hw02.ipynb": good_nb()}))
    assert read_cells(both) == GOOD_CELLS
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["class", "m.zip", "n.zip"]


def test_symlink_entries_are_ignored(tmp_path):
    def with_link(extra: dict) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            link = zipfile.ZipInfo("hw02.ipynb")
            link.create_system = 3
            link.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(link, "/etc/shadow")
            for name, data in extra.items():
                z.writestr(name, dumps(data))
        return buf.getvalue()

    refused(write(tmp_path / "o.zip", with_link({})), "holds 0", "links")
    assert read_cells(write(tmp_path / "p.zip", with_link({"real/hw02.ipynb": good_nb()}))) == GOOD_CELLS


def test_too_many_entries(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for i in range(notebook.MAX_ZIP_ENTRIES + 1):
            z.writestr(f"{i}", b"")
        z.writestr("hw02.ipynb", dumps(good_nb()))
    refused(write(tmp_path / "q.zip", buf.getvalue()), "entries", str(notebook.MAX_ZIP_ENTRIES))


def test_too_many_entries_behind_a_lying_count(tmp_path, monkeypatch):
    """The end record's count is not trusted: the parsed listing is counted too."""
    monkeypatch.setattr(notebook, "MAX_ZIP_ENTRIES", 5)
    data = bytearray(zip_bytes({f"{i}": b"" for i in range(10)}))
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, end + 8, 1, 1)
    refused(write(tmp_path / "r.zip", bytes(data)), "10 entries")


def test_bad_utf8_entry_name(tmp_path):
    data = bytearray(zip_bytes({"hw02.ipynb": good_nb()}))
    for sig, off in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(sig)
        struct.pack_into("<H", data, at + off, 0x800)
        name_at = at + (30 if sig == b"PK\x03\x04" else 46)
        data[name_at] = 0xFF
    refused(write(tmp_path / "s.zip", bytes(data)), "zip")


# -- finding submissions ---------------------------------------------------------------------------


def test_find_submissions(tmp_path):
    for name in ["alice.ipynb", "bob.ZIP", "Carol.IpYnB", ".hidden.ipynb", "notes.txt", "data.csv"]:
        write(tmp_path / name, good_nb())
    (tmp_path / ".ipynb_checkpoints").mkdir()
    write(tmp_path / ".ipynb_checkpoints" / "alice-checkpoint.ipynb", good_nb())
    (tmp_path / "folder.ipynb").mkdir()  # a folder is not a notebook file
    (tmp_path / "__MACOSX").mkdir()
    write(tmp_path / "__MACOSX" / "x.ipynb", good_nb())
    (tmp_path / "out" / "feedback").mkdir(parents=True)  # the grader's output: no notebook, not a student
    write(tmp_path / "out" / "gradebook.csv", b"name,score\n")
    (tmp_path / "dave").mkdir()
    write(tmp_path / "dave" / "hw02.ipynb", good_nb())
    (tmp_path / "dave" / ".ipynb_checkpoints").mkdir()
    write(tmp_path / "dave" / ".ipynb_checkpoints" / "hw02-checkpoint.ipynb", good_nb())
    (tmp_path / "erin").mkdir()
    write(tmp_path / "erin" / "hw02.ipynb", good_nb())
    write(tmp_path / "erin" / "hw02.zip", zip_bytes({"hw02.ipynb": good_nb()}))
    found = find_submissions(tmp_path)
    assert [e.path.name for e in found] == ["Carol.IpYnB", "alice.ipynb", "bob.ZIP", "dave", "erin"]
    assert [e.name for e in found] == ["Carol", "alice", "bob", "dave", "erin"]
    dave = read_submission(found[3])
    assert (dave.name, dave.path, dave.cells) == ("dave", tmp_path / "dave" / "hw02.ipynb", GOOD_CELLS)
    refused(tmp_path / "erin", "erin", "exactly one", "hw02.ipynb", "hw02.zip")
    # --only: the finder selects the students named, and names one it cannot find
    assert [e.path.name for e in find_submissions(tmp_path, only=["dave", "alice"])] == ["alice.ipynb", "dave"]
    with pytest.raises(ValueError, match=r"no submission named \['frank'\]"):
        find_submissions(tmp_path, only=["alice", "frank"])


def test_one_zip_per_student_all_holding_the_same_notebook(tmp_path):
    for student in ["alice", "bob", "carol"]:
        write(tmp_path / f"{student}.zip", zip_bytes({"hw02.ipynb": nb(code(f"who = {student!r}\n"))}))
    subs = [read_submission(p) for p in find_submissions(tmp_path)]
    assert [(s.name, s.cells) for s in subs] == [(n, [f"who = {n!r}\n"]) for n in ["alice", "bob", "carol"]]


@pytest.mark.parametrize("names", [["alice.ipynb", "alice.zip"], ["alice.ipynb", "alice.IPYNB"]])
def test_duplicate_names_are_a_whole_run_error(tmp_path, names):
    for name in names:
        write(tmp_path / name, good_nb())
    with pytest.raises(ValueError, match="alice") as info:
        find_submissions(tmp_path)
    assert not isinstance(info.value, SubmissionError)


def test_duplicate_file_and_folder(tmp_path):
    write(tmp_path / "alice.zip", zip_bytes({"hw02.ipynb": good_nb()}))
    (tmp_path / "alice").mkdir()
    write(tmp_path / "alice" / "hw02.ipynb", good_nb())
    with pytest.raises(ValueError, match="alice"):
        find_submissions(tmp_path)


def test_not_a_folder(tmp_path):
    with pytest.raises(NotADirectoryError):
        find_submissions(tmp_path / "nope")


# -- feedback file names ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["alice", "Anna Lee", "Lee, Anna", "Zoë", "李小龍", "x-1_2.3"])
def test_safe_names_are_kept(name):
    assert safe_filename(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "../../etc/passwd",
        "a/b",
        "a\\b",
        'O\'Brien "Jo"',
        "tab\there",
        "new\nline",
        "nul\x00",
        "<>:|?*",
        "rtl\u202egpj.exe",
        ".hidden",
        "..",
        ".",
        "",
        "CON",
        "con.txt",
        "trailing. ",
        "é" * 300,
        "e\u0301" * 100,
        "bad\udcffbytes",
        "  ",
    ],
)
def test_unsafe_names_are_made_safe(name):
    out = safe_filename(name)
    assert out and len(out.encode("utf-8")) <= MAX_FILENAME_BYTES
    assert not out.startswith((".", " ")) and out not in (".", "..")
    assert not any(c in out for c in "/\\\"'<>:|?*\x00\t\n\u202e")
    assert out.split(".")[0].upper() not in {"CON", "PRN", "AUX", "NUL"}
    out.encode("utf-8")
    assert safe_filename(name) == out  # stable
    if name.startswith("é"):
        assert out.startswith("é" * 50)  # human-readable: letters kept
    if name.startswith("e\u0301"):  # not cut between a letter and its accent
        assert out.split("-")[0].endswith("\u0301") or out.split("-")[0].endswith("é")


def test_unsafe_names_do_not_collide():
    names = ["a/b", "a\\b", "a_b", "a:b", "a" * 300, "a" * 301]
    assert len({safe_filename(n) for n in names}) == len(names)


def test_unique_filenames():
    names = ["Alice", "alice", "ALICE", "bob", "Zoë", "Zoe\u0308", "x"]
    out = unique_filenames(names)
    assert len({o.casefold() for o in out}) == len(names)
    assert out[names.index("bob")] == "bob" and out[names.index("x")] == "x"
    assert unique_filenames(list(reversed(names))) == list(reversed(out))  # order does not matter
    long = unique_filenames(["a" * 400, "a" * 400])
    assert long[0] == safe_filename("a" * 400) and long[1].endswith("-2") and long[0] != long[1]
    assert all(len(o.encode()) <= MAX_FILENAME_BYTES for o in long + unique_filenames(["é" * 400] * 3))
