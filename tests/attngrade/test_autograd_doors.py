"""Homework 11 asks for gradients computed with the backward formulas: every door to automatic
differentiation, and every PyTorch kernel that computes the backward pass, scores 0 with the reason.

Each attack is an answer of homework 11 that gets its gradients right through one door: PyTorch's
autograd engine (its Python wrapper, its C++ method however reached, with ``accumulate_grad``),
``grad_fn`` nodes called by hand (in the call's thread and in a thread of its own), forward mode's
built-ins and operators, PyTorch's softmax backward (the kernels, ``torch.ops.aten`` overloads and
the Python decomposition) and its fused attention backward kernels. Two checks:

* here, in this process, under the integrity guard of homework 11 as ``grader.check`` and otter's
  autograder use it (:func:`attngrade.sandboxed.integrity.current_guard`): each route reaches the
  right gradients where it runs at all (so a 0 is the guard's doing, not a wrong answer), the guard
  names it, and gradient recording is back as it was after the call;
* in the class grader: all attacks in one batch with the honest solutions, each in its own sandbox;
  the attacked question scores 0 and every test it loses says why, the honest notebook keeps full
  marks, and an attack graded on every question loses only the attacked one.

The guard's design (attngrade.sandboxed.integrity, AUTOGRAD_DOORS): the watched call runs with
gradient recording off, and an operator that runs with it on again is a hit, whatever switched it
on; reverse mode needs a graph recorded during the call, so this one check closes ``.backward()``,
the engine and the nodes called by hand. The engine is also matched by owner and name (its
``run_backward`` is a new bound method on every access) and seen evaluating a graph's nodes from the
kernels it runs; forward mode needs ``aten::_make_dual``, watched at the kernel level.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from attngrade.grading.grader import Grader
from attngrade.sandboxed import integrity

from ..homework_support import bwrap_available, homework
from ..submissions import code_cells, submission_with

AUTOGRAD = "automatic differentiation, which this homework asks you not to use"
KERNEL = "PyTorch's kernel"  # "PyTorch's kernel(s) X, which compute(s) what this homework asks you to write"

# the autograd routes reuse this forward pass (the plain formula, causal as the homework defines it)
FORWARD = """
def _forward(Q, K, V, causal):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])  # (..., n, m)
    if causal:
        n, m = S.shape[-2], S.shape[-1]
        S = S.masked_fill(torch.arange(m, device=Q.device) > torch.arange(n, device=Q.device).unsqueeze(-1), -math.inf)
    return torch.softmax(S, dim=-1) @ V  # (..., n, d_v)
"""

# the softmax-backward routes: P and dP as the formulas build them, dS from PyTorch, the rest by hand
WITH_DS = """
def attention_backward(Q, K, V, dO, causal=False):
    scale = 1 / math.sqrt(Q.shape[-1])
    S = Q @ K.transpose(-2, -1) * scale  # (..., n, m)
    if causal:
        n, m = S.shape[-2], S.shape[-1]
        S = S.masked_fill(torch.arange(m, device=Q.device) > torch.arange(n, device=Q.device).unsqueeze(-1), -math.inf)
    P = torch.softmax(S, dim=-1)
    dP = dO @ V.transpose(-2, -1)  # (..., n, m)
    dS = DS
    return dS @ K * scale, dS.transpose(-2, -1) @ Q * scale, P.transpose(-2, -1) @ dO
"""


def with_ds(expression: str) -> str:
    return WITH_DS.replace("DS", expression)


#: name -> (function, source of the answer, the hit the guard names, what the feedback says)
ATTACKS: dict[str, tuple[str, str, str, str]] = {
    "engine: torch.autograd.graph._engine_run_backward": (
        "attention_backward",
        FORWARD
        + """
def attention_backward(Q, K, V, dO, causal=False):
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_() for t in (Q, K, V))
        O = _forward(q, k, v, causal)
    return torch.autograd.graph._engine_run_backward((O,), (dO,), False, False, (q, k, v), False, False)
""",
        "torch.autograd.graph._engine_run_backward",
        AUTOGRAD,
    ),
    "engine: Variable._execution_engine.run_backward": (
        "attention_backward",
        FORWARD
        + """
def attention_backward(Q, K, V, dO, causal=False):
    torch.set_grad_enabled(True)
    q, k, v = (t.detach().requires_grad_() for t in (Q, K, V))
    O = _forward(q, k, v, causal)
    engine = torch.autograd.Variable._execution_engine
    return engine.run_backward((O,), (dO,), False, False, (q, k, v), False, False)
""",
        integrity.ENGINE,
        AUTOGRAD,
    ),
    "engine: run_backward(accumulate_grad=True)": (
        "attention_backward",
        FORWARD
        + """
def attention_backward(Q, K, V, dO, causal=False):
    torch._C._set_grad_enabled(True)
    q, k, v = (t.detach().requires_grad_() for t in (Q, K, V))
    O = _forward(q, k, v, causal)
    torch._C._ImperativeEngine().run_backward((O,), (dO,), False, False, (), True, True)
    return q.grad, k.grad, v.grad
""",
        integrity.ENGINE,
        AUTOGRAD,
    ),
    "engine: sys.modules and getattr strings": (
        "attention_backward",
        FORWARD
        + """
def attention_backward(Q, K, V, dO, causal=False):
    import sys
    t = sys.modules["to" + "rch"]
    getattr(t._C, "_set_grad_" + "enabled")(True)
    q, k, v = (x.detach().requires_grad_() for x in (Q, K, V))
    O = _forward(q, k, v, causal)
    engine = getattr(getattr(t.autograd, "Vari" + "able"), "_execution" + "_engine")
    return getattr(engine, "run_" + "backward")((O,), (dO,), False, False, (q, k, v), False, False)
""",
        integrity.ENGINE,
        AUTOGRAD,
    ),
    "engine: called from C (itertools.starmap), recording on through map": (
        "attention_backward",
        FORWARD
        + """
def attention_backward(Q, K, V, dO, causal=False):
    import itertools
    list(map(torch._C._set_grad_enabled, [True]))
    q, k, v = (x.detach().requires_grad_() for x in (Q, K, V))
    O = _forward(q, k, v, causal)
    run = torch.autograd.Variable._execution_engine.run_backward
    return next(itertools.starmap(run, [((O,), (dO,), False, False, (q, k, v), False, False)]))
""",
        integrity.ENGINE,
        AUTOGRAD,
    ),
    "grad_fn nodes called by hand": (
        "attention_backward",
        FORWARD
        + """
def _by_hand(Q, K, V, dO, causal):
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_() for t in (Q, K, V))
        O = _forward(q, k, v, causal)
    grads = {}

    def walk(node, g):  # the graph is a tree of nodes here: no gradient needs summing before it flows on
        if hasattr(node, "variable"):  # AccumulateGrad: a leaf
            grads[id(node.variable)] = grads.get(id(node.variable), 0) + g
            return
        outs = node(g)
        for (nxt, _), out in zip(node.next_functions, outs if isinstance(outs, tuple) else (outs,)):
            if nxt is not None and out is not None:
                walk(nxt, out)

    walk(O.grad_fn, dO)
    return tuple(grads[id(t)] for t in (q, k, v))


def attention_backward(Q, K, V, dO, causal=False):
    return _by_hand(Q, K, V, dO, causal)
""",
        integrity.RECORDING,
        AUTOGRAD,
    ),
    "grad_fn nodes called by hand in a thread": (
        "attention_backward",
        FORWARD
        + """
def _by_hand(Q, K, V, dO, causal):
    # the guard switches recording off in a thread the call starts too (at its first Python call):
    # the thread switches it back on, out of sight of the torch modes, which are the call thread's
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_() for t in (Q, K, V))
        O = _forward(q, k, v, causal)
    grads = {}

    def walk(node, g):
        if hasattr(node, "variable"):
            grads[id(node.variable)] = grads.get(id(node.variable), 0) + g
            return
        outs = node(g)
        for (nxt, _), out in zip(node.next_functions, outs if isinstance(outs, tuple) else (outs,)):
            if nxt is not None and out is not None:
                walk(nxt, out)

    walk(O.grad_fn, dO)
    return tuple(grads[id(t)] for t in (q, k, v))


def attention_backward(Q, K, V, dO, causal=False):
    import threading
    box = {}
    worker = threading.Thread(target=lambda: box.setdefault("grads", _by_hand(Q, K, V, dO, causal)))
    worker.start()
    worker.join()
    return box["grads"]
""",
        integrity.RECORDING,
        AUTOGRAD,
    ),
    "forward mode: torch._VF._make_dual and torch._C._enter_dual_level": (
        "attention_backward",
        FORWARD
        + """
def attention_backward(Q, K, V, dO, causal=False):
    level = torch._C._enter_dual_level()
    try:
        grads = []
        for which, X in enumerate((Q, K, V)):
            g = torch.zeros(X.numel(), dtype=X.dtype)
            for j in range(X.numel()):  # one forward-mode product per entry: d<dO, O>/dX_j
                tangent = torch.zeros(X.numel(), dtype=X.dtype)
                tangent[j] = 1
                args = [Q, K, V]
                args[which] = torch._VF._make_dual(X, tangent.view_as(X), level=level)
                O = _forward(*args, causal)
                g[j] = (torch._VF._unpack_dual(O, level)[1] * dO).sum()
            grads.append(g.view_as(X))
        return tuple(grads)
    finally:
        torch._C._exit_dual_level(level=level)
""",
        "torch._C._enter_dual_level",
        AUTOGRAD,
    ),
    "forward mode: torch.ops.aten._make_dual.default": (
        "attention_backward",
        FORWARD
        + """
def attention_backward(Q, K, V, dO, causal=False):
    level = getattr(torch._C, "_enter_dual_level")()
    make_dual, unpack_dual = torch.ops.aten._make_dual.default, torch.ops.aten._unpack_dual.default
    try:
        grads = []
        for which, X in enumerate((Q, K, V)):
            g = torch.zeros(X.numel(), dtype=X.dtype)
            for j in range(X.numel()):
                tangent = torch.zeros(X.numel(), dtype=X.dtype)
                tangent[j] = 1
                args = [Q, K, V]
                args[which] = make_dual(X, tangent.view_as(X), level)
                g[j] = (unpack_dual(_forward(*args, causal), level)[1] * dO).sum()
            grads.append(g.view_as(X))
        return tuple(grads)
    finally:
        torch._C._exit_dual_level(level=level)
""",
        "torch._C._enter_dual_level",
        AUTOGRAD,
    ),
    "softmax backward: torch._softmax_backward_data": (
        "attention_backward",
        with_ds("torch._softmax_backward_data(dP, P, -1, P.dtype)"),
        "torch.ops.aten._softmax_backward_data",
        KERNEL,
    ),
    "softmax backward: getattr(torch.ops.aten, ...).default": (
        "attention_backward",
        with_ds('getattr(torch.ops.aten, "_softmax_backward_" + "data").default(dP, P, -1, P.dtype)'),
        "torch.ops.aten._softmax_backward_data",
        KERNEL,
    ),
    "softmax backward: _log_softmax_backward_data of P * dP and log P": (
        "attention_backward",
        with_ds("torch.ops.aten._log_softmax_backward_data(P * dP, torch.log(P), -1, P.dtype)"),
        "torch.ops.aten._log_softmax_backward_data",
        KERNEL,
    ),
    "softmax backward: PyTorch's Python decomposition": (
        "attention_backward",
        with_ds(
            "__import__('torch._decomp.decompositions').__dict__['_decomp'].decompositions._softmax_backward_data(dP, P, -1, P.dtype)"
        ),
        "torch.ops.aten._softmax_backward_data",
        KERNEL,
    ),
    "fused attention backward: _scaled_dot_product_flash_attention_for_cpu_backward": (
        "tiled_attention_backward",
        """
def tiled_attention_backward(Q, K, V, O, L, dO, block_size, causal=False):
    # the kernel takes (batch, heads, n, d): flatten the batch dimensions into one
    lead = Q.shape[:-2]
    four = lambda t: t.reshape(-1, 1, *t.shape[-2:])
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
    dQ, dK, dV = kernel(four(dO), four(Q), four(K), four(V), four(O), L.reshape(-1, 1, L.shape[-1]), 0.0, causal)
    return dQ.reshape(*lead, *dQ.shape[-2:]), dK.reshape(*lead, *dK.shape[-2:]), dV.reshape(*lead, *dV.shape[-2:])
""",
        "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward",
        KERNEL,
    ),
}

#: the fused backward kernels with no CPU implementation: the guard must name each one called (on a
#: CPU they fail anyway, so the test is that the feedback gives the reason, not "no kernel")
GPU_KERNELS = sorted(integrity.SDPA_BACKWARD_OPS - {"_scaled_dot_product_flash_attention_for_cpu_backward"})
ATTACKS["fused attention backward: the GPU kernels, each tried"] = (
    "attention_backward",
    """
def attention_backward(Q, K, V, dO, causal=False):
    for name in NAMES:
        try:
            getattr(torch.ops.aten, name)(dO, Q, K, V)
        except Exception:
            pass
    scale = 1 / math.sqrt(Q.shape[-1])
    S = Q @ K.transpose(-2, -1) * scale  # (..., n, m)
    if causal:
        n, m = S.shape[-2], S.shape[-1]
        S = S.masked_fill(torch.arange(m, device=Q.device) > torch.arange(n, device=Q.device).unsqueeze(-1), -math.inf)
    P = torch.softmax(S, dim=-1)
    dP = dO @ V.transpose(-2, -1)
    dS = P * (dP - (P * dP).sum(dim=-1, keepdim=True))
    return dS @ K * scale, dS.transpose(-2, -1) @ Q * scale, P.transpose(-2, -1) @ dO
""".replace("NAMES", repr(GPU_KERNELS)),
    f"torch.ops.aten.{GPU_KERNELS[0]}",
    KERNEL,
)
QUESTION = {"attention_backward": "q2", "tiled_attention_backward": "q3"}
#: attacks graded on every question (the others on the attacked question only): the rest is untouched
GRADED_WHOLE = (
    "engine: Variable._execution_engine.run_backward",
    "fused attention backward: _scaled_dot_product_flash_attention_for_cpu_backward",
)


# -- in this process: the guard of grader.check and otter's autograder ----------------------------


def _compile(source: str, name: str):
    namespace = {"torch": torch, "math": math}
    exec(compile(source, f"<attack {name}>", "exec"), namespace)
    return namespace[name]


def _honest_gradients(Q, K, V, dO, causal):
    q, k, v = (t.detach().clone().requires_grad_() for t in (Q, K, V))
    O = _compile(FORWARD, "_forward")(q, k, v, causal)
    return torch.autograd.grad(O, (q, k, v), dO)


def _inputs(function: str, causal: bool):
    # small: the forward-mode routes take one forward pass per entry of Q, K and V
    gen = torch.Generator().manual_seed(1100)
    Q, K, V, dO = (torch.randn(2, 3, 2, generator=gen, dtype=torch.float64) for _ in range(4))
    if function == "attention_backward":
        return (Q, K, V, dO), {"causal": causal}
    S = Q @ K.transpose(-2, -1) / math.sqrt(2)
    if causal:
        S = S.masked_fill(torch.ones(3, 3, dtype=torch.bool).triu(1), -math.inf)
    O, L = torch.softmax(S, dim=-1) @ V, torch.logsumexp(S, dim=-1)
    return (Q, K, V, O, L, dO, 2), {"causal": causal}


@functools.cache
def hw11_guard() -> integrity.Guard:
    return integrity.Guard(homework("hw11").forbidden)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_the_guard_names_every_route_that_reaches_the_gradients(name):
    function, source, hit, _ = ATTACKS[name]
    answer = _compile(source, function)
    guard = hw11_guard()
    # whatever the caller's mode (recording on in a notebook, off in a test), the call runs with it off
    for causal, recording in ((False, True), (True, False)):
        args, kwargs = _inputs(function, causal)
        if "GPU kernels" not in name:  # the route reaches the right gradients, unwatched
            expected = _honest_gradients(*args[:3], args[-1] if function == "attention_backward" else args[5], causal)
            torch.testing.assert_close(tuple(answer(*args, **kwargs)), expected)
        with torch.set_grad_enabled(recording):
            with pytest.raises(integrity.ForbiddenReference) as caught:
                with integrity.watch_call(function, guard):
                    answer(*args, **kwargs)
            assert torch.is_grad_enabled() is recording
        assert hit in caught.value.hits, (name, caught.value.hits)
        assert AUTOGRAD in str(caught.value) or KERNEL in str(caught.value)


@pytest.mark.parametrize("kernel", GPU_KERNELS)
def test_each_fused_backward_kernel_is_named_by_the_guard(kernel):
    guard = hw11_guard()
    x = torch.zeros(1, 1, 2, 2)
    with pytest.raises(integrity.ForbiddenReference) as caught:
        with integrity.watch_call("attention_backward", guard):
            getattr(torch.ops.aten, kernel).default(x, x, x, x)
    assert caught.value.hits == [f"torch.ops.aten.{kernel}"]
    assert KERNEL in str(caught.value)


def test_the_honest_answers_run_nothing_forbidden_and_keep_the_callers_mode():
    nb = submission_with(homework("hw11"), {})
    source = "\n".join(
        c for c in code_cells(nb) if "def attention_backward" in c or "def tiled_attention_backward" in c
    )
    guard = hw11_guard()
    for function in ("attention_backward", "tiled_attention_backward"):
        answer = _compile("import math\nimport torch\nimport attnbook\n" + source, function)
        for causal, recording in ((False, True), (True, False)):
            args, kwargs = _inputs(function, causal)
            with torch.set_grad_enabled(recording):
                with integrity.watch_call(function, guard):
                    answer(*args, **kwargs)
                assert torch.is_grad_enabled() is recording
            assert guard.hits == [] and guard.tampered == []


def test_switching_recording_on_without_building_a_graph_is_named_too():
    """The rule is simple to state: the call runs with gradient recording off, and an operator run
    with it on again scores 0, whether or not a graph is built."""
    guard = hw11_guard()
    with pytest.raises(integrity.ForbiddenReference) as caught:
        with integrity.watch_call("attention_backward", guard):
            with torch.enable_grad():
                torch.ones(2) + 1
    assert caught.value.hits == [integrity.RECORDING]
    assert AUTOGRAD in str(caught.value)


# -- in the class grader ----------------------------------------------------------------------


needs_bwrap = pytest.mark.skipif(bwrap_available() is not None, reason=f"no sandbox here: {bwrap_available()}")


@functools.cache
def _batch():
    hw = homework("hw11")
    subs = [("honest", code_cells(submission_with(hw, {})))]
    only = {}
    for index, (name, (function, source, _, _)) in enumerate(ATTACKS.items()):
        key = f"attack{index:02d}"
        subs.append((key, code_cells(submission_with(hw, {function: source}))))
        if name not in GRADED_WHOLE:
            only[key] = [QUESTION[function]]
    with Grader(hw, jobs=2) as grader:
        results = grader.grade_sources(subs, questions=only)
    return {r.submission: r for r in results}


def _explain(result):
    return {
        "status": result.status,
        "error": result.error,
        "scores": {q.name: q.score for q in result.questions},
        "failed": [f"{q.name}/{c.name}: {c.message[:300]}" for q in result.questions for c in q.cases if not c.passed],
    }


@needs_bwrap
def test_the_honest_solutions_keep_full_marks():
    honest = _batch()["honest"]
    assert honest.status == "ok", _explain(honest)
    attacked = {"q1", *QUESTION.values()}  # the questions of the gradients (a later one: its own tests)
    assert all(q.score == q.possible for q in honest.questions if q.name in attacked), _explain(honest)


@needs_bwrap
@pytest.mark.parametrize("index,name", list(enumerate(ATTACKS)))
def test_every_door_scores_zero_with_the_reason(index, name):
    function, _, _, reason = ATTACKS[name]
    results = _batch()
    result, honest = results[f"attack{index:02d}"], results["honest"]
    assert result.status != "error", _explain(result)
    full = {q.name: q.score for q in honest.questions}
    scores = {q.name: q.score for q in result.questions}
    attacked = QUESTION[function]
    assert scores[attacked] == 0, _explain(result)
    if name in GRADED_WHOLE:
        assert scores == {**full, attacked: 0}, _explain(result)
    lost = [c.message for q in result.questions for c in q.cases if not c.passed and q.name == attacked]
    assert lost and all(reason in message for message in lost), _explain(result)
