"""make test's units of work (tests/units.py), handed to the pytest-xdist workers longest first, in stages.

Each worker takes one unit at a time, in the order of :data:`ORDER`. The stages (:data:`STAGES`)
are "chapters, then the book, then the browser": the strict book build (the unit ``book: build``)
is handed out only when every chapter has finished, so it finds every chapter's outputs in its
execution cache (tests/plugins/chapters.py), and the site's other tests (the pages in the browser,
a unit each) only when the build has finished. Meanwhile the other units go to whichever worker is
free. Without pytest-xdist (``-n 0``) the tests run in the same order, one after the other.
"""

from __future__ import annotations

import pytest

from ..units import unit_of

#: The order in which the workers take the units: longest first, so that the two workers finish
#: together instead of one idling while the other runs a long unit it took last. An entry is a
#: unit's name or the start of one; a unit no entry names comes after them all, in pytest's order.
#: The places come from the wall times per unit of a whole `make test` (its time table lists the
#: longest units, tests/plugins/time_table.py): a new unit of a minute or more goes in by its time.
#: The staged units (STAGES) keep their stage order here too, for runs without pytest-xdist.
ORDER = [
    "book/10_induction_heads.md",
    "book/07_attention_at_work.md",
    "book/",
    "book: build",  # the strict book build, as soon as the chapters are done (STAGES)
    "tests/book/test_site.py",
    "tests/attngrade/test_grader_concurrency.py",
    "mutations:hw08",
    "mutations:hw11",
    "tests/attngrade/test_grading_cli.py",
    "tests/attngrade/test_autograd_doors.py",
    "tests/attngrade/test_grading_repeatable.py",
    "tests/attngrade/test_grader_isolation.py",
    "mutations:hw07",
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

#: "chapters, then the book, then the browser": a unit starting with an entry of stage k is handed
#: out only when every unit of the stages before k has finished
STAGES = [
    ("book/",),  # the chapters through nbval; their outputs go to the book build's cache
    ("book: build",),  # the strict book build (tests/book/test_site.py::test_book_builds_strictly)
    ("tests/book/test_site.py", "page:"),  # the built site's other tests, each page in the browser a unit
]


def rank(unit: str) -> int:
    return next((k for k, entry in enumerate(ORDER) if unit.startswith(entry)), len(ORDER))


def stage(unit: str) -> int | None:
    return next((k for k, entries in enumerate(STAGES) if unit.startswith(entries)), None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every worker collects the tests in the same order, the units in ORDER's (the sort is stable:
    within a unit, and among the units ORDER does not name, pytest's order)."""
    items.sort(key=lambda item: rank(unit_of(item.nodeid)))


# Why a scheduler of our own. pytest-xdist's `--dist loadgroup` hands out tests grouped by their
# `xdist_group` mark, which the workers write into the test ids; with pytest 9 the rewritten ids
# no longer reach the controller and every test becomes a group of its own (pytest-xdist issue
# #1386, https://github.com/pytest-dev/pytest-xdist/issues/1386, open with pytest-xdist 3.8.0). So
# each test writes its unit into its own id (tests/units.py), and this scheduler, plugged in
# through xdist's documented extension point (the hook `pytest_xdist_make_scheduler`, returning an
# object with the methods of `xdist.scheduler.Scheduling`; nothing private of xdist is used),
# hands the units out. It also holds the stages back, which no scheduler of xdist's does.
# When to delete it: once a pytest-xdist release fixes #1386 and can hold a group back until
# others have finished (then mark each test `xdist_group(unit_of(item.nodeid))` in collection,
# keep ORDER's sort, and use plain loadgroup), or once the book build no longer needs the chapters
# to have run first. Until then, pyproject.toml bounds pytest and pytest-xdist below their next
# major versions.
@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: none without it (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Our scheduler for ``--dist loadgroup`` (pyproject.toml's addopts); xdist's for the others."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.workermanage import parse_tx_spec_config

    return UnitScheduling(workers=len(parse_tx_spec_config(config)))


class UnitScheduling:
    """Hands each worker one unit at a time, in the order collected (ORDER), holding staged units
    back until the stages before them have finished.

    A worker runs a test only once it has been sent the next one, or told to shut down (it must know
    the next test to tear fixtures down): so a worker gets its next unit when a single test of its
    current unit is left, and is shut down when nothing is left for it.
    """

    def __init__(self, workers: int):
        self.workers = workers  # how many collections to wait for
        self.collections: dict = {}  # worker -> the test ids it collected
        self.collection: list[str] = []  # the test ids every worker collected, in their order
        self.pending: dict = {}  # worker -> indices of the tests sent to it and not yet finished
        self.queue: list[tuple[str, list[int]]] | None = None  # (unit, indices), not yet handed out
        self.unfinished: dict[str, int] = {}  # unit -> its tests not yet finished

    # -- what pytest-xdist asks
    @property
    def nodes(self) -> list:
        return list(self.pending)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.collections) >= self.workers

    @property
    def tests_finished(self) -> bool:  # a worker left with one test runs it when it is shut down
        return self.queue == [] and all(len(sent) <= 1 for sent in self.pending.values())

    @property
    def has_pending(self) -> bool:
        return bool(self.queue) or any(self.pending.values())

    def add_node(self, node) -> None:
        self.pending[node] = []

    def add_node_collection(self, node, collection) -> None:
        if self.queue is not None and list(collection) != self.collection:
            raise RuntimeError(f"worker {node.gateway.id} collected other tests than the first workers")
        self.collections[node] = list(collection)

    def schedule(self) -> None:
        if self.queue is None:  # the first time: the units, in the order the workers collected them
            collections = list(self.collections.values())
            if any(collection != collections[0] for collection in collections):
                from xdist.report import report_collection_diff

                raise RuntimeError(report_collection_diff(collections[0], collections[1], "gw0", "gw1"))
            self.collection = collections[0]
            units: dict[str, list[int]] = {}
            for index, nodeid in enumerate(self.collection):
                units.setdefault(unit_of(nodeid), []).append(index)
            self.queue = list(units.items())
            self.unfinished = {unit: len(indices) for unit, indices in self.queue}
        self._hand_out()

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        self.pending[node].remove(item_index)
        self.unfinished[unit_of(self.collection[item_index])] -= 1
        self._hand_out()

    def remove_node(self, node) -> str | None:
        """A worker left: after its last test, or crashed (then the test it ran is returned, to be
        reported failed, and the tests it had not run go back to the front of the queue)."""
        sent = self.pending.pop(node)
        self.collections.pop(node, None)
        if not sent:
            return None
        crashed, *rest = sent
        self.unfinished[unit_of(self.collection[crashed])] -= 1
        back: dict[str, list[int]] = {}
        for index in rest:
            back.setdefault(unit_of(self.collection[index]), []).append(index)
        self.queue[:0] = back.items()
        self._hand_out()
        return self.collection[crashed]

    def mark_test_pending(self, item: str) -> None:
        raise NotImplementedError  # only for work stealing, which this scheduler does not do

    def remove_pending_tests_from_node(self, node, indices) -> None:
        raise NotImplementedError

    # -- the policy
    def _waits_for(self) -> dict[int, set[str]]:
        """For each stage, the units of the stages before it that have not finished."""
        left = [u for u in self.unfinished if self.unfinished[u] and stage(u) is not None]
        return {k: {u for u in left if stage(u) < k} for k in range(len(STAGES))}

    def _open(self, unit: str, node, waits_for: dict[int, set[str]], queued: set[str]) -> bool:
        """Whether ``node`` may take ``unit`` now: a unit of a stage when every unit of the stages
        before has finished, or has its last tests queued on ``node`` (which runs them first)."""
        mine = stage(unit)
        if mine is None or not waits_for[mine]:
            return True
        here = {unit_of(self.collection[i]) for i in self.pending[node]}
        return waits_for[mine] <= here and not waits_for[mine] & queued

    def _hand_out(self) -> None:
        ready = [node for node in self.pending if node in self.collections and not node.shutting_down]
        waits_for = self._waits_for()
        for node in ready:
            while len(self.pending[node]) <= 1:
                queued = {name for name, _ in self.queue}
                k = next(
                    (k for k, (name, _) in enumerate(self.queue) if self._open(name, node, waits_for, queued)), None
                )
                if k is None:
                    break
                _, indices = self.queue.pop(k)
                self.pending[node] += indices
                node.send_runtest_some(indices)
            if not self.queue and len(self.pending[node]) <= 1:
                node.shutdown()
        # Every worker waits for a next test, and the units left wait for the last tests of units
        # that two workers or more hold: all but one of those workers are shut down, so they run
        # their last test (and leave), and the stage opens for the one kept.
        if self.queue and all(not n.shutting_down and len(sent) <= 1 for n, sent in self.pending.items()):
            waited = set().union(*waits_for.values())
            holding = [n for n in ready if any(unit_of(self.collection[i]) in waited for i in self.pending[n])]
            for node in holding[1:]:
                node.shutdown()
