"""Writing grades out: the CSV gradebook, one feedback file per submission, and the class summary.

* ``gradebook.csv``: submission, one column per question, total, possible, status (``ok``,
  ``review``, ``error``), error (why the grader failed on that row);
* ``feedback/<submission>.md``: per question the score and each test's verdict; failing hidden
  tests say what went wrong but never show the test's source;
* ``summary.md`` and ``histogram.png``: per-question averages, how often each hidden test failed,
  the score distribution, and the entries of the class folder that were not graded, with the reason;
* ``hidden_failures.json``: the hidden tests each graded row failed, and ``mistakes.json``, the
  known mistakes its failed checks named ("Likely mistake: ..."), kept so that the summary after a
  partial re-grade still counts the whole class;
* ``misconceptions.csv``: per question and named mistake, how many students it explains and who
  (the summary ranks the questions by points lost and lists the same counts under each);
* ``questions.png``: one histogram of the scores per question (one y-scale, bars centred on the
  scores); ``questions.json``: each question's points; ``run.json``: the homework graded and when
  (what ``export`` and ``course-report`` name it by).

With ``merge`` (the CLI's ``--only``) the rows graded now replace those of the same students in the
existing gradebook and the other rows stay, and the summary is computed from the merged rows; without it the gradebook and the feedback folder are
replaced whole (no stale feedback files remain). Files are written to a temporary name and renamed
into place, so a link planted at an output path is replaced, not followed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import tempfile
import time
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .results import GradebookRow, SubmissionResult, score_text

FIXED_COLUMNS = ("total", "possible", "status", "error")


# -- file names ---------------------------------------------------------------------------------
# a student's feedback file is named after the submission: any name a file system gave us, made
# safe for every file system and distinct from every other student's

MAX_FILENAME_BYTES = 150
"""The longest name (in UTF-8 bytes) :func:`safe_filename` returns."""
_KEEP = set(" -_.,+()@")
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, at a character boundary and not between a
    letter and its combining marks."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    cut = data[:limit].decode("utf-8", "ignore")
    while cut and unicodedata.category(text[len(cut)]).startswith("M"):
        cut = cut[:-1]
    return cut


def safe_filename(name: str) -> str:
    """A file name (no extension) for ``name`` that every file system accepts and a person can
    read: letters of any script, digits, and `` -_.,+()@`` are kept, everything else (path
    separators, control and bidirectional characters, quotes, ``<>:|?*``) becomes ``_``; at most
    :data:`MAX_FILENAME_BYTES` UTF-8 bytes. A name that is already safe is returned as is; any
    other gets ``-`` and 8 hex digits of a hash of the original, so that two names never give the
    same file name (except by case, see :func:`unique_filenames`)."""
    text = unicodedata.normalize("NFC", os.fsencode(name).decode("utf-8", "backslashreplace"))
    cleaned = "".join(c if unicodedata.category(c)[0] in "LMN" or c in _KEEP else "_" for c in text)
    while "__" in cleaned:
        cleaned = cleaned.replace("__", "_")
    cleaned = cleaned.strip(" ._")
    if cleaned.split(".")[0].upper().strip() in _RESERVED:
        cleaned = "_" + cleaned
    if cleaned and cleaned == name and len(cleaned.encode("utf-8")) <= MAX_FILENAME_BYTES:
        return cleaned
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    base = _cut(cleaned, MAX_FILENAME_BYTES - 9).rstrip(" ._") or "submission"
    return f"{base}-{digest}"


def unique_filenames(names: list[str]) -> list[str]:
    """Safe file names for ``names`` (in the same order), distinct even on a file system that
    ignores case or Unicode normalisation: where two collide, the one that sorts later gets
    ``-2``, ``-3``, ... The result depends only on the set of names, not on their order."""
    taken: set[str] = set()
    chosen: dict[int, str] = {}
    for i in sorted(range(len(names)), key=lambda k: (names[k], k)):
        base = safe_filename(names[i])
        candidate, n = base, 1
        while unicodedata.normalize("NFC", candidate).casefold() in taken:
            n += 1
            suffix = f"-{n}"
            candidate = _cut(base, MAX_FILENAME_BYTES - len(suffix)) + suffix
        taken.add(unicodedata.normalize("NFC", candidate).casefold())
        chosen[i] = candidate
    return [chosen[i] for i in range(len(names))]


@dataclass
class Written:
    """What :func:`write_reports` wrote, and the whole class's rows (after a merge too), for the
    comparison and the LMS export of the same run."""

    gradebook: Path
    feedback: list[Path]
    summary: Path
    histogram: Path | None
    summary_text: str
    rows: list[GradebookRow]


def atomic_write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # a failed write leaves no temporary file behind
        raise


#: what a grading run records about itself beside the gradebook: the homework and when
RUN_FILE = "run.json"


def recorded_homework(folder: Path) -> str | None:
    """The homework graded into ``folder``, as the run recorded it (``run.json``; for an output
    folder of an older version, the title of its ``summary.md``), or None without either."""
    try:
        name = json.loads((folder / RUN_FILE).read_text(encoding="utf-8")).get("homework")
        if isinstance(name, str) and name:
            return name
    except (OSError, ValueError, AttributeError):
        pass
    try:
        with open(folder / "summary.md", encoding="utf-8") as f:
            found = re.match(r"# (.+): class summary$", f.readline().rstrip("\n"))
    except (OSError, UnicodeDecodeError):
        return None
    return found.group(1) if found else None


def recorded_time(folder: Path) -> float:
    """When the homework in ``folder`` was last graded (seconds since the epoch): the run's record,
    else the gradebook's modification time."""
    try:
        when = json.loads((folder / RUN_FILE).read_text(encoding="utf-8")).get("graded_at")
        if isinstance(when, (int, float)):
            return float(when)
    except (OSError, ValueError, AttributeError):
        pass
    try:
        return (folder / "gradebook.csv").stat().st_mtime
    except OSError:
        return 0.0


_num = score_text


def _cell_name(name: str) -> str:
    # a leading =, +, - or @ would make a spreadsheet evaluate the name as a formula
    return ("'" + name) if name[:1] in ("=", "+", "-", "@", "\t", "\r") else name


def gradebook_csv(rows: Sequence[GradebookRow], questions: Sequence[str]) -> str:
    """CSV text: submission, one column per question, total, possible, status, error."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["submission", *questions, *FIXED_COLUMNS])
    for row in sorted(rows, key=lambda r: r.submission):
        w.writerow(
            [
                _cell_name(row.submission),
                *(_num(row.scores.get(q, 0.0)) for q in questions),
                _num(row.total),
                _num(row.possible),
                row.status,
                row.error,
            ]
        )
    return buf.getvalue()


def read_gradebook(path: Path) -> list[GradebookRow]:
    """The rows of a gradebook an earlier run wrote (submission names unescaped; [] if there is
    none). ValueError names the file, the line and the column of a score that is not a number."""
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        questions = [c for c in reader.fieldnames or [] if c != "submission" and c not in FIXED_COLUMNS]

        def number(raw: dict, column: str) -> float:
            text = (raw.get(column) or "").strip()
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"{path}, line {reader.line_num}: {column!r} is {text!r}, not a number") from None

        for raw in reader:
            name = raw.get("submission") or ""
            if name[:2] in ("'=", "'+", "'-", "'@", "'\t", "'\r"):
                name = name[1:]
            scores = {q: number(raw, q) for q in questions if (raw.get(q) or "").strip()}
            total, possible = number(raw, "total"), number(raw, "possible")
            rows.append(GradebookRow(name, scores, total, possible, raw.get("status") or "ok", raw.get("error") or ""))
    return rows


HIDDEN_NOTE = (
    "Hidden tests (other shapes, dtypes and edge cases) ran at grading; their names and what "
    "they found are shown, their code is not."
)


def feedback_text(r: SubmissionResult, homework: str) -> str:
    """The feedback a student receives: per question the score and each test's verdict."""
    lines = [f"# {homework}: feedback for {r.submission}", "", f"Total: {_num(r.total)} / {_num(r.possible)}", ""]
    if r.status == "error":
        lines += [
            "**The grader failed on this submission; this is not your score.** Your instructor has "
            "been told and will grade it again.",
            "",
        ]
    for q in r.questions:
        lines.append(f"## {q.name}: {_num(q.score)} / {_num(q.possible)}")
        for c in q.cases:
            mark = "passed" if c.passed else "FAILED"
            kind = "hidden" if c.hidden else "public"
            lines.append(f"- [{mark}] {c.name} ({kind}, {_num(c.points)} pt)")
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
            lines.append(f"| {q} | {sum(vals) / len(vals):.2f} | {_num(possible.get(q, 0))} |")
        totals = [r.total for r in graded]
        lines += [
            "",
            f"Average total: {sum(totals) / len(totals):.2f} of "
            f"{_num(graded[0].possible)} (status=error rows left out)",
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
            lines.append(f"- {q}: {_num(lost)} points lost in all")
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


def _merged_record(
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
        w.writerow([question, mistake, len(students), "; ".join(_cell_name(s) for s in students)])
    return buf.getvalue()


def points_lost(
    rows: Sequence[GradebookRow], questions: Sequence[str], possible: dict[str, float]
) -> list[tuple[str, float]]:
    """Per question, the points the graded rows lost in all, most first."""
    graded = [r for r in rows if r.status != "error"]
    lost = {q: sum(possible.get(q, 0.0) - r.scores.get(q, 0.0) for r in graded) for q in questions}
    return sorted(lost.items(), key=lambda kv: (-kv[1], kv[0]))


MAX_BARS = 40
"""The most bars a score histogram draws (wider bars, of whole points, beyond)."""


def score_bins(scores: Sequence[float], top: float) -> list[float]:
    """Histogram bin edges for ``scores`` out of ``top``, each bar centred on a score it counts:
    one bar per point when every score is whole, per half point when they are halves (the bars
    of 0, 1, 2, ... are [-0.5, 0.5), [0.5, 1.5), ...), widened to 2, 4, ... points so that there are
    at most :data:`MAX_BARS`. Scores of any other kind (a scaled total) get 20 equal bins over [0, top]."""
    values = [float(v) for v in scores] + [float(top)]
    if not all((2 * v).is_integer() for v in values):
        return [top * k / 20 for k in range(21)]
    step = 1.0 if all(v.is_integer() for v in values) else 0.5
    while max(values) / step + 1 > MAX_BARS:
        step = 2 * step if step >= 1 else 1.0
    bars = int(max(values) // step) + 1
    return [(k - 0.5) * step for k in range(bars + 1)]


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _png(fig) -> bytes:
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def histogram_figure(rows: Sequence[GradebookRow], homework: str):
    """The histogram of the totals (status=error rows left out), bars centred on the scores
    (:func:`score_bins`); None without matplotlib."""
    plt = _pyplot()
    if plt is None:
        return None
    from matplotlib.ticker import MaxNLocator

    totals = [r.total for r in rows if r.status != "error"]
    possible = max([r.possible for r in rows] + [1.0])
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.hist(totals, bins=score_bins(totals, possible), color="#4C72B0", edgecolor="white")
    ax.set_xlabel(f"total score (of {possible:g})")
    ax.set_ylabel("submissions")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{homework}: {len(totals)} graded submissions")
    fig.tight_layout()
    return fig


def histogram_png(rows: Sequence[GradebookRow], homework: str) -> bytes | None:
    """:func:`histogram_figure` as PNG bytes, or None without matplotlib."""
    fig = histogram_figure(rows, homework)
    return None if fig is None else _png(fig)


def question_histograms_figure(
    rows: Sequence[GradebookRow], questions: Sequence[str], possible: dict[str, float], homework: str
):
    """One histogram of the scores per question (status=error rows left out), side by side with
    one y-scale, so that bar heights compare across questions; bars centred on the scores
    (:func:`score_bins`). None without matplotlib or without a graded row."""
    plt = _pyplot()
    if plt is None:
        return None
    from matplotlib.ticker import MaxNLocator

    graded = [r for r in rows if r.status != "error"]
    if not graded or not questions:
        return None
    fig, axes = plt.subplots(
        1, len(questions), figsize=(2.2 * len(questions) + 0.6, 2.6), dpi=100, squeeze=False, sharey=True
    )
    for ax, q in zip(axes[0], questions):
        scores = [r.scores.get(q, 0.0) for r in graded]
        top = possible.get(q) or max(scores + [1.0])
        ax.hist(scores, bins=score_bins(scores, top), color="#4C72B0", edgecolor="white")
        ax.set_title(q)
        ax.set_xlabel("points")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0][0].set_ylabel("submissions")
    fig.suptitle(f"{homework}: scores per question")
    fig.tight_layout()
    return fig


def question_histograms_png(
    rows: Sequence[GradebookRow], questions: Sequence[str], possible: dict[str, float], homework: str
) -> bytes | None:
    """:func:`question_histograms_figure` as PNG bytes (None without matplotlib or graded rows)."""
    fig = question_histograms_figure(rows, questions, possible, homework)
    return None if fig is None else _png(fig)


def write_reports(
    results: Sequence[SubmissionResult],
    questions: Sequence[str],
    out: str | os.PathLike[str],
    homework: str,
    *,
    merge: bool = False,
    ignored: Sequence[tuple[str, str]] = (),
) -> Written:
    """Write the gradebook, the feedback files and the summary into ``out`` (see the module doc)."""
    out = Path(out)
    book = out / "gradebook.csv"
    rows = {r.submission: GradebookRow.of(r, questions) for r in results}
    if merge:
        for row in read_gradebook(book):
            rows.setdefault(row.submission, row)
    atomic_write(book, gradebook_csv(list(rows.values()), questions))
    atomic_write(out / RUN_FILE, json.dumps({"homework": homework, "graded_at": time.time()}, indent=1) + "\n")
    names = sorted(rows)
    files = dict(zip(names, unique_filenames(names)))
    feedback_dir = out / "feedback"
    if not merge and feedback_dir.is_dir():
        keep = {f"{files[r.submission]}.md" for r in results}
        for old in feedback_dir.glob("*.md"):
            if old.name not in keep and old.is_file():
                old.unlink()
    paths = []
    for r in results:
        p = feedback_dir / f"{files[r.submission]}.md"
        atomic_write(p, feedback_text(r, homework))
        paths.append(p)
    # the hidden tests each row failed, kept beside the gradebook so that a re-grade of some
    # students (--only) still summarises the whole class
    failed = _merged_record(out / "hidden_failures.json", hidden_failures(results), results, rows, merge)
    mistakes = _merged_record(out / "mistakes.json", named_mistakes(results), results, rows, merge)
    atomic_write(out / "misconceptions.csv", misconceptions_csv(mistakes))
    text = summary_text(
        list(rows.values()), questions, results, homework, hidden_failed=failed, mistakes=mistakes, ignored=ignored
    )
    summary = out / "summary.md"
    png = histogram_png(list(rows.values()), homework)
    histogram = None
    if png is not None:
        histogram = out / "histogram.png"
        atomic_write(histogram, png)
        text += "\n![score histogram](histogram.png)\n"
    possible = {q.name: q.possible for r in results for q in r.questions}
    atomic_write(out / "questions.json", json.dumps({q: possible.get(q) for q in questions}, indent=1) + "\n")
    per_question = question_histograms_png(list(rows.values()), questions, possible, homework)
    if per_question is not None:
        atomic_write(out / "questions.png", per_question)
        text += "\n![scores per question](questions.png)\n"
    atomic_write(summary, text)
    return Written(book, paths, summary, histogram, text, sorted(rows.values(), key=lambda r: r.submission))
