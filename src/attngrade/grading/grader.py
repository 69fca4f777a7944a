"""Grading submissions: each in a bubblewrap sandbox, every verdict computed in the grader's process.

For one submission (found, with its student's name, by :mod:`.finder`) the grader (1) reads the
notebook's code cells as text (:mod:`.notebook`),
(2) reads them statically for constructs an instructor may want to review (:mod:`.static`; this
never changes a score), (3) has a sandbox execute them (:mod:`.bubblewrap`, :mod:`.session`, :mod:`attngrade.sandboxed.worker`), and
(4) runs each question's otter tests *here*, passing them proxies that call the student's
functions in the sandbox and return plain data. The tests compute their reference answers with
``attnbook`` in this process, which never imports, unpickles or executes anything the student
wrote. Whether an answer used a reference implementation is decided by what ran during the call
(the reference is absent from the sandbox, and :mod:`attngrade.sandboxed.integrity` watches the fused kernels), not
by what the code names. Submissions are graded in parallel, one thread driving one sandbox each.
"""

from __future__ import annotations

import math
import os
import queue
import re
import shutil
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from ..checks import CheckFailure
from ..homework import Homework, Question, TestCaseSpec
from ..sandboxed.warm_ups import warm_ups
from . import static
from .bubblewrap import INSTALL_HINT, InfrastructureError, SandboxError, SandboxUnavailable, Worker, find_bwrap
from .finder import Entry, entry_at
from .notebook import Submission, SubmissionError, read_submission
from .results import CaseResult, QuestionResult, SubmissionResult
from .session import Session
from .view import build_view, hidden_paths

#: without an explicit number of jobs, a batch of n submissions runs in ceil(n / 8) sandboxes at most
SUBMISSIONS_PER_SANDBOX = 8


def _format_failure(exc: BaseException) -> str:
    """A failed test's message for the feedback. A check's own note that hidden tests run at
    grading is left out: grading is when they ran (the feedback says so once, at its end)."""
    if isinstance(exc, CheckFailure):
        text = exc.message or "an assertion in the test failed"
    elif isinstance(exc, AssertionError):
        text = str(exc) or "an assertion in the test failed"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text[:4000]


def run_case(case: TestCaseSpec, session: Session) -> tuple[bool, str]:
    """Run one test case against the sandbox; (passed, message)."""
    kwargs: dict[str, Any] = {}
    for name in case.params:
        try:
            kind, value = session.lookup(name)
        except SandboxError as exc:
            return False, f"`{name}` could not be looked up: the notebook's process {exc}"
        if kind == "missing":
            return False, f"`{name}` is not defined in the notebook"
        kwargs[name] = session.proxy(name) if kind == "callable" else value
    try:
        case.func(**kwargs)
    except Exception as exc:
        return False, _format_failure(exc)
    return True, case.success_message or "passed"


#: the first cell of every student notebook ``otter assign`` writes: ``grader = otter.Notebook("hw02.ipynb")``
_OTTER_NOTEBOOK = re.compile(r"""\botter\.Notebook\(\s*(?:nb_path\s*=\s*)?(['"])([^'"\n]{1,200})\1""")


def recorded_assignment(cells: Sequence[str]) -> str | None:
    """The homework a notebook was handed out as: the name its otter cell records
    (``otter.Notebook("hw02.ipynb")`` gives ``hw02``), or None when no cell records one."""
    for cell in cells:
        found = _OTTER_NOTEBOOK.search(cell)
        if found:
            name = found.group(2).replace("\\", "/").rsplit("/", 1)[-1]
            return name[: -len(".ipynb")] if name.endswith(".ipynb") else name
    return None


def wrong_homework(cells: Sequence[str], homework: str) -> str | None:
    """Why a notebook looks handed in for another homework than ``homework`` (None if it does not)."""
    recorded = recorded_assignment(cells)
    if recorded is None or recorded == homework:
        return None
    return (
        f"wrong homework? this notebook was handed out as {recorded!r} (its cell "
        f"otter.Notebook({recorded + '.ipynb'!r})) but is graded as {homework!r}: its score is for "
        f"{homework}'s questions"
    )


def writes_tests(questions: Sequence[Question]) -> bool:
    """Whether some question has the student write a test, run on the instructor's candidates
    (its tests call :mod:`attngrade.student_tests`, the one caller of ``run_as_test``)."""
    return any("student_tests" in q.source or "run_as_test" in q.source for q in questions)


def grade_cells(
    cells: list[str],
    questions: Sequence[Question],
    homework: Homework,
    *,
    worker: Worker,
    name: str,
    path: str = "",
    limits: dict[str, Any] | None = None,
    static_checks: bool = True,
) -> SubmissionResult:
    """Grade one submission given its code cells, in ``worker``.

    Raises :class:`InfrastructureError` when the sandbox fails before the student's code runs.
    """
    result = SubmissionResult(submission=name, path=path)
    if static_checks:
        findings = static.analyze(cells, homework.forbidden, {q.name: q.functions for q in questions})
        result.review = list(dict.fromkeys(r for reasons in findings.values() for r in reasons))
    mismatch = wrong_homework(cells, homework.name)
    if mismatch:  # a review row whatever the static reading says (the score stays what the tests give)
        result.review.insert(0, mismatch)
    # the candidate server and test factory cost each submission's child two forks of a process
    # holding torch: only where a question has the student write a test (attngrade.student_tests)
    session = Session(worker, cells, limits=limits or homework.limits, candidates=writes_tests(questions))
    try:
        session.start()
        result.execution_errors = list(session.execution_errors)
        for q in questions:
            qr = QuestionResult(q.name, 0.0, q.possible)
            for case in q.cases:
                if session.broken is not None:
                    passed, message = False, "not graded: " + session.broken
                else:
                    passed, message = run_case(case, session)
                qr.cases.append(
                    CaseResult(
                        q.name,
                        case.name,
                        case.hidden,
                        float(case.points or 0),
                        passed,
                        message
                        if passed
                        else (case.failure_message + "\n" + message if case.failure_message else message),
                    )
                )
            passed_points = sum(c.points for c in qr.cases if c.passed)
            if q.all_or_nothing:
                qr.score = qr.possible if all(c.passed for c in qr.cases) else 0.0
            else:
                qr.score = float(passed_points)
            result.questions.append(qr)
    finally:
        session.close()
    result.worker_lost = session.worker_lost
    result.review.extend(f"the run-time integrity guard was switched off: {t}" for t in dict.fromkeys(session.tampered))
    if result.review:
        result.status = "review"
    result.notes.extend(dict.fromkeys(session.events))
    return result


def _shown_path(sub: Submission) -> str:
    """The path a gradebook row names: the file that was read, or '' for code given as text."""
    return str(sub.path) if sub.path is not None else ""


def _zero(name: str, path: str, questions: Sequence[Question], note: str, status: str = "ok") -> SubmissionResult:
    res = SubmissionResult(name, path, notes=[note], status=status)
    res.questions = [QuestionResult(q.name, 0.0, q.possible) for q in questions]
    if status == "error":
        res.error = note
    return res


class Grader:
    """Grades submissions of one homework, each in a bubblewrap sandbox; reusable across calls.

    ``sandbox=False`` (the CLI's ``--unsafe-no-sandbox``) runs the workers without isolation, for a
    trusted setting; without it, a machine without bubblewrap raises :class:`SandboxUnavailable`.
    ``hide``: more paths the sandboxes must not see (the submissions and output folders).
    ``static_checks``: read the code for constructs an instructor may want to review (never
    scored).
    """

    def __init__(
        self,
        homework: Homework,
        *,
        jobs: int | None = None,
        limits: dict[str, Any] | None = None,
        sandbox: bool = True,
        hide: Sequence[str | os.PathLike[str]] = (),
        static_checks: bool = True,
    ):
        self.homework = homework
        self.questions = homework.questions()
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self._jobs_chosen = jobs is not None  # else a small batch starts fewer sandboxes (_grade_items)
        self.limits = {**homework.limits, **(limits or {})}
        self.sandbox = sandbox
        self.static_checks = static_checks
        self.hide = [str(p) for p in hide]
        self.warnings: list[str] = []
        self._root: Path | None = None
        self._view = None
        # last in, first out: a sandbox that is running is used again before one is started
        self._workers: queue.LifoQueue[Worker] = queue.LifoQueue()
        self._all_workers: list[Worker] = []
        # one pool for the grader's whole life: bubblewrap's --die-with-parent follows the thread
        # that started a sandbox, so a sandbox started by a thread that ends would end with it
        self._pool: ThreadPoolExecutor | None = None

    @property
    def sandbox_uids(self) -> list[int]:
        """The user ids the sandboxes started so far run as (to check that nothing of them is left)."""
        return [w.uid for w in self._all_workers if w.uid is not None]

    @property
    def sandbox_cpu_seconds(self) -> float:
        """CPU seconds used so far by the sandboxes this grader started (their processes are not
        the grader's children: :mod:`.bubblewrap` reads their time from /proc), counted up to each
        one's last finished submission."""
        return sum(w.cpu_used for w in self._all_workers)

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for w in self._all_workers:
            w.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._all_workers = []
        self._workers = queue.LifoQueue()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def _ensure_started(self) -> None:
        if self._root is not None:
            return
        if self.sandbox and find_bwrap() is None:
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed: " + INSTALL_HINT)
        self._root = Path(tempfile.mkdtemp(prefix="attngrade-"))
        os.chmod(self._root, 0o700)
        self._view = build_view(self._root / "view", self.homework.forbidden)
        hide = hidden_paths([str(self.homework.folder.parent), *self.hide])
        # a call the homework's notebook names that is slow at its first (sandboxed.warm_ups.WARM_UPS): made once
        # per worker before any fork, not once per submission. Decided by the homework alone, so that
        # every submission's child starts the same, whoever its classmates are (limits count CPU time)
        master = self.homework.master
        warm = warm_ups(master.read_text(encoding="utf-8")) if master.exists() else []
        for _ in range(self.jobs):
            w = Worker(
                self._view,
                hide=hide,
                forbidden=self.homework.forbidden,
                warm=warm,
                sandbox=self.sandbox,
                tmp_mb=int(self.limits.get("tmp_mb", 64)),
            )
            self._all_workers.append(w)
        for w in reversed(self._all_workers):  # the first worker (started below) comes out first
            self._workers.put(w)
        self._pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="attngrade")
        # start one worker now: a machine where bubblewrap cannot work fails here, loudly
        for attempt in range(2):
            try:
                self._pool.submit(self._all_workers[0].start).result()
                break
            except InfrastructureError as exc:
                if attempt:
                    raise SandboxUnavailable(f"the sandbox did not start, twice: {exc}") from None

    def _grade_one(self, sub: Submission, questions: Sequence[Question]) -> SubmissionResult:
        """Grade one submission on ``questions``; retry once on a fresh sandbox when the sandbox failed."""
        name, cells, path = sub.name, sub.cells, _shown_path(sub)
        worker = self._workers.get()
        try:
            first_failure = None
            for attempt in range(2):
                try:
                    res = grade_cells(
                        cells,
                        questions,
                        self.homework,
                        worker=worker,
                        name=name,
                        path=path,
                        limits=self.limits,
                        static_checks=self.static_checks,
                    )
                except InfrastructureError as exc:
                    worker.close()
                    first_failure = first_failure or str(exc)
                    if attempt == 0:
                        continue
                    return _zero(
                        name,
                        path,
                        questions,
                        f"grader error (not caused by this submission): the sandbox failed twice: {exc}",
                        status="error",
                    )
                if res.worker_lost and attempt == 0:
                    # the sandbox died while this notebook ran: run it once more on a fresh one;
                    # a notebook that kills its sandbox again gets what it earned the second time
                    worker.close()
                    continue
                if res.worker_lost:
                    res.notes.append("the notebook's sandbox died while running it, twice; tests that had not run fail")
                return res
            raise AssertionError("unreachable")
        finally:
            self._workers.put(worker)

    def grade_sources(
        self,
        submissions: Iterable[tuple[str, list[str]]],
        *,
        progress: bool = False,
        questions: Mapping[str, Sequence[str]] | None = None,
    ) -> list[SubmissionResult]:
        """Grade (name, code cells) pairs in parallel; results in the same order.

        ``questions``: for some submissions (by name), the names of the only questions to grade
        (the mutation tests grade each wrong solution on the question it breaks); the others are
        graded on every question.
        """
        items = [Submission(name, None, cells) for name, cells in submissions]
        known = {q.name for q in self.questions}
        subsets = {}
        for name, wanted in (questions or {}).items():
            if set(wanted) - known:
                raise ValueError(
                    f"{self.homework.name} has no question {sorted(set(wanted) - known)} (asked for {name!r})"
                )
            subsets[name] = [q for q in self.questions if q.name in wanted]
        return self._grade_items(items, progress=progress, questions=subsets)

    def _grade_items(
        self,
        items: list[Submission],
        *,
        progress: bool,
        questions: Mapping[str, Sequence[Question]] | None = None,
    ) -> list[SubmissionResult]:
        """Grade submissions in parallel, each on ``questions[its name]`` if given, else on every
        question; results in the same order, each starting with its reader's notes."""
        self._ensure_started()
        # starting a sandbox costs seconds (torch, matplotlib, the guard's first use), as much as
        # grading several ordinary submissions: unless told how many, a small batch uses fewer
        parallel = self.jobs
        if not self._jobs_chosen:
            parallel = min(self.jobs, math.ceil(len(items) / SUBMISSIONS_PER_SANDBOX))
        slots = threading.Semaphore(max(1, parallel))

        def one(sub: Submission) -> SubmissionResult:
            subset = (questions or {}).get(sub.name, self.questions)
            try:
                with slots:
                    result = self._grade_one(sub, subset)
            except SandboxUnavailable:
                raise
            except Exception:  # a bug of the grader, not the student's: say so
                result = _zero(
                    sub.name,
                    _shown_path(sub),
                    subset,
                    "internal grader error:\n" + traceback.format_exc(limit=5),
                    status="error",
                )
            result.notes[:0] = sub.notes
            return result

        bar = None
        if progress:
            try:
                from tqdm import tqdm

                bar = tqdm(total=len(items), desc=f"grading {self.homework.name}", unit="notebook", file=sys.stderr)
            except ImportError:
                bar = None
        results: list[SubmissionResult | None] = [None] * len(items)
        assert self._pool is not None
        futures = {self._pool.submit(one, item): k for k, item in enumerate(items)}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        return [r for r in results if r is not None]

    def grade_entries(self, entries: Iterable[Entry], *, progress: bool = False) -> list[SubmissionResult]:
        """Grade the submissions :func:`.finder.find_submissions` found, each under the name it
        found; results sorted by name. Every file is read into memory before any student code runs;
        a file that cannot be read scores 0 with the reason (that row only)."""
        items, unreadable = [], []
        for entry in entries:
            try:
                items.append(read_submission(entry))
            except SubmissionError as exc:
                unreadable.append(
                    _zero(
                        entry.name,
                        str(entry.path),
                        self.questions,
                        f"the submission could not be read as a notebook: {exc}",
                    )
                )
        graded = self._grade_items(items, progress=progress)
        return sorted(graded + unreadable, key=lambda r: r.submission)

    def grade_paths(self, paths: Iterable[str | os.PathLike[str]], *, progress: bool = False) -> list[SubmissionResult]:
        """Grade submitted files (or students' folders), each named as the finder names it
        (:func:`.finder.entry_at`); see :meth:`grade_entries`."""
        return self.grade_entries([entry_at(p) for p in paths], progress=progress)
