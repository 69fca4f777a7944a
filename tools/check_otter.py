"""Grade every honest habit with both graders and report where ``otter run`` and the class grader disagree.

The habit suite (``tests/attngrade/test_grader_habits.py``: odd file names, zip exports, comparisons
with the course's references above and below the answers, prints, files written, ...), hw02's
honest and hostile tests for its test-writing question (``test_student_tests.HW02_TESTS``) and each
homework's comparing notebook (``tests/submissions.py``: the solutions with ``expected =
<reference call>`` at the top and the bottom of every answer cell) are graded twice: by ``otter
run`` on the homework's Gradescope zip, as Gradescope would, and by the class grader
(``attnbook-grade``'s ``Grader``, in its sandbox). Every question's score must be the same::

    make check-otter                                           # hw01's habits and every homework
    .venv/bin/python -m tools.check_otter --homework hw02 hw09 # some homework's comparing notebooks

It prints one line per notebook and exits with status 1 when a score differs (or a run fails).
It is not part of ``make test``: each ``otter run`` starts a kernel and imports torch (4-10 s),
and the whole check runs about forty of them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

#: habits where the two graders are known to differ, and why (listed as KNOWN, not counted as a failure)
KNOWN = {
    "byte_order_mark": "otter run cannot read a notebook that starts with a UTF-8 byte-order mark "
    "(nbformat: 'Notebook does not appear to be JSON'); attnbook-grade reads it and grades it in full",
}


def otter_scores(zip_path: Path, notebook: Path, questions: list[str]) -> dict[str, float] | str:
    """``otter run``'s score per question, or the reason it gave none."""
    out = notebook.parent / "otter-out"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "otter", "run", "--no-logo", "-a", str(zip_path), "-o", str(out), str(notebook)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=notebook.parent,
    )
    results = out / "results.json"
    if proc.returncode != 0 or not results.exists():
        return f"otter run failed (exit {proc.returncode}): {(proc.stdout + proc.stderr)[-600:]}"
    tests = json.loads(results.read_text(encoding="utf-8"))["tests"]
    return {t["name"]: float(t["score"]) for t in tests if t.get("name") in questions}


def notebooks(homework_names: list[str], habits: bool, student_tests: bool = True) -> list[tuple[str, str, str, bytes]]:
    """(homework, label, file name, content) for every notebook to grade."""
    from tests.homework_support import homework
    from tests.submissions import comparing_submission

    chosen = []
    if habits:
        from tests.attngrade.test_grader_habits import habits as habit_table

        for label, (file_name, content) in habit_table().items():
            data = content if isinstance(content, bytes) else json.dumps(content, indent=1).encode("utf-8")
            chosen.append(("hw01", label, file_name, data))
    for name in homework_names:
        hw = homework(name)
        chosen.append((name, "comparing", f"{name}.ipynb", json.dumps(comparing_submission(hw)).encode("utf-8")))
    if student_tests:
        from tests.attngrade.test_student_tests import hw02_notebooks

        for label, nb in hw02_notebooks().items():
            chosen.append(("hw02", label, "hw02.ipynb", json.dumps(nb).encode("utf-8")))
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--homework", nargs="*", default=None, help="homework whose comparing notebook to grade (all)")
    parser.add_argument("--no-habits", action="store_true", help="leave out hw01's habit suite")
    parser.add_argument(
        "--no-student-tests", action="store_true", help="leave out hw02's honest and hostile tests of q5"
    )
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)

    from attngrade.grading.grader import Grader
    from attngrade.homework import all_homework
    from tests.homework_support import autograder_zip, bwrap_available, homework

    names = args.homework if args.homework is not None else [hw.name for hw in all_homework()]
    chosen = notebooks(names, habits=not args.no_habits, student_tests=not args.no_student_tests)
    work = Path(tempfile.mkdtemp(prefix="check-otter-"))
    paths = []
    for k, (_, _, file_name, data) in enumerate(chosen):
        folder = work / f"{k:03d}"
        folder.mkdir()
        path = folder / file_name
        path.write_bytes(data)
        paths.append(path)

    # otter run, in parallel
    def run(k: int) -> dict[str, float] | str:
        hw = homework(chosen[k][0])
        questions = [q.name for q in hw.questions()]
        return otter_scores(autograder_zip(hw), paths[k], questions)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        theirs = list(pool.map(run, range(len(chosen))))

    # the class grader, one batch per homework
    ours: list[dict[str, float] | str] = [""] * len(chosen)
    for hw_name in dict.fromkeys(c[0] for c in chosen):
        ks = [k for k, c in enumerate(chosen) if c[0] == hw_name]
        with Grader(homework(hw_name), jobs=args.jobs, sandbox=bwrap_available() is None) as grader:
            results = grader.grade_paths([paths[k] for k in ks])
        by_path = {r.path: r for r in results}
        for k in ks:
            r = by_path.get(str(paths[k]))
            ours[k] = {q.name: float(q.score) for q in r.questions} if r is not None else "no row"

    disagreements = 0
    for (hw_name, label, _, _), mine, other in zip(chosen, ours, theirs):
        same = isinstance(mine, dict) and mine == other
        if not same and label in KNOWN:
            print(f"KNOWN     {hw_name} {label:28} {KNOWN[label]}")
            continue
        disagreements += not same
        if same:
            print(f"same      {hw_name} {label:28} {sum(mine.values()):g} points from both")
        else:
            print(f"DIFFERENT {hw_name} {label:28} attnbook-grade {mine}  otter run {other}")
    known = sum(1 for c in chosen if c[1] in KNOWN)
    print(
        f"{len(chosen) - disagreements} of {len(chosen)} notebooks get the same scores from both graders "
        f"or differ for a known reason ({known} known)"
    )
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
