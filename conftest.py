"""Run every chapter of the book (MyST markdown notebooks under book/) through nbval.

nbval only collects ``.ipynb`` files, and the chapters are stored as MyST markdown without
outputs. For each chapter this hook writes the jupytext conversion to an ``.ipynb`` under pytest's
cache folder and hands that file to nbval, with the test id of the ``.md`` file, so a failing cell
is reported as ``book/01_single_query_attention.md::Cell 7``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

BOOK = Path(__file__).parent / "book"


def _is_chapter(file_path: Path) -> bool:
    if file_path.suffix != ".md" or BOOK not in file_path.parents:
        return False
    with open(file_path, encoding="utf-8") as f:
        head = f.read(600)
    return head.startswith("---") and "kernelspec:" in head


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if not _is_chapter(file_path):
        return None
    import jupytext
    from nbval.plugin import IPyNbFile

    notebook = jupytext.read(file_path)
    relative = file_path.relative_to(parent.config.rootpath)
    target = parent.config.cache.mkdir("nbval") / relative.with_suffix(".ipynb")
    target.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(notebook, target)
    return IPyNbFile.from_parent(parent, path=target, nodeid=relative.as_posix())
