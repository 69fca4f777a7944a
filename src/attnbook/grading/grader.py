"""Grading submissions: each in its own sandbox, every verdict computed in the grader's process.

For one submission the grader (1) reads the notebook's code cells as text, (2) checks them
statically for forbidden references and dynamic code (:mod:`.static`), (3) has a sandbox child
execute them (:mod:`.sandboxes`), and (4) runs each question's otter tests *here*, passing them
proxies that call the student's functions in the sandbox and return plain tensors. The tests
compute their reference answers with ``attnbook`` in this process, which never imports, unpickles
or executes anything the student wrote. Submissions are graded in parallel, one thread driving
one sandbox each, ``jobs`` at a time.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import tempfile
import traceback
import zipfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import static
from .homework import Homework, Question, TestCaseSpec
from .sandboxes import Sandbox, SandboxError, Zygote


@dataclass
class CaseResult:
    question: str
    name: str
    hidden: bool
    points: float
    passed: bool
    message: str


@dataclass
class QuestionResult:
    name: str
    score: float
    possible: float
    cases: list[CaseResult] = field(default_factory=list)
    integrity: list[str] = field(default_factory=list)


@dataclass
class SubmissionResult:
    """The grade of one submission, with everything its feedback file says."""

    submission: str
    path: str
    questions: list[QuestionResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    execution_errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(q.score for q in self.questions)

    @property
    def possible(self) -> float:
        return sum(q.possible for q in self.questions)

    def score(self, question: str) -> float:
        return next(q.score for q in self.questions if q.name == question)


# the largest notebook read from a submitted zip (a guard against zip bombs)
MAX_NOTEBOOK_BYTES = 64 * 2**20


def _notebook_in_zip(path: Path) -> dict:
    """The one notebook inside a zip made by ``grader.export()`` (otter's export: the notebook, and
    possibly a PDF and otter's log)."""
    with zipfile.ZipFile(path) as archive:
        notebooks = [i for i in archive.infolist()
                     if i.filename.endswith(".ipynb") and "/." not in "/" + i.filename
                     and not i.filename.startswith("__MACOSX/")]
        if len(notebooks) != 1:
            names = [i.filename for i in notebooks]
            raise ValueError(f"{path.name} must hold exactly one .ipynb notebook, it holds {len(names)}: {names}")
        info = notebooks[0]
        if info.file_size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"{info.filename} in {path.name} is {info.file_size} bytes, more than "
                             f"{MAX_NOTEBOOK_BYTES} allowed")
        return json.loads(archive.read(info).decode("utf-8"))


def read_code_cells(path: str | os.PathLike[str]) -> list[str]:
    """The code cells of a notebook file, or of the notebook in a zip exported by
    ``grader.export()``, as text (nothing is executed)."""
    path = Path(path)
    if path.suffix == ".zip":
        try:
            nb = _notebook_in_zip(path)
        except zipfile.BadZipFile as exc:
            raise ValueError(f"{path.name} is not a valid zip file: {exc}") from exc
    else:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        raise ValueError("not a Jupyter notebook (no list of cells)")
    out = []
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            src = cell.get("source", "")
            out.append("".join(src) if isinstance(src, list) else str(src))
    return out


def _format_failure(exc: BaseException) -> str:
    if isinstance(exc, AssertionError):
        text = str(exc) or "an assertion in the test failed"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text[:4000]


def run_case(case: TestCaseSpec, sandbox: Sandbox) -> tuple[bool, str]:
    """Run one test case against the sandbox; (passed, message)."""
    kwargs: dict[str, Any] = {}
    for name in case.params:
        try:
            kind, value = sandbox.lookup(name)
        except SandboxError as exc:
            return False, f"`{name}` could not be looked up: the notebook's process {exc}"
        if kind == "missing":
            return False, f"`{name}` is not defined in the notebook"
        kwargs[name] = sandbox.proxy(name) if kind == "callable" else value
    try:
        case.func(**kwargs)
    except Exception as exc:
        return False, _format_failure(exc)
    return True, case.success_message or "passed"


def grade_cells(cells: list[str], questions: Sequence[Question], homework: Homework, *, zygote: Zygote,
                workroot: Path, slot: int, name: str, path: str = "", isolate_uid: bool | None = None,
                limits: dict[str, Any] | None = None, static_checks: bool = True) -> SubmissionResult:
    """Grade one submission given its code cells."""
    result = SubmissionResult(submission=name, path=path)
    findings = (static.analyze(cells, homework.forbidden, {q.name: q.functions for q in questions})
                if static_checks else {})
    sandbox = Sandbox(zygote, cells, forbidden=homework.forbidden, limits=limits or homework.limits,
                      workroot=workroot, slot=slot, isolate_uid=isolate_uid)
    try:
        sandbox.start()
        result.execution_errors = list(sandbox.execution_errors)
        for q in questions:
            qr = QuestionResult(q.name, 0.0, q.possible, integrity=findings.get(q.name, []))
            for case in q.cases:
                if qr.integrity:
                    passed, message = False, "not graded: " + qr.integrity[0]
                elif sandbox.broken is not None:
                    passed, message = False, "not graded: " + sandbox.broken
                else:
                    passed, message = run_case(case, sandbox)
                qr.cases.append(CaseResult(q.name, case.name, case.hidden, float(case.points or 0), passed,
                                           message if passed else (case.failure_message + "\n" + message
                                                                   if case.failure_message else message)))
            passed_points = sum(c.points for c in qr.cases if c.passed)
            if q.all_or_nothing:
                qr.score = qr.possible if all(c.passed for c in qr.cases) else 0.0
            else:
                qr.score = float(passed_points)
            result.questions.append(qr)
    finally:
        sandbox.close()
    result.notes.extend(dict.fromkeys(sandbox.events))
    return result


class Grader:
    """Grades submissions of one homework; reusable across calls (one zygote for all)."""

    def __init__(self, homework: Homework, *, jobs: int | None = None, isolate_uid: bool | None = None,
                 limits: dict[str, Any] | None = None, zygote: Zygote | None = None,
                 static_checks: bool = True):
        """``isolate_uid``: give each sandbox its own user id (default: when running as root).
        ``zygote``: share one zygote between graders (the caller closes it). ``static_checks``:
        False only to test the sandbox's own defences without the static pass."""
        self.homework = homework
        self.questions = homework.questions()
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self.isolate_uid = isolate_uid
        self.limits = {**homework.limits, **(limits or {})}
        self.static_checks = static_checks
        self._own_zygote = zygote is None
        self._zygote: Zygote | None = zygote
        self._workroot: Path | None = None
        self.warnings: list[str] = []

    def __enter__(self) -> "Grader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._zygote is not None and self._own_zygote:
            self._zygote.close()
        self._zygote = None
        if self._workroot is not None:
            shutil.rmtree(self._workroot, ignore_errors=True)
            self._workroot = None

    def _ensure_started(self) -> None:
        if self._zygote is None:
            self._zygote = Zygote()
        if self._workroot is None:
            self._workroot = Path(tempfile.mkdtemp(prefix="attnbook-grade-"))
            os.chmod(self._workroot, 0o711)  # sandboxes with their own uid may enter their folder
            self._probe_isolation()

    def _probe_isolation(self) -> None:
        """Check, with an empty notebook, that sandboxes start (with their own uid if asked)."""
        from .sandboxes import running_as_root

        wanted = running_as_root() if self.isolate_uid is None else self.isolate_uid
        if not wanted:
            self.isolate_uid = False
            return
        probe = Sandbox(self._zygote, ["x = 1"], forbidden=[], limits=self.limits, workroot=self._workroot,
                        slot=self.jobs, isolate_uid=True, max_restarts=0)
        try:
            ok = probe.start() and probe.child_uid == probe.uid
        finally:
            probe.close()
        self.isolate_uid = bool(ok)
        if not ok:
            self.warnings.append("sandboxes could not take a user id of their own; grading without that isolation")

    def grade_sources(self, submissions: Iterable[tuple[str, list[str]]]) -> list[SubmissionResult]:
        """Grade (name, code cells) pairs in parallel; results in the same order."""
        self._ensure_started()
        items = list(submissions)
        slots: queue.Queue[int] = queue.Queue()
        for k in range(self.jobs):
            slots.put(k)

        def one(item: tuple[str, list[str]]) -> SubmissionResult:
            name, cells = item
            slot = slots.get()
            try:
                return grade_cells(cells, self.questions, self.homework, zygote=self._zygote,
                                   workroot=self._workroot, slot=slot, name=name,
                                   isolate_uid=self.isolate_uid, limits=self.limits,
                                   static_checks=self.static_checks)
            except Exception:  # a bug of the grader, not the student's: say so, grade 0
                res = SubmissionResult(name, "")
                res.questions = [QuestionResult(q.name, 0.0, q.possible) for q in self.questions]
                res.notes.append("internal grader error:\n" + traceback.format_exc(limit=5))
                return res
            finally:
                slots.put(slot)

        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            return list(pool.map(one, items))

    def grade_paths(self, paths: Iterable[str | os.PathLike[str]]) -> list[SubmissionResult]:
        """Grade notebook files. Every file is read into memory before any student code runs."""
        items, unreadable = [], {}
        for p in paths:
            p = Path(p)
            try:
                items.append((p.stem, read_code_cells(p), str(p)))
            except (OSError, ValueError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
                unreadable[p.stem] = (str(p), f"the submission could not be read as a notebook: {exc}")
        graded = self.grade_sources((name, cells) for name, cells, _ in items)
        by_name = {}
        for (name, _, path), res in zip(items, graded):
            res.path = path
            by_name[name] = res
        for name, (path, why) in unreadable.items():
            res = SubmissionResult(name, path, notes=[why])
            res.questions = [QuestionResult(q.name, 0.0, q.possible) for q in self.questions]
            by_name[name] = res
        return [by_name[k] for k in sorted(by_name)]


def find_submissions(folder: str | os.PathLike[str]) -> list[Path]:
    """The submissions in ``folder``: notebooks and the zips of ``grader.export()`` (not recursive;
    hidden files and checkpoints skipped)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder of submitted notebooks")
    found = sorted(p for p in folder.iterdir()
                   if p.suffix in (".ipynb", ".zip") and p.is_file() and not p.name.startswith("."))
    stems = [p.stem for p in found]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    if twice:
        raise ValueError(f"{folder}: both a .ipynb and a .zip for {twice}; keep one submission per student")
    return found
