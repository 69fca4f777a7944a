"""Benchmark: seconds per submission, the class grader against otter's own ``grade_submission``.

    python -m attngrade bench hw01 -n 100 --otter-n 5

grades ``n`` copies of the homework's solutions with the class grader (on ``--jobs`` cores,
default all; the time includes starting the sandboxes), then ``--otter-n`` copies one by one through
``otter.api.grade_submission`` with the homework's Gradescope zip (otter starts a Jupyter kernel
per submission). Both must give full marks; it prints the seconds per submission of each.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

from ..homework import load_homework


def bench_ours(hw, paths, jobs: int | None) -> tuple[float, list[float]]:
    from ..grading.grader import Grader

    start = time.perf_counter()
    with Grader(hw, jobs=jobs) as grader:
        results = grader.grade_paths(paths)
    took = time.perf_counter() - start
    for r in results:
        if r.total != r.possible:  # say why, on stderr: a benchmark of wrong grades is worthless
            failed = [f"{q.name} {c.name}: {c.message[:300]}" for q in r.questions for c in q.cases if not c.passed]
            print(f"{r.submission}: {r.total:g}/{r.possible:g}", *failed, *r.notes, sep="\n  ", file=sys.stderr)
    return took, [r.total / r.possible for r in results]


def bench_otter(hw, paths) -> tuple[float, list[float]]:
    from otter.api import grade_submission

    zips = sorted(hw.dist.glob("autograder/*.zip"))
    if not zips:
        raise FileNotFoundError(f"no autograder zip in {hw.dist / 'autograder'}: build {hw.name} first")
    fractions = []
    start = time.perf_counter()
    for p in paths:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            results = grade_submission(str(p), str(zips[-1]), quiet=True)
        fractions.append(results.total / results.possible)
    return time.perf_counter() - start, fractions


def main(*, homework: str = "hw01", n: int = 100, otter_n: int = 3, jobs: int | None = None) -> int:
    """``python -m attngrade bench``: the seconds per submission of each grader (see the module's
    documentation). Returns the exit status: 0 when the class grader gave every copy full marks."""
    hw = load_homework(homework)
    if not hw.is_built():
        from .assign import build

        problems = build([hw])
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
    solutions = hw.autograder_notebook.read_bytes()  # the master's solutions, as otter assign wrote them
    with tempfile.TemporaryDirectory(prefix="attnbook-bench-") as tmp:
        paths = [Path(tmp) / f"copy{k:04d}.ipynb" for k in range(max(n, otter_n))]
        for path in paths:
            path.write_bytes(solutions)
        cores = jobs or os.cpu_count() or 1
        ours, fr = bench_ours(hw, paths[:n], jobs)
        print(
            f"{hw.name}: class grader, {n} submissions on {cores} cores: {ours:.1f} s in all, "
            f"{ours / n:.3f} s per submission (full marks: {sum(f == 1 for f in fr)}/{len(fr)})"
        )
        if otter_n > 0:
            theirs, fo = bench_otter(hw, paths[:otter_n])
            print(
                f"{hw.name}: otter grade_submission, {otter_n} submissions one by one: {theirs:.1f} s in all, "
                f"{theirs / otter_n:.3f} s per submission (full marks: {sum(f == 1 for f in fo)}/{len(fo)})"
            )
            print(f"speed-up per submission: {theirs / otter_n / (ours / n):.0f}x")
        ok = all(f == 1 for f in fr)
    return 0 if ok else 1


if __name__ == "__main__":  # the one command line is attngrade.cli's
    sys.exit("run it as: python -m attngrade bench ... (python -m attngrade bench --help)")
