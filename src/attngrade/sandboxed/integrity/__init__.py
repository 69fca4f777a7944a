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

The package, by job: :mod:`.references` (the reference vocabulary: names, codes, operators,
autograd's doors), :mod:`.guard` (the run-time guard), :mod:`.homework_list` (the list where the
tests run, and one call watched), :mod:`.writer` (the build-time writer of the list). Every name
below is importable from here.
"""

from __future__ import annotations

from .guard import ForbiddenReference, Guard
from .homework_list import (
    ENV_VAR,
    INTEGRITY_FILE,
    SEARCH_PATHS,
    configure,
    current_guard,
    forbidden_from_environment,
    uninitialised_memory_filled,
    watch_call,
)
from .references import (
    AUTOGRAD_DOORS,
    AUTOGRAD_PREFIXES,
    ENGINE,
    RECORDING,
    SDPA_BACKWARD_OPS,
    SOFTMAX_BACKWARD_OPS,
    TORCH_OPS,
    forbidden_what,
    is_autograd,
    resolve_reference,
)
from .writer import write_integrity_file

__all__ = [
    "AUTOGRAD_DOORS",
    "AUTOGRAD_PREFIXES",
    "ENGINE",
    "ENV_VAR",
    "ForbiddenReference",
    "Guard",
    "INTEGRITY_FILE",
    "RECORDING",
    "SEARCH_PATHS",
    "SDPA_BACKWARD_OPS",
    "SOFTMAX_BACKWARD_OPS",
    "TORCH_OPS",
    "configure",
    "current_guard",
    "forbidden_from_environment",
    "forbidden_what",
    "is_autograd",
    "resolve_reference",
    "uninitialised_memory_filled",
    "watch_call",
    "write_integrity_file",
]
