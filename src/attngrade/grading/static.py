"""Reading a submission's code without running it: what an instructor may want to look at.

Whether an answer used a reference implementation is decided by what runs (the references are
absent from the sandbox, and :mod:`attngrade.sandboxed.integrity` watches what executes): this static reading never
changes a score. Its findings put the row in ``status=review`` and are listed in the feedback. It
parses every code cell with :mod:`ast` (parsing runs nothing) and reports, per question:

* a **forbidden reference**: the answer's function, or a function or class it uses, names one of
  the homework's forbidden references (``attnbook.softmax``, ``F.scaled_dot_product_attention``,
  ...), whatever the import alias, or a top-level statement binds one to a name
  (``softmax_beta = attnbook.softmax``); a top-level *call* such as a student's own check
  ``assert_close(mine(x), attnbook.softmax(x))`` is fine;
* a **dynamic-code construct**: ``exec``, ``eval``, ``compile``, ``__import__``, ``importlib``,
  ``getattr`` with a computed name, frame and function internals (``__globals__``,
  ``__closure__``, ``sys.modules``, ``gc``, ``inspect``...) or private torch entry points
  (``torch.ops``, ``torch._C``). These are the ways to reach a reference behind the grader's
  back, and no homework answer needs them. Inside a function they count against the questions
  that use the function; at top level (or imported anywhere) against every question.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..sandboxed.integrity import resolve_reference
from ..sandboxed.ipython import to_python  # the IPython translation the sandbox applies before running a cell
from .parsing import parse

#: names that run code built at run time, or reach objects behind the grader's back
DYNAMIC_NAMES = {
    "exec",
    "eval",
    "compile",
    "__import__",
    "globals",
    "vars",
    "locals",
    "breakpoint",
}
#: modules whose import alone marks dynamic code
DYNAMIC_MODULES = {
    "importlib",
    "imp",
    "runpy",
    "ctypes",
    "gc",
    "marshal",
    "pickle",
    "dill",
    "cloudpickle",
    "zipimport",
}
#: attributes that reach interpreter internals
DYNAMIC_ATTRIBUTES = {
    "__globals__",
    "__closure__",
    "__code__",
    "__builtins__",
    "__dict__",
    "__wrapped__",
    "__subclasses__",
    "__bases__",
    "__base__",
    "__mro__",
    "__loader__",
    "__spec__",
    "__func__",
    "__self__",
    "__getattribute__",
    "__reduce__",
    "__reduce_ex__",
    "__import__",
    "__defaults__",
    "__kwdefaults__",
    "f_globals",
    "f_locals",
    "f_back",
    "f_builtins",
    "gi_frame",
    "cr_frame",
    "tb_frame",
    "_getframe",
    "__traceback__",
}
#: attribute paths under torch that lead to the raw kernels
PRIVATE_TORCH = ("torch.ops", "torch._C", "torch.overrides", "torch._", "torch.library", "torch.utils.cpp_extension")


@dataclass
class Finding:
    """One reason a question is marked as leaning on a reference or on dynamic code."""

    question: str
    reason: str


@dataclass
class _Unit:
    """A top-level function or class (or, named ``<top>``, all other top-level statements)."""

    name: str
    uses: set[str] = field(default_factory=set)  # other units it names
    forbidden: list[str] = field(default_factory=list)  # forbidden references it names
    bound_forbidden: list[str] = field(default_factory=list)  # (top level) forbidden refs bound to names
    dynamic: list[str] = field(default_factory=list)  # dynamic-code constructs inside it


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _resolve_object(dotted: str) -> Any:
    """The object a dotted name of ``attnbook``, ``torch`` or ``numpy`` denotes, among the modules
    already imported (:func:`attngrade.sandboxed.integrity.resolve_reference` with ``load=False``:
    a student's names are never imported here); None if none."""
    if dotted.split(".")[0] not in ("attnbook", "torch", "numpy"):
        return None
    try:
        return resolve_reference(dotted, load=False)
    except Exception:  # noqa: BLE001 - any attribute a student names may raise anything when read
        return None


class Analyzer:
    """Static checks of one notebook against one homework's forbidden references."""

    def __init__(self, forbidden: Iterable[str]):
        self.forbidden = list(forbidden)
        self._objects = {}
        for name in self.forbidden:
            obj = _resolve_object(name)
            if obj is not None:
                self._objects[id(obj)] = (name, obj)

    def _forbidden_name(self, dotted: str) -> str | None:
        """The forbidden reference ``dotted`` denotes, if any (by name, then by identity)."""
        for name in self.forbidden:
            if dotted == name:
                return name
        obj = _resolve_object(dotted)
        if obj is not None and id(obj) in self._objects:
            return self._objects[id(obj)][0]
        return None

    def analyze(self, cells: list[str], questions: dict[str, list[str]]) -> list[Finding]:
        """Findings for ``questions`` (question -> names of the functions its tests call)."""
        trees = []
        for source in cells:
            try:
                trees.append(parse(to_python(source)))  # as the sandbox runs it
            except (SyntaxError, ValueError):
                continue  # a cell that does not parse does not run either
        aliases: dict[str, str] = {}
        stars: list[str] = []
        dynamic: list[str] = []

        # pass 1: imports and top-level aliases (x = torch.nn.functional) anywhere in the notebook
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name.split(".")[0] in DYNAMIC_MODULES:
                            dynamic.append(f"imports {a.name}")
                        if a.asname:
                            aliases[a.asname] = a.name
                        else:
                            top = a.name.split(".")[0]
                            aliases.setdefault(top, top)
                elif isinstance(node, ast.ImportFrom):
                    module = ("." * node.level) + (node.module or "")
                    if module.split(".")[0] in DYNAMIC_MODULES:
                        dynamic.append(f"imports from {module}")
                    for a in node.names:
                        if a.name == "*":
                            stars.append(module)
                        else:
                            aliases[a.asname or a.name] = f"{module}.{a.name}"
            for node in tree.body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    d = _dotted(node.value)
                    if d is not None:
                        aliases[node.targets[0].id] = self._expand(d, aliases)

        # pass 2: units (top-level defs and classes) and what each one names
        units: dict[str, _Unit] = {"<top>": _Unit("<top>")}
        top_level: list[ast.AST] = []
        for tree in trees:
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    units.setdefault(node.name, _Unit(node.name))
                else:
                    top_level.append(node)
        for tree in trees:
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self._scan(node, units[node.name], units, aliases, stars, units[node.name].dynamic, top=False)
        for node in top_level:
            self._scan(node, units["<top>"], units, aliases, stars, dynamic, top=True)
            # top-level `answer = helper` makes `answer` use `helper`
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                used = (
                    {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name) and n.id in units}
                    if node.value
                    else set()
                )
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            units.setdefault(n.id, _Unit(n.id)).uses |= used

        findings: list[Finding] = []
        for q, names in questions.items():
            reasons: list[str] = []
            seen: set[str] = set()
            todo = [n for n in names]
            while todo:
                n = todo.pop()
                if n in seen or n not in units:
                    continue
                seen.add(n)
                unit = units[n]
                for ref in unit.forbidden:
                    reasons.append(f"`{n}` uses {ref}, the reference implementation this homework asks you to write")
                for what in unit.dynamic:
                    reasons.append(f"`{n}` {what} (dynamic code is not accepted in answers)")
                todo.extend(unit.uses)
            for ref in units["<top>"].bound_forbidden:
                reasons.append(f"a top-level statement binds {ref}, the reference implementation, to a name")
            for what in dynamic:
                reasons.append(f"a top-level statement {what} (dynamic code is not accepted in submissions)")
            for r in dict.fromkeys(reasons):
                findings.append(Finding(q, r))
        return findings

    def _expand(self, dotted: str, aliases: dict[str, str]) -> str:
        head, _, rest = dotted.partition(".")
        if head in aliases and aliases[head] != head:
            base = aliases[head]
            return f"{base}.{rest}" if rest else base
        return dotted

    def _scan(self, root, unit, units, aliases, stars, dynamic, *, top: bool) -> None:
        called: set[int] = set()
        binding: set[int] = set()
        deferred: set[int] = set()  # inside a lambda: code that runs later, like a function body
        if top:
            for node in ast.walk(root):
                if isinstance(node, ast.Lambda):
                    deferred.update(id(n) for n in ast.walk(node.body))
                if isinstance(node, ast.Call):
                    called.add(id(node.func))
                # where a reference ends up stored: assigned values, lambdas, containers
                value = None
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                    value = node.value
                elif isinstance(node, (ast.Lambda, ast.List, ast.Tuple, ast.Set, ast.Dict)):
                    value = node
                if value is not None:
                    binding.update(id(n) for n in ast.walk(value))
        for node in ast.walk(root):
            if isinstance(node, ast.Name):
                if node.id in DYNAMIC_NAMES:
                    dynamic.append(f"uses {node.id}()")
                if node.id in units and node.id != unit.name:
                    unit.uses.add(node.id)
            if isinstance(node, ast.Attribute) and node.attr in DYNAMIC_ATTRIBUTES:
                dynamic.append(f"reads the attribute .{node.attr}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "delattr", "hasattr")
            ):
                if len(node.args) < 2 or not isinstance(node.args[1], ast.Constant):
                    dynamic.append(f"uses {node.func.id}() with a computed attribute name")
                else:
                    base = _dotted(node.args[0])
                    if base is not None:
                        self._check_ref(
                            f"{self._expand(base, aliases)}.{node.args[1].value}",
                            node,
                            unit,
                            top,
                            called,
                            binding,
                            deferred,
                        )
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(getattr(node, "ctx", None), ast.Load):
                d = _dotted(node)
                if d is None:
                    continue
                full = self._expand(d, aliases)
                if full == "sys.modules" or full.startswith("sys.modules."):
                    dynamic.append("reads sys.modules")
                if full.startswith(PRIVATE_TORCH):
                    dynamic.append(f"uses the private torch entry point {full}")
                self._check_ref(full, node, unit, top, called, binding, deferred)
                if isinstance(node, ast.Name) and node.id not in aliases:
                    for module in stars:
                        self._check_ref(f"{module}.{node.id}", node, unit, top, called, binding, deferred)

    def _check_ref(self, full: str, node, unit, top, called, binding, deferred) -> None:
        ref = self._forbidden_name(full)
        if ref is None:
            return
        if top:
            if id(node) in deferred or (id(node) in binding and id(node) not in called):
                unit.bound_forbidden.append(ref)
        else:
            unit.forbidden.append(ref)


def analyze(cells: list[str], forbidden: Iterable[str], questions: dict[str, list[str]]) -> dict[str, list[str]]:
    """Question -> reasons (empty list when clean); see the module docstring."""
    result: dict[str, list[str]] = {q: [] for q in questions}
    for f in Analyzer(forbidden).analyze(cells, questions):
        result[f.question].append(f.reason)
    return result
