"""What a student is told for each known mistake: every homework's mutants against the public tests.

For each wrong solution in ``exercises/hwNN_topic/mutants.py`` this applies the mutant to the
solutions (as tests/homework/test_mutations.py does), runs the notebook's code in this process and
runs the PUBLIC tests of the mutant's question on its functions, the way ``grader.check`` runs them
in a student's notebook (no sandbox: the public tests only call the student's function through
``attngrade.checks.check_call``). It records the first line that names a cause:

* ``Likely mistake: ...`` (a known mistake of the test, ``mistakes=``) -- a *named* hint;
* ``Note: ...`` (a fact about the result, such as a row that should be zeros) or a generic
  ``Hint: ...`` guess (transposed, rescaled, lower precision);
* ``no hint`` (the failure message names no cause; its first line follows);
* ``public tests pass`` (only the hidden tests catch it at grading).

Run ``.venv/bin/python -m tools.hint_table [hwNN ...]``: one markdown table per homework
(mutant | question | what the student is told).
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
import warnings
from dataclasses import dataclass

from attngrade.checks import HINT_PREFIX, CheckFailure
from attngrade.homework import Homework, all_homework
from tests.homework_support import homework
from tests.submissions import code_cells, load_mutants, mutant_submission, submission_with

#: what the student is told, by kind
NAMED, NOTE, GUESSED, NONE, PASS = "named", "note", "guess", "none", "pass"


@dataclass
class Told:
    """What the public tests tell a student about one mutant."""

    mutant: str
    question: str
    kind: str  # NAMED, NOTE, GUESSED, NONE or PASS
    text: str  # the hint's line (or the failure's first line)
    message: str = ""  # the whole failure message of the first failing public test

    @property
    def named(self) -> bool:
        return self.kind == NAMED

    @property
    def contradicted(self) -> bool:
        """A named hint followed by a generic guess (check_call drops those: this should never be)."""
        return self.named and any(line.startswith(HINT_PREFIX) for line in self.message.splitlines())


def _runnable(source: str) -> bool:
    """Whether a code cell of the autograder notebook runs here (not otter's own cells)."""
    return "otter" not in source and "grader." not in source


def notebook_namespace(cells: list[str]) -> dict:
    """The namespace left by running the notebook's code cells (an error stops nothing: a student's
    notebook goes on to the next cell too)."""
    env: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for source in cells:
            if not _runnable(source):
                continue
            try:
                exec(compile(source, "<cell>", "exec"), env)
            except Exception:  # noqa: BLE001 - a broken cell leaves its names undefined, as in Jupyter
                continue
    return env


def first_line(lines: list[str]) -> str:
    """The failure's first line, with a call described over several lines folded into one."""
    if not lines:
        return ""
    if lines[0].endswith("(") and any(line.startswith("  )") for line in lines):
        end = next(i for i, line in enumerate(lines) if line.startswith("  )"))
        return lines[0] + "...)" + lines[end].removeprefix("  )")
    return lines[0]


def classify(message: str) -> tuple[str, str]:
    """(kind, line) for a failure message of ``check_call``."""
    lines = message.splitlines()
    for line in lines:
        if line.startswith("Likely mistake: "):
            return NAMED, line.removeprefix("Likely mistake: ").strip()
    for line in lines:
        if line.strip().startswith("Note: "):
            return NOTE, line.strip()
    for line in lines:
        if line.startswith(HINT_PREFIX):
            return GUESSED, line.strip()
    return NONE, f"no hint ({first_line(lines)})"


def public_failure(hw: Homework, question: str, env: dict) -> str | None:
    """The message of the first failing public test of ``question`` (None when all pass)."""
    (q,) = [q for q in hw.questions() if q.name == question]
    for case in q.cases:
        if case.hidden:
            continue
        kwargs = {p: env.get(p) for p in case.params if p != "env"}
        if "env" in case.params:
            kwargs["env"] = env
        try:
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                case.func(**kwargs)
        except CheckFailure as failure:
            return failure.message
        except Exception as exc:  # noqa: BLE001 - a test that fails otherwise (as otter reports it)
            return f"{type(exc).__name__}: {exc}"
    return None


def told(hw: Homework, mutant: str, spec: tuple) -> Told:
    """What the public tests of the mutant's question tell a student who made that mistake."""
    question = spec[0]
    env = notebook_namespace(code_cells(mutant_submission(hw, spec)))
    message = public_failure(hw, question, env)
    if message is None:
        return Told(mutant, question, PASS, "public tests pass (only hidden tests catch it)")
    kind, line = classify(message)
    return Told(mutant, question, kind, line, message)


def hint_table(name: str, mutants: list[str] | None = None) -> list[Told]:
    """What each mutant of homework ``name`` is told (all of them, or those named)."""
    hw = homework(name)
    specs = load_mutants(hw)
    return [told(hw, m, specs[m]) for m in (mutants or specs)]


def solutions_pass(name: str) -> list[str]:
    """The questions whose public tests fail on the solutions themselves (should be none)."""
    hw = homework(name)
    env = notebook_namespace(code_cells(submission_with(hw, {})))
    return [q.name for q in hw.questions() if public_failure(hw, q.name, env) is not None]


def _cell(text: str, width: int = 220) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def markdown(name: str, rows: list[Told]) -> str:
    named = sum(r.named for r in rows)
    out = [
        f"### {name}: {named} of {len(rows)} mutants get a named hint",
        "",
        "| mutant | question | what the student is told |",
        "|---|---|---|",
    ]
    labels = {NAMED: "Likely mistake: ", NOTE: "", GUESSED: "", NONE: "", PASS: ""}
    flag = " **(followed by a generic guess)**"
    out += [
        f"| {_cell(r.mutant, 90)} | {r.question} | {_cell(labels[r.kind] + r.text)}{flag if r.contradicted else ''} |"
        for r in rows
    ]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    names = argv or [hw.name for hw in all_homework()]
    start = time.perf_counter()
    total = named = contradicted = 0
    for name in names:
        broken = solutions_pass(name)
        if broken:
            print(f"**{name}: the solutions fail the public tests of {broken}**\n")
        rows = hint_table(name)
        total += len(rows)
        named += sum(r.named for r in rows)
        contradicted += sum(r.contradicted for r in rows)
        print(markdown(name, rows) + "\n", flush=True)
    print(
        f"{named} of {total} mutants get a named hint, {contradicted} of them followed by a generic guess "
        f"({time.perf_counter() - start:.1f} s)"
    )
    return 1 if contradicted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
