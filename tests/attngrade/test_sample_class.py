"""``python -m attngrade sample-class``: a class made of the homework's own notebooks, with a roster
that leaves one student out and an answer key of who made which mistake; a notebook handed in for
another homework is a ``review`` row with the reason; the guide's recipe keeps each homework's
sample class in its own folder, and the numbers it quotes are the sample's."""

from __future__ import annotations

import csv
import json
import re

from attngrade.authoring.mutation import load_mutants
from attngrade.cli import main as command
from attngrade.grading.grader import Grader, recorded_assignment, wrong_homework
from attngrade.homework import load_homework

from ..homework_support import homework
from ..paths import ROOT

GUIDE = ROOT / "book" / "for_instructors.md"


def main(argv: list[str]) -> int:
    """``python -m attngrade sample-class ...``, run in this process."""
    return command(["sample-class", *argv])


def test_sample_class_has_every_mutant_a_roster_and_an_answer_key(tmp_path, capsys):
    hw = homework("hw05")
    assert main([hw.name, "--out", str(tmp_path)]) == 0
    notebooks = sorted(p.stem for p in (tmp_path / "submissions").glob("*.ipynb"))
    mutants = load_mutants(hw)
    assert len(notebooks) == len(mutants) + 3 and notebooks[0] == "student-01"
    key = list(csv.DictReader(open(tmp_path / "answer_key.csv", encoding="utf-8")))
    assert [r["submission"] for r in key] == notebooks
    assert {r["mistake"] for r in key[3:]} == set(mutants)
    assert all(r["question"] == mutants[r["mistake"]][0] for r in key[3:])
    roster = list(csv.DictReader(open(tmp_path / "roster.csv", encoding="utf-8")))
    assert [r["submission"] for r in roster] == notebooks[:-1]  # one student left out on purpose
    assert f"--out {tmp_path.parent / 'grades' / 'hw05'}" in capsys.readouterr().out  # the guide's layout
    assert main(["hw99", "--out", str(tmp_path / "x")]) == 2
    # the same homework again is fine; another homework in the same folder is refused, writing nothing
    assert main([hw.name, "--out", str(tmp_path)]) == 0
    assert main(["hw00", "--out", str(tmp_path)]) == 2
    assert "already holds the sample class of hw05" in capsys.readouterr().err
    assert sorted(p.stem for p in (tmp_path / "submissions").glob("*.ipynb")) == notebooks
    (tmp_path / "homework.txt").unlink()  # a folder from before the marker, holding notebooks: refused too
    assert main(["hw00", "--out", str(tmp_path)]) == 2


def test_the_recorded_assignment_name_is_read_from_the_otter_cell():
    assert recorded_assignment(['# Initialize Otter\nimport otter\ngrader = otter.Notebook("hw03.ipynb")']) == "hw03"
    assert recorded_assignment(["x = 1", "grader = otter.Notebook(nb_path='work/hw10.ipynb')"]) == "hw10"
    assert recorded_assignment(["import otter", "grader.check('q1')"]) is None
    assert wrong_homework(['grader = otter.Notebook("hw10.ipynb")'], "hw10") is None
    reason = wrong_homework(['grader = otter.Notebook("hw03.ipynb")'], "hw10")
    assert "'hw03'" in reason and "graded as 'hw10'" in reason


def test_a_notebook_of_another_homework_is_a_review_row_with_the_reason(tmp_path):
    """hw05's solutions handed in as hw00 score what hw00's tests give (0 here), flagged for review
    with the reason in the feedback; hw00's own notebook is not flagged."""
    other = homework("hw05")
    own = homework("hw00")
    solutions = json.loads(other.autograder_notebook.read_text(encoding="utf-8"))
    own_nb = json.loads(own.student_notebook.read_text(encoding="utf-8"))

    def code(nb):
        return [
            "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"]
            if c["cell_type"] == "code"
        ]

    assert recorded_assignment(code(solutions)) == "hw05" and recorded_assignment(code(own_nb)) == "hw00"
    with Grader(own, jobs=1) as grader:
        wrong, right = grader.grade_sources([("wrong", code(solutions)), ("right", code(own_nb))])
    assert wrong.status == "review" and wrong.review[0].startswith("wrong homework? ")
    assert "'hw05'" in wrong.review[0] and wrong.total == 0
    assert not any("wrong homework" in r for r in right.review)


def test_the_guide_keeps_each_sample_class_apart_and_quotes_its_numbers():
    text = GUIDE.read_text(encoding="utf-8")
    made = re.findall(r"attngrade sample-class (hw\d\d) --out (\S+)", text)
    graded = re.findall(r"attnbook-grade (hw\d\d) (\S+)/submissions --out", text)
    assert made and graded
    outs = {}
    for name, out in made:
        assert outs.setdefault(out, name) == name, f"{out} holds two homework"
        assert name in out.split("/")[-1], f"{out} is not named after {name}"
    assert all(outs.get(folder) == name for name, folder in graded), (made, graded)
    # "2 of 33": the sample class of hw02 has its mutants and three more students
    quoted = re.search(r"on the sample class of (hw\d\d)[^)]*?\b(\d+) of (\d+):", text, re.DOTALL)
    assert quoted, "the guide quotes no count from its sample class"
    assert int(quoted.group(3)) == len(load_mutants(load_homework(quoted.group(1)))) + 3
