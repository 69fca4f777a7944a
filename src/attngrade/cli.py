"""``attnbook-grade`` / ``python -m attnbook.grading``: grade a folder of submitted notebooks.

Example::

    attnbook-grade hw01 submissions/hw01/ --out grades/hw01

writes ``grades/hw01/gradebook.csv`` (submission, one column per question, total, possible) and
``grades/hw01/feedback/<submission>.md``, grading on all cores (``--jobs``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .homework import DEFAULT_LIMITS, load_homework


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attnbook-grade",
        description="Grade a folder of submitted notebooks for one homework, each in its own sandbox.",
    )
    p.add_argument("homework", help="homework name (hw01), its folder, or its master notebook")
    p.add_argument("submissions", help="folder of submitted notebooks (.ipynb, or the .zip of grader.export()), one per student")
    p.add_argument("-o", "--out", default=None, help="output folder (default: grades/<homework>)")
    p.add_argument("-j", "--jobs", type=int, default=None, help="parallel sandboxes (default: all cores)")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"seconds for everything about one submission (default {DEFAULT_LIMITS['submission_timeout']:g})")
    p.add_argument("--call-timeout", type=float, default=None,
                   help=f"seconds per call of a student's function (default {DEFAULT_LIMITS['call_timeout']:g})")
    p.add_argument("--memory-mb", type=int, default=None,
                   help=f"memory a submission may allocate, MiB (default {DEFAULT_LIMITS['memory_mb']})")
    p.add_argument("--no-build", action="store_true", help="fail instead of building a stale homework")
    p.add_argument("--no-uid-isolation", action="store_true",
                   help="when running as root, do not give each sandbox its own user id")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .grader import Grader, find_submissions
    from .report import write_reports

    try:
        hw = load_homework(args.homework)
        paths = find_submissions(args.submissions)
    except (FileNotFoundError, NotADirectoryError, ValueError) as exc:
        print(f"attnbook-grade: {exc}", file=sys.stderr)
        return 2
    if not hw.is_built():
        if args.no_build:
            print(f"{hw.name} is not built (or older than its master); run make assignments", file=sys.stderr)
            return 2
        from .assign import build

        print(f"building {hw.name} (otter assign) ...", file=sys.stderr)
        problems = build([hw])
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
    if not paths:
        print(f"no .ipynb or .zip files in {args.submissions}", file=sys.stderr)
        return 2
    limits = {}
    if args.timeout is not None:
        limits["submission_timeout"] = args.timeout
    if args.call_timeout is not None:
        limits["call_timeout"] = args.call_timeout
    if args.memory_mb is not None:
        limits["memory_mb"] = args.memory_mb
    start = time.perf_counter()
    with Grader(hw, jobs=args.jobs, limits=limits,
                isolate_uid=False if args.no_uid_isolation else None) as grader:
        results = grader.grade_paths(paths)
        questions = [q.name for q in grader.questions]
        for warning in grader.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    out = Path(args.out) if args.out else Path("grades") / hw.name
    book, feedback = write_reports(results, questions, out, hw.name)
    took = time.perf_counter() - start
    print(f"graded {len(results)} submissions of {hw.name} in {took:.1f} s "
          f"({took / max(len(results), 1):.2f} s each); gradebook: {book}; feedback: {out / 'feedback'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
