"""attngrade.sandboxed.integrity: a forbidden reference is caught by what runs during the call, by any route,
and honest code that merely names one is not (issue 11, item 6)."""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import operator
import runpy
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import attnbook
import attnbook.kernels.flash_triton as _flash_triton  # noqa: E402 - imports no triton (the device-call attack's global)
from attngrade.checks import CheckFailure, call, check_call
from attngrade.homework import load_homework
from attngrade.sandboxed import integrity
from attngrade.sandboxed.integrity import INTEGRITY_FILE, ForbiddenReference, Guard, watch_call

from ..paths import ROOT  # noqa: E402

FORBIDDEN = load_homework(ROOT / "exercises" / "hw02_masked_attention").forbidden  # its groups expanded
tl = None  # triton.language, set by the test that jits _calls_the_package_kernel (which names tl.constexpr)
ATTENTION_FILE = attnbook.attention.__code__.co_filename
ATTENTION_PACKAGE = attnbook.attention.__module__.rpartition(".")[0]  # attnbook.core: its relative imports


@pytest.fixture(scope="module")
def guard() -> Guard:
    g = Guard(FORBIDDEN)
    assert g.unresolved == []
    return g


def _qkv(*shape: int, dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(*shape, generator=gen, dtype=dtype) for _ in range(3))


Q, K, V = _qkv(3, 4)
MASK = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])


def ran(guard: Guard, func, *args, **kwargs) -> list[str]:
    guard.reset()
    with guard.watch():
        func(*args, **kwargs)
    return guard.hits


# -- every route to the reference is caught ---------------------------------------------------


def _fresh_module_copy():
    spec = importlib.util.spec_from_file_location(f"{ATTENTION_PACKAGE}.attention_copy", ATTENTION_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


def _exec_file_under_other_name(q, k, v):
    ns: dict = {"__name__": "copied", "__package__": ATTENTION_PACKAGE}
    exec(compile(Path(ATTENTION_FILE).read_text(encoding="utf-8"), "my_own_attention.py", "exec"), ns)
    return ns["attention"](q, k, v)


def _helper_with_fused_attention(q, k, v, mask=None):
    scores_like = q @ k.transpose(-2, -1)  # some work of its own first
    del scores_like
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None


def _in_a_new_thread(q, k, v):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", attnbook.attention(q, k, v)))
    t.start()
    t.join()
    return out["r"]


class _Subclassed(attnbook.MultiHeadAttention):
    pass


ROUTES = {
    "direct": lambda q, k, v: attnbook.attention(q, k, v),
    "operator.attrgetter": lambda q, k, v: operator.attrgetter("attention")(attnbook)(q, k, v),
    "attrgetter dotted": lambda q, k, v: operator.attrgetter("formal.attention")(attnbook),  # not called
    "getattr(__import__)": lambda q, k, v: __import__("attnbook").attention(q, k, v),
    "functools.partial": lambda q, k, v: functools.partial(attnbook.attention, q)(k, v),
    "eval": lambda q, k, v: eval("attnbook.attention")(q, k, v),
    "eval of a joined name": lambda q, k, v: eval("attnbook." + "atten" + "tion")(q, k, v),
    "exec": lambda q, k, v: exec("r = attnbook.attention(q, k, v)", {"attnbook": attnbook, "q": q, "k": k, "v": v}),
    "runpy": lambda q, k, v: runpy.run_path(ATTENTION_FILE, run_name=f"{ATTENTION_PACKAGE}.copy")["attention"](q, k, v),
    "importlib copy of the module": lambda q, k, v: _fresh_module_copy().attention(q, k, v),
    "exec of the file's text": _exec_file_under_other_name,
    "a thread started in the call": _in_a_new_thread,
    "attnbook.softmax via vars()": lambda q, k, v: vars(attnbook)["softmax"](q @ k.T),
    "attnbook.apply_mask": lambda q, k, v: attnbook.apply_mask(q @ k.T, MASK),
    "attnbook.core.column_convention.attention": lambda q, k, v: attnbook.core.column_convention.attention(
        q.T.contiguous(), k.T.contiguous(), *[torch.eye(4, dtype=q.dtype), torch.zeros(4, dtype=q.dtype)] * 3
    ),
    "MultiHeadAttention": lambda q, k, v: attnbook.MultiHeadAttention(4, 2)(
        q[None].float(), k[None].float(), v[None].float()
    ),
    "a subclass of MultiHeadAttention": lambda q, k, v: _Subclassed(4, 2)(
        q[None].float(), k[None].float(), v[None].float()
    ),
    # PyTorch's fused attention
    "F.scaled_dot_product_attention in a helper": _helper_with_fused_attention,
    "torch._C._nn": lambda q, k, v: torch._C._nn.scaled_dot_product_attention(q, k, v),
    "attrgetter on torch": lambda q, k, v: operator.attrgetter("nn.functional.scaled_dot_product_attention")(torch)(
        q, k, v
    ),
    "torch.ops.aten packet": lambda q, k, v: torch.ops.aten.scaled_dot_product_attention(q, k, v),
    "torch.ops.aten overload": lambda q, k, v: torch.ops.aten.scaled_dot_product_attention.default(q, k, v),
    "torch.ops.aten math kernel": lambda q, k, v: torch.ops.aten._scaled_dot_product_attention_math(q, k, v),
    "torch.ops.aten flash kernel": lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q[None, None].float(), k[None, None].float(), v[None, None].float()
    ),
    "eval of torch's name": lambda q, k, v: eval("torch.nn.functional.scaled_dot_product_attention")(q, k, v),
    "nn.MultiheadAttention": lambda q, k, v: torch.nn.MultiheadAttention(4, 2, batch_first=True).double()(
        q[None], k[None], v[None]
    ),
    "F.multi_head_attention_forward": lambda q, k, v: torch.nn.MultiheadAttention(4, 1).double()(
        q[:, None], k[:, None], v[:, None], need_weights=False
    ),
}
EXPECTED_HIT = {
    "attnbook.softmax via vars()": "attnbook.softmax",
    "attnbook.apply_mask": "attnbook.apply_mask",
    # called through the module's path, named as the forbidden list names it: the face's attnbook.formal
    "attnbook.core.column_convention.attention": "attnbook.formal.attention",
    "MultiHeadAttention": "attnbook.MultiHeadAttention",
    "a subclass of MultiHeadAttention": "attnbook.MultiHeadAttention",
    "nn.MultiheadAttention": "torch.nn.functional.multi_head_attention_forward",
    "F.multi_head_attention_forward": "torch.nn.functional.multi_head_attention_forward",
}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_every_route_to_a_reference_is_caught(guard: Guard, route: str) -> None:
    hits = ran(guard, ROUTES[route], Q, K, V)
    if route == "attrgetter dotted":  # fetched, never called: nothing ran
        assert hits == []
        return
    if "torch" in route or "fused" in route or "aten" in route or "helper" in route:
        expected = EXPECTED_HIT.get(route, "torch.nn.functional.scaled_dot_product_attention")
    else:
        expected = EXPECTED_HIT.get(route, "attnbook.attention")
    assert expected in hits, (route, hits)
    # the reference's own helpers (attnbook.attention calls attnbook.softmax) are not listed too
    assert len(hits) == 1, hits


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_fused_kernel_reached_from_torchscript(guard: Guard) -> None:
    """No Python runs between the call and the kernel: the dispatch mode sees the fused kernel."""
    scripted = torch.jit.script(_scripted_sdpa)
    q, k, v = (t[None, None].float() for t in (Q, K, V))  # 4-D float: PyTorch's fused CPU kernel
    assert ran(guard, scripted, q, k, v) == ["torch.nn.functional.scaled_dot_product_attention"]


def _scripted_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_fused_kernel_reached_from_torch_compile(guard: Guard, backend: str) -> None:
    """A compiled answer still runs the fused kernel through the dispatcher, where the guard's mode
    sees it (the mode does without PyTorch's dynamo shim, see integrity.guard._mode_classes)."""
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(_scripted_sdpa, backend=backend)
    q, k, v = (t[None, None].float() for t in (Q, K, V))
    assert "torch.nn.functional.scaled_dot_product_attention" in ran(guard, compiled, q, k, v)
    guard.reset()
    with guard.watch():  # an honest compiled answer is not flagged
        torch.compile(lambda q, k: (q @ k.transpose(-2, -1)).softmax(-1), backend=backend)(q, k)
    assert guard.hits == []


def test_native_multi_head_attention_fast_path(guard: Guard) -> None:
    mha = torch.nn.MultiheadAttention(4, 2, batch_first=True).eval()
    x = torch.randn(1, 3, 4)
    with torch.no_grad():
        assert ran(guard, mha, x, x, x) == ["torch.nn.functional.multi_head_attention_forward"]


def test_torch_multihead_attention_as_a_class() -> None:
    g = Guard(["torch.nn.MultiheadAttention"])  # hw03's entry: every function of the class
    x = torch.randn(1, 3, 4)
    assert ran(g, lambda: torch.nn.MultiheadAttention(4, 2, batch_first=True)(x, x, x)) == [
        "torch.nn.MultiheadAttention"
    ]


def test_reference_then_an_error_still_reports_the_reference(guard: Guard) -> None:
    def answer(q, k, v):
        attnbook.attention(q, k, v)
        raise ValueError("cover my tracks")

    with pytest.raises(ForbiddenReference, match="attnbook.attention"):
        with watch_call("masked_attention", guard):
            answer(Q, K, V)


def test_a_reference_caught_by_the_answer_itself_is_still_seen(guard: Guard) -> None:
    def answer(q, k, v):
        try:
            attnbook.attention(q, k, v, mask="not a mask")
        except Exception:  # noqa: BLE001
            pass
        return q

    assert ran(guard, answer, Q, K, V) == ["attnbook.attention"]


# -- honest code is not flagged ---------------------------------------------------------------


def honest_matmul(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, -math.inf)
    shift = S.amax(dim=-1, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(S - shift)
    total = e.sum(dim=-1, keepdim=True)
    W = e / torch.where(total > 0, total, torch.ones_like(total))
    return W @ V, W


def honest_einsum(Q, K, V, mask=None):
    import inspect  # an ordinary habit

    assert inspect.isfunction(honest_einsum)
    S = torch.einsum("...nd,...md->...nm", Q, K) * Q.shape[-1] ** -0.5
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    W = torch.softmax(S, dim=-1).nan_to_num(0.0)
    return torch.einsum("...nm,...md->...nd", W, V), W


def honest_naming_the_reference(Q, K, V, mask=None, compare=False):
    if compare:  # never true while graded: naming the reference is not running it
        return attnbook.attention(Q, K, V, mask=mask)
    reference = attnbook.attention  # a name, not a call
    del reference
    W = F.softmax(F.linear(Q, K) / math.sqrt(Q.shape[-1]), dim=-1)
    return W @ V, W


def honest_from_a_star_import(Q, K, V, mask=None):
    ns: dict = {}
    exec("from attnbook import *\nfrom torch.nn.functional import *", ns)  # names everything, calls nothing
    W = torch.nn.functional.softmax(Q @ K.mT / math.sqrt(Q.shape[-1]), dim=-1)
    return W @ V, W


def honest_module_layers(Q, K, V, mask=None):
    proj = torch.nn.Linear(Q.shape[-1], Q.shape[-1], dtype=Q.dtype)
    with torch.no_grad():
        proj.weight.copy_(torch.eye(Q.shape[-1], dtype=Q.dtype))
        proj.bias.zero_()
    W = torch.nn.Softmax(dim=-1)(proj(Q) @ K.mT / math.sqrt(Q.shape[-1]))
    return W @ V, W


HONEST = [honest_matmul, honest_einsum, honest_naming_the_reference, honest_from_a_star_import, honest_module_layers]


@pytest.mark.parametrize("answer", HONEST, ids=lambda f: f.__name__)
def test_honest_answers_are_not_flagged(guard: Guard, answer) -> None:
    expected = attnbook.attention(Q, K, V)[0]  # the student's own comparison, outside the call
    for mask in (None, MASK):
        guard.reset()
        with guard.watch():
            out, _ = answer(Q, K, V, mask=mask) if mask is not None else answer(Q, K, V)
        assert guard.hits == [], (answer.__name__, guard.hits)
        assert guard.tampered == []
    assert torch.allclose(answer(Q, K, V)[0], expected)
    attnbook.attention(Q, K, V)  # and after: still nothing counted
    assert guard.hits == []


def test_the_guard_leaves_the_interpreter_as_it_found_it(guard: Guard) -> None:
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    def mine(frame, event, arg):
        return None

    sys.setprofile(mine)
    try:
        with guard.watch():
            honest_matmul(Q, K, V)
        assert sys.getprofile() is mine
    finally:
        sys.setprofile(None)
    assert sys.getprofile() is None and threading.getprofile() is None
    assert _get_current_function_mode_stack() == [] and _get_current_dispatch_mode_stack() == []


def test_cprofile_survives_the_guard(guard: Guard) -> None:
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    try:
        with guard.watch():
            honest_matmul(Q, K, V)
    finally:
        prof.disable()
    assert sys.getprofile() is None


def test_switching_the_profiler_off_is_noted_as_tampering(guard: Guard) -> None:
    def sneaky(q, k, v):
        sys.setprofile(None)
        return attnbook.attention(q, k, v)

    assert ran(guard, sneaky, Q, K, V) == []  # what the guard cannot see ...
    assert guard.tampered  # ... it notes, for review


def test_message(guard: Guard) -> None:
    ran(guard, ROUTES["direct"], Q, K, V)
    assert guard.message("masked_attention") == (
        "`masked_attention` ran attnbook.attention, the reference implementation this homework asks "
        "you to write; this test scores 0"
    )
    guard.reset()
    assert guard.hits == []


def test_overhead_is_small_for_small_tensors(guard: Guard) -> None:
    ran(guard, honest_matmul, Q, K, V)  # warm: the first dispatch mode imports parts of torch
    n = 200
    start = time.process_time()
    for _ in range(n):
        with guard.watch():
            honest_matmul(Q, K, V)
    per_call = (time.process_time() - start) / n
    assert per_call < 0.01, f"{per_call * 1e3:.2f} ms per guarded call"  # measured: ~0.15 ms


def test_python_only_lists_do_not_start_the_torch_watchers() -> None:
    g = Guard(["attnbook.permutation_matrix", "attnbook.is_permutation_matrix"])  # hw06
    assert not g.uses_torch
    assert ran(g, lambda: F.scaled_dot_product_attention(Q, K, V)) == []
    assert ran(g, lambda: attnbook.permutation_matrix(torch.tensor([1, 0]))) == ["attnbook.permutation_matrix"]


def test_unknown_names_are_kept_aside() -> None:
    g = Guard(["attnbook.no_such_function", "no_such_package.attention", "attnbook.attention"])
    assert g.unresolved == ["attnbook.no_such_function", "no_such_package.attention"]
    assert ran(g, ROUTES["direct"], Q, K, V) == ["attnbook.attention"]


# -- checks.call applies it: grader.check and otter's runner --------------------------------------


@pytest.fixture
def no_list(monkeypatch, tmp_path):
    """No forbidden list from anywhere but what the test sets."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(integrity.ENV_VAR, raising=False)
    monkeypatch.setattr(integrity.homework_list, "_PACKAGE_FILE", tmp_path / "no-package-file.json")
    integrity.configure(None)
    yield tmp_path
    integrity.configure(None)


def cheat(Q, K, V, mask=None):
    return attnbook.attention(Q, K, V, mask=mask)


def test_check_call_fails_an_answer_that_runs_the_reference(no_list) -> None:
    expected = attnbook.attention(Q, K, V, mask=MASK)
    check_call(cheat, "masked_attention", (Q, K, V), expected, kwargs={"mask": MASK})  # no list: passes
    integrity.configure(FORBIDDEN)
    with pytest.raises(CheckFailure) as info:
        check_call(cheat, "masked_attention", (Q, K, V), expected, kwargs={"mask": MASK})
    assert str(info.value).startswith(
        "`masked_attention` ran attnbook.attention, the reference "
        "implementation this homework asks you to write; this test scores 0"
    )
    check_call(honest_matmul, "masked_attention", (Q, K, V), expected, kwargs={"mask": MASK})
    with pytest.raises(CheckFailure, match="scaled_dot_product_attention"):
        call(_helper_with_fused_attention, "masked_attention", (Q, K, V))


def test_the_list_beside_the_notebook_applies(no_list: Path) -> None:
    integrity.write_integrity_file(no_list, "hw02", FORBIDDEN)
    assert json.loads((no_list / INTEGRITY_FILE).read_text())["forbidden"] == FORBIDDEN
    with pytest.raises(CheckFailure, match="attnbook.attention"):
        call(cheat, "masked_attention", (Q, K, V))
    (no_list / INTEGRITY_FILE).unlink()
    call(cheat, "masked_attention", (Q, K, V))


def test_the_list_in_the_autograder_package_copy_applies(no_list: Path) -> None:
    # otter copies the zip's files/attnbook_pkg into the submission folder, its working directory
    integrity.write_integrity_file(no_list / "attnbook_pkg", "hw02", ["attnbook.attention"])
    # a submission's own (empty) list beside it cannot take entries away: all lists found apply
    (no_list / INTEGRITY_FILE).write_text(json.dumps({"forbidden": []}))
    with pytest.raises(CheckFailure, match="attnbook.attention"):
        call(cheat, "masked_attention", (Q, K, V))


def test_the_environment_variable_applies(no_list: Path, monkeypatch) -> None:
    monkeypatch.setenv(integrity.ENV_VAR, json.dumps(["torch.nn.functional.scaled_dot_product_attention"]))
    with pytest.raises(CheckFailure, match="scaled_dot_product_attention"):
        call(_helper_with_fused_attention, "masked_attention", (Q, K, V))
    call(cheat, "masked_attention", (Q, K, V))  # attnbook is not on this list


def test_no_module_of_attnbook_is_shadowed_so_one_resolver_suffices():
    """Every module ``attnbook.a.b`` is what the attribute ``b`` of ``attnbook.a`` gives (no function
    of the same name re-exported over it), so resolving a dotted name by attributes and by imports
    agree, and the grader needs one resolver: the guard, the sandbox's view and the static reading."""
    import pkgutil

    from attngrade.sandboxed.integrity import resolve_reference

    modules = ["attnbook"] + [m.name for m in pkgutil.walk_packages(attnbook.__path__, "attnbook.")]
    assert "attnbook.core.softmax" in modules and "attnbook.efficient.online_softmax" in modules
    for name in modules:
        module = importlib.import_module(name)
        parent, _, last = name.rpartition(".")
        if parent:
            assert getattr(sys.modules[parent], last) is module, f"{name} is shadowed by another object"
        assert resolve_reference(name) is module
    assert resolve_reference("attnbook.softmax") is attnbook.softmax  # the function, re-exported
    assert resolve_reference("attnbook.efficient.online_softmax.online_normalizer") is (
        sys.modules["attnbook.efficient.online_softmax"].online_normalizer
    )


def test_resolving_without_loading_imports_nothing():
    """The static reading of a notebook resolves the names a student writes with ``load=False``: what
    is imported resolves as with loading, what is not is not found (and not imported)."""
    from attngrade.sandboxed.integrity import resolve_reference

    assert resolve_reference("attnbook.core.masks.apply_mask", load=False) is attnbook.apply_mask
    assert resolve_reference("torch.nn.functional.softmax", load=False) is F.softmax
    for missing in ("attnbook.no_such_module.f", "no_such_package.f", "attnbook.softmax.no_such_attribute"):
        with pytest.raises((ImportError, AttributeError)):
            resolve_reference(missing, load=False)
    assert "no_such_package" not in sys.modules
    with pytest.raises(ImportError):
        resolve_reference("attnbook.no_such_module.f")  # with loading: the import fails


# -- homework 11's Triton kernels, under any wrapper ------------------------------------------


def _triton_or_skip():
    """triton and attnbook's Triton module, with the kernels running in Triton's interpreter (where
    the kernel's Python code runs, and so what the guard sees)."""
    import attnbook.kernels.flash_triton as flash_triton

    if not flash_triton.triton_available():
        pytest.skip("triton is not installed")
    if not flash_triton.triton_interpreted():
        pytest.skip("the kernels are compiled for a GPU here: no Python of theirs runs to be seen")
    import triton

    return flash_triton, triton


def _launch_forward(kernel) -> torch.Tensor:
    """One program of a FlashAttention forward kernel with the package's signature on n = 5, m = 7."""
    import triton.language as tl

    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, rows, 4, generator=gen) for rows in (5, 7, 7))  # (1, n or m, 4)
    O, L = torch.zeros(1, 5, 4), torch.zeros(1, 5)  # (1, n, d_v), (1, n)
    kernel[(1, 1)](
        q, k, v, O, L,
        *q.stride(), *k.stride(), *v.stride(), *O.stride(), *L.stride(),
        5, 7, 4, 4, 0.5,
        IS_CAUSAL=False, ACC=tl.float32, BLOCK_Q=16, BLOCK_K=16, BLOCK_DK=16, BLOCK_DV=16,
    )  # fmt: skip
    return O


def _fresh_triton_module():
    import attnbook.kernels.flash_triton as flash_triton

    spec = importlib.util.spec_from_file_location("attnbook.kernels.copy_of_flash_triton", flash_triton.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._load_triton()  # its kernels jitted: the same source, another module
    return module


#: ways to run homework 11's forbidden kernel ``attnbook.kernels.flash_triton.flash_forward_kernel``
#: (question 4 asks for it): each takes (flash_triton, triton) and returns a kernel to launch
TRITON_ROUTES = {
    "the package's kernel": lambda ft, triton: ft.flash_forward_kernel,
    "jitted again from .fn": lambda ft, triton: triton.jit(ft.flash_forward_kernel.fn),
    "jitted twice over": lambda ft, triton: triton.jit(triton.jit(ft.flash_forward_kernel.fn).fn),
    "a new function on the kernel's code": lambda ft, triton: triton.jit(
        type(ft.flash_forward_kernel.fn)(ft.flash_forward_kernel.fn.__code__, ft.flash_forward_kernel.fn.__globals__)
    ),
    "the interpreter's rewritten function, jitted": lambda ft, triton: triton.jit(ft.flash_forward_kernel.rewrite()),
    "a fresh copy of the module": lambda ft, triton: _fresh_triton_module().flash_forward_kernel,
    "triton.heuristics around a new jit": lambda ft, triton: triton.heuristics({})(
        triton.jit(ft.flash_forward_kernel.fn)
    ),
}


def _calls_the_package_kernel(
    Q,
    K,
    V,
    O,
    L,
    stride_qb,
    stride_qn,
    stride_qd,
    stride_kb,
    stride_km,
    stride_kd,
    stride_vb,
    stride_vm,
    stride_vd,
    stride_ob,
    stride_on,
    stride_od,
    stride_lb,
    stride_ln,
    n,
    m,
    d_k,
    d_v,
    scale,
    IS_CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_DK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    """A kernel of one's own whose body calls the package's kernel as a device function (in Triton's
    interpreter, a Python call made inside the launch): jitted by the test."""
    _flash_triton.flash_forward_kernel(
        Q, K, V, O, L,
        stride_qb, stride_qn, stride_qd, stride_kb, stride_km, stride_kd, stride_vb, stride_vm, stride_vd,
        stride_ob, stride_on, stride_od, stride_lb, stride_ln,
        n, m, d_k, d_v, scale, IS_CAUSAL, ACC, BLOCK_Q, BLOCK_K, BLOCK_DK, BLOCK_DV,
    )  # fmt: skip


def _jit_the_device_call(ft, triton):
    global tl
    tl = importlib.import_module("triton.language")
    return triton.jit(_calls_the_package_kernel)


TRITON_ROUTES["a kernel of one's own calling it as a device function"] = _jit_the_device_call


@pytest.fixture(scope="module")
def hw11_guard() -> Guard:
    g = Guard(load_homework(ROOT / "exercises" / "hw11_kernel").forbidden)
    assert g.unresolved == []
    return g


@pytest.mark.parametrize("route", list(TRITON_ROUTES))
def test_the_package_triton_kernel_is_caught_under_any_wrapper(hw11_guard: Guard, route: str) -> None:
    flash_triton, triton = _triton_or_skip()
    kernel = TRITON_ROUTES[route](flash_triton, triton)
    expected = _launch_forward(flash_triton.flash_forward_kernel)
    assert expected.abs().sum() > 0  # the kernel wrote O
    hits = ran(hw11_guard, lambda: torch.testing.assert_close(_launch_forward(kernel), expected))
    assert hits == ["attnbook.kernels.flash_triton.flash_forward_kernel"], (route, hits)


def test_a_failed_launch_gives_the_profiler_back(hw11_guard: Guard) -> None:
    """Inside a launch in Triton's interpreter the guard watches by the trace hook; after it, even
    one that raised, the profiler is back and the trace hook is the caller's."""
    flash_triton, _ = _triton_or_skip()
    before = sys.gettrace()
    hw11_guard.reset()
    with pytest.raises(Exception, match="."):  # noqa: B017 - whatever the interpreter raises
        with hw11_guard.watch():
            flash_triton.flash_forward_kernel[(1, 1)](*[None] * 5)  # too few arguments: raises inside the launch
            assert sys.getprofile() is hw11_guard._profile_func
    assert hw11_guard.tampered == [] and sys.gettrace() is before
    hw11_guard.reset()
    with hw11_guard.watch():
        _launch_forward(flash_triton.flash_forward_kernel)
        assert sys.getprofile() is hw11_guard._profile_func and sys.gettrace() is before
    assert hw11_guard.tampered == []


def test_a_triton_kernel_of_ones_own_is_not_flagged(hw11_guard: Guard) -> None:
    _, triton = _triton_or_skip()
    import triton.language as tl

    @triton.jit
    def double(X, Y, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(Y + offs, 2 * tl.load(X + offs, mask=offs < n), mask=offs < n)

    x, y = torch.arange(5.0), torch.zeros(5)
    assert ran(hw11_guard, lambda: double[(1,)](x, y, 5, BLOCK=8)) == []
    torch.testing.assert_close(y, 2 * x)
