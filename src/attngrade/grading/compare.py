"""Re-grades you can trust: what changed between two gradebooks, per student and per question, and
which tests changed in between.

Every grading run writes ``tests.json`` beside its gradebook: a fingerprint (SHA-256) of each test
case's source, points and visibility. ``attnbook-grade ... --compare OLD/gradebook.csv`` reads the
old gradebook and the ``tests.json`` beside it before grading, and afterwards compares them with
the run's own rows (the whole class after an ``--only`` merge; never its gradebook read back) and
writes

* ``comparison.csv``: submission, question, before, after, change, for every score that moved
  (and for students who appear on one side only);
* ``comparison.md``: the same for people, starting with **every lowered score** (a re-grade never
  lowers a score without listing it), then the raised ones, then the tests that were added,
  removed or changed since the old run.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import inspect
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .parsing import parse
from .results import GradebookRow, score_text

TESTS_FILE = "tests.json"


def _case_sources(question_source: str) -> dict[str, str]:
    """The source of each top-level function of a question's test file, by name."""
    try:
        tree = parse(question_source)
    except SyntaxError:
        return {}
    return {
        node.name: ast.get_source_segment(question_source, node) or ""
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def fingerprint_tests(questions) -> dict[str, dict[str, str]]:
    """Per question, per test case: a SHA-256 of its source, its points and whether it is hidden."""
    out: dict[str, dict[str, str]] = {}
    for q in questions:
        sources = _case_sources(q.source)
        for case in q.cases:
            source = sources.get(getattr(case.func, "__name__", ""))
            if not source:
                try:
                    source = inspect.getsource(case.func)
                except (OSError, TypeError):  # no source at all: the question's test file stands for it
                    source = q.source
            text = f"{source}\npoints={case.points}\nhidden={case.hidden}"
            out.setdefault(q.name, {})[case.name] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return out


def read_fingerprints(gradebook: Path) -> dict[str, dict[str, str]] | None:
    """The ``tests.json`` beside ``gradebook``, or None when that run wrote none."""
    path = gradebook.parent / TESTS_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass
class Change:
    submission: str
    question: str
    before: float | None  # None: no such row or column before
    after: float | None

    @property
    def delta(self) -> float:
        return (self.after or 0.0) - (self.before or 0.0)


@dataclass
class Comparison:
    changes: list[Change] = field(default_factory=list)
    tests_added: list[str] = field(default_factory=list)
    tests_removed: list[str] = field(default_factory=list)
    tests_changed: list[str] = field(default_factory=list)
    tests_known: bool = True  # False when the old run left no tests.json

    @property
    def lowered(self) -> list[Change]:
        return [c for c in self.changes if c.delta < 0]

    @property
    def raised(self) -> list[Change]:
        return [c for c in self.changes if c.delta > 0]


def _score(row: GradebookRow | None, column: str) -> float | None:
    return None if row is None else row.value(column)


def compare(
    old_rows: Sequence[GradebookRow],
    new_rows: Sequence[GradebookRow],
    questions: Sequence[str],
    old_tests: dict[str, dict[str, str]] | None,
    new_tests: dict[str, dict[str, str]],
) -> Comparison:
    """Every (submission, question or total) whose score differs between the two gradebooks, and
    the test cases added, removed or changed between the two runs."""
    old = {r.submission: r for r in old_rows}
    new = {r.submission: r for r in new_rows}
    result = Comparison()
    for name in sorted(set(old) | set(new)):
        for column in [*questions, "total"]:
            before, after = _score(old.get(name), column), _score(new.get(name), column)
            if before != after:
                result.changes.append(Change(name, column, before, after))
    if old_tests is None:
        result.tests_known = False
        return result
    old_cases = {f"{q}/{c}": h for q, cases in old_tests.items() for c, h in cases.items()}
    new_cases = {f"{q}/{c}": h for q, cases in new_tests.items() for c, h in cases.items()}
    result.tests_added = sorted(set(new_cases) - set(old_cases))
    result.tests_removed = sorted(set(old_cases) - set(new_cases))
    result.tests_changed = sorted(k for k in set(old_cases) & set(new_cases) if old_cases[k] != new_cases[k])
    return result


def _num(x: float | None) -> str:
    return "" if x is None else score_text(x)


def comparison_csv(cmp: Comparison) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["submission", "question", "before", "after", "change"])
    for c in cmp.changes:
        w.writerow([c.submission, c.question, _num(c.before), _num(c.after), f"{c.delta:+g}"])
    return buf.getvalue()


def comparison_markdown(cmp: Comparison, old: Path) -> str:
    def lines(changes: list[Change]) -> list[str]:
        return [f"- {c.submission}, {c.question}: {_num(c.before) or '-'} → {_num(c.after) or '-'}" for c in changes]

    out = [f"# Re-grade compared with {old}", ""]
    lowered = [c for c in cmp.lowered if c.question != "total"]
    out += [f"## Lowered scores ({len(lowered)})", ""]
    out += lines(lowered) or ["none"]
    raised = [c for c in cmp.raised if c.question != "total"]
    out += ["", f"## Raised scores ({len(raised)})", ""]
    out += lines(raised) or ["none"]
    out += ["", "## Tests changed since the old run", ""]
    if not cmp.tests_known:
        out.append(f"unknown: the old run wrote no {TESTS_FILE} beside its gradebook")
    else:
        for label, names in (
            ("added", cmp.tests_added),
            ("removed", cmp.tests_removed),
            ("changed", cmp.tests_changed),
        ):
            out.append(f"- {label}: {', '.join(names) if names else 'none'}")
    return "\n".join(out) + "\n"
