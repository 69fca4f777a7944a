"""Where a run's time went: a table at the end of every run of more than one unit (make test).

Rows: each chapter, each homework (the tests under tests/homework/ whose id names it), the book
build and the browser (tests/book/), the grader (tests/attngrade/), the package (the rest). Columns:
the number of tests, their wall time (the durations pytest reports for setup, call and teardown,
summed; with workers, summed over them) and their CPU time, measured in the process that ran each
test: its own, that of the processes it started and waited for (a chapter's kernel, the
browser, a command line's process), and that of the grader's sandboxes, which no process of ours
waits for (each sandbox's grader reads their time from /proc and appends it to the file this
plugin names in ATTNGRADE_SANDBOX_CPU_LOG, which the processes a test starts inherit:
attngrade.grading.bubblewrap), all counted when they end. Then the run's elapsed time, how busy
the workers were, and the longest units of work, to keep tests/plugins/units.py's ORDER current
(a unit of a minute or more that ORDER does not name is flagged).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections import defaultdict

import pytest

from ..units import unit_of
from .units import ORDER, rank

_CPU_AT_START = pytest.StashKey[float]()

#: attngrade.grading.bubblewrap.CPU_LOG_VARIABLE (not imported: the package's tests need no grader)
SANDBOX_CPU_LOG = "ATTNGRADE_SANDBOX_CPU_LOG"


def _sandbox_cpu() -> float:
    """The CPU seconds of the sandboxes that have ended since this process started, logged by
    their graders (in this process or in the processes it started)."""
    try:
        with open(os.environ[SANDBOX_CPU_LOG], encoding="utf-8") as f:
            return sum(float(line) for line in f if line.strip())
    except (KeyError, OSError, ValueError):
        return 0.0


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + _sandbox_cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    item.stash[_CPU_AT_START] = _cpu()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown" and _CPU_AT_START in item.stash:  # the test's CPU, its fixtures' included
        report.user_properties.append(("cpu_s", _cpu() - item.stash[_CPU_AT_START]))


def group_of(nodeid: str) -> str:
    """The row of the table a test counts in."""
    path = nodeid.split("::")[0]
    if path.startswith("book/"):
        return path
    if path.startswith("tests/homework/"):
        named = re.search(r"\bhw\d\d", nodeid)
        return f"homework {named[0]}" if named else "homework (all of them)"
    if path.startswith("tests/book/"):
        return "the book build and the browser"
    if path.startswith("tests/attngrade/"):
        return "the grader"
    return "the package and the rest"


class TimeTable:
    """Registered in the process that prints the summary (xdist's controller, or the only one)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.start = time.monotonic()
        self.wall: dict[str, float] = defaultdict(float)  # per test: its setup, call and teardown
        self.cpu: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.wall[report.nodeid] += report.duration
        self.cpu[report.nodeid] += sum(value for name, value in report.user_properties if name == "cpu_s")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if len({unit_of(nodeid) for nodeid in self.wall}) > 1:  # one unit alone: nothing to compare
            terminalreporter.write_sep("=", "where the time went")
            for line in self.lines():
                terminalreporter.write_line(line)

    def lines(self) -> list[str]:
        rows: dict[str, list] = {}  # group -> [tests, wall, CPU]
        units: dict[str, float] = defaultdict(float)
        for nodeid, wall in self.wall.items():
            row = rows.setdefault(group_of(nodeid), [0, 0.0, 0.0])
            row[0] += 1
            row[1] += wall
            row[2] += self.cpu[nodeid]
            units[unit_of(nodeid)] += wall
        order = sorted(rows, key=lambda g: (not g.startswith("book/"), not g.startswith("homework"), g))
        lines = [f"{'':40} {'tests':>6} {'wall s':>8} {'CPU s':>8}"]
        lines += [f"{group:40} {rows[group][0]:6d} {rows[group][1]:8.1f} {rows[group][2]:8.1f}" for group in order]
        wall, cpu = sum(self.wall.values()), sum(self.cpu.values())
        lines.append(f"{'all':40} {len(self.wall):6d} {wall:8.1f} {cpu:8.1f}")
        elapsed = time.monotonic() - self.start
        lines.append(
            f"elapsed {elapsed:.0f} s on {self.workers} worker(s), busy {wall / (elapsed * self.workers):.0%} "
            "of it (the tests' wall time over elapsed x workers)"
        )
        lines.append("longest units of work (ORDER in tests/plugins/units.py hands these out first):")
        for unit in sorted(units, key=units.get, reverse=True)[:6]:
            unlisted = units[unit] >= 60 and rank(unit) == len(ORDER)
            lines.append(f"  {unit:60} {units[unit]:6.0f} s" + ("  (not in ORDER)" if unlisted else ""))
        return lines


def pytest_configure(config: pytest.Config) -> None:
    # a log of this process's own (a pytest-xdist worker inherits its controller's environment)
    folder, before = tempfile.mkdtemp(prefix="attnbook-sandbox-cpu-"), os.environ.get(SANDBOX_CPU_LOG)
    os.environ[SANDBOX_CPU_LOG] = os.path.join(folder, "seconds")

    def restore() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        if before is None:
            os.environ.pop(SANDBOX_CPU_LOG, None)
        else:
            os.environ[SANDBOX_CPU_LOG] = before

    config.add_cleanup(restore)
    if not hasattr(config, "workerinput"):  # not a pytest-xdist worker
        workers = getattr(config.option, "numprocesses", None) or 1
        config.pluginmanager.register(TimeTable(int(workers)), "attnbook-time-table")
