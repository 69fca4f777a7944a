"""The run-time guard: :class:`Guard` watches one call of a student's function with the Python
profiler and two torch modes (see the package's documentation) and records which forbidden
references ran; :class:`ForbiddenReference` is what a caught call raises."""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from typing import Any

from .references import (
    _REVERSE_DOORS,
    _TORCH_BUILTINS,
    AUTOGRAD_DOORS,
    ENGINE,
    RECORDING,
    SDPA_BACKWARD_OPS,
    TORCH_OPS,
    _decompositions,
    _def_line,
    _functions_of,
    _op_builtins,
    _op_name,
    _place,
    forbidden_what,
    resolve_reference,
)


class ForbiddenReference(Exception):
    """An answer ran a reference implementation that its homework forbids (the message says which)."""

    def __init__(self, message: str, hits: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.hits = list(hits)


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
            # from tracing it, and that imports torch._dynamo (hundreds of modules) on
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
