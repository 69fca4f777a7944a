"""A sample class to try the grader on before the first real one, made from a homework's own notebooks.

``python -m attngrade sample-class hw02 --out sample/`` writes

* ``sample/submissions/``: one notebook per "student": two who hand in the solutions, one who hands
  in the notebook as it was handed out, and one per known wrong solution (``mutants.py``), each the
  solutions with that one mistake;
* ``sample/roster.csv``: a roster for ``--export`` (``submission,id,name,email``), which leaves out
  one student on purpose, so that the export shows how a mismatch is reported
  (``--missing-as-zero`` does not help there: a gradebook row without a student is never dropped);
* ``sample/answer_key.csv``: which student made which mistake, to check what the summary and
  ``misconceptions.csv`` say against the truth.

Then, as in the instructor's guide ("the week after the deadline")::

    attnbook-grade hw02 sample/submissions --out sample/grades/hw02
    attnbook-grade hw02 sample/submissions --out sample/grades/hw02 --only student-01 \\
        --compare sample/grades/hw02/gradebook.csv --export canvas --roster sample/roster.csv
    python -m attngrade course-report sample/grades
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from ..homework import Homework, load_homework
from .mutation import load_mutants, mutant_submission, stub_submission


def sample_class(hw: Homework) -> tuple[dict[str, dict], list[tuple[str, str, str]]]:
    """The notebooks by student name, and (student, question, mistake) for the answer key."""
    solutions = json.loads(hw.autograder_notebook.read_text(encoding="utf-8"))
    notebooks = {"student-01": solutions, "student-02": solutions, "student-03": stub_submission(hw)}
    key = [("student-01", "", "none"), ("student-02", "", "none"), ("student-03", "", "handed in unanswered")]
    for k, (name, mutant) in enumerate(sorted(load_mutants(hw).items()), start=4):
        student = f"student-{k:02d}"
        notebooks[student] = mutant_submission(hw, mutant)
        key.append((student, mutant[0], name))
    return notebooks, key


MARKER = "homework.txt"  # the homework a sample folder holds, so that a second homework is refused


def write_sample_class(hw: Homework, out: Path) -> Path:
    """Write the class into ``out``; a folder that already holds another homework's class is refused
    (``ValueError``): graded as one homework, the two would mix in one gradebook."""
    notebooks, key = sample_class(hw)
    folder = out / "submissions"
    marker = out / MARKER
    held = marker.read_text(encoding="utf-8").strip() if marker.is_file() else None
    present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if (held is not None and held != hw.name) or (held is None and present):
        what = (
            f"the sample class of {held}" if held else f"files of an unknown homework ({', '.join(present[:3])}, ...)"
        )
        raise ValueError(f"{folder} already holds {what}; give {hw.name}'s sample class its own folder")
    folder.mkdir(parents=True, exist_ok=True)
    marker.write_text(hw.name + "\n", encoding="utf-8")
    for student, nb in notebooks.items():
        (folder / f"{student}.ipynb").write_text(json.dumps(nb, indent=1), encoding="utf-8")
    students = sorted(notebooks)
    roster = io.StringIO()
    w = csv.writer(roster)
    w.writerow(["submission", "id", "name", "email"])
    for k, student in enumerate(students[:-1], start=1):  # the last student is left out on purpose
        w.writerow([student, 1000 + k, f"Student {k:02d}", f"{student}@example.edu"])
    (out / "roster.csv").write_text(roster.getvalue(), encoding="utf-8")
    answers = io.StringIO()
    w = csv.writer(answers)
    w.writerow(["submission", "question", "mistake"])
    w.writerows(key)
    (out / "answer_key.csv").write_text(answers.getvalue(), encoding="utf-8")
    return folder


def main(*, homework: str, out: str | Path | None = None) -> int:
    """``python -m attngrade sample-class HOMEWORK``: :func:`write_sample_class` into ``out``
    (default ``sample-class/<homework>``). Returns the exit status: 0, 1 when the homework could
    not be built, 2 for an unknown homework or a folder holding another homework's class."""
    try:
        hw = load_homework(homework)
    except (FileNotFoundError, ValueError) as exc:
        print(f"attngrade sample-class: {exc}", file=sys.stderr)
        return 2
    if not hw.is_built():
        from .assign import build

        problems = build([hw])
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
    out = Path(out) if out else Path("sample-class") / hw.name
    try:
        folder = write_sample_class(hw, out)
    except ValueError as exc:
        print(f"attngrade sample-class: {exc}", file=sys.stderr)
        return 2
    count = len(list(folder.glob("*.ipynb")))
    print(f"{count} notebooks in {folder}; roster: {out / 'roster.csv'}; answer key: {out / 'answer_key.csv'}")
    print(f"grade them: attnbook-grade {hw.name} {folder} --out {out.parent / 'grades' / hw.name}")
    return 0
