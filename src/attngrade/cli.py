"""The one command line of the course's grader: ``attnbook-grade`` and ``python -m attngrade``.

This module holds the only parser. Each command is one function of its stage's module, called
with the command's options as keyword arguments (as otter-grader's ``cli.py`` does), so a script
can call the same function without building an argument list:

* ``grade``: :func:`attngrade.grading.run.grade`, grade a folder of submissions (the default
  command: ``attnbook-grade HOMEWORK FOLDER``);
* ``assign``: :func:`attngrade.authoring.assign.main`, every homework's student version and autograder;
* ``release``: :func:`attngrade.authoring.release.main`, the student-facing course;
* ``bench``: :func:`attngrade.authoring.bench.main`, grading speed against otter's;
* ``export``: :func:`attngrade.grading.export.main`, a gradebook as the file an LMS imports;
* ``course-report``: :func:`attngrade.grading.course_report.main`, what the class got wrong, every
  homework;
* ``sample-class``: :func:`attngrade.authoring.sample_class.main`, a class made of a homework's mutants.

Example::

    attnbook-grade hw01 submissions/hw01/ --out grades/hw01

writes ``grades/hw01/gradebook.csv`` (submission, one column per question, total, possible, status,
error), ``grades/hw01/feedback/<submission>.md``, ``summary.md`` and ``histogram.png``, grading
on all cores (``--jobs``), each submission in a bubblewrap sandbox, and ``tests.json`` (a
fingerprint of every test case). ``--only alice bob`` re-grades some students and merges them into
the existing gradebook; ``--compare OLD/gradebook.csv`` writes ``comparison.md`` and
``comparison.csv`` (every score that moved, lowered ones first, and the tests that changed:
:mod:`attngrade.grading.compare`); ``--export FORMAT --roster ROSTER.csv`` writes the file that
LMS imports (:mod:`attngrade.grading.export`, whose ``FORMATS`` are the choices:
``--assignment 'Title (id)'`` names the LMS item, by default the homework's name; ``--points N`` or
``--percent`` scales the scores to its points; ``python -m attngrade export`` does the same for an
existing gradebook). The exit status of ``grade`` is :func:`attngrade.grading.run.grade`'s: 0 when
every row was graded, 1 when a row has ``status=error`` (the grader failed, not the student), 2 for
bad arguments, a missing sandbox, or an export the roster or the LMS's identifiers refuse.

The functions are imported when their command runs: ``--help`` imports no torch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .grading.export import FORMATS
from .homework import DEFAULT_LIMITS

# -- the commands: each passes its options on, as keyword arguments, to its stage's function --------


def _grade(**options) -> int:
    from .authoring.assign import build
    from .grading.run import grade

    return grade(build=build, **options)


def _assign(**options) -> int:
    from .authoring.assign import main

    return main(**options)


def _release(**options) -> int:
    from .authoring.release import main

    return main(**options)


def _bench(**options) -> int:
    from .authoring.bench import main

    return main(**options)


def _export(**options) -> int:
    from .grading.export import main

    return main(**options)


def _course_report(**options) -> int:
    from .grading.course_report import main

    return main(**options)


def _sample_class(**options) -> int:
    from .authoring.sample_class import main

    return main(**options)


# -- the options ----------------------------------------------------------------------------------


def _export_options(p: argparse.ArgumentParser, *, required: bool) -> None:
    """The options of an LMS export: ``grade --export FORMAT ...`` and ``export --format FORMAT ...``."""
    p.add_argument(
        "--format" if required else "--export",
        dest="lms",
        required=required,
        default=None,
        choices=list(FORMATS),
        help="the LMS whose import file to write" + ("" if required else " (needs --roster)"),
    )
    p.add_argument(
        "--roster",
        required=required,
        default=None,
        help="CSV with columns submission,id[,name,email,username,sis_user_id,sis_login_id,section], "
        "or Canvas's own gradebook export",
    )
    p.add_argument(
        "--assignment",
        default=None,
        help="the LMS item's name: for Canvas 'Title (id)' with the id in the assignment's URL, or its "
        "exact title (default: the homework's name)",
    )
    scale = p.add_mutually_exclusive_group()
    scale.add_argument("--points", type=float, default=None, help="scale the scores to the LMS item's N points")
    scale.add_argument("--percent", action="store_true", help="scale the scores to 100 (same as --points 100)")
    p.add_argument("--missing-as-zero", action="store_true", help="give roster students without a row 0")


def _grade_options(p: argparse.ArgumentParser) -> None:
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
    _export_options(p, required=False)
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


def _assign_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("homework", nargs="*", help="homework names (default: all under exercises/)")
    p.add_argument("-j", "--jobs", type=int, default=None, help="otter assign runs in parallel")


def _release_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=None, help="output folder (default: dist/course in the repository)")
    p.add_argument("--no-book", action="store_true", help="leave the website out (no book build)")
    p.add_argument(
        "--rebuild-book",
        action="store_true",
        help="run the strict book build even if _build/html is newer than every source",
    )
    p.add_argument(
        "--no-assign",
        action="store_true",
        help="fail rather than build a homework whose student version is missing or stale",
    )
    p.add_argument("--no-source", action="store_true", help="leave the public source copy out")


def _bench_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("homework", nargs="?", default="hw01")
    p.add_argument("-n", type=int, default=100, help="copies graded by the class grader")
    p.add_argument("--otter-n", type=int, default=3, help="copies graded by otter's grade_submission (0: skip)")
    p.add_argument("-j", "--jobs", type=int, default=None, help="parallel sandboxes (default: all cores)")


def _export_command_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("gradebook", help="a gradebook.csv written by attnbook-grade")
    _export_options(p, required=True)
    p.add_argument("--out", default=None, help="file to write (default: FORMAT.csv beside the gradebook)")


def _course_report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("grades", help="the folder holding one attnbook-grade output folder per homework")
    p.add_argument("--out", default=None, help="file to write (default: GRADES/course_report.md)")


def _sample_class_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("homework", help="homework name (hw02), its folder or its master notebook")
    p.add_argument("--out", default=None, help="folder to write (default: sample-class/<homework>)")


#: each command: its name, its function, its options, its line in ``--help``, its description, and
#: its ``prog`` (None: ``python -m attngrade NAME``; grading keeps the console script's name)
COMMANDS = (
    (
        "grade",
        _grade,
        _grade_options,
        "grade a folder of submitted notebooks (the default command)",
        "Grade a folder of submitted notebooks for one homework, each in its own bubblewrap sandbox.",
        "attnbook-grade",
    ),
    (
        "assign",
        _assign,
        _assign_options,
        "build student versions and autograders for the homework",
        "Build student versions and autograders for the homework.",
        None,
    ),
    (
        "release",
        _release,
        _release_options,
        "build the student-facing course and check it for leaks",
        "Build the student-facing course (website, package, student notebooks, public source) into one "
        "folder, and check that it holds no solution, hidden test, master or mutant.",
        None,
    ),
    (
        "bench",
        _bench,
        _bench_options,
        "seconds per submission, this grader against otter's",
        "Benchmark: seconds per submission, the class grader against otter's own ``grade_submission``.",
        None,
    ),
    (
        "export",
        _export,
        _export_command_options,
        "write a gradebook as the CSV file an LMS imports",
        "Write a gradebook as the CSV file an LMS imports.",
        None,
    ),
    (
        "course-report",
        _course_report,
        _course_report_options,
        "what a class got wrong across every graded homework",
        "What a class got wrong across a whole course: every homework's gradebook in one report.",
        None,
    ),
    (
        "sample-class",
        _sample_class,
        _sample_class_options,
        "a class made of a homework's own notebooks, to try the grader on",
        "A sample class to try the grader on before the first real one, made from a homework's own notebooks.",
        None,
    ),
)
NAMES = tuple(name for name, *_ in COMMANDS)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The command line's parser, and each command's own parser by name."""
    parser = argparse.ArgumentParser(
        prog="python -m attngrade",
        description="The course's class grader, its homework builder and its release. "
        "Without a command the arguments are grade's: attnbook-grade HOMEWORK SUBMISSIONS [options] "
        "(also python -m attngrade HOMEWORK SUBMISSIONS) grades a folder of submissions.",
        epilog="Each command explains its options: python -m attngrade COMMAND --help.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    parsers = {}
    for name, run, options, line, description, prog in COMMANDS:
        extra = {"prog": prog} if prog else {}
        p = sub.add_parser(name, help=line, description=description, **extra)
        options(p)
        p.set_defaults(run=run)
        parsers[name] = p
    parsers["grade"].epilog = (
        "Without a command, python -m attngrade and attnbook-grade grade. "
        "The other commands: python -m attngrade --help."
    )
    return parser, parsers


def main(argv: list[str] | None = None) -> int:
    """``python -m attngrade [grade] HOMEWORK FOLDER ...`` grades (also ``attnbook-grade``);
    ``python -m attngrade COMMAND ...`` runs another command (``--help`` lists them). Returns the
    command's exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in NAMES and argv[0] not in ("-h", "--help")):
        argv = ["grade", *argv]  # the default command
    parser, parsers = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own parser, with its usage
        parsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    options = vars(args)
    del options["command"]
    run = options.pop("run")
    return run(**options)


if __name__ == "__main__":
    sys.exit(main())
