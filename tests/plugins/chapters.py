"""Run every chapter of the book (MyST markdown notebooks under book/) through nbval, once.

nbval only collects ``.ipynb`` files, and the chapters are stored as MyST markdown without
outputs. For each chapter this plugin writes the jupytext conversion to an ``.ipynb`` under pytest's
cache folder and hands that file to nbval, with the test id of the ``.md`` file, so a failing cell
is reported as ``book/01_single_query_attention.md::notebook::Cell 7``.

Each chapter executes once per check: when every cell of a chapter has passed, its outputs are
stored in the book build's execution cache (``_build/.jupyter_cache``, jupyter-cache keyed by the
code cells), so the strict book build that follows (``tests/book/test_site.py``, handed out after
every chapter has finished: tests/plugins/units.py) reuses them instead of running the chapter
again. The book's own reader (myst-nb) must see the same code cells as jupytext; when it does not,
nothing is stored and the book build executes that chapter itself.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
#: where the book build (jupyter-book, execute_notebooks: cache) keeps executed notebooks
EXECUTION_CACHE = ROOT / "_build" / ".jupyter_cache"

sys.path.insert(0, str(BOOK / "_ext"))
from chapters import is_chapter  # noqa: E402  (book/_ext/chapters.py, shared with the book build)


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix == ".md" and BOOK in file_path.parents and is_chapter(file_path):
        return MySTChapter.from_parent(parent, path=file_path)
    return None


class MySTChapter(pytest.File):
    """A chapter ``book/NN_name.md``: collects the nbval notebook made from it by jupytext.

    The chapter itself is the collected file, so ``pytest book/00_notation.md`` selects it; its one
    child is nbval's collector for the converted ``.ipynb`` (under pytest's cache folder).
    """

    def collect(self):
        import jupytext

        relative = self.path.relative_to(self.config.rootpath)
        target = _nbval_folder(self.config) / relative.with_suffix(".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        # every pytest-xdist worker collects every chapter: write to a file of this process's own,
        # then rename it into place, so no worker reads a notebook another is still writing
        partial = target.with_name(f".{target.stem}.{os.getpid()}.partial.ipynb")
        jupytext.write(jupytext.read(self.path), partial)
        os.replace(partial, target)
        yield executed_chapter_class().from_parent(self, path=target, nodeid=f"{self.nodeid}::notebook")


@functools.cache
def executed_chapter_class():  # nbval is imported only when a chapter is collected
    from nbval.plugin import IPyNbFile

    class ExecutedChapter(IPyNbFile):
        """nbval's notebook, which hands its outputs to the book build's cache when every cell passed."""

        def collect(self):
            self.cell_items = []
            self.failed = False
            for item in super().collect():
                self.cell_items.append(item)
                yield item

        def teardown(self):
            super().teardown()
            ran = [getattr(item, "test_outputs", None) is not None for item in self.cell_items]
            if self.cell_items and all(ran) and not self.failed and not getattr(self, "timed_out", False):
                store_in_execution_cache(self.parent.path, [item.test_outputs for item in self.cell_items])

    return ExecutedChapter


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if outcome.get_result().failed and hasattr(item.parent, "cell_items"):
        item.parent.failed = True


def store_in_execution_cache(chapter: Path, outputs: list[list]) -> bool:
    """Store a chapter executed by nbval (its code cells' outputs, in order) in the book's cache."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from myst_nb.core.read import read_myst_markdown_notebook

    nb = read_myst_markdown_notebook(chapter.read_text(encoding="utf-8"), path=chapter)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    if len(code) != len(outputs):
        return False
    for count, (cell, outs) in enumerate(zip(code, outputs), start=1):
        cell.execution_count = count
        cell.outputs = [nbformat.from_dict(dict(out)) for out in outs]
        for out in cell.outputs:
            if out.get("output_type") == "execute_result":
                out["execution_count"] = count
    EXECUTION_CACHE.parent.mkdir(parents=True, exist_ok=True)
    get_cache(str(EXECUTION_CACHE)).cache_notebook_bundle(
        CacheBundleIn(nb=nb, uri=str(chapter), data={"executed_by": "nbval"}), check_validity=True, overwrite=True
    )
    return True


#: the temporary folder of the converted chapters when pytest's cache plugin is disabled
_NBVAL_TMP = pytest.StashKey[Path]()


def _nbval_folder(config: pytest.Config) -> Path:
    """Pytest's cache folder ``nbval``, or, when the cache plugin is disabled, one temporary folder
    for the run (removed when it ends: pytest_unconfigure)."""
    cache = getattr(config, "cache", None)
    if cache is not None:
        return cache.mkdir("nbval")
    if _NBVAL_TMP not in config.stash:
        import tempfile

        config.stash[_NBVAL_TMP] = Path(tempfile.mkdtemp(prefix="attnbook-nbval-"))
    return config.stash[_NBVAL_TMP]


def pytest_unconfigure(config: pytest.Config) -> None:
    if _NBVAL_TMP in config.stash:
        import shutil

        shutil.rmtree(config.stash[_NBVAL_TMP], ignore_errors=True)
