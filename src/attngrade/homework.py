"""A homework as the grader sees it: its folder, its configuration and its questions' tests.

Each homework lives in ``exercises/hwNN_topic/``: the otter master notebook ``hwNN.ipynb``, a
``grading.yml`` (the references students must not call, sandbox limits), and once built
(``make assignments``) ``dist/student/`` and ``dist/autograder/``. The tests are read from the
autograder notebook that ``otter assign`` writes: its metadata holds, per question, an otter
test file in the exception-based (pytest-style) format::

    from otter.test_files import test_case
    OK_FORMAT = False
    name = "q1"
    points = 4
    @test_case(points=1, hidden=False)
    def test_shape(softmax_beta): ...

This module reads that format itself, without importing otter (whose import takes seconds), and
resolves points the way otter documents it; a test checks that both agree on every homework.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

#: default sandbox limits, overridable per homework in grading.yml and on the command line
DEFAULT_LIMITS = {
    "memory_mb": 2048,  # address space the student's code may add on top of torch
    "cpu_seconds": 120,  # CPU time of one sandbox process
    "file_mb": 16,  # largest file a sandbox may write
    # Soft limits count CPU seconds, which a busy machine (another grading run, a classmate's
    # endless loop in the next sandbox) does not change; code that waits without computing is
    # stopped after wall_factor times the limit in wall-clock seconds. Hard limits are wall-clock.
    "cell_timeout": 20.0,  # soft limit per notebook cell (CPU s)
    "call_timeout": 10.0,  # soft limit per call of a student's function (CPU s)
    "wall_factor": 3.0,  # a soft limit also stops code after this many times its seconds of wall time
    "exec_timeout": 120.0,  # hard limit for running the whole notebook once (s)
    "call_grace": 5.0,  # a call is killed this long after its soft limit's wall time (s)
    "submission_timeout": 240.0,  # hard limit for everything about one submission (s)
}


@dataclass
class TestCaseSpec:
    """One test case: a function whose parameters name what it needs from the notebook."""

    name: str
    func: Callable[..., Any]
    points: float | None
    hidden: bool
    success_message: str | None = None
    failure_message: str | None = None

    @property
    def params(self) -> list[str]:
        return list(inspect.signature(self.func).parameters)


@dataclass
class Question:
    """One question: its test cases, with resolved points."""

    name: str
    cases: list[TestCaseSpec]
    all_or_nothing: bool = False
    source: str = ""

    @property
    def possible(self) -> float:
        return float(sum(c.points or 0 for c in self.cases))

    @property
    def functions(self) -> list[str]:
        """The notebook names this question's tests ask for."""
        return list(dict.fromkeys(p for c in self.cases for p in c.params if p != "env"))


class _TestCaseDecorator:
    """Mirror of ``otter.test_files.test_case`` (the decorator in a test file)."""

    def __init__(self, name=None, points=None, hidden=False, success_message=None, failure_message=None):
        self.name, self.points, self.hidden = name, points, hidden
        self.success_message, self.failure_message = success_message, failure_message
        self.func = None

    def __call__(self, func):
        self.func = func
        return self


_OTTER_IMPORT = re.compile(r"^from otter\.test_files import test_case[ \t]*$", re.MULTILINE)


def resolve_points(total: Any, cases: list[TestCaseSpec]) -> list[TestCaseSpec]:
    """Point value of each case, following otter's documented rules.

    ``total`` may be a list (one value per case), a number (the question's total: cases without
    points share what the others leave), or None (cases without points share 1 point if no case
    has points, else get 0).
    """
    if isinstance(total, list):
        if len(total) != len(cases):
            raise ValueError(f"{len(total)} point values for {len(cases)} test cases")
        cases = [replace(c, points=p) for c, p in zip(cases, total)]
        total = None
    elif total is not None and not isinstance(total, (int, float)):
        raise TypeError(f"points must be a number or a list, got {type(total).__name__}")
    given = sum(c.points for c in cases if c.points is not None)
    n_free = sum(c.points is None for c in cases)
    if total is not None:
        if given > total:
            raise ValueError(f"test cases give {given} points but the question is worth {total}")
        share = (total - given) / n_free if n_free else 0.0
    elif given == 0 and all(c.points in (0, None) for c in cases):
        share = 1 / n_free if n_free else 0.0
    else:
        share = 0.0
    return [replace(c, points=c.points if c.points is not None else share) for c in cases]


def parse_test_file(source: str, origin: str = "<test file>") -> Question:
    """Read an otter exception-based test file (trusted: it comes from the master notebook)."""
    code = compile(_OTTER_IMPORT.sub("test_case = __attnbook_test_case__", source), origin, "exec")
    env: dict[str, Any] = {"__attnbook_test_case__": _TestCaseDecorator, "__name__": "otter_tests"}
    exec(code, env)
    if "name" not in env:
        raise ValueError(f"test file {origin} does not define `name`")
    cases = []
    for value in list(env.values()):
        if isinstance(value, _TestCaseDecorator):
            name = value.name or value.func.__name__
            cases.append(
                TestCaseSpec(
                    name, value.func, value.points, bool(value.hidden), value.success_message, value.failure_message
                )
            )
    cases = resolve_points(env.get("points"), cases)
    return Question(str(env["name"]), cases, bool(env.get("all_or_nothing", False)), source)


def exercises_root() -> Path:
    """The ``exercises/`` folder: $ATTNBOOK_EXERCISES, ./exercises, or the one beside src/."""
    env = os.environ.get("ATTNBOOK_EXERCISES")
    if env:
        return Path(env)
    here = Path.cwd() / "exercises"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[2] / "exercises"


@dataclass
class Homework:
    """One homework folder (see the module docstring)."""

    name: str
    folder: Path
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def master(self) -> Path:
        return self.folder / f"{self.name}.ipynb"

    @property
    def dist(self) -> Path:
        return self.folder / "dist"

    @property
    def student_notebook(self) -> Path:
        return self.dist / "student" / f"{self.name}.ipynb"

    @property
    def autograder_notebook(self) -> Path:
        return self.dist / "autograder" / f"{self.name}.ipynb"

    @property
    def forbidden(self) -> list[str]:
        return list(self.config.get("forbidden", []))

    @property
    def limits(self) -> dict[str, Any]:
        return {**DEFAULT_LIMITS, **self.config.get("limits", {})}

    def is_built(self) -> bool:
        """Whether dist/ exists and is newer than the master and grading.yml."""
        if not self.autograder_notebook.exists() or not self.student_notebook.exists():
            return False
        built = self.autograder_notebook.stat().st_mtime
        sources = [self.master, self.folder / "grading.yml"]
        return all(built >= p.stat().st_mtime for p in sources if p.exists())

    def questions(self) -> list[Question]:
        """The questions and their tests, read from the built autograder notebook."""
        if not self.autograder_notebook.exists():
            raise FileNotFoundError(
                f"{self.autograder_notebook} does not exist: build the homework first "
                f"(make assignments, or python -m attngrade assign {self.name})"
            )
        nb = json.loads(self.autograder_notebook.read_text(encoding="utf-8"))
        meta = nb.get("metadata", {}).get("otter", {})
        if meta.get("OK_FORMAT", True):
            raise ValueError(
                f"{self.autograder_notebook}: tests must use otter's pytest-style format (ok_format: false)"
            )
        return [parse_test_file(src, f"{self.name}/{q}") for q, src in meta.get("tests", {}).items()]


def load_homework(spec: str | os.PathLike[str]) -> Homework:
    """A homework from its name (``hw01``), its folder, or its master notebook."""
    path = Path(spec)
    if path.suffix == ".ipynb" and path.is_file():
        folder, name = path.parent, path.stem
    elif path.is_dir() and any(path.glob("hw*.ipynb")):
        folder = path
        name = sorted(p.stem for p in path.glob("hw*.ipynb"))[0]
    else:
        root = exercises_root()
        matches = sorted(root.glob(f"{spec}_*")) + sorted(p for p in root.glob(f"{spec}") if p.is_dir())
        if not matches:
            known = ", ".join(sorted(p.name for p in root.glob("hw*") if p.is_dir())) or "none"
            raise FileNotFoundError(f"no homework {spec!r} under {root} (known: {known})")
        folder = matches[0]
        name = folder.name.split("_")[0]
    config_path = folder / "grading.yml"
    config = yaml.safe_load(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    return Homework(name=name, folder=folder.resolve(), config=config or {})


def all_homework() -> list[Homework]:
    """Every homework under :func:`exercises_root`, in order."""
    root = exercises_root()
    return [
        load_homework(p) for p in sorted(root.glob("hw[0-9][0-9]_*")) if (p / f"{p.name.split('_')[0]}.ipynb").exists()
    ]
