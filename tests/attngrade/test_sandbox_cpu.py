"""The CPU time of the grader's sandboxes is counted: by the grader (``Grader.sandbox_cpu_seconds``,
read from /proc, attngrade.grading.bubblewrap) and in the CPU column of make test's time table
(tests/plugins/time_table.py). A sandbox's processes are not the grader's children (bubblewrap's
outer process exits without waiting for its pid 1), so ``os.times`` alone leaves them out."""

from __future__ import annotations

import os

import pytest

from attngrade.grading.bubblewrap import CPU_LOG_VARIABLE
from attngrade.grading.grader import Grader

from ..homework_support import bwrap_available, homework
from ..plugins import time_table
from ..submissions import code_cells, submission_with

pytestmark = pytest.mark.skipif(bwrap_available() is not None, reason=f"no sandbox here: {bwrap_available()}")

#: CPU seconds each busy loop spins, measured by its own process's clock
BUSY = 0.75

SPIN = """
import os, time

def _spin(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
"""

#: in the submission's own process, which the worker waits for
IN_THE_CHILD = f"_spin({BUSY})\n"

#: in an orphan (its parent has ended), which bubblewrap's pid 1 waits for; the cell waits until the
#: orphan has ended (its end of the pipe closes)
IN_AN_ORPHAN = f"""
_r, _w = os.pipe()
_middle = os.fork()
if _middle == 0:
    if os.fork() == 0:
        os.close(_r)
        _spin({BUSY})
    os._exit(0)
os.close(_w)
os.waitpid(_middle, 0)
assert os.read(_r, 1) == b""
os.close(_r)
"""


#: hw00 has no test-writing question, so its notebook's process forks no candidate server or test
#: factory (attngrade.grading.grader.writes_tests): with a process of its own, q1's function is gone
NO_HELPER_PROCESSES = """
import os

_mine = [p for p in os.listdir("/proc") if p.isdigit() and os.path.exists(f"/proc/{p}/stat")
         and open(f"/proc/{p}/stat").read().rsplit(")", 1)[-1].split()[1] == str(os.getpid())]
if _mine:
    column_weights = "this process has processes of its own: " + ", ".join(_mine)
"""


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def test_the_time_table_uses_the_graders_variable():
    assert time_table.SANDBOX_CPU_LOG == CPU_LOG_VARIABLE


def test_a_grading_tests_cpu_time_counts_its_sandboxes_busy_loops(request):
    """One sandbox grades the solutions twice, then the solutions with a busy loop in the
    submission's process and one in an orphan: the grader's count grows by both loops more than
    for the plain notebook (and not twice that), and this test's CPU time, as the time table
    reports it, holds the sandbox's whole time besides this process's own. (A fourth notebook
    checks that its process forked no helper: hw00 has no test-writing question.)"""
    hw = homework("hw00")
    plain = code_cells(submission_with(hw, {}))
    busy = [*plain, SPIN, IN_THE_CHILD, IN_AN_ORPHAN]
    alone = [*plain, NO_HELPER_PROCESSES]
    own = _own_cpu()
    counted = []
    with Grader(hw, jobs=1, static_checks=False) as grader:
        for name, cells in [("plain", plain), ("plain again", plain), ("busy", busy), ("alone", alone)]:
            (result,) = grader.grade_sources([(name, cells)])
            assert result.total == result.possible > 0 and not result.execution_errors, (name, result)
            counted.append(grader.sandbox_cpu_seconds)
    own = _own_cpu() - own
    plain_job = counted[1] - counted[0]
    busy_job = counted[2] - counted[1]
    assert plain_job > 0
    # both loops, on top of what the plain notebook costs (forking the orphan costs a little more;
    # one loop left out, or the orphan counted twice, is BUSY off)
    assert plain_job + 2 * BUSY - 0.3 <= busy_job <= plain_job + 2 * BUSY + 0.5, counted
    # the time table: its CPU for this test so far is this process's own and its children's, and
    # the sandbox's, logged when it ended (with the last moments of its worker)
    with open(os.environ[CPU_LOG_VARIABLE], encoding="utf-8") as f:
        logged = [float(line) for line in f]
    assert logged and counted[-1] - 0.01 <= logged[-1] <= counted[-1] + 0.2, (logged, counted)  # written to 0.001
    reported = time_table._cpu() - request.node.stash[time_table._CPU_AT_START]
    assert reported >= own + logged[-1] - 0.05, (reported, own, logged[-1])
