"""One notebook, one score: grading the same class twice writes the same gradebook and feedback.

The class is homework 2's solutions and a notebook that reads memory it never wrote: its softmax
shifts a fully masked row by ``torch.empty_like`` instead of ``torch.zeros_like``, right when that
memory holds a finite number and wrong (nan weights) when it holds nan or -inf. Without care its
score depends on what the allocator hands back (18/21 in one run and 21/21 in another, in an
attack on the grader); the sandbox fills every uninitialised tensor with nan
(``torch.utils.deterministic.fill_uninitialized_memory``, in attngrade.sandboxed.worker.preload), so
it loses the same points on every run. The class is graded twice, with one and with two sandboxes
(the notebooks meet different histories of the allocator), and the notebook three times within a
run; the gradebooks and feedback files must be equal byte for byte, and the copies' scores equal.
``grader.check`` and otter's autograder, which call the answer in their own process, fill it too
(attngrade.sandboxed.integrity.watch_call).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

from attngrade.grading.grader import Grader
from attngrade.grading.output_files import RUN_FILE
from attngrade.grading.report import write_reports
from attngrade.sandboxed import integrity

from ..homework_support import bwrap_available, homework
from ..submissions import code_cells, edited_submission, submission_with, write_notebook

needs_bwrap = pytest.mark.skipif(bwrap_available() is not None, reason=f"no sandbox here: {bwrap_available()}")

ZEROS = "shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))"
EMPTY = "shift = torch.where(torch.isfinite(shift), shift, torch.empty_like(shift))"


@functools.cache
def _runs(root: str) -> list[tuple[dict[str, bytes], dict[str, dict[str, float]]]]:
    hw = homework("hw02")
    class_folder = Path(root) / "class"
    class_folder.mkdir(parents=True)
    write_notebook(submission_with(hw, {}), class_folder / "honest.ipynb")
    mutant = edited_submission(hw, ZEROS, EMPTY)
    for copy in ("uninitialised", "uninitialised_again", "uninitialised_once_more"):
        write_notebook(json.loads(json.dumps(mutant)), class_folder / f"{copy}.ipynb")
    runs = []
    for index, jobs in enumerate((1, 2)):
        out = Path(root) / f"out{index}"
        with Grader(hw, jobs=jobs) as grader:
            results = grader.grade_paths(sorted(class_folder.glob("*.ipynb")))
            questions = [q.name for q in grader.questions]
        write_reports(results, questions, out, hw.name)
        files = {
            str(path.relative_to(out)): path.read_bytes()
            for path in sorted(out.rglob("*"))
            if path.is_file() and path.name != RUN_FILE  # RUN_FILE: when it was graded
        }
        scores = {r.submission: {q.name: q.score for q in r.questions} for r in results}
        runs.append((files, scores))
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return _runs(str(tmp_path_factory.mktemp("repeatable")))


@needs_bwrap
def test_two_gradings_of_a_class_write_the_same_gradebook_and_feedback(runs):
    (first, _), (second, _) = runs
    assert "gradebook.csv" in first and any(name.startswith("feedback") for name in first)
    assert sorted(first) == sorted(second)
    for name in first:
        assert first[name] == second[name], (name, first[name].decode()[:2000], second[name].decode()[:2000])


@needs_bwrap
def test_a_notebook_that_reads_uninitialised_memory_loses_the_same_points_every_time(runs):
    for _, scores in runs:
        honest = scores["honest"]
        assert sum(honest.values()) == 21, honest
        copies = [scores[name] for name in ("uninitialised", "uninitialised_again", "uninitialised_once_more")]
        assert copies[0] == copies[1] == copies[2], copies
        # its fully masked rows get nan weights: question 3 loses points, the rest is untouched
        assert copies[0]["q3"] < honest["q3"] and {**copies[0], "q3": honest["q3"]} == honest, copies[0]


def test_grader_check_and_otter_fill_uninitialised_memory_too():
    """In the student's notebook and in otter's autograder the tests call the answer in their own
    process, through the integrity guard (attngrade.sandboxed.integrity.watch_call): there too the
    call sees nan where it reads memory it never wrote, and every switch is put back after."""
    hw = homework("hw02")
    (cell,) = [c for c in code_cells(edited_submission(hw, ZEROS, EMPTY)) if "def masked_attention" in c]
    namespace: dict = {}
    exec(compile("import math\nimport torch\n" + cell, "<mutant>", "exec"), namespace)
    Q = K = V = torch.ones(1, 2, 3, dtype=torch.float64)
    mask = torch.tensor([[True, True], [False, False]])  # the second query sees no key
    guard = integrity.Guard(hw.forbidden)
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    for _ in range(3):
        with integrity.watch_call("masked_attention", guard):
            _, weights = namespace["masked_attention"](Q, K, V, mask)
        assert weights[0, 1].isnan().all() and not weights[0, 0].isnan().any(), weights
    assert (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    ) == before
