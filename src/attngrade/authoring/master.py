"""The format of a homework's master notebook (otter-grader 7): which lines are solutions, which
are the prompt a student sees, which cells are tests. The one reader of that format, used by the
homework builder's leak check (:func:`attngrade.authoring.assign.leaks`) and the release scan
(:func:`attngrade.authoring.leaks.find_leaks`).

In a master, a solution is a block between ``# BEGIN SOLUTION`` and ``# END SOLUTION``, a line
ending in ``# SOLUTION`` (or ``# SOLUTION NO PROMPT``), or a whole cell between the raw cells
``# BEGIN SOLUTION`` / ``# END SOLUTION``. Tests are the cells between ``# BEGIN TESTS`` and
``# END TESTS``, or a code cell that starts with a ``# BEGIN TEST CONFIG`` string. Lines are compared
after :func:`norm`, since ``otter assign`` rewrites some of them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

_TRAILING_COMMENT = re.compile(r"\s+#[^'\"]*$")
_SPACES = re.compile(r"\s+")


def norm(line: str) -> str:
    """A line as compared: stripped, without a trailing comment, single quotes, single spaces
    (``otter assign`` rewrites tests that way, and a copy may differ in those details only)."""
    line = _TRAILING_COMMENT.sub("", line.strip())
    return _SPACES.sub(" ", line.replace('"', "'"))


def code_lines(text: str) -> list[str]:
    """Each line of ``text``, normalised."""
    return [norm(line) for line in text.splitlines()]


def cell_source(cell: dict) -> str:
    """A notebook cell's source as one string (nbformat stores a string or a list of lines)."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


_BEGIN = re.compile(r"#\s*BEGIN SOLUTION")
_END = re.compile(r"#\s*END SOLUTION")
_SOLUTION_SUFFIX = re.compile(r"#\s*SOLUTION(\s+NO PROMPT)?\s*$")
_ANY_SUFFIX = re.compile(r"#\s*SOLUTION(\s+NO PROMPT)?\s*$", re.MULTILINE)


_TESTS_BEGIN = re.compile(r"#\s*BEGIN TESTS")
_TESTS_END = re.compile(r"#\s*END TESTS")
#: a test cell of otter-grader's format: its config (YAML) in the first group
TEST_CONFIG = re.compile(r'^\s*"""\s*# BEGIN TEST CONFIG(.*?)"""\s*# END TEST CONFIG[^\n]*\n?', re.S)


def solution_and_prompt_lines(master: Path) -> tuple[set[str], set[str]]:
    """(solution lines, prompt lines) of a master notebook, each normalised (:func:`norm`).

    Solution lines are those between ``# BEGIN SOLUTION`` / ``# END SOLUTION`` comments, those
    ending in ``# SOLUTION``, and every line of a solution cell (the cells between the raw
    delimiters) that has no such markers; markdown solution cells count whole. Prompt lines are
    the rest of the master except its test cells: what the student version shows as the text and
    code of the homework. (A solution line that a *public test* repeats is still a solution line:
    the public tests travel to students in the student notebook.)
    """
    nb = json.loads(master.read_text(encoding="utf-8"))
    solution, other = set(), set()
    in_solution_cells = in_tests = False
    for cell in nb.get("cells", []):
        text = cell_source(cell)
        head = text.strip().splitlines()[0].strip() if text.strip() else ""
        if cell.get("cell_type") == "raw":
            if _BEGIN.fullmatch(head) or _END.fullmatch(head):
                in_solution_cells = bool(_BEGIN.fullmatch(head))
                continue
            if _TESTS_BEGIN.fullmatch(head) or _TESTS_END.fullmatch(head):
                in_tests = bool(_TESTS_BEGIN.fullmatch(head))
                continue
        if in_tests or (cell.get("cell_type") == "code" and TEST_CONFIG.match(text)):
            continue
        has_markers = bool(_BEGIN.search(text) or _ANY_SUFFIX.search(text))
        if in_solution_cells and not has_markers:
            solution.update(code_lines(text))
            continue
        in_block = False
        for raw in text.splitlines():
            line = raw.strip()
            if _BEGIN.match(line):
                in_block = True
            elif _END.match(line):
                in_block = False
            elif in_block:
                solution.add(norm(line))
            elif _SOLUTION_SUFFIX.search(line):
                solution.add(norm(_SOLUTION_SUFFIX.sub("", line)))
            else:
                other.add(norm(line))
    return solution, other


def solution_only_lines(master: Path) -> set[str]:
    """The solution lines of a master that its prompt does not also hold, normalised (:func:`norm`),
    leaving out comments and lines shorter than 8 characters (too common to mean a leak)."""
    solution, prompt = solution_and_prompt_lines(master)
    return {s for s in solution - prompt if len(s) >= 8 and not s.startswith("#")}
