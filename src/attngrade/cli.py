"""``attnbook-grade`` / ``python -m attngrade``: grade a folder of submitted notebooks.

Example::

    attnbook-grade hw01 submissions/hw01/ --out grades/hw01

writes ``grades/hw01/gradebook.csv`` (submission, one column per question, total, possible, status,
error), ``grades/hw01/feedback/<submission>.md``, ``summary.md`` and ``histogram.png``, grading
on all cores (``--jobs``), each submission in a bubblewrap sandbox, and ``tests.json`` (a
fingerprint of every test case). ``--only alice bob`` re-grades some students and merges them into
the existing gradebook; ``--compare OLD/gradebook.csv`` writes ``comparison.md`` and
``comparison.csv`` (every score that moved, lowered ones first, and the tests that changed:
:mod:`attngrade.grading.compare`); ``--export canvas|moodle --roster ROSTER.csv`` writes the file
that LMS imports (:mod:`attngrade.grading.export`: ``--assignment 'Title (id)'`` names the LMS item,
by default the homework's name; ``--points N`` or ``--percent`` scales the scores to its points;
``python -m attngrade export`` does the same for an existing gradebook). Exit status: 0 when every
row was graded, 1 when a row has ``status=error`` (the grader failed, not the student), 2 for bad
arguments, a missing sandbox, or an export the roster or the LMS's identifiers refuse (the
gradebook is written; the export is not, and an earlier export file of that name is removed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .homework import DEFAULT_LIMITS, load_homework


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attnbook-grade",
        description="Grade a folder of submitted notebooks for one homework, each in its own bubblewrap sandbox.",
        epilog="The other commands: python -m attngrade assign | release | bench | export | course-report | sample-class (each with --help).",
    )
    p.add_argument("homework", help="homework name (hw01), its folder, or its master notebook")
    p.add_argument(
        "submissions",
        help="folder of submissions: NAME.ipynb or NAME.zip (grader.export()), "
        "or one folder NAME/ per student; NAME is the student",
    )
    p.add_argument("-o", "--out", default=None, help="output folder (default: grades/<homework>)")
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=None,
        help="parallel sandboxes (default: all cores, and at most one per 8 submissions)",
    )
    p.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        default=None,
        help="re-grade only these students and merge them into the existing gradebook",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds for everything about one submission (default {DEFAULT_LIMITS['submission_timeout']:g})",
    )
    p.add_argument(
        "--call-timeout",
        type=float,
        default=None,
        help=f"CPU seconds per call of a student's function (default {DEFAULT_LIMITS['call_timeout']:g})",
    )
    p.add_argument(
        "--memory-mb",
        type=int,
        default=None,
        help=f"memory a submission may allocate, MiB (default {DEFAULT_LIMITS['memory_mb']})",
    )
    from .grading.export import add_export_options

    add_export_options(p, required=False)
    p.add_argument(
        "--compare",
        default=None,
        metavar="OLD_GRADEBOOK",
        help="write the change per student and question against this earlier gradebook (comparison.md)",
    )
    p.add_argument("--no-build", action="store_true", help="fail instead of building a stale homework")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="grade WITHOUT isolation (no bubblewrap): only for notebooks you trust",
    )
    return p


#: the other commands of ``python -m attngrade`` (the module whose ``main(argv)`` runs each)
COMMANDS = {
    "assign": "attngrade.authoring.assign",  # every homework's student version and autograder
    "release": "attngrade.authoring.release",  # the student-facing course
    "bench": "attngrade.authoring.bench",  # grading speed against otter's
    "export": "attngrade.grading.export",  # a gradebook as the CSV an LMS imports
    "course-report": "attngrade.grading.course_report",  # what the class got wrong, every homework
    "sample-class": "attngrade.authoring.sample_class",  # a class made of the homework's mutants, to try it all
}


def main(argv: list[str] | None = None) -> int:
    """``python -m attngrade [grade] HOMEWORK FOLDER ...`` grades (also ``attnbook-grade``);
    ``python -m attngrade assign|release|bench ...`` builds, releases or measures."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        import importlib

        return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])
    if argv and argv[0] == "grade":
        argv = argv[1:]
    return grade(argv)


def grade(argv: list[str]) -> int:
    """Grade a class (see the module's documentation)."""
    args = build_parser().parse_args(argv)
    from .grading.bubblewrap import SandboxUnavailable
    from .grading.grader import Grader
    from .grading.notebook import find_submissions, ignored_entries
    from .grading.report import write_reports

    try:
        hw = load_homework(args.homework)
        paths = find_submissions(args.submissions, only=args.only)
        ignored = ignored_entries(args.submissions)
        roster = _roster(args)  # read now: a bad roster or old gradebook stops before any grading
        earlier = _earlier(args)
    except (FileNotFoundError, NotADirectoryError, ValueError) as exc:
        print(f"attnbook-grade: {exc}", file=sys.stderr)
        return 2
    if not paths:
        print(f"attnbook-grade: no .ipynb or .zip submissions in {args.submissions}", file=sys.stderr)
        return 2
    if ignored and not args.only:
        print(f"not graded ({len(ignored)} entries of {args.submissions}, listed in summary.md):", file=sys.stderr)
        for name, reason in ignored[:20]:
            print(f"  {name}: {reason}", file=sys.stderr)
    if not hw.is_built():
        if args.no_build:
            print(f"{hw.name} is not built (or older than its master); run make assignments", file=sys.stderr)
            return 2
        from .authoring.assign import build

        print(f"building {hw.name} (otter assign) ...", file=sys.stderr)
        problems = build([hw])
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
    limits = {}
    if args.timeout is not None:
        limits["submission_timeout"] = args.timeout
    if args.call_timeout is not None:
        limits["call_timeout"] = args.call_timeout
    if args.memory_mb is not None:
        limits["memory_mb"] = args.memory_mb
    out = Path(args.out) if args.out else Path("grades") / hw.name
    if args.unsafe_no_sandbox:
        print(
            "warning: grading WITHOUT a sandbox (--unsafe-no-sandbox): submissions can read, change "
            "and delete your files",
            file=sys.stderr,
        )
    start = time.perf_counter()
    try:
        with Grader(
            hw, jobs=args.jobs, limits=limits, sandbox=not args.unsafe_no_sandbox, hide=[args.submissions, str(out)]
        ) as grader:
            results = grader.grade_paths(paths, progress=not args.no_progress)
            questions = [q.name for q in grader.questions]
    except SandboxUnavailable as exc:
        print(f"attnbook-grade: {exc}", file=sys.stderr)
        return 2
    paths_written = write_reports(results, questions, out, hw.name, merge=bool(args.only), ignored=ignored)
    took = time.perf_counter() - start
    errors = [r for r in results if r.status == "error"]
    print(
        f"graded {len(results)} submissions of {hw.name} in {took:.1f} s "
        f"({took / max(len(results), 1):.2f} s each); gradebook: {paths_written.gradebook}; "
        f"feedback: {out / 'feedback'}; summary: {paths_written.summary}"
    )
    print(paths_written.summary_text)
    status = _after_grading(args, hw, grader.questions, out, paths_written.gradebook, roster, earlier)
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


def _roster(args):
    """The roster for ``--export`` (None without it); ValueError for a bad one or a missing --roster."""
    if args.export is None:
        if args.roster or args.missing_as_zero or args.assignment or args.points is not None or args.percent:
            raise ValueError(
                "--roster, --assignment, --points, --percent and --missing-as-zero go with --export FORMAT"
            )
        return None
    if args.points is not None and not args.points > 0:
        raise ValueError(f"--points must be a positive number, not {args.points:g}")
    if not args.roster:
        raise ValueError(f"--export {args.export} needs --roster FILE (columns submission,id[,name,email,...])")
    from .grading.export import read_roster

    return read_roster(args.roster)


def _earlier(args):
    """(rows, test fingerprints) of the gradebook named by ``--compare`` (None without it)."""
    if args.compare is None:
        return None
    from .grading.compare import read_fingerprints
    from .grading.report import read_gradebook

    old = Path(args.compare)
    if not old.is_file():
        raise ValueError(f"--compare {old}: no such gradebook file")
    return read_gradebook(old), read_fingerprints(old)


def _after_grading(args, hw, questions, out: Path, gradebook: Path, roster, earlier) -> int:
    """Record the tests' fingerprints; write the comparison and the LMS export that were asked for.
    Returns 2 when the export could not be written (the roster and the gradebook disagree)."""
    from .grading.compare import TESTS_FILE, compare, comparison_csv, comparison_markdown, fingerprint_tests
    from .grading.report import atomic_write, read_gradebook

    fingerprints = fingerprint_tests(questions)
    rows = read_gradebook(gradebook)  # the whole class, after an --only merge too
    if earlier is not None:
        old_rows, old_tests = earlier
        cmp = compare(old_rows, rows, [q.name for q in questions], old_tests, fingerprints)
        atomic_write(out / "comparison.csv", comparison_csv(cmp))
        atomic_write(out / "comparison.md", comparison_markdown(cmp, Path(args.compare)))
        lowered = [c for c in cmp.lowered if c.question != "total"]
        print(
            f"compared with {args.compare}: {len(lowered)} scores lowered, "
            f"{len([c for c in cmp.raised if c.question != 'total'])} raised (comparison.md)"
        )
        for c in lowered:
            print(f"  LOWERED {c.submission}, {c.question}: {c.before:g} -> {(c.after or 0):g}")
    atomic_write(out / TESTS_FILE, json.dumps(fingerprints, indent=1, sort_keys=True))
    if roster is None:
        return 0
    from .grading.export import export, export_points, report_export, write_export

    assignment = args.assignment or hw.name  # the LMS item's name: never the output folder's
    target = out / f"{args.export}.csv"
    result, error = write_export(
        target,
        lambda: export(
            rows, roster, args.export, assignment, missing_as_zero=args.missing_as_zero, points=export_points(args)
        ),
    )
    if result is None:
        print(f"attnbook-grade: the {args.export} export was not written: {error}", file=sys.stderr)
        return 2
    report_export(args.export, result, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
