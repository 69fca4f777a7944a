"""Wrong and right submissions made from a homework's own notebooks: its mutants applied to the
solutions, for the mutation tests and for a sample class an instructor can grade before the first
real one (``python -m attngrade sample-class``).

Mutants live beside each master in ``exercises/hwNN_topic/mutants.py`` as ``MUTANTS = {name:
(question, old, new)}``: a one-line edit of the solutions, where ``old`` occurs exactly once in the
solutions' code cells and is replaced by ``new`` (:func:`mutant_submission`). The older form
``(question, {function: source})`` replaces whole definitions (:func:`submission_with`).
:func:`stub_submission` is the student notebook as handed out (every answer ``...``).
"""

from __future__ import annotations

import ast
import copy
import json
import runpy
import textwrap
from typing import Any

from ..homework import Homework
from .master import cell_source


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
            new = replace_function(cell_source(cell), name, todo[name])
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
    found = [c for c in cells if old in cell_source(c)]
    count = sum(cell_source(c).count(old) for c in found)
    if count != 1:
        raise ValueError(
            f"{hw.name}: a mutant's edit must match exactly once in the solutions; {old!r} matches {count} times"
        )
    cell = found[0]
    cell["source"] = cell_source(cell).replace(old, new, 1)
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


def load_mutants(hw: Homework) -> dict[str, tuple]:
    """The homework's wrong solutions: name -> (question that must lose points, old, new) or (question, {function: source})."""
    path = hw.folder / "mutants.py"
    if not path.exists():
        return {}
    return dict(runpy.run_path(str(path))["MUTANTS"])
