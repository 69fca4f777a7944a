"""Did a student's answer run a forbidden reference? Decided from what executes during the call.

Each homework lists, in ``exercises/*/grading.yml`` (``forbidden:``), the reference
implementations it asks students to write themselves: ``attnbook.attention``,
``attnbook.MultiHeadAttention``, ``torch.nn.functional.scaled_dot_product_attention``, ... A
:class:`Guard` built from that list watches one call of the student's function::

    guard = Guard(["attnbook.attention", "torch.nn.functional.scaled_dot_product_attention"])
    with guard.watch():
        result = masked_attention(Q, K, V)
    if guard.hits:
        raise ForbiddenReference(guard.message("masked_attention"))

What the code *names* never matters (an answer may ``import attnbook``, star-import it, mention
``attnbook.attention`` in a branch that does not run, or compare with it in a cell of its own);
what matters is what *runs* inside the watched call. Three watchers, all switched on only for the
call:

1. **The Python profiler** (``sys.setprofile``, and ``threading.setprofile`` for threads started
   during the call; on Python 3.12+ also every thread already running) sees each Python function
   that starts and each built-in that is called. A forbidden Python function is known by its code:
   the code object itself, an equal one (a fresh copy of the module compiled from the same source:
   ``importlib`` from the file, ``runpy``, ``importlib.reload``, ``exec`` of the file's text, even
   under another file name), or its place ``(real path of the file, qualified name, first line)``.
   For a class, every function defined in its body counts (``__init__``, ``forward``, properties,
   ...). A Triton kernel counts as the function it wraps (``.fn`` of ``triton.jit``'s object, of the
   interpreter's, of ``autotune``/``heuristics``), also at its ``def`` line: Triton's interpreter runs
   the kernel compiled again from its source from the ``def`` on, so under any jit (``triton.jit(
   kernel.fn)``, a copy of the module, a device-function call) what runs has the kernel's file, name and
   ``def`` line. While the interpreter runs a launch (``GridExecutor.__call__``, hundreds of thousands
   of calls of its own) the cheaper trace hook replaces the profiler until the launch returns: it sees
   every Python call, no C call (the torch watchers stay on). A forbidden
   built-in (``torch.nn.functional.scaled_dot_product_attention`` is ``torch._C._nn``'s) is known by
   identity, however it was reached (``operator.attrgetter``, ``getattr(__import__(...))``,
   ``functools.partial``, ``eval`` of a string, ...).
2. **A** ``TorchFunctionMode`` sees every call of PyTorch's Python API, including
   ``torch.ops.aten.*``, *before* PyTorch picks a backend; this matters because for inputs that
   PyTorch's fused kernels do not take (3-D, or under a dispatch mode) ``scaled_dot_product_attention``
   decomposes into plain ``bmm``/``softmax`` ops that a dispatch-level watcher cannot tell from
   honest code.
3. **A** ``TorchDispatchMode`` sees the ATen kernels that actually run, so a fused attention kernel
   reached without Python (a TorchScript function, a C++ extension) is caught too.

The torch watchers are used only when the list names something of PyTorch's; the ATen operators
behind each name are in :data:`TORCH_OPS` (a forbidden operator also counts when one of PyTorch's
Python decompositions of it runs, e.g. ``torch._decomp.decompositions._softmax_backward_data``,
known by its code).

**Automatic differentiation** (where the list names ``torch.autograd.grad``,
``torch.autograd.backward`` or ``torch.autograd.forward_ad.make_dual``: :data:`AUTOGRAD_DOORS`) is
closed by what it cannot do without, not by its names alone. Reverse mode needs a graph recorded
during the call, so the guard runs the call with gradient recording off (in its thread, and in any
thread the call starts, from that thread's first Python call) and counts an operator that runs with
it on again (:data:`RECORDING`), whatever switched it on (``torch.enable_grad``,
``torch.set_grad_enabled``, ``torch._C._set_grad_enabled``, ``inference_mode(False)``, a call from C):
one check that closes ``.backward()``, ``torch.autograd.grad``, ``torch.func``, the engine and
``grad_fn`` nodes called by hand. The engine is watched besides: its ``run_backward``, a method of
a built-in class bound anew on every access (so identity cannot match it), is matched by owner and
name on any engine object (:data:`ENGINE`); its Python wrapper
``torch.autograd.graph._engine_run_backward`` by code; and the dispatch mode sees the engine
evaluate a graph's node (``torch._C._current_autograd_node``), however the engine was called.
Forward mode needs ``aten::_make_dual`` (the only maker of a dual tensor), watched at the kernel
level like the fused kernels, and the built-ins ``torch._C._enter_dual_level``, ``torch._make_dual``
(= ``torch._VF._make_dual``) and ``torch._unpack_dual`` by identity. A student's call that
switches recording on without building anything is counted too: the rule is the mode, simple to
state. Still unseen: ``grad_fn`` nodes of a graph recorded *before* the call (in a cell) called by
hand on tensors overwritten through ``.data``, and the tampering below.

**What the guard cannot see** (for the static flag-for-review, see :mod:`attngrade.grading.static`): code
that deliberately switches the watchers off inside the call (``sys.setprofile(None)``,
``torch._C.DisableTorchFunction()``, popping the torch modes; such tampering is noted in
:attr:`Guard.tampered`, not counted as a hit); work done in another process or, on Python < 3.12,
in a thread started before the call (a thread pool made in an earlier cell); PyTorch's attention
reached from C++/TorchScript when PyTorch falls back to its math decomposition; one function's
source copied and compiled on its own (``exec(inspect.getsource(attnbook.attention))`` compiles to
other bytecode; it is caught only through the forbidden functions the copy calls in turn, here
``attnbook.attention_scores`` and ``attnbook.softmax``) or retyped by hand; objects returned by the answer whose methods run the reference later, outside the call
(a ``torch.Tensor`` subclass with ``__torch_function__``). In the class grader these matter less:
the sandbox makes the references absent, and only plain data comes back.

Where the list comes from, in the process that runs ``grader.check`` or otter's autograder
(:func:`current_guard`): :func:`configure`, the environment variable ``ATTNGRADE_FORBIDDEN`` (a
JSON list), and the small JSON file :data:`INTEGRITY_FILE` that ``python -m attngrade assign`` writes
beside the student's notebook, into the autograder zip's ``attnbook_pkg/`` (which otter copies
into the submission folder, the working directory while grading) and into the ``attngrade``
package shipped in that zip. All that are found apply (their union).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "AUTOGRAD_DOORS",
    "ENGINE",
    "ForbiddenReference",
    "Guard",
    "INTEGRITY_FILE",
    "RECORDING",
    "SDPA_BACKWARD_OPS",
    "SOFTMAX_BACKWARD_OPS",
    "TORCH_OPS",
    "configure",
    "current_guard",
    "forbidden_from_environment",
    "is_autograd",
    "uninitialised_memory_filled",
    "watch_call",
    "write_integrity_file",
]

#: The file (JSON ``{"homework": ..., "forbidden": [...]}``) that carries a homework's forbidden
#: list to where its tests run.
INTEGRITY_FILE = "attngrade_integrity.json"
#: Where :func:`current_guard` looks for it, relative to the working directory, besides the copy
#: inside the ``attngrade`` package (``_integrity.json``, written only into the shipped copy).
SEARCH_PATHS = (INTEGRITY_FILE, os.path.join("attnbook_pkg", INTEGRITY_FILE))
_PACKAGE_FILE = Path(__file__).with_name("_integrity.json")
ENV_VAR = "ATTNGRADE_FORBIDDEN"

_SDPA_OPS = frozenset(
    {
        "scaled_dot_product_attention",
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_attention_math_for_mps",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_fused_attention_overrideable",
        "_flash_attention_forward",
        "_flash_attention_forward_no_dropout_inplace",
        "_efficient_attention_forward",
    }
)
#: the backward kernels of PyTorch's fused attention: each takes Q, K, V, O, dO and the log-sum-exp
#: and returns (dQ, dK, dV), the backward pass of homework 11 in one call; with a chosen dO, dV = P^T dO
#: also gives the weights P, so they stand for attention's forward pass as well
SDPA_BACKWARD_OPS = frozenset(
    {
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_cudnn_attention_backward",
        "_scaled_dot_product_fused_attention_overrideable_backward",
        "_flash_attention_backward",
        "_efficient_attention_backward",
    }
)
_SDPA_OPS = _SDPA_OPS | SDPA_BACKWARD_OPS
#: PyTorch's softmax backward kernels: ``_softmax_backward_data(dP, P, -1, dtype)`` is
#: dS = P * (dP - D) in one call, and so is ``_log_softmax_backward_data(P * dP, log P, -1, dtype)``
#: (the sparse ones the same on a sparse copy). Named one by one as ``torch.ops.aten.NAME``.
SOFTMAX_BACKWARD_OPS = frozenset(
    {
        "_softmax_backward_data",
        "_log_softmax_backward_data",
        "_sparse_softmax_backward_data",
        "_sparse_log_softmax_backward_data",
    }
)
_MHA_OPS = frozenset({"_native_multi_head_attention", "_transformer_encoder_layer_fwd"})

#: ATen operators (``aten::NAME``, checked against the installed torch with ``dir(torch.ops.aten)``)
#: that count as running a forbidden PyTorch reference. A forbidden ``torch.ops.aten.NAME`` counts
#: as its own operator.
TORCH_OPS: dict[str, frozenset[str]] = {
    "torch.nn.functional.scaled_dot_product_attention": _SDPA_OPS,
    "torch._C._nn.scaled_dot_product_attention": _SDPA_OPS,
    "torch.nn.functional.multi_head_attention_forward": _MHA_OPS,
    "torch.nn.MultiheadAttention": _MHA_OPS,
    "torch.nn.modules.activation.MultiheadAttention": _MHA_OPS,
    "torch.nn.TransformerEncoderLayer": frozenset({"_transformer_encoder_layer_fwd"}),
    # a kernel named as torch.ops.aten.NAME counts as itself (listed here so that the sandbox refuses it)
    **{f"torch.ops.aten.{op}": frozenset({op}) for op in SDPA_BACKWARD_OPS | SOFTMAX_BACKWARD_OPS},
}
# built-ins (no code object) that count like the name: PyTorch's Python entry points of those ops
_TORCH_BUILTINS = {
    "torch.nn.functional.multi_head_attention_forward": ("torch._native_multi_head_attention",),
    "torch.nn.MultiheadAttention": ("torch._native_multi_head_attention",),
    "torch.nn.TransformerEncoderLayer": ("torch._transformer_encoder_layer_fwd",),
}


class ForbiddenReference(Exception):
    """An answer ran a reference implementation that its homework forbids (the message says which)."""

    def __init__(self, message: str, hits: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.hits = list(hits)


# --------------------------------------------------------------------------- resolving names


def resolve_reference(dotted: str, *, load: bool = True) -> Any:
    """The object a dotted name refers to (``attnbook.core.masks.causal_mask``): the first part is a
    module, each next part an attribute of the object before it or, where it is none, a submodule.

    The one resolver of the grader: the run-time guard, the sandbox's view (which stubs what it
    finds) and the static reading of a notebook all use it. In ``attnbook`` no submodule shares its
    dotted name with a function, so "attribute" and "submodule" never disagree. With ``load=False``
    nothing is imported: a module that is not imported yet is not found (the static reading names
    whatever a student writes, and must not import it). Raises ``ImportError`` or
    ``AttributeError`` when the name does not resolve.
    """
    parts = dotted.split(".")
    obj: Any = importlib.import_module(parts[0]) if load else sys.modules.get(parts[0])
    if obj is None:
        raise ModuleNotFoundError(f"{parts[0]} is not imported")
    for i, part in enumerate(parts[1:], start=2):
        try:
            obj = getattr(obj, part)
            continue
        except AttributeError:
            if not isinstance(obj, types.ModuleType):
                raise
        name = ".".join(parts[:i])
        if name in sys.modules:
            obj = sys.modules[name]
        elif load:
            obj = importlib.import_module(name)
        else:
            raise AttributeError(f"{'.'.join(parts[: i - 1])} has no attribute {part!r} (or it is not imported)")
    return obj


def _functions_of(obj: Any, seen: set[int] | None = None) -> Iterator[Any]:
    """Python functions (with ``__code__``) and built-ins that running ``obj`` means."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, (staticmethod, classmethod)):
        yield from _functions_of(obj.__func__, seen)
    elif isinstance(obj, property):
        for f in (obj.fget, obj.fset, obj.fdel):
            if f is not None:
                yield from _functions_of(f, seen)
    elif inspect.isclass(obj):
        for value in vars(obj).values():
            if isinstance(value, (types.FunctionType, staticmethod, classmethod, property)):
                yield from _functions_of(value, seen)
    elif inspect.ismodule(obj):
        for value in vars(obj).values():
            if getattr(value, "__module__", None) == obj.__name__ and (
                inspect.isfunction(value) or inspect.isclass(value)
            ):
                yield from _functions_of(value, seen)
    elif isinstance(obj, types.MethodType):
        yield from _functions_of(obj.__func__, seen)
    elif isinstance(obj, types.FunctionType):
        # the innermost function of a decorated one: a decorator's wrapper code is shared by
        # every function it decorates, so it cannot tell a reference from anything else
        yield inspect.unwrap(obj)
    elif isinstance(obj, (types.BuiltinFunctionType, types.MethodDescriptorType)):
        # a method of a built-in class (the autograd engine's run_backward) is bound anew on every
        # access, so it is matched by its owner class and name (Guard._methods), not by identity
        yield obj
    elif type(obj).__module__.partition(".")[0] == "triton" and getattr(obj, "fn", None) is not None:
        # a Triton kernel (triton.jit's JITFunction, the interpreter's InterpretedFunction, autotune and
        # heuristics wrappers): the Python function it wraps, however often wrapped
        yield from _functions_of(obj.fn, seen)


def _qualname(code: types.CodeType) -> str:
    return getattr(code, "co_qualname", code.co_name)  # co_qualname: Python 3.11+


def _place(code: types.CodeType) -> tuple[str, str, int] | None:
    name = code.co_filename
    if not name or name.startswith("<"):
        return None
    try:
        return (os.path.realpath(name), _qualname(code), code.co_firstlineno)
    except (OSError, ValueError):
        return None


def _def_line(code: types.CodeType) -> int:
    """The line of a decorated function's ``def`` (its ``co_firstlineno`` is its first decorator's
    line), as Triton finds it: where Triton's interpreter puts the first line of the kernel it
    compiles again from the source. ``co_firstlineno`` where the function has no decorator."""
    import linecache

    first = code.co_firstlineno
    if not linecache.getline(code.co_filename, first).lstrip().startswith("@"):
        return first
    for line in range(first + 1, first + 200):  # past the decorators and their arguments
        text = linecache.getline(code.co_filename, line)
        if not text:
            break
        if text.lstrip().startswith(("def ", "async def ")):
            return line
    return first


def _op_name(func: Any) -> str | None:
    """``NAME`` of an ATen operator (``torch.ops.aten.NAME`` or one of its overloads), else None."""
    schema = getattr(func, "_schema", None)
    if schema is not None:
        name = schema.name
    else:
        name = getattr(func, "_qualified_op_name", None)
    if not isinstance(name, str) or not name.startswith("aten::"):
        return None
    return name[len("aten::") :]


def _op_builtins(op: str) -> Iterator[Any]:
    """PyTorch's Python built-ins of the ATen operator ``op`` (``torch._softmax_backward_data`` is
    ``torch._C._VariableFunctions._softmax_backward_data``), where torch is imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    for namespace in ("_VariableFunctions", "_nn", "_linalg", "_special", "_fft"):
        f = getattr(getattr(torch._C, namespace, None), op, None)
        if isinstance(f, types.BuiltinFunctionType):
            yield f


_DECOMPOSITIONS: dict[str, list[Any]] | None = None


def _decompositions(op: str) -> list[Any]:
    """The Python functions that PyTorch's decomposition table holds for the ATen operator ``op``
    (``torch._decomp.decompositions._softmax_backward_data``): each computes the operator with
    plain operators, so the guard knows them by their code. Empty where torch is not imported."""
    global _DECOMPOSITIONS
    if "torch" not in sys.modules:
        return []
    if _DECOMPOSITIONS is None:
        table: dict[str, list[Any]] = {}
        try:
            from torch._decomp import decomposition_table  # imported with torch

            for overload, fn in list(decomposition_table.items()):
                name = _op_name(overload)
                if name is None:
                    continue
                for f in _functions_of(fn):
                    if isinstance(f, types.FunctionType) and f not in table.setdefault(name, []):
                        table[name].append(f)
        except Exception:  # noqa: BLE001 - a torch without the table: the kernels are still watched
            table = {}
        _DECOMPOSITIONS = table
    return _DECOMPOSITIONS.get(op, [])


# --------------------------------------------------------------------------- the guard


#: forbidden names that are a tool, not a reference implementation: the answer may not use them
AUTOGRAD_PREFIXES = ("torch.autograd", "torch.func")

#: the hit recorded when an operator runs with gradient recording on inside a call that the guard
#: runs with it off (:data:`AUTOGRAD_DOORS`): whatever switched it back on
RECORDING = "gradient recording (switched back on inside the call, which runs with it off)"
#: the autograd engine: a call of its ``run_backward`` on any engine object, matched by owner and
#: name, and the engine evaluating a graph's nodes, seen from the kernels that run
ENGINE = "torch._C._ImperativeEngine.run_backward"
_REVERSE_DOORS = ("torch.autograd.graph._engine_run_backward", ENGINE)
_FORWARD_DOORS = (
    "torch._C._enter_dual_level",
    "torch._make_dual",  # the same built-in as torch._VF._make_dual
    "torch._unpack_dual",
    "torch.ops.aten._make_dual",
    "torch.ops.aten._make_dual_copy",
    "torch.ops.aten._unpack_dual",
)
#: automatic differentiation, closed by every door where a homework forbids one of its public
#: entry points: forbidding ``torch.autograd.grad`` or ``torch.autograd.backward`` forbids the engine
#: they call (the Python wrapper by its code, the C++ method by owner and name) and runs the
#: watched call with gradient recording off, an operator run with it on again being a hit
#: (:data:`RECORDING`; reverse mode needs a graph recorded during the call, so this one check also
#: closes ``grad_fn`` nodes called by hand); forbidding ``torch.autograd.forward_ad.make_dual`` forbids
#: forward mode's built-ins and operators (a dual tensor is made by ``aten::_make_dual`` alone)
AUTOGRAD_DOORS: dict[str, tuple[str, ...]] = {
    "torch.autograd.grad": _REVERSE_DOORS,
    "torch.autograd.backward": _REVERSE_DOORS,
    "torch.autograd.forward_ad.make_dual": _FORWARD_DOORS,
}
_AUTOGRAD_NAMES = frozenset({RECORDING, *_REVERSE_DOORS, *_FORWARD_DOORS})


def is_autograd(name: str) -> bool:
    """Whether a forbidden name (or hit) is automatic differentiation rather than a reference."""
    return name.startswith(AUTOGRAD_PREFIXES) or name in _AUTOGRAD_NAMES


def forbidden_what(hits: list[str]) -> str:
    """What the student's function ran, in the words of the feedback: the reference implementations
    the homework asks them to write, PyTorch's kernels that compute them, or automatic
    differentiation where it asks for the gradient."""

    def listed(names: list[str]) -> str:
        return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"

    tools = [h for h in hits if is_autograd(h)]
    kernels = [h for h in hits if h not in tools and h.startswith("torch.ops.aten.")]
    references = [h for h in hits if h not in tools and h not in kernels]
    parts = []
    if references:
        noun = "the reference implementation" if len(references) == 1 else "reference implementations"
        parts.append(f"{listed(references)}, {noun} this homework asks you to write")
    if kernels:
        noun = "PyTorch's kernel" if len(kernels) == 1 else "PyTorch's kernels"
        verb = "computes" if len(kernels) == 1 else "compute"
        parts.append(f"{noun} {listed(kernels)}, which {verb} what this homework asks you to write")
    if tools:
        parts.append(f"{listed(tools)}: automatic differentiation, which this homework asks you not to use")
    return "; and ".join(parts)


class Guard:
    """Watches calls of a student's function for the forbidden references of one homework.

    ``forbidden``: dotted names, as in a homework's ``grading.yml``. Names that do not resolve (a
    package that is not installed) are kept in :attr:`unresolved` and only matched as PyTorch
    operators where :data:`TORCH_OPS` knows them.
    """

    def __init__(self, forbidden: list[str]) -> None:
        self.forbidden = list(dict.fromkeys(str(n) for n in forbidden))
        self.unresolved: list[str] = []
        self.tampered: list[str] = []
        self._hits: dict[str, None] = {}
        self._by_code: dict[types.CodeType, str] = {}
        self._by_place: dict[tuple, str] = {}
        self._builtins: dict[int, tuple[Any, str]] = {}
        self._ops: dict[str, str] = {}
        self._methods: dict[str, tuple[type, str]] = {}  # method name -> (owner class, label)
        self._seen: dict[int, tuple[Any, str | None]] = {}  # id(code or callable) -> (it, label)
        self._depth = 0
        self._lock = threading.Lock()
        #: whether calls run with gradient recording off (the list forbids reverse-mode autograd)
        self.closes_recording = False
        self._closed_threads: set[int] = set()  # threads whose recording this watch switched off
        for name in self.forbidden:
            self._add(name)
        # one function each, so "is it still ours" can be asked: the call thread's and the other threads'
        self._profile_func, self._thread_profile_func = self._make_profiler()

    # -- building the tables

    def _add(self, name: str) -> None:
        label = name
        ops = set(TORCH_OPS.get(name, ()))
        if name.startswith("torch.ops.aten."):
            ops.add(name.split(".")[3])
        for op in ops:
            # a backward kernel is named as itself: "ran scaled_dot_product_attention" would mislead
            op_label = f"torch.ops.aten.{op}" if op in SDPA_BACKWARD_OPS else label
            self._ops.setdefault(op, op_label)
            for f in _op_builtins(op):  # torch.NAME, torch._C._VariableFunctions.NAME: by identity
                self._builtins.setdefault(id(f), (f, op_label))
            for f in _decompositions(op):  # PyTorch's Python decompositions of it: by their code
                self._add_code(f.__code__, op_label)
        try:
            obj = resolve_reference(name)
        except Exception:  # noqa: BLE001 - not installed, or no such attribute
            self.unresolved.append(name)
            obj = None
        if obj is not None:
            for f in _functions_of(obj):
                if isinstance(f, types.MethodDescriptorType):
                    self._methods.setdefault(f.__name__, (f.__objclass__, label))
                elif isinstance(f, types.BuiltinFunctionType):
                    self._builtins.setdefault(id(f), (f, label))
                else:
                    self._add_code(f.__code__, label)
        for extra in _TORCH_BUILTINS.get(name, ()):
            try:
                f = resolve_reference(extra)
            except Exception:  # noqa: BLE001
                continue
            self._builtins.setdefault(id(f), (f, label))
        doors = AUTOGRAD_DOORS.get(name, ())
        if doors is _REVERSE_DOORS:
            self.closes_recording = True
        for door in doors:
            if door not in self.forbidden:
                self.forbidden.append(door)
                self._add(door)

    def _add_code(self, code: types.CodeType, label: str) -> None:
        self._by_code.setdefault(code, label)
        place = _place(code)
        if place is not None:
            self._by_place.setdefault(place, label)
            # the same function compiled again from its source, from the ``def`` on and at the top
            # level: what Triton's interpreter runs for a kernel, whichever jit wrapped it
            line = _def_line(code)
            self._by_place.setdefault((place[0], place[1], line), label)
            self._by_place.setdefault((place[0], code.co_name, line), label)

    @property
    def uses_torch(self) -> bool:
        """Whether the torch watchers are needed (the list names PyTorch operators)."""
        return bool(self._ops) or any(n.startswith("torch.") for n in self.forbidden)

    # -- results

    @property
    def hits(self) -> list[str]:
        """The forbidden references that ran while watched (as listed, each once, in order)."""
        return list(self._hits)

    def reset(self) -> None:
        """Forget the hits (and tampering) recorded so far."""
        self._hits.clear()
        self.tampered.clear()

    def message(self, name: str) -> str:
        """What to tell the student whose function ``name`` ran :attr:`hits`."""
        if not self.hits:
            return f"`{name}` ran no forbidden reference"
        return f"`{name}` ran {forbidden_what(self.hits)}; this test scores 0"

    def _record(self, label: str, frame: Any = None) -> None:
        """Count ``label``, unless it runs inside another forbidden reference (whose hit says it)."""
        if frame is not None and self._inside_forbidden(frame):
            return
        self._hits[label] = None

    def _inside_forbidden(self, frame: Any) -> bool:
        """Whether ``frame`` or one of its callers is forbidden code (only walked on a hit)."""
        while frame is not None:
            code = frame.f_code
            seen = self._seen.get(id(code))
            label = seen[1] if seen is not None and seen[0] is code else self._classify_code(code)
            if label is not None and label is not _LAUNCH:
                return True
            frame = frame.f_back
        return False

    # -- classifying what runs

    def _classify_code(self, code: types.CodeType) -> str | None:
        label = self._by_code.get(code)
        if label is None:
            place = _place(code)
            if place is not None:
                label = self._by_place.get(place)
        return label

    def _make_profiler(self) -> tuple[Any, Any]:
        """The profile functions of the call's thread and of the threads it starts: closures over
        plain dicts, since they run for every call."""
        seen_get = self._seen.get
        builtins_get = self._builtins.get
        methods_get = self._methods.get if self._methods else None
        seen = self._seen
        hits = self._hits
        classify = self._classify_code
        record = self._record
        guard = self
        grad_on = set_grad = None
        if self.closes_recording:
            import torch  # the list names torch.autograd: it is imported

            grad_on, set_grad = torch.is_grad_enabled, torch._C._set_grad_enabled
        closed = self._closed_threads
        ident = threading.get_ident

        def classify_call(code: types.CodeType) -> str | None:
            return _LAUNCH if code is _interpreter_launch_code() else classify(code)

        def trace_calls(frame: Any, event: str, arg: Any) -> None:
            """The trace hook during a launch in Triton's interpreter: each Python call, as the profiler sees it."""
            if event == "call" and guard._depth:
                code = frame.f_code
                found = seen_get(id(code))
                if found is None or found[0] is not code:
                    found = seen[id(code)] = (code, classify_call(code))
                if found[1] is not None and found[1] is not _LAUNCH:
                    record(found[1], frame.f_back)

        def launch(frame: Any) -> None:
            """Triton's interpreter launches a kernel (``frame`` runs ``GridExecutor.__call__``): hundreds of
            thousands of Python and C calls of the interpreter's own, which the profiler would slow down five
            times. Until the launch returns, the cheaper trace hook (:func:`trace_calls`) watches instead: it
            sees every Python call (the kernel that the interpreter compiled again from its source, device
            functions, anything a kernel calls) but no C call, and the torch modes stay on."""
            restore, previous_trace = sys.getprofile(), sys.gettrace()

            def on_exit(f: Any, event: str, arg: Any) -> Any:
                if event == "return":
                    sys.settrace(previous_trace)
                    if sys.getprofile() is None:  # else replaced inside the launch: tampering, noted after the call
                        sys.setprofile(restore)
                return on_exit

            sys.setprofile(None)
            sys.settrace(trace_calls)
            frame.f_trace_lines = False
            frame.f_trace = on_exit

        def in_thread(frame: Any, event: str, arg: Any) -> None:
            """The profile function of the other threads (those the call starts): the call thread's
            recording is watched by the dispatch mode, theirs only here, at each Python event."""
            if guard._depth and grad_on is not None:
                me = ident()
                if me not in closed:  # first seen: recording off there too
                    closed.add(me)
                    set_grad(False)
                elif grad_on() and RECORDING not in hits:  # switched back on, by whatever means
                    record(RECORDING, frame)
            profile(frame, event, arg)

        def profile(frame: Any, event: str, arg: Any) -> None:
            if not guard._depth:
                return
            if event == "call":
                code = frame.f_code
                found = seen_get(id(code))
                if found is None or found[0] is not code:
                    found = seen[id(code)] = (code, classify_call(code))
                if found[1] is not None:
                    if found[1] is _LAUNCH:
                        launch(frame)
                    else:
                        record(found[1], frame.f_back)
            elif event == "c_call":
                found = builtins_get(id(arg))
                if found is not None and found[0] is arg:
                    record(found[1], frame)
                elif methods_get is not None:  # a built-in class's method: by owner and name
                    method = methods_get(getattr(arg, "__name__", None))
                    if method is not None and isinstance(getattr(arg, "__self__", None), method[0]):
                        record(method[1], frame)

        return profile, in_thread

    def _torch_label(self, func: Any) -> str | None:
        seen = self._seen.get(id(func))
        if seen is None or seen[0] is not func:
            found = self._builtins.get(id(func))
            label = found[1] if found is not None and found[0] is func else None
            if label is None:
                op = _op_name(func)
                if op is not None:
                    label = self._ops.get(op)
            seen = (func, label)
            self._seen[id(func)] = seen
        return seen[1]

    # -- watching

    @contextlib.contextmanager
    def watch(self) -> Iterator[Guard]:
        """Watch what runs inside the ``with`` block; hits accumulate in :attr:`hits`."""
        modes = self._torch_modes() if self.uses_torch else ()
        prev_profile = sys.getprofile()
        prev_thread_profile = getattr(threading, "getprofile", lambda: None)()
        all_threads = hasattr(threading, "setprofile_all_threads") and self._depth == 0
        torch = sys.modules.get("torch") if self.closes_recording else None
        prev_grad = None
        if torch is not None:  # the call runs with gradient recording off (AUTOGRAD_DOORS)
            prev_grad = torch.is_grad_enabled()
            torch._C._set_grad_enabled(False)
            if self._depth == 0:
                self._closed_threads.clear()
            self._closed_threads.add(threading.get_ident())
        with self._lock:
            self._depth += 1
        try:
            with contextlib.ExitStack() as stack:
                for mode in modes:
                    stack.enter_context(mode)
                threading.setprofile(self._thread_profile_func)
                if all_threads:  # Python 3.12+: threads already running too
                    threading.setprofile_all_threads(self._thread_profile_func)
                sys.setprofile(self._profile_func)
                try:
                    yield self
                finally:
                    if sys.getprofile() is not self._profile_func:
                        self.tampered.append("the Python profiler was replaced during the call")
                    if modes and not self._modes_still_active(modes):
                        self.tampered.append("PyTorch's function or dispatch mode was removed during the call")
                    if all_threads:
                        threading.setprofile_all_threads(None)
                    _restore_profile(prev_profile)
                    threading.setprofile(prev_thread_profile)
        finally:
            with self._lock:
                self._depth -= 1
            if prev_grad is not None:
                torch._C._set_grad_enabled(prev_grad)

    def _torch_modes(self) -> tuple:
        see_functions, see_kernels = _mode_classes()
        return (see_functions(self), see_kernels(self))

    @staticmethod
    def _modes_still_active(modes: tuple) -> bool:
        try:
            from torch.overrides import _get_current_function_mode_stack
            from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

            return any(m is modes[0] for m in _get_current_function_mode_stack()) and any(
                m is modes[1] for m in _get_current_dispatch_mode_stack()
            )
        except Exception:  # noqa: BLE001 - private helpers moved: do not claim tampering
            return True


#: the label of a kernel launch in Triton's interpreter (not a hit): see ``Guard._make_profiler``'s ``launch``
_LAUNCH = "<a kernel launch in Triton's interpreter>"


def _interpreter_launch_code() -> types.CodeType | None:
    """The code of Triton's interpreter that runs a kernel's grid, where triton's interpreter is imported."""
    module = sys.modules.get("triton.runtime.interpreter")
    executor = getattr(module, "GridExecutor", None)
    return getattr(vars(executor).get("__call__"), "__code__", None) if isinstance(executor, type) else None


def _restore_profile(prev: Any) -> None:
    """Put back the profiler that was on before: a Python function, or cProfile's (``enable()``)."""
    if prev is None or callable(prev):
        sys.setprofile(prev)
    elif callable(getattr(prev, "enable", None)):
        sys.setprofile(None)
        prev.enable()
    else:
        sys.setprofile(None)


_MODE_CLASSES: tuple | None = None


def _observe(mode: Any, func: Any, args: tuple, kwargs: dict | None) -> Any:
    """What both torch modes do: note ``func`` if it is a forbidden operator, then run it."""
    # lean: the profiler, when on, sees every call made here
    seen = mode.seen.get(id(func))
    if seen is None or seen[0] is not func or seen[1] is not None:
        label = mode.guard._torch_label(func)
        if label is not None:
            mode.guard._record(label, sys._getframe(2))
    if kwargs:
        return func(*args, **kwargs)
    return func(*args)


def _mode_classes() -> tuple:
    """The two torch modes (classes made once: making a class costs more than a small call)."""
    global _MODE_CLASSES
    if _MODE_CLASSES is None:
        import torch  # the modes need it; a torch answer imports it anyway
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        class _SeeFunctions(TorchFunctionMode):
            def __init__(self, guard: Guard) -> None:
                super().__init__()
                self.guard = guard
                self.seen = guard._seen

            def __torch_function__(self, func, types, args=(), kwargs=None):
                return _observe(self, func, args, kwargs)

        observe_outside_dynamo = torch._disable_dynamo(_observe, recursive=True)  # imports dynamo when first called
        current_node, grad_on = torch._C._current_autograd_node, torch.is_grad_enabled

        class _SeeKernels(TorchDispatchMode):
            def __init__(self, guard: Guard) -> None:
                super().__init__()
                self.guard = guard
                self.seen = guard._seen
                self.hits = guard._hits
                self.closes = guard.closes_recording

            # PyTorch wraps a mode's __torch_dispatch__ in a shim that keeps dynamo (torch.compile)
            # from tracing it, and that imports torch._dynamo (about 800 modules, 1.5-2.5 s) on
            # the mode's first call, in every sandbox the grader starts. Dynamo can only be tracing
            # once it is imported, so the shim is used from then on, and the call is direct before
            # (tests/attngrade/test_integrity.py: compiled answers)
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if self.closes:  # what automatic differentiation cannot do without
                    if current_node() is not None:  # the engine evaluates a graph's node
                        if ENGINE not in self.hits:
                            self.guard._record(ENGINE, sys._getframe(1))
                    elif grad_on() and RECORDING not in self.hits:  # an operator records a graph
                        self.guard._record(RECORDING, sys._getframe(1))
                if "torch._dynamo" in sys.modules:
                    return observe_outside_dynamo(self, func, args, kwargs)
                return _observe(self, func, args, kwargs)

        _MODE_CLASSES = (_SeeFunctions, _SeeKernels)
    return _MODE_CLASSES


# --------------------------------------------------------------------------- the homework's list

_configured: list[str] | None = None
_cache: dict[str, Any] = {"key": None, "guard": None}
_cache_lock = threading.Lock()


def configure(forbidden: list[str] | None) -> None:
    """Set (or with ``None`` clear) the forbidden list for this process, besides any found on disk."""
    global _configured
    _configured = None if forbidden is None else list(forbidden)


def _read_list(path: Path) -> list[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    names = data.get("forbidden") if isinstance(data, dict) else data
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def _sources() -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    if _configured is not None:
        found.append(("configure", tuple(_configured)))
    env = os.environ.get(ENV_VAR)
    if env:
        found.append(("env", env))
    for path in (*(Path.cwd() / p for p in SEARCH_PATHS), _PACKAGE_FILE) if _cwd_ok() else (_PACKAGE_FILE,):
        try:
            st = path.stat()
        except OSError:
            continue
        found.append((str(path), (st.st_mtime_ns, st.st_size)))
    return found


def _cwd_ok() -> bool:
    try:
        Path.cwd()
        return True
    except OSError:
        return False


def forbidden_from_environment() -> list[str]:
    """The forbidden list that applies here: the union of every source :func:`current_guard` reads."""
    names: list[str] = []
    for source, value in _sources():
        if source == "configure":
            names.extend(value)
        elif source == "env":
            try:
                data = json.loads(value)
            except ValueError:
                data = [v.strip() for v in value.split(",")]
            names.extend(n for n in (data if isinstance(data, list) else []) if isinstance(n, str) and n)
        else:
            names.extend(_read_list(Path(source)))
    return list(dict.fromkeys(names))


def current_guard() -> Guard | None:
    """A :class:`Guard` for this process's homework, or ``None`` where no forbidden list is found."""
    key = tuple(_sources())
    with _cache_lock:
        if _cache["key"] == key:
            return _cache["guard"]
        names = forbidden_from_environment()
        guard = Guard(names) if names else None
        _cache["key"], _cache["guard"] = key, guard
        return guard


@contextlib.contextmanager
def watch_call(name: str, guard: Guard | None = None) -> Iterator[Guard | None]:
    """Watch one call of the student's function ``name``; raise :class:`ForbiddenReference` after
    it if it ran a forbidden reference (even if the call itself raised)."""
    guard = current_guard() if guard is None else guard
    if guard is None:
        yield None
        return
    guard.reset()
    failed = None
    try:
        with guard.watch(), uninitialised_memory_filled():
            yield guard
    except BaseException as exc:  # the student's own error: the forbidden reference says more
        failed = exc
    if guard.hits:
        raise ForbiddenReference(guard.message(name), guard.hits) from None
    if failed is not None:
        raise failed


@contextlib.contextmanager
def uninitialised_memory_filled() -> Iterator[None]:
    """While the block runs, the memory that ``torch.empty`` and its kin hand out is filled with NaN
    (the largest integer for integer dtypes), as the sandbox does for all of grading
    (:func:`attngrade.sandboxed.worker.preload`): an answer that reads memory it never wrote gets the
    same score on every run, and in ``grader.check`` and otter's autograder (:func:`watch_call`) the
    score the class grader gives. PyTorch's C++ switches (``torch.use_deterministic_algorithms``
    also imports inductor's config, and with it triton); a caller's own deterministic mode is kept,
    and every switch is put back after."""
    switches = getattr(sys.modules.get("torch"), "_C", None)
    try:
        saved = (
            switches._get_deterministic_algorithms(),
            switches._get_deterministic_algorithms_warn_only(),
            switches._get_deterministic_fill_uninitialized_memory(),
        )
    except AttributeError:  # torch is not imported (nothing to fill), or has no such switches
        yield
        return
    switches._set_deterministic_algorithms(True, warn_only=saved[1] if saved[0] else True)
    switches._set_deterministic_fill_uninitialized_memory(True)
    try:
        yield
    finally:
        switches._set_deterministic_algorithms(saved[0], warn_only=saved[1])
        switches._set_deterministic_fill_uninitialized_memory(saved[2])


def write_integrity_file(
    folder: str | os.PathLike[str], homework: str, forbidden: list[str], name: str = INTEGRITY_FILE
) -> Path:
    """Write the forbidden list of ``homework`` as ``folder/name`` (see :data:`INTEGRITY_FILE`)."""
    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"homework": homework, "forbidden": list(forbidden)}, indent=1) + "\n"
    path.write_text(text, encoding="utf-8")
    return path
