"""The class summary (``summary.md``): per-question averages, how often each hidden test failed,
what the class got wrong (the known mistakes its failed checks named, ``misconceptions.csv``), and
the entries of the class folder that were not graded.

The hidden tests each graded row failed (``hidden_failures.json``) and its named mistakes
(``mistakes.json``) are kept beside the gradebook, so that the summary after a partial re-grade
still counts the whole class.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from .gradebook import cell_name
from .output_files import atomic_write
from .results import GradebookRow, SubmissionResult, score_text


def summary_text(
    rows: Sequence[GradebookRow],
    questions: Sequence[str],
    results: Sequence[SubmissionResult],
    homework: str,
    *,
    hidden_failed: dict[str, list[str]] | None = None,
    mistakes: dict[str, list[str]] | None = None,
    ignored: Sequence[tuple[str, str]] = (),
) -> str:
    """The class summary: counts by status, per-question averages, hidden-test failures, and the
    files of the folder that were not graded, with the reason.

    ``hidden_failed`` maps every graded row of the gradebook (status=error rows left out) to the
    hidden tests it failed (:func:`hidden_failures`); by default it is read off ``results``.
    ``mistakes`` (:func:`named_mistakes`, for every graded row) adds what the class got wrong: the
    questions ranked by points lost, each with how many students each named mistake explains."""
    graded = [r for r in rows if r.status != "error"]
    possible: dict[str, float] = {}
    for r in results:
        for q in r.questions:
            possible[q.name] = q.possible
    lines = [
        f"# {homework}: class summary",
        "",
        f"{len(rows)} submissions: "
        + ", ".join(f"{n} {s}" for s, n in sorted(Counter(r.status for r in rows).items())),
        "",
    ]
    if graded:
        lines += ["| question | average | possible |", "|---|---|---|"]
        for q in questions:
            vals = [r.scores.get(q, 0.0) for r in graded]
            lines.append(f"| {q} | {sum(vals) / len(vals):.2f} | {score_text(possible.get(q, 0))} |")
        totals = [r.total for r in graded]
        lines += [
            "",
            f"Average total: {sum(totals) / len(totals):.2f} of "
            f"{score_text(graded[0].possible)} (status=error rows left out)",
            "",
        ]
    if hidden_failed is None:
        hidden_failed = hidden_failures(results)
    failures = Counter(case for cases in hidden_failed.values() for case in cases)
    lines += ["Hidden tests failed (every graded row of the gradebook):", ""]
    if failures:
        lines += [f"- {name}: {n} of {len(hidden_failed)}" for name, n in failures.most_common()]
    else:
        lines.append("- none")
    if graded and mistakes is not None:
        lines += ["", "What the class got wrong (questions by points lost; the known mistakes the checks named):", ""]
        named = misconceptions(mistakes)
        for q, lost in points_lost(rows, questions, possible):
            if lost <= 0:
                continue
            lines.append(f"- {q}: {score_text(lost)} points lost in all")
            lines += [f"  - {len(s)} of {len(graded)}: {m}" for qq, m, s in named if qq == q]
        if not any(lost > 0 for _, lost in points_lost(rows, questions, possible)):
            lines.append("- nothing: every graded row has full marks")
        lines += ["", "(names per mistake: misconceptions.csv)"]
    if ignored:
        lines += ["", f"Not graded ({len(ignored)} entries of the folder):", ""]
        lines += [f"- {name}: {reason}" for name, reason in ignored]
    return "\n".join(lines) + "\n"


def hidden_failures(results: Sequence[SubmissionResult]) -> dict[str, list[str]]:
    """For each submission graded (status=error left out), the hidden tests it failed ("q1 name")."""
    return {
        r.submission: [f"{q.name} {c.name}" for q in r.questions for c in q.cases if c.hidden and not c.passed]
        for r in results
        if r.status != "error"
    }


#: how a check's message names the known mistake that explains a failure (attngrade.checks)
LIKELY_MISTAKE = re.compile(r"^Likely mistake: (.+)$", re.MULTILINE)


def named_mistakes(results: Sequence[SubmissionResult]) -> dict[str, list[str]]:
    """For each submission graded (status=error left out), the known mistakes its failed checks
    named, as ``"q3: <the mistake>"``, once per question."""
    out = {}
    for r in results:
        if r.status == "error":
            continue
        found = []
        for q in r.questions:
            for c in q.cases:
                if not c.passed:
                    found += [f"{q.name}: {m.strip()}" for m in LIKELY_MISTAKE.findall(c.message or "")]
        out[r.submission] = list(dict.fromkeys(found))
    return out


def read_record(path: Path) -> dict[str, list[str]]:
    """A per-row record written next to the gradebook by an earlier run ({} if none or unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): [str(c) for c in v] for k, v in data.items() if isinstance(v, list)}


def merged_record(
    path: Path,
    fresh: dict[str, list[str]],
    results: Sequence[SubmissionResult],
    rows: dict[str, GradebookRow],
    merge: bool,
) -> dict[str, list[str]]:
    """The record at ``path`` with the rows graded now replaced (``merge``) or alone, kept for the
    rows of the gradebook that were graded (status=error left out), written back to ``path``."""
    record = read_record(path) if merge else {}
    for r in results:
        record.pop(r.submission, None)
    record.update(fresh)
    record = {n: record[n] for n in sorted(record) if n in rows and rows[n].status != "error"}
    atomic_write(path, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return record


def misconceptions(mistakes: dict[str, list[str]]) -> list[tuple[str, str, list[str]]]:
    """(question, mistake, the students it explains), most students first."""
    who: dict[tuple[str, str], list[str]] = {}
    for student, found in mistakes.items():
        for item in found:
            question, _, mistake = item.partition(": ")
            who.setdefault((question, mistake), []).append(student)
    return sorted(((q, m, sorted(s)) for (q, m), s in who.items()), key=lambda t: (-len(t[2]), t[0], t[1]))


def misconceptions_csv(mistakes: dict[str, list[str]]) -> str:
    """question, mistake, students (how many), names (semicolon-separated), most common first."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["question", "mistake", "students", "names"])
    for question, mistake, students in misconceptions(mistakes):
        w.writerow([question, mistake, len(students), "; ".join(cell_name(s) for s in students)])
    return buf.getvalue()


def points_lost(
    rows: Sequence[GradebookRow], questions: Sequence[str], possible: dict[str, float]
) -> list[tuple[str, float]]:
    """Per question, the points the graded rows lost in all, most first."""
    graded = [r for r in rows if r.status != "error"]
    lost = {q: sum(possible.get(q, 0.0) - r.scores.get(q, 0.0) for r in graded) for q in questions}
    return sorted(lost.items(), key=lambda kv: (-kv[1], kv[0]))
