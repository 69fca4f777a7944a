"""The feedback a student receives (``feedback/<submission>.md``): per question the score and each
test's verdict; failing hidden tests say what went wrong but never show the test's source.
"""

from __future__ import annotations

from .results import SubmissionResult, score_text

HIDDEN_NOTE = (
    "Hidden tests (other shapes, dtypes and edge cases) ran at grading; their names and what "
    "they found are shown, their code is not."
)


def feedback_text(r: SubmissionResult, homework: str) -> str:
    """The feedback a student receives: per question the score and each test's verdict."""
    lines = [
        f"# {homework}: feedback for {r.submission}",
        "",
        f"Total: {score_text(r.total)} / {score_text(r.possible)}",
        "",
    ]
    if r.status == "error":
        lines += [
            "**The grader failed on this submission; this is not your score.** Your instructor has "
            "been told and will grade it again.",
            "",
        ]
    for q in r.questions:
        lines.append(f"## {q.name}: {score_text(q.score)} / {score_text(q.possible)}")
        for c in q.cases:
            mark = "passed" if c.passed else "FAILED"
            kind = "hidden" if c.hidden else "public"
            lines.append(f"- [{mark}] {c.name} ({kind}, {score_text(c.points)} pt)")
            if not c.passed:
                lines.extend("    " + line for line in c.message.splitlines())
        lines.append("")
    if any(c.hidden for q in r.questions for c in q.cases):
        lines += [HIDDEN_NOTE, ""]
    if r.execution_errors:
        lines.append("## Cells that raised an error when the grader ran your notebook")
        for e in r.execution_errors:
            lines.append(f"- code cell {e['cell']}: {e['error'].splitlines()[0] if e['error'] else ''}")
        lines.append("")
    if r.notes:
        lines.append("## Notes")
        lines.extend(f"- {n}" for n in r.notes)
        lines.append("")
    if r.review:
        lines.append("## Flagged for your instructor to look at (this did not change your score)")
        lines.extend(f"- {n}" for n in r.review[:10])
        lines.append("")
    return "\n".join(lines)


def failure_summary(r: SubmissionResult) -> list[str]:
    """What cost a submission points, one line each: failed tests, notes and cells that raised (for
    instructors' error messages and the tests)."""
    lines = []
    for q in r.questions:
        for c in q.cases:
            if not c.passed:
                lines.append(f"  {q.name} {c.name}: {c.message.splitlines()[0] if c.message else ''}")
    lines.extend(f"  note: {n}" for n in r.notes)
    lines.extend(f"  review: {n}" for n in r.review)
    lines.extend(f"  cell {e['cell']}: {e['error']}" for e in r.execution_errors)
    if r.error:
        lines.append(f"  error: {r.error}")
    return lines
