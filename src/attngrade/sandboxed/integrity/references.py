"""The reference vocabulary: what a forbidden name stands for when code runs. A dotted name resolved
to its object, the functions (and codes, and places in files) that object holds, PyTorch's ATen
operators and built-ins behind a name (:data:`TORCH_OPS`), the Python decompositions of an operator,
automatic differentiation's doors (:data:`AUTOGRAD_DOORS`), and the words the feedback uses for what
a call ran (:func:`forbidden_what`)."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

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
