"""A grading run of a class, from the folder to the files: ``attnbook-grade HOMEWORK SUBMISSIONS``
(the options are :mod:`attngrade.cli`'s; :func:`grade` takes them as keyword arguments).

The run finds the submissions, each with its student's name (:mod:`.finder`), reads the roster
and the earlier gradebook it was asked to use (a bad one stops the run before any grading),
grades every submission in its sandbox (:class:`.grader.Grader`), writes the gradebook, feedback
and summary (:func:`.report.write_reports`), then compares the run's rows with the earlier
gradebook (:mod:`.compare`) and writes the LMS's import file (:mod:`.export`). The comparison and
the export read the run's own rows (the whole class after an ``--only`` merge), never the
gradebook file it has just written.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..homework import Homework, load_homework
from .compare import TESTS_FILE, comparison_csv, comparison_markdown, fingerprint_tests, read_fingerprints
from .compare import compare as compare_rows
from .export import export as export_rows
from .export import read_roster, report_export, scale, write_export
from .finder import find_submissions, ignored_entries
from .gradebook import read_gradebook
from .output_files import atomic_write
from .report import write_reports

#: how a run builds a homework whose student version is missing or stale: the problems found
Build = Callable[[list[Homework]], list[str]]


def _fail(message: str) -> int:
    print(f"attnbook-grade: {message}", file=sys.stderr)
    return 2


def grade(
    *,
    homework: str,
    submissions: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    only: Sequence[str] | None = None,
    timeout: float | None = None,
    call_timeout: float | None = None,
    memory_mb: int | None = None,
    lms: str | None = None,
    roster: str | os.PathLike[str] | None = None,
    assignment: str | None = None,
    points: float | None = None,
    percent: bool = False,
    missing_as_zero: bool = False,
    compare: str | os.PathLike[str] | None = None,
    no_build: bool = False,
    no_progress: bool = False,
    unsafe_no_sandbox: bool = False,
    build: Build | None = None,
) -> int:
    """Grade the class in ``submissions`` for ``homework`` into ``out`` (default
    ``grades/<homework>``); with ``lms`` (the command line's ``--export``) also write that LMS's
    import file for ``roster``, and with ``compare`` the comparison with that earlier gradebook.
    ``build`` builds a stale homework (the command line passes :func:`attngrade.authoring.assign.build`;
    without it, or with ``no_build``, a stale homework is an error).

    Returns the exit status: 0 when every row was graded, 1 when a row has ``status=error`` (the
    grader failed, not the student) or the build failed, 2 for bad arguments, a missing sandbox, or
    an export the roster or the LMS's identifiers refuse (the gradebook is written; the export is
    not, and an earlier export file of that name is removed)."""
    from .bubblewrap import SandboxUnavailable
    from .grader import Grader  # imports torch: not for --help

    try:
        hw = load_homework(homework)
        found = find_submissions(submissions, only=only)
        ignored = ignored_entries(submissions)
        # read now: a bad roster or earlier gradebook stops the run before any grading
        students = _roster(lms, roster, assignment, points, percent, missing_as_zero)
        earlier = _earlier(compare)
        target = Path(out) if out else Path("grades") / hw.name
        if only:
            read_gradebook(target / "gradebook.csv")  # the rows an --only merge keeps must be readable
    except (FileNotFoundError, NotADirectoryError, ValueError) as exc:
        return _fail(str(exc))
    if not found:
        return _fail(f"no .ipynb or .zip submissions in {submissions}")
    if ignored and not only:
        print(f"not graded ({len(ignored)} entries of {submissions}, listed in summary.md):", file=sys.stderr)
        for name, reason in ignored[:20]:
            print(f"  {name}: {reason}", file=sys.stderr)
    if not hw.is_built():
        if no_build or build is None:
            print(f"{hw.name} is not built (or older than its master); run make assignments", file=sys.stderr)
            return 2
        print(f"building {hw.name} (otter assign) ...", file=sys.stderr)
        problems = build([hw])
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
    limits = {}
    if timeout is not None:
        limits["submission_timeout"] = timeout
    if call_timeout is not None:
        limits["call_timeout"] = call_timeout
    if memory_mb is not None:
        limits["memory_mb"] = memory_mb
    if unsafe_no_sandbox:
        print(
            "warning: grading WITHOUT a sandbox (--unsafe-no-sandbox): submissions can read, change "
            "and delete your files",
            file=sys.stderr,
        )
    start = time.perf_counter()
    try:
        with Grader(
            hw, jobs=jobs, limits=limits, sandbox=not unsafe_no_sandbox, hide=[submissions, str(target)]
        ) as grader:
            results = grader.grade_entries(found, progress=not no_progress)
            questions = grader.questions
    except SandboxUnavailable as exc:
        return _fail(str(exc))
    names = [q.name for q in questions]
    written = write_reports(results, names, target, hw.name, merge=bool(only), ignored=ignored)
    took = time.perf_counter() - start
    print(
        f"graded {len(results)} submissions of {hw.name} in {took:.1f} s "
        f"({took / max(len(results), 1):.2f} s each); gradebook: {written.gradebook}; "
        f"feedback: {target / 'feedback'}; summary: {written.summary}"
    )
    print(written.summary_text)
    fingerprints = fingerprint_tests(questions)
    if earlier is not None:
        old_rows, old_tests = earlier
        cmp = compare_rows(old_rows, written.rows, names, old_tests, fingerprints)
        atomic_write(target / "comparison.csv", comparison_csv(cmp))
        atomic_write(target / "comparison.md", comparison_markdown(cmp, Path(compare)))
        lowered = [c for c in cmp.lowered if c.question != "total"]
        print(
            f"compared with {compare}: {len(lowered)} scores lowered, "
            f"{len([c for c in cmp.raised if c.question != 'total'])} raised (comparison.md)"
        )
        for c in lowered:
            print(f"  LOWERED {c.submission}, {c.question}: {c.before:g} -> {(c.after or 0):g}")
    atomic_write(target / TESTS_FILE, json.dumps(fingerprints, indent=1, sort_keys=True))
    status = 0
    if students is not None:
        file = target / f"{lms}.csv"
        item = assignment or hw.name  # the LMS item's name: never the output folder's
        result, error = write_export(
            file,
            lambda: export_rows(
                written.rows, students, lms, item, missing_as_zero=missing_as_zero, points=scale(points, percent)
            ),
        )
        if result is None:
            print(f"attnbook-grade: the {lms} export was not written: {error}", file=sys.stderr)
            status = 2
        else:
            report_export(lms, result, file)
    errors = [r for r in results if r.status == "error"]
    if errors:
        print(
            f"attnbook-grade: the grader failed on {len(errors)} submission(s) (status=error in the gradebook; "
            f"not the students' fault): " + ", ".join(r.submission for r in errors[:10]),
            file=sys.stderr,
        )
        for r in errors[:3]:
            print(f"  {r.submission}: {r.error.splitlines()[0] if r.error else ''}", file=sys.stderr)
        return 1
    return status


def _roster(lms, roster, assignment, points, percent, missing_as_zero):
    """The roster for the export (None without one); ValueError for a bad one or a missing roster."""
    if lms is None:
        if roster or missing_as_zero or assignment or points is not None or percent:
            raise ValueError(
                "--roster, --assignment, --points, --percent and --missing-as-zero go with --export FORMAT"
            )
        return None
    if points is not None and not points > 0:
        raise ValueError(f"--points must be a positive number, not {points:g}")
    if not roster:
        raise ValueError(f"--export {lms} needs --roster FILE (columns submission,id[,name,email,...])")
    return read_roster(roster)


def _earlier(compare):
    """(rows, test fingerprints) of the earlier gradebook to compare with (None without one)."""
    if compare is None:
        return None
    old = Path(compare)
    if not old.is_file():
        raise ValueError(f"--compare {old}: no such gradebook file")
    return read_gradebook(old), read_fingerprints(old)
