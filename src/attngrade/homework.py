"""A homework as the grader sees it: its folder, its configuration and its questions' tests.

Each homework lives in ``exercises/hwNN_topic/``: the otter master notebook ``hwNN.ipynb``, a
``grading.yml`` (the references students must not call, sandbox limits), and once built
(``make assignments``) ``dist/student/`` and ``dist/autograder/``. A ``grading.yml``'s
``forbidden:`` may name groups of references (``- group: masks``), defined once for every
homework in ``exercises/forbidden_groups.yml`` (:func:`read_forbidden`).

The tests are read from the autograder notebook that ``otter assign`` writes: its metadata holds,
per question, an otter test file in the exception-based (pytest-style) format::

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

import functools
import inspect
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .sandboxed.integrity import resolve_reference

#: the file, in the exercises folder, that defines the groups of forbidden references
GROUPS_FILE = "forbidden_groups.yml"

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

    @functools.cached_property
    def forbidden(self) -> list[str]:
        """The dotted names of ``forbidden:`` with its groups expanded, each checked to resolve."""
        return read_forbidden(self.folder / "grading.yml", self.config, groups_file(self.folder))

    @property
    def limits(self) -> dict[str, Any]:
        return {**DEFAULT_LIMITS, **self.config.get("limits", {})}

    def is_built(self) -> bool:
        """Whether dist/ exists and is newer than the master, grading.yml and the groups file."""
        if not self.autograder_notebook.exists() or not self.student_notebook.exists():
            return False
        built = self.autograder_notebook.stat().st_mtime
        sources = [self.master, self.folder / "grading.yml", groups_file(self.folder)]
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


def groups_file(folder: Path) -> Path:
    """The groups file of the homework in ``folder``: the one beside it (in its exercises folder),
    else the one in :func:`exercises_root` (for a homework folder copied elsewhere)."""
    beside = Path(folder).parent / GROUPS_FILE
    return beside if beside.exists() else exercises_root() / GROUPS_FILE


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None


def read_groups(path: Path) -> dict[str, list]:
    """The groups of forbidden references in ``path``: a mapping of group names to lists whose
    entries are dotted names or ``{group: NAME}`` (a group may include another)."""
    groups = _read_yaml(path) if path.exists() else {}
    groups = {} if groups is None else groups
    if not isinstance(groups, dict) or not all(isinstance(v, list) for v in groups.values()):
        raise ValueError(f"{path}: must map each group name to a list of references")
    return groups


def read_forbidden(config_path: Path, config: dict[str, Any], groups_path: Path) -> list[str]:
    """The forbidden references of a ``grading.yml`` (read from ``config_path`` into ``config``),
    in order and without repeats, with every ``{group: NAME}`` entry replaced by the references of
    the group NAME of ``groups_path``.

    Raises ``ValueError`` naming the file for an entry that is neither a dotted name nor a group, an
    unknown group, a group that includes itself, and a name that does not resolve (a typo would
    otherwise leave a reference usable).
    """
    groups: dict[str, list] | None = None
    names: dict[str, str] = {}  # name -> where it is listed

    def expand(entries: object, where: str, stack: tuple[str, ...]) -> None:
        nonlocal groups
        if not isinstance(entries, list):
            raise ValueError(f"{where}: forbidden must be a list, got {type(entries).__name__}")
        for entry in entries:
            if isinstance(entry, str) and entry.strip():
                names.setdefault(entry.strip(), where)
                continue
            if not (isinstance(entry, dict) and list(entry) == ["group"] and isinstance(entry["group"], str)):
                raise ValueError(f"{where}: each forbidden entry is a dotted name or {{group: NAME}}, got {entry!r}")
            name = entry["group"]
            if groups is None:
                groups = read_groups(groups_path)
            if name not in groups:
                known = ", ".join(sorted(groups)) or "none"
                raise ValueError(f"{where}: unknown group {name!r} (the groups of {groups_path}: {known})")
            if name in stack:
                raise ValueError(f"{groups_path}: group {name!r} includes itself ({' -> '.join((*stack, name))})")
            expand(groups[name], f"{groups_path}, group {name!r}", (*stack, name))

    expand(config.get("forbidden", []), str(config_path), ())
    for name, where in names.items():
        try:
            resolve_reference(name)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{where}: forbidden reference {name!r} does not resolve ({exc})") from None
    return list(names)


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
    config = (_read_yaml(config_path) if config_path.exists() else {}) or {}
    if not isinstance(config, dict):
        raise ValueError(f"{config_path}: must be a mapping (forbidden:, limits:)")
    return Homework(name=name, folder=folder.resolve(), config=config)


def all_homework() -> list[Homework]:
    """Every homework under :func:`exercises_root`, in order."""
    root = exercises_root()
    return [
        load_homework(p) for p in sorted(root.glob("hw[0-9][0-9]_*")) if (p / f"{p.name.split('_')[0]}.ipynb").exists()
    ]
