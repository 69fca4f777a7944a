"""``python -m attngrade sample-class``: a class made of the homework's own notebooks, with a roster
that leaves one student out and an answer key of who made which mistake."""

from __future__ import annotations

import csv

from attngrade.build.mutation import load_mutants
from attngrade.build.sample_class import main

from ..homework_support import homework


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
    assert "attnbook-grade hw05" in capsys.readouterr().out
    assert main(["hw99", "--out", str(tmp_path / "x")]) == 2
