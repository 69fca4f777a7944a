"""Run every chapter of the book (MyST markdown notebooks under book/) through nbval.

nbval only collects ``.ipynb`` files, and the chapters are stored as MyST markdown without
outputs. For each chapter this hook writes the jupytext conversion to an ``.ipynb`` under pytest's
cache folder and hands that file to nbval, with the test id of the ``.md`` file, so a failing cell
is reported as ``book/01_single_query_attention.md::notebook::Cell 7``.
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


class MySTChapter(pytest.File):
    """A chapter ``book/NN_name.md``: collects the nbval notebook made from it by jupytext.

    The chapter itself is the collected file, so ``pytest book/00_notation.md`` selects it; its one
    child is nbval's collector for the converted ``.ipynb`` (under pytest's cache folder).
    """

    def collect(self):
        import jupytext
        from nbval.plugin import IPyNbFile

        relative = self.path.relative_to(self.config.rootpath)
        target = _nbval_folder(self.config) / relative.with_suffix(".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        jupytext.write(jupytext.read(self.path), target)
        yield IPyNbFile.from_parent(self, path=target, nodeid=f"{self.nodeid}::notebook")


def _nbval_folder(config: pytest.Config) -> Path:
    """Pytest's cache folder ``nbval``, or a temporary folder when the cache plugin is disabled."""
    cache = getattr(config, "cache", None)
    if cache is not None:
        return cache.mkdir("nbval")
    import tempfile

    return Path(tempfile.mkdtemp(prefix="attnbook-nbval-"))


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if _is_chapter(file_path):
        return MySTChapter.from_parent(parent, path=file_path)
    return None
