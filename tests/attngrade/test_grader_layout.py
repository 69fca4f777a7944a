"""The grader's rooms: subpackages by trust zone and stage, and who may import whom.

``attngrade.sandboxed`` is what runs inside a submission's sandbox, and the sandbox's view holds a
copy of exactly it; ``attngrade.grading`` grades on the host; ``attngrade.authoring`` builds the
homework and releases the course. The import graph only points down: the sandboxed code imports
nothing else of the grader, grading never imports authoring, and the student-facing checks import
only the guard. Of the sandbox's modules the host imports only those shared with it
(:data:`SHARED_WITH_THE_HOST`, each owned by the sandbox), never the worker's loop or the child.
"""

from __future__ import annotations

import ast
import filecmp
from pathlib import Path

import pytest

import attngrade
from attngrade.grading.view import build_view

PACKAGE = Path(attngrade.__file__).resolve().parent

#: for each room, the rooms its modules may import from (their own room included)
ALLOWED = {
    "sandboxed": {"sandboxed"},
    "checks": {"sandboxed"},
    "student_tests": {"sandboxed", "checks"},  # what test-writing questions' tests call
    "homework": {"sandboxed"},  # the one resolver checks that grading.yml's names exist
    "grading": {"grading", "sandboxed", "checks", "homework"},
    "authoring": {"authoring", "grading", "sandboxed", "checks", "homework"},
    "cli": {"grading", "authoring", "homework"},
    "__main__": {"cli"},
    "__init__": set(),
}


def room(module: Path) -> str:
    relative = module.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imported_rooms(module: Path) -> set[str]:
    """The rooms of attngrade that ``module`` imports (relative or absolute imports, anywhere in it)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    package = module.relative_to(PACKAGE).parent.parts  # () at the top, ("grading",) in a room
    rooms = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - (node.level - 1)]) if node.level > 1 else list(package)
                parts = base + (node.module.split(".") if node.module else [])
                names = [parts] if node.module else [base + [alias.name] for alias in node.names]
            elif node.module and node.module.split(".")[0] == "attngrade":
                names = [node.module.split(".")[1:]]
            else:
                continue
            rooms |= {parts[0] for parts in names if parts}
        elif isinstance(node, ast.Import):
            rooms |= {a.name.split(".")[1] for a in node.names if a.name.startswith("attngrade.")}
    return rooms


MODULES = sorted(PACKAGE.rglob("*.py"))

#: the modules of ``sandboxed`` that code outside it (the host, the checks) may import, and why; the
#: rest (the worker's loop, the child, its limits and privileges, the clean-up) are the guest's own.
#: Each module here belongs to the sandbox, which runs it; the others read it so that both sides
#: agree on one definition
SHARED_WITH_THE_HOST = {
    "protocol": "the wire format both ends speak",
    "integrity": "the guard (the checks and the student's notebook run it too) and the reference vocabulary",
    "candidates": "test-writing questions: the seal's key size, and the same runs outside the class grader",
    "ipython": "the IPython translation the child applies to each cell; grading.static reads the same Python",
    "warm_ups": "the calls a worker makes before it forks; grading.grader names them from the master notebook",
}


def sandboxed_modules_imported(module: Path) -> set[str]:
    """The modules of ``attngrade.sandboxed`` that ``module`` imports (anywhere in it)."""
    found = set()
    here = module.relative_to(PACKAGE).parent.parts
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[: len(here) - (node.level - 1)])
                parts = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.startswith("attngrade."):
                parts = node.module.split(".")[1:]
            else:
                continue
            if parts[:1] == ["sandboxed"]:
                found |= {parts[1]} if len(parts) > 1 else {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["attngrade", "sandboxed"] and len(parts) > 2:
                    found.add(parts[2])
    return found


@pytest.mark.parametrize("module", MODULES, ids=[str(m.relative_to(PACKAGE)) for m in MODULES])
def test_outside_the_sandbox_only_the_shared_modules_are_read(module):
    """The host imports only the sandbox's shared modules, and those import no module of the guest's
    own (so the host never runs the worker's loop, the child or the clean-up)."""
    if room(module) == "sandboxed":
        if module.relative_to(PACKAGE / "sandboxed").parts[0].removesuffix(".py") in SHARED_WITH_THE_HOST:
            guest_only = sandboxed_modules_imported(module) - set(SHARED_WITH_THE_HOST)
            assert not guest_only, f"the shared sandboxed/{module.name} imports {sorted(guest_only)}"
        return
    read = sandboxed_modules_imported(module) - set(SHARED_WITH_THE_HOST)
    assert not read, f"{module.relative_to(PACKAGE)} imports the guest's own sandboxed.{sorted(read)}"


def test_the_shared_modules_exist():
    for name in SHARED_WITH_THE_HOST:
        folder = PACKAGE / "sandboxed"
        assert (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file(), name


@pytest.mark.parametrize("module", MODULES, ids=[str(m.relative_to(PACKAGE)) for m in MODULES])
def test_imports_point_down(module):
    where = room(module)
    assert where in ALLOWED, f"{module.relative_to(PACKAGE)}: a room the layout test does not know"
    outside = imported_rooms(module) - ALLOWED[where] - {where}
    assert not outside, f"{module.relative_to(PACKAGE)} ({where}) imports from {sorted(outside)}"


def test_the_rooms_are_the_subpackages():
    rooms = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert rooms == ["authoring", "checks", "grading", "sandboxed"]
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "cli.py", "homework.py", "student_tests.py"]


def test_the_sandbox_sees_exactly_the_sandboxed_subpackage(tmp_path):
    view = build_view(tmp_path, forbidden=[])
    lib = view.root / "lib" / "attngrade"
    seen = sorted(str(p.relative_to(lib)) for p in lib.rglob("*") if p.is_file())
    ours = sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "sandboxed").rglob("*.py"))
    assert seen == ["__init__.py", *ours]
    for name in ours:
        assert filecmp.cmp(lib / name, PACKAGE / name, shallow=False)


def _attngrade_imports(module: Path) -> set[Path]:
    """The files of attngrade that ``module`` imports (relative imports, anywhere in it)."""
    found = set()
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = module.parent
            for _ in range(node.level - 1):
                base = base.parent
            stems = [node.module.split(".")] if node.module else [[alias.name] for alias in node.names]
            for parts in stems:
                target = base.joinpath(*parts)
                for candidate in (target.with_suffix(".py"), target / "__init__.py"):
                    if candidate.is_file():
                        found.add(candidate)
                        # a package's __init__ runs on the way to its modules
                        found |= {p / "__init__.py" for p in candidate.parents if p.is_relative_to(PACKAGE)}
    return found


def test_the_light_modules_are_everything_the_homework_tests_import():
    """The autograder zip carries LIGHT_MODULES of attngrade (otter's autograder has nothing else of
    the grader): every file that ``checks`` and ``student_tests`` import, however deep, is in it."""
    from attngrade.authoring.assign import LIGHT_MODULES

    todo = [PACKAGE / "checks" / "__init__.py", PACKAGE / "student_tests.py"]
    needed: set[Path] = {PACKAGE / "__init__.py"}
    while todo:
        module = todo.pop()
        if module not in needed:
            needed.add(module)
            todo.extend(_attngrade_imports(module))
    light = {PACKAGE / name for name in LIGHT_MODULES}
    assert needed - light == set(), (
        f"missing from LIGHT_MODULES: {sorted(str(p.relative_to(PACKAGE)) for p in needed - light)}"
    )
    assert all(p.is_file() for p in light), sorted(str(p) for p in light if not p.is_file())
