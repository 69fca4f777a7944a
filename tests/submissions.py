"""Making submissions from a homework's notebooks, for the mutation, grader and CLI tests.

The solutions changed by mutants, and the student notebook as handed out, come from
:mod:`attngrade.authoring.mutation` (the same code makes an instructor's sample class); this module adds
what only the tests need: code cells as the grader reads them, writing a notebook, and the
solutions comparing themselves with a forbidden reference (:func:`comparing_submission`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from attngrade.authoring.master import cell_source
from attngrade.authoring.mutation import (  # noqa: F401  (the tests import them from here too)
    edited_submission,
    load_mutants,
    mutant_submission,
    replace_function,
    stub_submission,
    submission_with,
)
from attngrade.homework import Homework


def code_cells(nb: dict[str, Any]) -> list[str]:
    """The code cells of a notebook (as the grader reads them)."""
    return [cell_source(c) for c in nb["cells"] if c.get("cell_type") == "code"]


def write_notebook(nb: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return path


#: a valid call of a reference each homework forbids (the first of these that its grading.yml names):
#: in the student's Jupyter it runs, while grading it raises, as the reference is absent there
REFERENCE_CALLS = {
    "attnbook.softmax": "attnbook.softmax(torch.zeros(2, 3))",
    "torch.nn.functional.scaled_dot_product_attention": (
        "torch.nn.functional.scaled_dot_product_attention(torch.zeros(1, 2, 3), torch.zeros(1, 4, 3), torch.zeros(1, 4, 3))"
    ),
    "attnbook.MultiHeadAttention": "attnbook.MultiHeadAttention(4, 2)",
    "attnbook.sinusoidal_encoding": "attnbook.sinusoidal_encoding(4, 6)",
    "attnbook.permutation_matrix": "attnbook.permutation_matrix(torch.tensor([1, 0]))",
    "attnbook.models.interpretability.composition_score": "attnbook.models.interpretability.composition_score(torch.eye(2), torch.eye(2))",
}


def comparing_submission(hw: Homework) -> dict[str, Any]:
    """The solutions, with a comparison against a forbidden reference at the top and at the bottom of
    every answer cell (``expected = <reference call>``, then a line that uses ``expected``), as a
    student checks an answer against the course's own function. It must get full marks."""
    call = next((REFERENCE_CALLS[name] for name in hw.forbidden if name in REFERENCE_CALLS), None)
    if call is None:
        raise KeyError(f"{hw.name}: add a call of one of {sorted(hw.forbidden)} to REFERENCE_CALLS")
    above = f"import torch\nimport attnbook\nexpected = {call}\nprint(type(expected))\n\n"
    below = f"\n\nexpected = {call}\nprint(type(expected))\n"
    functions = {f for question in hw.questions() for f in question.functions}
    nb = copy.deepcopy(json.loads(hw.autograder_notebook.read_text(encoding="utf-8")))
    answers = 0
    for cell in nb["cells"]:
        source = cell_source(cell)
        if cell.get("cell_type") == "code" and any(f"def {f}(" in source or f"class {f}" in source for f in functions):
            cell["source"] = above + source + below
            answers += 1
    if not answers:
        raise ValueError(f"{hw.name}: no answer cell defines any of {sorted(functions)}")
    return nb
