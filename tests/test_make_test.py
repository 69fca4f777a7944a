"""The check itself: make test's units of work (tests/units.py), their order and stages and the
scheduler that hands them to the workers (tests/plugins/units.py), and its time table
(tests/plugins/time_table.py)."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import pytest

from .paths import ROOT
from .plugins.time_table import TimeTable, group_of
from .plugins.units import ORDER, STAGES, UnitScheduling, rank, stage
from .units import by_unit, unit, unit_of


def declared_units() -> set[str]:
    """The unit names the test files declare (``unit("...")``) and the prefixes of ``by_unit``'s."""
    sources = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("test_*.py"))
    declared = set(re.findall(r'unit\("([^"]+)"\)', sources))
    return declared | {f"{prefix}:" for prefix in re.findall(r'by_unit\([^,]+, "([^"]+)"\)', sources)}


def test_every_entry_of_the_order_and_the_stages_names_something_that_exists():
    """An entry is a path (a chapter, a test file, a folder) or the name of a unit that a test file
    declares; a renamed file or unit must not drop out of the order or its stage unnoticed."""
    declared = declared_units()
    entries = ORDER + [entry for entries in STAGES for entry in entries]
    missing = [
        entry
        for entry in entries
        if not (
            (ROOT / entry).exists()
            if "/" in entry and ":" not in entry
            else any(n.startswith(entry) or entry.startswith(n) for n in declared)
        )
    ]
    assert not missing, f"entries that name no file and no declared unit: {missing}"


def test_the_order_keeps_the_stages_in_order_for_a_run_without_workers():
    staged = [stage(entry) for entry in ORDER if stage(entry) is not None]
    assert staged == sorted(staged) and set(staged) == set(range(len(STAGES))), staged


def test_a_unit_is_read_from_the_test_id():
    assert unit_of("tests/attnbook/test_attention.py::test_x[cpu-float32]") == "tests/attnbook/test_attention.py"
    assert unit_of("book/00_notation.md::notebook::Cell 3") == "book/00_notation.md"
    assert unit_of("tests/homework/test_mutations.py::test_m[@mutations:hw08-off by -1]") == "mutations:hw08"
    assert unit_of("tests/x.py::test_y[float32-@cli: benchmark]") == "cli: benchmark"
    assert unit_of("tests/x.py::test_y[a@b-c]") == "tests/x.py"  # an '@' inside a parameter names nothing


def test_units_are_written_into_the_parameters_ids():
    params = by_unit(["hw00", ("hw01", "a mutant")], "mutations")
    assert [p.values for p in params] == [("hw00",), ("hw01", "a mutant")]
    assert [p.id for p in params] == ["@mutations:hw00", "@mutations:hw01-a mutant"]

    def test():
        pass

    marks = unit("cli: benchmark")(test).pytestmark
    assert [m.name for m in marks] == ["parametrize", "usefixtures"]
    assert marks[0].args == ("unit", [pytest.param("cli: benchmark", id="@cli: benchmark")])
    for bad in ("a-b", "a]", "a@b", ""):
        with pytest.raises(ValueError, match="a unit's name"):
            unit(bad)


class FakeWorker:
    """A pytest-xdist worker as the scheduler sees it: it runs a test once it holds the next one, or
    has been told to shut down. It checks, as tests are sent to it, that a unit of a stage comes
    only when every test of the stages before it has finished or is queued before it here."""

    def __init__(self, name: str, run: FakeRun):
        self.gateway = SimpleNamespace(id=name)
        self.run = run
        self.queue: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices):
        for index in indices:
            mine = self.run.stages.get(index)
            for earlier, theirs in self.run.stages.items():
                if mine is not None and theirs < mine and earlier not in self.run.done:
                    assert earlier in self.queue, (
                        f"{self.run.collection[index]} sent before {self.run.collection[earlier]}"
                    )
        (sent,) = {unit_of(self.run.collection[i]) for i in indices}  # one unit at a time
        self.run.sent.append(sent)
        self.queue += indices

    def shutdown(self):
        self.shutting_down = True


class FakeRun:
    def __init__(self, collection: list[str], workers: int, seed: int):
        self.collection, self.done = collection, set()
        self.stages = {i: stage(unit_of(t)) for i, t in enumerate(collection) if stage(unit_of(t)) is not None}
        self.scheduler = UnitScheduling(workers)
        self.workers = [FakeWorker(f"gw{k}", self) for k in range(workers)]
        self.random = random.Random(seed)
        self.ran: list[tuple[str, str]] = []  # (worker, test), in the order they ran
        self.sent: list[str] = []  # the units, in the order they were handed out

    def go(self) -> None:
        """Run to the end, choosing at random which worker runs its next test (as DSession drives it)."""
        for worker in self.workers:
            self.scheduler.add_node(worker)
        for worker in self.workers:
            self.scheduler.add_node_collection(worker, self.collection)
        assert self.scheduler.collection_is_completed
        self.scheduler.schedule()
        while True:
            if self.scheduler.tests_finished:  # DSession.triggershutdown
                for worker in self.scheduler.nodes:
                    worker.shutdown()
            able = [w for w in self.workers if len(w.queue) >= 2 or (w.shutting_down and w.queue)]
            if not able:
                break
            worker = self.random.choice(able)
            index = worker.queue.pop(0)
            self.ran.append((worker.gateway.id, self.collection[index]))
            self.done.add(index)
            self.scheduler.mark_test_complete(worker, index)
        for worker in self.workers:
            assert worker.shutting_down and not worker.queue, f"{worker.gateway.id} was left waiting"
            assert self.scheduler.remove_node(worker) is None


def collection(chapters: int, others: int, pages: int) -> list[str]:
    """Test ids like make test's, sorted as the workers sort them (ORDER)."""
    ids = [f"book/{k:02d}_x.md::notebook::Cell {c}" for k in range(chapters) for c in range(1 + k % 3)]
    ids += ["tests/book/test_site.py::test_book_builds_strictly[@book: build]"]
    ids += [f"tests/book/test_site.py::test_links[book/{k:02d}_x]" for k in range(2)]
    ids += [f"tests/book/test_site.py::test_page_in_the_browser[@page:book/{k:02d}_x]" for k in range(pages)]
    ids += [
        f"tests/homework/test_mutations.py::test_m[@mutations:hw{k:02d}-m{m}]" for k in range(others) for m in range(3)
    ]
    ids += [f"tests/attnbook/test_{k}.py::test_{t}" for k in range(others) for t in range(1 + k % 2)]
    return sorted(ids, key=lambda nodeid: rank(unit_of(nodeid)))


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize(
    "chapters,others,pages", [(12, 15, 20), (2, 0, 3), (1, 0, 1), (3, 1, 0), (0, 4, 2)], ids=lambda v: str(v)
)
def test_the_scheduler_runs_every_test_once_in_units_and_stages(workers, chapters, others, pages):
    """Every test runs once, each unit on one worker, the stages in order (FakeWorker), and no run
    stalls: not when only the site's units are left while two workers each hold a chapter's last
    cell (then one of them is let go), in 20 random interleavings of the workers."""
    tests = collection(chapters, others, pages)
    for seed in range(20):
        run = FakeRun(tests, workers, seed)
        run.go()
        assert sorted(test for _, test in run.ran) == sorted(tests), seed
        where: dict[str, set[str]] = {}
        for worker, test in run.ran:
            where.setdefault(unit_of(test), set()).add(worker)
        assert all(len(workers) == 1 for workers in where.values()), where


def test_the_units_are_handed_out_in_order_when_they_are_free_to_go():
    """Longest first (ORDER): the units no stage holds back are sent in the order collected."""
    run = FakeRun(collection(12, 15, 20), 2, seed=0)
    run.go()
    free = [u for u in run.sent if stage(u) is None]
    assert free == sorted(free, key=rank) and len(free) == 15 + 15


def test_a_crashed_workers_tests_go_to_the_other():
    tests = collection(0, 3, 0)
    run = FakeRun(tests, 2, seed=0)
    for worker in run.workers:
        run.scheduler.add_node(worker)
        run.scheduler.add_node_collection(worker, tests)
    run.scheduler.schedule()
    dead, alive = run.workers
    crashed = dead.queue[0]
    assert run.scheduler.remove_node(dead) == tests[crashed]
    queued = {i for _, indices in run.scheduler.queue for i in indices}
    assert dead.queue[1:] and set(dead.queue[1:]) <= set(alive.queue) | queued
    assert crashed not in set(alive.queue) | queued  # reported failed by pytest-xdist, not run again


def test_the_time_table_has_a_row_per_chapter_and_homework_and_adds_up():
    table = TimeTable(workers=2)
    reports = [
        ("book/00_notation.md::notebook::Cell 0", 3.0, 2.5),
        ("book/00_notation.md::notebook::Cell 1", 1.0, 1.0),
        ("tests/homework/test_mutations.py::test_m[@mutations:hw02-x]", 4.0, 3.0),
        ("tests/homework/test_homework.py::test_h[hw02]", 2.0, 0.5),
        ("tests/attngrade/test_checks.py::test_c", 1.5, 1.5),
        ("tests/book/test_site.py::test_page_in_the_browser[@page:book/intro]", 6.0, 2.0),
        ("tests/attnbook/test_attention.py::test_a[cpu]", 0.5, 0.5),
    ]
    for nodeid, wall, cpu in reports:
        for when, share in (("setup", 0.25), ("call", 0.5), ("teardown", 0.25)):
            table.pytest_runtest_logreport(
                SimpleNamespace(
                    nodeid=nodeid,
                    duration=wall * share,
                    user_properties=[("cpu_s", cpu)] if when == "teardown" else [],
                )
            )
    lines = table.lines()
    end = next(k for k, line in enumerate(lines) if line.startswith("elapsed"))
    rows = {line[:40].strip(): line[40:].split() for line in lines[1:end]}
    assert rows["book/00_notation.md"] == ["2", "4.0", "3.5"]
    assert rows["homework hw02"] == ["2", "6.0", "3.5"]
    assert rows["the book build and the browser"] == ["1", "6.0", "2.0"]
    assert rows["the grader"] == ["1", "1.5", "1.5"] and rows["the package and the rest"] == ["1", "0.5", "0.5"]
    assert rows["all"] == ["7", "18.0", "11.0"]
    assert group_of("tests/homework/test_hints.py::test_every_hint") == "homework (all of them)"
    longest = [line.split()[0] for line in lines[end + 2 :]]  # after the elapsed line and the heading
    assert longest[0] == "page:book/intro" and set(longest[1:3]) == {"mutations:hw02", "book/00_notation.md"}, lines


def test_make_help_lists_every_documented_target():
    """A target documented by a `## ` comment on its line is listed by `make help`, which is also what
    `make` alone does (not run here: were that broken, `make` would run the first target, `system`)."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    documented = re.findall(r"^([a-zA-Z_-]+):.*## (.+)$", makefile, re.MULTILINE)
    assert len(documented) >= 10 and ("help", "list the documented targets") in documented
    assert re.search(r"^\.DEFAULT_GOAL := help$", makefile, re.MULTILINE)
    listed = subprocess.run(["make", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for target, text in documented:
        assert re.search(rf"^  {re.escape(target)} +{re.escape(text)}$", listed, re.MULTILINE), target
