"""Run every chapter of the book (MyST markdown notebooks under book/) through nbval, once.

nbval only collects ``.ipynb`` files, and the chapters are stored as MyST markdown without
outputs. For each chapter this hook writes the jupytext conversion to an ``.ipynb`` under pytest's
cache folder and hands that file to nbval, with the test id of the ``.md`` file, so a failing cell
is reported as ``book/01_single_query_attention.md::notebook::Cell 7``.

Each chapter executes once per check: when every cell of a chapter has passed, its outputs are
stored in the book build's execution cache (``_build/.jupyter_cache``, jupyter-cache keyed by the
code cells), so the strict book build that follows (``tests/book/test_site.py``) reuses them instead
of running the chapter again. The book's own reader (myst-nb) must see the same code cells as
jupytext; when it does not, nothing is stored and the book build executes that chapter itself.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import pytest

BOOK = Path(__file__).parent / "book"


ROOT = Path(__file__).parent
#: where the book build (jupyter-book, execute_notebooks: cache) keeps executed notebooks
EXECUTION_CACHE = ROOT / "_build" / ".jupyter_cache"

sys.path.insert(0, str(BOOK / "_ext"))
from chapters import finished_folder, is_chapter  # noqa: E402  (book/_ext/chapters.py, shared with the book build)


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
            try:
                if self.cell_items and all(ran) and not self.failed and not getattr(self, "timed_out", False):
                    store_in_execution_cache(self.parent.path, [item.test_outputs for item in self.cell_items])
            finally:
                done = finished_folder(ROOT)  # the book build may wait for it (tests/book/test_site.py)
                done.mkdir(parents=True, exist_ok=True)
                (done / self.parent.path.name).touch()

    return ExecutedChapter


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and hasattr(item.parent, "cell_items"):
        item.parent.failed = True


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


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix == ".md" and BOOK in file_path.parents and is_chapter(file_path):
        return MySTChapter.from_parent(parent, path=file_path)
    return None


#: The order in which make test's workers (pytest-xdist, ``--dist loadgroup``) take the units of work
#: (tests/units.py; a unit is a test file unless the file splits itself): longest first, so that the
#: two workers finish together instead of one idling while the other runs a long unit it took last.
#: An entry is a unit's name or the start of a test id. The chapters come first (the website's build
#: waits for all of them), the longest of them first; the website's build (the unit of
#: tests/book/test_site.py's own tests) comes after a few long units, by when they have run, and its
#: pages (a unit each) after it.
ORDER = [
    "book/10_induction_heads.md",
    "book/07_attention_at_work.md",
    "book/",
    "tests/attngrade/test_grader_concurrency.py",
    "mutations:hw08",
    "mutations:hw11",
    "tests/attngrade/test_grading_cli.py",
    "tests/attngrade/test_autograd_doors.py",
    "tests/attngrade/test_grading_repeatable.py",
    "tests/attngrade/test_grader_isolation.py",
    "mutations:hw07",
    "tests/book/test_site.py",
    "tests/attngrade/test_gradescope.py",
    "cli: benchmark",
    "concurrency: in one process",
    "homework: a failing solution",
    "tests/book/test_jupyterlab.py",
    "cli: PYTHONPATH",
    "tests/homework/test_homework.py",
    "mutations:",
    "isolation: without the batch",
    "page:",
    "tests/attngrade/test_student_tests.py",
    "tests/attngrade/test_integrity.py",
    "tests/attngrade/test_release.py",
    "tests/attngrade/test_grader_habits.py",
    "tests/attnbook/test_flash_triton.py",
    "tests/homework/test_hints.py",
]


def unit_of(item: pytest.Item) -> str:
    """The unit of work a test belongs to (tests/units.py): its own, or its file."""
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0]) if mark else item.nodeid.split("::")[0]


#: where each make test worker writes the units of its tests (set by the controller, inherited by
#: the workers): pytest 9 ignores the test ids pytest-xdist 3.8 renames to carry them
_UNITS_ENV = "ATTNBOOK_TEST_UNITS"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        unit, path = unit_of(item), item.nodeid.split("::")[0]
        return next(
            (k for k, entry in enumerate(ORDER) if unit.startswith(entry) or path.startswith(entry) and unit == path),
            len(ORDER),
        )

    items.sort(key=rank)  # stable: within a unit, and among the other units, pytest's order
    folder = os.environ.get(_UNITS_ENV)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if folder and worker:
        units = {item.nodeid: unit_of(item) for item in items}
        partial = Path(folder) / f".{worker}.json"
        partial.write_text(json.dumps(units), encoding="utf-8")
        os.replace(partial, Path(folder) / f"{worker}.json")


def pytest_configure(config: pytest.Config) -> None:
    parallel = config.getoption("dist", "no") == "loadgroup" and config.getoption("numprocesses", None)
    if parallel and not os.environ.get("PYTEST_XDIST_WORKER"):
        import tempfile

        os.environ[_UNITS_ENV] = tempfile.mkdtemp(prefix="attnbook-test-units-")


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    folder = os.environ.get(_UNITS_ENV)
    if folder and not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(folder, ignore_errors=True)
    if _NBVAL_TMP in config.stash:
        shutil.rmtree(config.stash[_NBVAL_TMP], ignore_errors=True)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup`` by units (tests/units.py): a test's unit is its xdist_group mark, or its
    file (plain loadgroup makes each unmarked test a unit, and a module's fixtures would be set up
    on every worker). The workers tell the controller each test's unit in a file (_UNITS_ENV)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        units: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.units is None:  # read once, when every worker has collected
                folder = os.environ.get(_UNITS_ENV)
                self.units = {}
                for written in sorted(Path(folder).glob("gw*.json")) if folder else []:
                    self.units.update(json.loads(written.read_text(encoding="utf-8")))
            return self.units.get(nodeid) or nodeid.split("::")[0]

    return UnitScheduling(config, log)
