"""Making submissions from a homework's notebooks, for the mutation, grader and CLI tests.

:func:`submission_with` takes the autograder notebook (the solutions) and replaces the
definitions of some functions by other source code, e.g. a wrong solution; :func:`stub_submission`
is the student notebook as handed out (every answer ``...``). Mutants live beside each master in
``exercises/hwNN_topic/mutants.py`` as ``MUTANTS = {name: (question, old, new)}``: a one-line edit
of the solutions, where ``old`` occurs exactly once in the solutions' code cells and is replaced by
``new`` (:func:`mutant_submission`). The older form ``(question, {function: source})`` replaces
whole definitions.
"""

from __future__ import annotations

import ast
import copy
import json
import runpy
import textwrap
from pathlib import Path
from typing import Any

from attngrade.homework import Homework


def _cell_source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def replace_function(source: str, name: str, new_def: str) -> str | None:
    """``source`` with the top-level definition of ``name`` replaced by ``new_def`` (None if absent)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            lines = source.splitlines()
            start = (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1
            return "\n".join(
                lines[:start] + textwrap.dedent(new_def).strip("\n").splitlines() + lines[node.end_lineno :]
            )
    return None


def submission_with(hw: Homework, replacements: dict[str, str]) -> dict[str, Any]:
    """The solutions notebook with each function in ``replacements`` redefined by its source."""
    nb = json.loads(hw.autograder_notebook.read_text(encoding="utf-8"))
    nb = copy.deepcopy(nb)
    todo = dict(replacements)
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code":
            continue
        for name in list(todo):
            new = replace_function(_cell_source(cell), name, todo[name])
            if new is not None:
                cell["source"] = new
                del todo[name]
    if todo:
        raise KeyError(f"{hw.name}: no definition of {sorted(todo)} in the solutions notebook")
    return nb


def edited_submission(hw: Homework, old: str, new: str) -> dict[str, Any]:
    """The solutions notebook with the one occurrence of ``old`` in its code cells replaced by ``new``."""
    nb = copy.deepcopy(json.loads(hw.autograder_notebook.read_text(encoding="utf-8")))
    cells = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    found = [c for c in cells if old in _cell_source(c)]
    count = sum(_cell_source(c).count(old) for c in found)
    if count != 1:
        raise ValueError(
            f"{hw.name}: a mutant's edit must match exactly once in the solutions; {old!r} matches {count} times"
        )
    cell = found[0]
    cell["source"] = _cell_source(cell).replace(old, new, 1)
    return nb


def mutant_submission(hw: Homework, mutant: tuple) -> dict[str, Any]:
    """The solutions notebook changed by one mutant: ``(question, old, new)`` or ``(question, {function: source})``."""
    if len(mutant) == 3:
        _, old, new = mutant
        return edited_submission(hw, old, new)
    _, functions = mutant
    return submission_with(hw, functions)


def stub_submission(hw: Homework) -> dict[str, Any]:
    """The student notebook exactly as handed out."""
    return json.loads(hw.student_notebook.read_text(encoding="utf-8"))


def code_cells(nb: dict[str, Any]) -> list[str]:
    """The code cells of a notebook (as the grader reads them)."""
    return [_cell_source(c) for c in nb["cells"] if c.get("cell_type") == "code"]


def load_mutants(hw: Homework) -> dict[str, tuple]:
    """The homework's wrong solutions: name -> (question that must lose points, old, new) or (question, {function: source})."""
    path = hw.folder / "mutants.py"
    if not path.exists():
        return {}
    return dict(runpy.run_path(str(path))["MUTANTS"])


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
    "attnbook.interpretability.composition_score": "attnbook.interpretability.composition_score(torch.eye(2), torch.eye(2))",
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
        source = _cell_source(cell)
        if cell.get("cell_type") == "code" and any(f"def {f}(" in source or f"class {f}" in source for f in functions):
            cell["source"] = above + source + below
            answers += 1
    if not answers:
        raise ValueError(f"{hw.name}: no answer cell defines any of {sorted(functions)}")
    return nb
