"""Build every homework: ``python -m attngrade assign [hw00 hw01 ...]`` (``make assignments``).

For each homework under ``exercises/`` this runs ``otter assign`` on the master notebook, which
writes ``dist/student/`` (the notebook students get: no solutions, public tests only) and
``dist/autograder/`` (solutions, all tests, and the Gradescope autograder zip) and fails if the
solutions do not pass every test. Then it checks, itself, that

* the student notebook holds no solution line and no hidden test (:func:`leaks`), and
* the class grader gives the solutions full marks, with the homework's forbidden references
  absent from the sandbox (so the solutions do not lean on them either).

It exits non-zero if anything fails. The autograder zip carries a copy of the ``attnbook``
package (``attnbook_pkg/``), installed from the zip by the requirements in each master's
configuration, so Gradescope needs nothing else. The copy also holds the light part of
``attngrade`` that the tests import (:mod:`attngrade.checks`, :mod:`attngrade.student_tests`,
:mod:`attngrade.sandboxed.integrity`, :mod:`attngrade.sandboxed.candidates`), and the
homework's forbidden list (``grading.yml``) as :data:`attngrade.sandboxed.integrity.INTEGRITY_FILE`, both at
``attnbook_pkg/`` (otter copies it into the submission folder, the working directory while
grading) and inside the shipped ``attngrade``; the student folder gets the same file beside the
notebook. So ``grader.check`` in the student's notebook and ``otter run`` / Gradescope on the zip
fail a test whose call of the student's function ran a forbidden reference, as the class grader
does.

Where students write tests (a question graded with :mod:`attngrade.student_tests`), the autograder
also installs :data:`STUDENT_TEST_REQUIREMENTS` (``ipytest``: a ``%%ipytest`` cell defines its tests
under ``otter run`` only where the magic exists), added to the requirements otter generated from the
master's configuration (:func:`add_requirements`), so no master has to remember it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..homework import Homework, all_homework, load_homework, parse_test_file
from ..sandboxed.integrity import write_integrity_file
from .master import cell_source, code_lines, solution_only_lines

PACKAGE_DIR = "attnbook_pkg"
#: the modules of attngrade that the homework tests need where they run (the student's notebook,
#: otter's autograder): nothing but the standard library and torch
LIGHT_MODULES = (
    "__init__.py",
    "checks/__init__.py",
    "checks/failure.py",
    "checks/display.py",
    "checks/matching.py",
    "checks/diagnosis.py",
    "checks/comparing.py",
    "checks/otter_reports.py",
    "checks/calling.py",
    "checks/homework_helpers.py",
    "student_tests.py",
    "sandboxed/__init__.py",
    "sandboxed/integrity/__init__.py",
    "sandboxed/integrity/references.py",
    "sandboxed/integrity/guard.py",
    "sandboxed/integrity/homework_list.py",
    "sandboxed/integrity/writer.py",
    "sandboxed/candidates/__init__.py",
    "sandboxed/candidates/forks.py",
    "sandboxed/candidates/sealing.py",
    "sandboxed/candidates/wire.py",
    "sandboxed/candidates/isolation.py",
    "sandboxed/candidates/factory.py",
    "sandboxed/candidates/server.py",
)
#: what the autograder installs, beyond the master's requirements, for a homework whose students
#: write tests: their ``%%ipytest`` cells (``import ipytest; ipytest.autoconfig()`` above) run in otter's kernel
STUDENT_TEST_REQUIREMENTS = ("ipytest>=0.14",)
#: the module a question's tests import when students write the tests
STUDENT_TESTS_MODULE = "attngrade.student_tests"
#: the repository's own packaging files, copied with the package: ``attnbook`` installs light
#: (torch, numpy, matplotlib), so the autograder installs it from the same pyproject.toml
PACKAGING_FILES = ("pyproject.toml", "README.md")


def _package_copy(hw: Homework) -> Path:
    """Put a minimal installable copy of attnbook (and attngrade's light modules, and the
    homework's forbidden list) beside the master, for the autograder zip."""
    import attnbook

    src = Path(attnbook.__file__).resolve().parent
    target = hw.folder / PACKAGE_DIR
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(src, target / "src" / "attnbook", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    grade_src = Path(__file__).resolve().parent.parent  # attngrade/
    grade_dst = target / "src" / "attngrade"
    for name in LIGHT_MODULES:
        (grade_dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(grade_src / name, grade_dst / name)
    # into the copy of sandboxed/, where integrity.homework_list looks for it
    write_integrity_file(grade_dst / "sandboxed", hw.name, hw.forbidden, name="_integrity.json")
    write_integrity_file(target, hw.name, hw.forbidden)
    repository = src.parents[1]  # src/attnbook -> the checkout
    for name in PACKAGING_FILES:
        if not (repository / name).exists():
            raise FileNotFoundError(f"{repository / name} is missing: build the homework from the course's checkout")
        shutil.copy2(repository / name, target / name)
    return target


def students_write_tests(hw: Homework) -> bool:
    """Whether some question of ``hw`` grades a test the student writes (its tests use
    :mod:`attngrade.student_tests`), read from the master."""
    return STUDENT_TESTS_MODULE in hw.master.read_text(encoding="utf-8")


def _requirement_name(line: str) -> str:
    import re

    return re.split(r"[\s\[<>=!~;@]", line.strip(), maxsplit=1)[0].lower()


def add_requirements(hw: Homework, extra: tuple[str, ...] | list[str]) -> None:
    """Add the requirements ``extra`` that ``hw``'s built autograder lacks (by package name) to
    ``dist/autograder/requirements.txt`` and to the zip's ``environment.yml`` (its pip list is what
    Gradescope installs) and ``requirements.txt`` where the zip has one."""
    import yaml

    def added(lines: list[str]) -> list[str]:
        have = {_requirement_name(x) for x in lines if x.strip()}
        return [x for x in extra if _requirement_name(x) not in have]

    folder = hw.dist / "autograder"
    req = folder / "requirements.txt"
    if req.exists():
        lines = req.read_text(encoding="utf-8").splitlines()
        if new := added(lines):
            req.write_text("\n".join([*lines, *new]) + "\n", encoding="utf-8")
    for zip_path in folder.glob("*.zip"):
        with zipfile.ZipFile(zip_path) as zf:
            entries = [(info, zf.read(info)) for info in zf.infolist()]
        changed = False
        rewritten = []
        for info, data in entries:
            if info.filename == "environment.yml":
                env = yaml.safe_load(data.decode("utf-8"))
                pips = [d for d in env.get("dependencies", []) if isinstance(d, dict) and "pip" in d]
                if not pips:
                    raise ValueError(f"{zip_path}: environment.yml has no pip list to add {list(extra)} to")
                if new := added(pips[0]["pip"]):
                    pips[0]["pip"].extend(new)
                    data = yaml.safe_dump(env, sort_keys=False).encode("utf-8")
                    changed = True
            elif info.filename == "requirements.txt":
                lines = data.decode("utf-8").splitlines()
                if new := added(lines):
                    data = ("\n".join([*lines, *new]) + "\n").encode("utf-8")
                    changed = True
            rewritten.append((info, data))
        if changed:
            tmp = zip_path.with_name(zip_path.name + ".tmp")
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
                for info, data in rewritten:
                    zf.writestr(info, data)
            tmp.replace(zip_path)


def run_otter_assign(homeworks: list[Homework], run_tests: bool = True) -> list[tuple[bool, str]]:
    """``otter assign`` for a group of homework, in one process of its own (see
    :mod:`attngrade.authoring.otter_batch`); ``(ok, log)`` for each.

    With ``run_tests`` otter also grades the solutions with its own runner and fails unless they
    get full marks; the class grader's check (:func:`solutions_full_marks`) runs in any case.
    """
    from .otter_batch import split_log

    packages = []
    for hw in homeworks:
        shutil.rmtree(hw.dist, ignore_errors=True)
        packages.append(_package_copy(hw))
    flags = [] if run_tests else ["--no-run-tests"]
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-u",
                "-m",
                "attngrade.authoring.otter_batch",
                *flags,
                *(str(hw.master.resolve()) for hw in homeworks),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=900 * len(homeworks),
        )
    finally:
        for pkg in packages:
            shutil.rmtree(pkg, ignore_errors=True)
    logs = split_log(proc.stdout)
    outcomes = []
    for hw in homeworks:
        ok, log = logs.get(str(hw.master.resolve()), (False, proc.stdout[-4000:]))
        ok = ok and hw.student_notebook.exists() and hw.autograder_notebook.exists()
        if ok:  # grader.check in the student's notebook applies the same integrity rule
            write_integrity_file(hw.student_notebook.parent, hw.name, hw.forbidden)
            write_integrity_file(hw.autograder_notebook.parent, hw.name, hw.forbidden)
            if students_write_tests(hw):
                add_requirements(hw, STUDENT_TEST_REQUIREMENTS)
        outcomes.append((ok, log.strip()))
    return outcomes


def leaks(hw: Homework) -> list[str]:
    """Problems with the student version: solution lines or hidden tests in it."""
    problems = []
    student = json.loads(hw.student_notebook.read_text(encoding="utf-8"))
    code = "\n".join(cell_source(c) for c in student["cells"] if c["cell_type"] == "code")
    student_lines = set(code_lines(code))
    for line in sorted(solution_only_lines(hw.master)):
        if line in student_lines:
            problems.append(f"{hw.name}: solution line in the student notebook: {line!r}")
    tests = student.get("metadata", {}).get("otter", {}).get("tests", {})
    text = json.dumps(student)
    for q, src in tests.items():
        for case in parse_test_file(src, f"{hw.name}/{q}").cases:
            if case.hidden:
                problems.append(f"{hw.name}: hidden test {case.name} is in the student notebook")
    for question in hw.questions():
        for case in question.cases:
            if case.hidden and case.func.__name__ in text:
                problems.append(f"{hw.name}: the student notebook mentions hidden test {case.func.__name__}")
    return problems


def solutions_full_marks(hw: Homework) -> list[str]:
    """Grade the autograder notebook (the solutions) with the class grader: must be full marks."""
    from ..grading.grader import Grader

    with Grader(hw, jobs=1) as grader:
        (res,) = grader.grade_paths([hw.autograder_notebook])
    if res.total == res.possible and res.possible > 0:
        return []
    from ..grading.feedback import failure_summary

    return [
        f"{hw.name}: the solutions get {res.total:g} / {res.possible:g} from the class grader",
        *failure_summary(res),
    ]


def build(
    homeworks: list[Homework], jobs: int | None = None, *, verify: bool = True, otter_tests: bool = True
) -> list[str]:
    """Build ``homeworks`` (otter assign, in ``jobs`` processes), then verify; return the problems found."""
    import os

    # one process per group (otter's import is most of the cost of a build), the groups in parallel
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(homeworks)))
    groups = [homeworks[i::jobs] for i in range(jobs)]
    problems: list[str] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        grouped = list(pool.map(lambda group: run_otter_assign(group, otter_tests), groups))
    outcomes = {hw.name: outcome for group, results in zip(groups, grouped) for hw, outcome in zip(group, results)}
    built = []
    for hw in homeworks:
        ok, log = outcomes[hw.name]
        if ok:
            built.append(hw)
        else:
            problems.append(f"{hw.name}: otter assign failed (do the solutions pass their tests?)\n{log[-4000:]}")
    if verify:  # what otter could not build has failed already
        for hw in built:
            if hw.autograder_notebook.exists() and hw.student_notebook.exists():
                problems.extend(leaks(hw))
                problems.extend(solutions_full_marks(hw))
    return problems


def main(*, homework: Sequence[str] = (), jobs: int | None = None) -> int:
    """``python -m attngrade assign [HOMEWORK ...]``: :func:`build` the homework named (default:
    all under ``exercises/``) in ``jobs`` processes. Returns the exit status (0 or 1)."""
    homeworks = [load_homework(h) for h in homework] if homework else all_homework()
    if not homeworks:
        print("no homework found", file=sys.stderr)
        return 1
    start = time.perf_counter()
    problems = build(homeworks, jobs)
    for line in problems:
        print(line, file=sys.stderr)
    took = time.perf_counter() - start
    names = ", ".join(h.name for h in homeworks)
    if problems:
        print(f"FAILED: {len(problems)} problem(s) building {names}", file=sys.stderr)
        return 1
    print(
        f"built {names} in {took:.0f} s: student versions in exercises/*/dist/student, "
        f"autograders (with Gradescope zips) in exercises/*/dist/autograder"
    )
    return 0


if __name__ == "__main__":  # the one command line is attngrade.cli's
    sys.exit("run it as: python -m attngrade assign ... (python -m attngrade assign --help)")
