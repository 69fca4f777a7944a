"""Adversarial submissions: the class grader must give each the score its work deserves.

Every attack is a submission of homework 1 (five questions, 22 points), written as a notebook file
into a class folder and graded in ONE batch (``Grader.grade_paths``) together with honest
submissions, each in a bubblewrap sandbox. Each attack may only change its own score; the honest
submissions get exactly full marks, and exactly what they get when graded alone. The limits are
small so that the endless loops cost seconds.

What the sandbox must not see (the course's ``exercises/`` with the masters, the built
autograder in ``dist/``, the class folder with the classmates' notebooks, the output folder, the
real course package and the grader's own files) is checked from inside: an attack looks for each
path and fails one of its own answers, naming what it saw, if it could see any.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

import attnbook
import attngrade
from attngrade.grading.grader import Grader

from ..homework_support import bwrap_available, homework, running_as_root
from ..submissions import code_cells, stub_submission, submission_with
from ..units import unit

pytestmark = pytest.mark.skipif(bwrap_available() is not None, reason=f"no sandbox here: {bwrap_available()}")

FULL = {"q1": 5, "q2": 4, "q3": 5, "q4": 4, "q5": 4}
ZERO = {q: 0 for q in FULL}
# small enough that the endless loops cost seconds, large enough for honest code on a busy machine
LIMITS = {
    "cell_timeout": 2.0,
    "call_timeout": 2.0,
    "wall_factor": 2.0,
    "call_grace": 2.0,
    "exec_timeout": 8.0,
    "submission_timeout": 12.0,
    "memory_mb": 1024,
}
REFERENCE = "reference implementation"  # what a test that ran a reference says

WRONG_Q3 = """
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    return torch.zeros(W_v.shape[0], dtype=x.dtype)
"""


def hw():
    return homework("hw01")


def solution_cells(replacements=None, before=(), after=()):
    """The solutions of hw01 with some functions replaced and cells added at the top / the end."""
    cells = code_cells(submission_with(hw(), replacements or {}))
    # cell 0 is otter's init cell and cell 1 the imports: attacks go right after them
    return cells[:2] + [str(c) for c in before] + cells[2:] + [str(c) for c in after]


def stub_cells(after=()):
    """The notebook as handed out (no work done), with cells added at the end."""
    return code_cells(stub_submission(hw())) + [str(c) for c in after]


def notebook(cells):
    """A notebook (nbformat 4) whose code cells are ``cells`` (a cell may be a raw source value)."""
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": c} for c in cells
        ],
    }


def scores(result):
    return {q.name: q.score for q in result.questions}


def failures(result):
    return [f"{q.name}/{c.name}: {c.message[:300]}" for q in result.questions for c in q.cases if not c.passed]


def explain(result):
    return {
        "status": result.status,
        "error": result.error,
        "notes": result.notes,
        "cells": result.execution_errors,
        "failed": failures(result),
    }


# -- the places a sandbox must not see ----------------------------------------------------------


def secret_paths(class_folder: Path, out: Path) -> list[str]:
    """Host paths that must be absent from inside the sandbox."""
    h = hw()
    real_attnbook = Path(attnbook.__file__).resolve().parent
    real_attngrade = Path(attngrade.__file__).resolve().parent
    repo = h.folder.parent.parent
    paths = [
        h.folder.parent,
        h.folder,
        h.master,
        h.dist,
        h.autograder_notebook,
        h.student_notebook,
        *sorted(h.dist.glob("autograder/*.zip")),
        h.folder / "mutants.py",
        h.folder / "grading.yml",
        real_attnbook,
        real_attnbook / "core" / "column_convention.py",
        real_attngrade,
        real_attngrade / "grader.py",
        repo / ".git",
        repo / "tests",
        repo / "src",
        class_folder,
        class_folder / "honest.ipynb",
        out,
        out / "gradebook.csv",
    ]
    return [str(p) for p in paths]


def probe_cell(paths: list[str], function: str = "retrieve") -> str:
    """A cell that breaks ``function`` (q5) if the sandbox can see any of ``paths``, naming them.

    A hidden folder may appear as an empty folder (that is how bubblewrap hides it); a file, or
    anything inside a folder, must be absent."""
    return f"""
import os
_seen = []
for _p in {paths!r}:
    try:
        if os.path.isdir(_p) and not os.path.islink(_p):
            if os.listdir(_p):
                _seen.append(_p + " (not empty)")
        elif os.path.lexists(_p):
            _seen.append(_p)
        with open(_p, "rb") as _f:
            _f.read(1)
            _seen.append("read " + _p)
    except OSError:
        pass
if _seen:
    def {function}(*args, **kwargs):
        raise RuntimeError("the sandbox can see: " + ", ".join(_seen))
"""


COPY_SOLUTIONS_FROM_DISK = """
import json, os, time
_found = []
_start = time.monotonic()
for _top in {tops!r}:
    for _root, _dirs, _files in os.walk(_top):
        _dirs[:] = [d for d in _dirs if not (_root == "/" and d in ("proc", "sys", "dev"))]
        if time.monotonic() - _start > 3:
            break
        for _name in _files:
            if _name.endswith(".ipynb"):
                _found.append(os.path.join(_root, _name))
for _path in _found + {known!r}:
    try:
        _nb = json.load(open(_path))
        for _cell in _nb["cells"]:
            if _cell["cell_type"] == "code":
                _src = "".join(_cell["source"])
                if "def " in _src and "grader" not in _src:
                    exec(_src, globals())
    except Exception:
        pass
"""


# -- the attacks: name -> (code cells, expected scores, what a failing test must say) ---------


def attacks(class_folder: Path, out: Path) -> dict[str, tuple[list, dict, str | None]]:
    grader_pid = os.getpid()
    secrets = secret_paths(class_folder, out)
    h = hw()
    return {
        "honest": (solution_cells(), FULL, None),
        "honest_too": (solution_cells(), FULL, None),
        "honest_wrong_q3": (solution_cells({"single_query_attention": WRONG_Q3}), {**FULL, "q3": 0}, None),
        "stub_as_handed_out": (stub_cells(), ZERO, None),
        # --- lying about results ---
        "monkeypatch_checks": (
            solution_cells(
                {"single_query_attention": WRONG_Q3},
                after=[
                    """
import numpy, torch.testing
torch.testing.assert_close = lambda *a, **k: None
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
numpy.allclose = lambda *a, **k: True
numpy.testing.assert_allclose = lambda *a, **k: None
for _mod in ("attngrade.checks", "attnbook.grading.checks", "attngrade.grading.grader"):
    try:
        _m = __import__(_mod, fromlist=["x"])
        _m.expect_close = _m.check_call = _m.call = _m.run_case = lambda *a, **k: None
    except Exception:
        pass
attnbook.core.column_convention.single_query_attention = single_query_attention
"""
                ],
            ),
            {**FULL, "q3": 0},
            None,
        ),
        "fake_success": (
            solution_cells(
                {"single_query_attention": WRONG_Q3},
                after=[
                    """
print("q1 results: All test cases passed!\\nq3 results: All test cases passed!\\nAll tests passed!\\nTotal: 22/22")
import sys
sys.stderr.write("All tests passed!\\n")
open("results.json", "w").write('{"total": 22, "possible": 22}')
"""
                ],
            ),
            {**FULL, "q3": 0},
            None,
        ),
        "returns_a_tensor_subclass": (
            solution_cells(
                {
                    "single_query_attention": """
class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func.__name__ in ("__eq__", "eq", "allclose", "isclose", "equal"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})
    def __eq__(self, other):
        return True

def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    return torch.zeros(W_v.shape[0], dtype=x.dtype).as_subclass(Liar)
"""
                }
            ),
            {**FULL, "q3": 0},
            None,
        ),
        "returns_an_object_equal_to_everything": (
            solution_cells(
                {
                    "single_query_attention": """
class Everything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __len__(self): return 3
    def __getattr__(self, name): return self
    def __call__(self, *a, **k): return self
    def __array__(self, *a, **k): raise SystemExit

def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    return Everything()
"""
                }
            ),
            {**FULL, "q3": 0},
            None,
        ),
        "returns_a_dict": (
            solution_cells(
                {
                    "retrieve": """
def retrieve(q, K, V, beta):
    return {"shape": (V.shape[0],), "dtype": "float64", "__eq__": True}
"""
                }
            ),
            {**FULL, "q5": 0},
            None,
        ),
        # --- leaving, looping, hoarding ---
        "sys_exit_in_a_cell": (solution_cells(before=["import sys\nsys.exit(0)"]), FULL, None),
        "sys_exit_in_a_call": (
            solution_cells(
                {
                    "retrieve": """
def retrieve(q, K, V, beta):
    import sys
    sys.exit(0)
"""
                }
            ),
            {**FULL, "q5": 0},
            None,
        ),
        "os_exit_at_top": (solution_cells(before=["import os\nos._exit(0)"]), ZERO, None),
        "os_exit_in_q3": (
            solution_cells(
                {
                    "single_query_attention": """
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    import os
    os._exit(3)
"""
                }
            ),
            {**FULL, "q3": 0},
            None,
        ),
        "endless_loop_in_a_cell": (solution_cells(before=["while True:\n    pass"]), FULL, None),
        # soft limits count CPU time: waiting past the limit without computing is not a loop ...
        "waits_past_the_cpu_limit_in_a_cell": (solution_cells(before=["import time\ntime.sleep(3)"]), FULL, None),
        # ... and waiting forever is stopped after the wall-clock multiple; the rest still runs
        "sleeps_forever_in_a_cell": (solution_cells(before=["import time\ntime.sleep(600)"]), FULL, None),
        "endless_loop_that_swallows_timeouts": (
            solution_cells(
                before=[
                    """
while True:
    try:
        while True:
            pass
    except BaseException:
        pass
"""
                ]
            ),
            ZERO,
            None,
        ),
        "endless_loop_in_q5": (
            solution_cells(
                {
                    "retrieve": """
def retrieve(q, K, V, beta):
    while True:
        try:
            while True:
                pass
        except BaseException:
            pass
"""
                }
            ),
            {**FULL, "q5": 0},
            None,
        ),
        "huge_allocation_in_a_cell": (solution_cells(before=["big = torch.ones(2**34)"]), FULL, None),
        "huge_allocation_in_q2": (
            solution_cells(
                {
                    "project": """
def project(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    hoard = bytearray(8 * 2**30)
    return W_q @ x + b_q, W_k @ z + b_k[:, None], W_v @ z + b_v[:, None]
"""
                }
            ),
            {**FULL, "q2": 0, "q3": 0},
            None,
        ),
        "fills_tmp_and_shm": (
            solution_cells(
                before=[
                    """
import os
for _folder in ("/tmp", "/dev/shm", os.getcwd()):
    for _k in range(200):
        try:
            with open(os.path.join(_folder, f"fill{_k}"), "wb") as _f:
                _f.write(b"x" * (8 << 20))
        except OSError:
            break
"""
                ]
            ),
            FULL,
            None,
        ),
        "fork_bomb": (
            solution_cells(
                before=[
                    """
import os, time
if os.fork() == 0:
    try:
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.05)
    finally:
        os._exit(0)
time.sleep(0.5)
"""
                ]
            ),
            FULL,
            None,
        ),
        # --- processes and signals ---
        "kills_everything_it_can_in_a_cell": (
            solution_cells(
                before=[
                    """
import os, signal
for _target in (-1, 0):
    try:
        os.kill(_target, signal.SIGKILL)
    except OSError:
        pass
"""
                ]
            ),
            ZERO,
            None,
        ),
        "kills_its_worker_in_a_cell": (
            solution_cells(
                before=[
                    """
import os, signal
try:
    os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)
except OSError:
    pass
try:
    os.kill(os.getppid(), signal.SIGKILL)
except OSError:
    pass
"""
                ]
            ),
            FULL if os.geteuid() == 0 else ZERO,
            None,
        ),
        # as root the worker keeps a user id of its own, so the child cannot signal it and the
        # notebook is graded as its answers deserve; as an ordinary user the worker dies with it and
        # the notebook loses every test, the same on every run (it is retried once)
        "kills_everything_in_q5": (
            solution_cells(
                {
                    "retrieve": """
def retrieve(q, K, V, beta):
    import os, signal
    os.kill(-1, signal.SIGKILL)
"""
                }
            ),
            None,
            None,
        ),  # its own score is whatever it is; the others must not notice
        "signals_the_grader": (
            solution_cells(
                before=[
                    f"""
import os, signal
for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
    for _pid in ({grader_pid},):
        try:
            os.kill(_pid, _sig)
        except OSError:
            pass
for _name in os.listdir("/proc"):
    if _name.isdigit() and int(_name) != os.getpid():
        try:
            _cmd = open(f"/proc/{{_name}}/cmdline", "rb").read()
            if b"pytest" in _cmd:
                os.kill(int(_name), signal.SIGTERM)
        except OSError:
            pass
"""
                ]
            ),
            None,
            None,
        ),
        "leaves_a_background_process": (
            solution_cells(
                before=[
                    f"""
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(2.5)  # long after this submission is graded
        for _path in {[str(out / "gradebook.csv"), str(out / "feedback" / "honest.md")]!r}:
            try:
                open(_path, "w").write("honest,0\\n")
            except OSError:
                pass
        for _ in range(40):
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            time.sleep(0.25)
        os._exit(0)
    os._exit(0)
"""
                ]
            ),
            FULL,
            None,
        ),
        # --- the reference implementation, by every route ---
        "calls_the_reference_in_q5": (
            solution_cells(
                {
                    "retrieve": """
def retrieve(q, K, V, beta):
    return attnbook.attention(q[None], K.T, V.T, scale=beta)[0][0]
"""
                }
            ),
            {**FULL, "q5": 0},
            REFERENCE,
        ),
        "imports_the_reference_under_an_alias": (
            solution_cells(
                {
                    "single_query_attention": """
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    from attnbook.core.column_convention import single_query_attention as reference
    return reference(x, z, W_q, b_q, W_k, b_k, W_v, b_v)
"""
                }
            ),
            {**FULL, "q3": 0},
            REFERENCE,
        ),
        "binds_the_reference_at_top_level": (
            solution_cells(after=["single_query_attention = attnbook.core.column_convention.single_query_attention"]),
            {**FULL, "q3": 0},
            REFERENCE,
        ),
        "obfuscated_getattr_in_q3": (
            solution_cells(
                {
                    "single_query_attention": """
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    return getattr(attnbook.core.column_convention, "single_" + "query_attention")(x, z, W_q, b_q, W_k, b_k, W_v, b_v)
"""
                }
            ),
            {**FULL, "q3": 0},
            REFERENCE,
        ),
        "operator_attrgetter_in_q5": (
            solution_cells(
                {
                    "retrieve": """
def retrieve(q, K, V, beta):
    import operator
    reference = operator.attrgetter("attention")(attnbook)
    return reference(q[None], K.T, V.T, scale=beta)[0][0]
"""
                }
            ),
            {**FULL, "q5": 0},
            REFERENCE,
        ),
        "reloads_the_reference": (
            solution_cells(
                {
                    "softmax_beta": """
def softmax_beta(s, beta=1.0):
    import importlib, sys
    module = importlib.reload(sys.modules["attnbook.core.softmax"])
    return module.softmax(s, beta=beta)
"""
                }
            ),
            {"q1": 0, "q2": 4, "q3": 0, "q4": 0, "q5": 0},
            REFERENCE,
        ),  # q3-q5 use softmax_beta
        "fresh_copy_from_the_reference_file": (
            solution_cells(
                {
                    "retrieve": """
def retrieve(q, K, V, beta):
    import importlib.util, inspect
    path = inspect.getsourcefile(attnbook.attention)
    spec = importlib.util.spec_from_file_location(attnbook.attention.__module__ + "_fresh_copy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.attention(q[None], K.T, V.T, scale=beta)[0][0]
"""
                }
            ),
            {**FULL, "q5": 0},
            REFERENCE,
        ),
        "runpy_of_the_reference_module": (
            solution_cells(
                {
                    "single_query_attention": """
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    import runpy
    namespace = runpy.run_module(attnbook.core.column_convention.single_query_attention.__module__, run_name="fresh_copy")
    return namespace["single_query_attention"](x, z, W_q, b_q, W_k, b_k, W_v, b_v)
"""
                }
            ),
            {**FULL, "q3": 0},
            REFERENCE,
        ),
        "eval_of_a_string": (
            solution_cells(
                {
                    "retrieve": """
def retrieve(q, K, V, beta):
    return eval("attnbook." + "attention(q[None], K.T, V.T, scale=beta)[0][0]")
"""
                }
            ),
            {**FULL, "q5": 0},
            REFERENCE,
        ),
        "exec_of_a_string": (
            solution_cells(
                {
                    "single_query_attention": """
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    scope = dict(globals(), args=(x, z, W_q, b_q, W_k, b_k, W_v, b_v))
    exec("import attnbook.core.column_convention as f\\nresult = f.single_query_attention(*args)", scope)
    return scope["result"]
"""
                }
            ),
            {**FULL, "q3": 0},
            REFERENCE,
        ),
        "fused_attention_in_a_helper": (
            solution_cells(
                {
                    "retrieve": """
def _helper(a, b, c, s):
    return torch.nn.functional.scaled_dot_product_attention(a, b, c, scale=s)

def retrieve(q, K, V, beta):
    return _helper(q[None], K.T, V.T, beta)[0]
"""
                }
            ),
            {**FULL, "q5": 0},
            REFERENCE,
        ),
        "torch_multihead_attention_module": (
            solution_cells(
                {
                    "retrieve": """
def retrieve(q, K, V, beta):
    F = torch.nn.functional
    d = max(q.shape[0], V.shape[0])
    pad = lambda x: F.pad(x, (0, d - x.shape[-1]))
    eye = torch.eye(d, dtype=q.dtype)
    mha = getattr(F, "multi_head_attention_forward")
    out, _ = mha(pad(q * beta * d ** 0.5)[None, None], pad(K.T)[:, None], pad(V.T)[:, None], d, 1,
                 torch.cat([eye, eye, eye]), None, None, None, False, 0.0, eye, None,
                 training=False, need_weights=False)
    return out[0, 0, :V.shape[0]]
"""
                }
            ),
            {**FULL, "q5": 0},
            REFERENCE,
        ),
        # --- the course's secrets, classmates and the grader's folders ---
        "looks_for_secrets": (solution_cells(after=[probe_cell(secrets)]), FULL, None),
        "copies_solutions_from_disk": (
            stub_cells(
                after=[
                    COPY_SOLUTIONS_FROM_DISK.format(
                        tops=["/", str(h.folder.parent.parent)],
                        known=[str(h.autograder_notebook), str(h.master), str(class_folder / "honest.ipynb")],
                    )
                ]
            ),
            ZERO,
            None,
        ),
        "vandal": (
            solution_cells(
                after=[
                    f"""
import os, shutil
for _folder in {[str(class_folder), str(out), str(h.dist), str(h.folder)]!r}:
    try:
        shutil.rmtree(_folder)
    except OSError:
        pass
for _path, _text in [({str(out / "gradebook.csv")!r}, "submission,total\\nhonest,0\\nvandal,22\\n"),
                     ({str(out / "feedback" / "honest.md")!r}, "you failed")]:
    try:
        os.makedirs(os.path.dirname(_path), exist_ok=True)
        open(_path, "w").write(_text)
    except OSError:
        pass
try:
    os.symlink("/etc/passwd", {str(out / "feedback" / "vandal.md")!r})
except OSError:
    pass
"""
                ]
            ),
            FULL,
            None,
        ),  # its answers are right; vandalism earns nothing and touches nothing
        "writes_garbage_to_the_grader_socket": (
            solution_cells(
                after=[
                    """
import os
for fd in range(3, 64):
    try:
        os.write(fd, b"\\x00\\xff" * 64)
    except OSError:
        pass
"""
                ]
            ),
            ZERO,
            None,
        ),
        "sends_the_grader_a_deeply_nested_frame": (
            solution_cells(
                after=[
                    """
import os, struct
_head, _tree = b'{"sizes": []}', b"[" * 200000 + b"]" * 200000
_body = struct.pack(">I", len(_head)) + _head + struct.pack(">I", len(_tree)) + _tree
for fd in range(3, 64):
    try:
        os.write(fd, struct.pack(">Q", len(_body)) + _body)
    except OSError:
        pass
"""
                ]
            ),
            ZERO,
            None,
        ),  # a frame the grader cannot decode is this row's problem (0 and a reason), never status=error
        "code_cell_source_is_numbers": (solution_cells() + [[1, 2, 3]], FULL, None),
        "checks_who_it_runs_as": (
            solution_cells(
                after=[
                    f"""
import os
if os.getuid() == 0 or os.geteuid() == 0 or os.getgid() == 0 or {running_as_root()!r} and os.getuid() == {os.getuid()}:
    def retrieve(*args, **kwargs):
        raise RuntimeError(f"running as uid {{os.getuid()}}/{{os.geteuid()}} gid {{os.getgid()}}")
"""
                ]
            ),
            FULL,
            None,
        ),
    }


@functools.cache
def _batch(root: str):
    root = Path(root)
    class_folder, out = root / "class", root / "out"
    class_folder.mkdir(parents=True)
    (out / "feedback").mkdir(parents=True)
    table = attacks(class_folder, out)
    for name, (cells, _, _) in table.items():
        (class_folder / f"{name}.ipynb").write_text(json.dumps(notebook(cells)), encoding="utf-8")
    (class_folder / "not_json.ipynb").write_text("{not json", encoding="utf-8")
    gradebook = out / "gradebook.csv"
    gradebook.write_text("written by the grader\n")
    uids = []
    with Grader(hw(), jobs=2, limits=LIMITS, hide=[class_folder, out]) as grader:
        results = grader.grade_paths(sorted(class_folder.glob("*.ipynb")))
        uids = grader.sandbox_uids
    by_name = {r.submission: r for r in results}
    return table, by_name, class_folder, out, uids


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    return _batch(str(tmp_path_factory.mktemp("isolation")))


@functools.cache
def graded_alone() -> dict:
    """The honest submissions, each in a class of its own (one call each)."""
    table = attacks(Path("/nonexistent/class"), Path("/nonexistent/out"))
    alone = {}
    with Grader(hw(), limits=LIMITS, jobs=1) as grader:
        for name in ("honest", "honest_too", "honest_wrong_q3"):
            (alone[name],) = grader.grade_sources([(name, table[name][0])])
    return alone


ATTACK_NAMES = list(attacks(Path("/c"), Path("/o")))


@pytest.mark.parametrize("name", ATTACK_NAMES)
def test_attack_gets_the_score_its_work_deserves(name, batch):
    table, results, *_ = batch
    _, expected, must_say = table[name]
    result = results[name]
    assert result.status != "error", explain(result)  # whatever a student does is not the grader's failure
    if expected is not None:
        assert scores(result) == expected, explain(result)
    if must_say is not None:
        lost = [c.message for q in result.questions for c in q.cases if not c.passed]
        assert lost and all(must_say in m for m in lost), explain(result)


def test_every_submission_in_the_folder_is_graded(batch):
    table, results, *_ = batch
    assert sorted(results) == sorted([*table, "not_json"])


def test_an_unreadable_file_gets_zero_and_a_reason(batch):
    _, results, *_ = batch
    broken = results["not_json"]
    assert scores(broken) == ZERO
    assert any("could not be read" in n for n in broken.notes), broken.notes


def test_a_cell_whose_source_is_numbers_is_read_as_empty_and_noted(batch):
    _, results, *_ = batch
    result = results["code_cell_source_is_numbers"]
    assert result.total == 22 and any("read as an empty cell" in n for n in result.notes), explain(result)


@pytest.mark.parametrize("name", ["honest", "honest_too", "honest_wrong_q3"])
def test_honest_submissions_are_unaffected_by_the_attacks(name, batch):
    table, results, *_ = batch
    in_batch = results[name]
    alone = graded_alone()[name]
    assert scores(in_batch) == scores(alone) == table[name][1], (explain(in_batch), explain(alone))
    assert [c.passed for q in in_batch.questions for c in q.cases] == [
        c.passed for q in alone.questions for c in q.cases
    ]
    assert in_batch.status == alone.status == "ok" and not in_batch.notes and not in_batch.execution_errors


def test_attacks_touch_nothing_outside_their_sandbox(batch):
    """Deleting the class folder and the dist/, writing the gradebook, planting a link, leaving a
    process that writes later: the host's files are as they were, no sandbox process is left."""
    table, results, class_folder, out, uids = batch
    time.sleep(3)  # the background process would have woken up by now
    assert sorted(p.stem for p in class_folder.glob("*.ipynb")) == sorted([*table, "not_json"])
    assert (out / "gradebook.csv").read_text() == "written by the grader\n"
    assert list((out / "feedback").iterdir()) == []
    assert hw().autograder_notebook.exists() and hw().master.exists()
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid in uids:
                left.append(pid)
        except OSError:
            pass
    assert left == [], "processes of the sandboxes' users are still running"


def test_findings_name_the_reference(batch):
    _, results, *_ = batch
    result = results["calls_the_reference_in_q5"]
    q5 = next(q for q in result.questions if q.name == "q5")
    assert all("attnbook.attention" in c.message and REFERENCE in c.message for c in q5.cases if not c.passed)
    assert all(c.passed for q in result.questions if q.name != "q5" for c in q.cases)
    sdpa = results["fused_attention_in_a_helper"]
    assert any("scaled_dot_product_attention" in m for m in failures(sdpa)), explain(sdpa)


def test_static_findings_never_change_a_score(batch):
    """The static reading flags the reference routes for review; with it switched off every score
    is the same (the reference is absent from the sandbox and watched at run time)."""
    table, results, *_ = batch
    names = [
        "calls_the_reference_in_q5",
        "binds_the_reference_at_top_level",
        "operator_attrgetter_in_q5",
        "fused_attention_in_a_helper",
        "honest",
        "honest_wrong_q3",
    ]
    with Grader(hw(), limits=LIMITS, jobs=1, static_checks=False) as grader:
        plain = grader.grade_sources([(n, table[n][0]) for n in names])
    for name, result in zip(names, plain):
        assert scores(result) == scores(results[name]) == table[name][1], (name, explain(result))
        assert result.review == [] and result.status == "ok"
    assert results["calls_the_reference_in_q5"].review, "the static reading should flag a call of the reference"


def test_a_row_flagged_for_review_says_so_in_its_status(batch):
    _, results, *_ = batch
    flagged = results["calls_the_reference_in_q5"]
    assert flagged.review and flagged.status == "review"
    assert results["honest"].status == "ok" and not results["honest"].review


@unit("isolation: without the batch")
def test_the_sandbox_sees_no_secret_even_in_a_visible_folder(tmp_path):
    """The class folder and the output folder placed inside the Python environment (which the
    sandbox must see): ``hide`` still makes them absent, and classmates cannot be read."""
    home = Path(sys.prefix) / f".attngrade-test-{uuid.uuid4().hex[:8]}"
    try:
        home.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot write into the Python environment: {exc}")
    try:
        class_folder, out = home / "class", home / "out"
        class_folder.mkdir()
        out.mkdir()
        (class_folder / "honest.ipynb").write_text(json.dumps(submission_with(hw(), {})))
        (out / "gradebook.csv").write_text("x\n")
        probe = solution_cells(after=[probe_cell(secret_paths(class_folder, out))])
        copier = stub_cells(
            after=[
                COPY_SOLUTIONS_FROM_DISK.format(
                    tops=[str(home), str(Path(sys.prefix))], known=[str(class_folder / "honest.ipynb")]
                )
            ]
        )
        # the control: without hiding them, the classmate's notebook would be visible and copied
        with Grader(hw(), limits=LIMITS, jobs=1, hide=[class_folder, out]) as grader:
            hidden_probe, hidden_copier = grader.grade_sources([("probe", probe), ("copier", copier)])
        with Grader(hw(), limits=LIMITS, jobs=1) as grader:
            (visible_copier,) = grader.grade_sources([("copier", copier)])
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert scores(hidden_probe) == FULL, explain(hidden_probe)
    assert scores(hidden_copier) == ZERO, explain(hidden_copier)
    assert scores(visible_copier) == FULL, "the control: a visible classmate can be copied"


WRITES_LEFTOVERS = """
import os, time, signal
open("/tmp/note_for_the_next_student", "w").write("hi")
open("/dev/shm/note_for_the_next_student", "w").write("hi")
open(os.path.join(os.getcwd(), "note_for_the_next_student"), "w").write("hi")
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
    os._exit(0)
"""

FINDS_NO_LEFTOVERS = """
import os
_left = [p for p in ("/tmp/note_for_the_next_student", "/dev/shm/note_for_the_next_student",
                     os.path.join(os.getcwd(), "note_for_the_next_student")) if os.path.exists(p)]
_mine = {1, os.getpid(), os.getppid()}
# this submission's own candidate server and test factory (forked before its first cell ran)
_mine |= {int(p) for p in os.listdir("/proc") if p.isdigit() and os.path.exists(f"/proc/{p}/stat")
          and open(f"/proc/{p}/stat").read().rsplit(")", 1)[-1].split()[1] == str(os.getpid())}
_left += [f"process {p}: " + open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace")
          for p in os.listdir("/proc") if p.isdigit() and int(p) not in _mine and os.path.exists(f"/proc/{p}/cmdline")]
# what the worker made before it dropped its privileges (torch's and matplotlib's caches) is not
# a student's and cannot be written to by one
_left += [os.path.join(d, f) for d in ("/tmp", "/dev/shm") for f in os.listdir(d)
          if f != "work" and os.lstat(os.path.join(d, f)).st_uid == os.getuid()]
if _left:
    def retrieve(*args, **kwargs):
        raise RuntimeError("left by an earlier submission: " + ", ".join(map(str, _left)))
"""


@unit("isolation: without the batch")
def test_nothing_survives_from_one_submission_to_the_next():
    """One worker, in order: files in /tmp, /dev/shm and the working folder and a process that
    ignores SIGTERM are gone before the next student's notebook runs; a submission that kills
    everything it can reach (its worker included) costs the next students nothing."""
    table = attacks(Path("/nonexistent/class"), Path("/nonexistent/out"))
    cells = {
        "writer": solution_cells(after=[WRITES_LEFTOVERS]),
        "reader": solution_cells(after=[FINDS_NO_LEFTOVERS]),
        "killer": table["kills_everything_it_can_in_a_cell"][0],
        "wrong_q3": solution_cells({"single_query_attention": WRONG_Q3}, after=[FINDS_NO_LEFTOVERS]),
    }
    names = ["writer", "reader", "writer", "killer", "reader", "wrong_q3"]
    expected = {"writer": FULL, "reader": FULL, "killer": ZERO, "wrong_q3": {**FULL, "q3": 0}}
    with Grader(hw(), limits=LIMITS, jobs=1) as grader:
        results = grader.grade_sources([(n, cells[n]) for n in names])
    for name, result in zip(names, results):
        assert scores(result) == expected[name], (name, explain(result))
        assert result.status != "error", (name, explain(result))


# -- the control: every route to the reference works where the reference is reachable ----------

ROUTES = [
    "calls_the_reference_in_q5",
    "imports_the_reference_under_an_alias",
    "binds_the_reference_at_top_level",
    "obfuscated_getattr_in_q3",
    "operator_attrgetter_in_q5",
    "reloads_the_reference",
    "fresh_copy_from_the_reference_file",
    "runpy_of_the_reference_module",
    "eval_of_a_string",
    "exec_of_a_string",
    "fused_attention_in_a_helper",
    "torch_multihead_attention_module",
    "monkeypatch_checks",
]


def _sample_inputs():
    import torch

    g = torch.Generator().manual_seed(1)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    return {
        "softmax_beta": ((r(3, 5), 0.7), {}),
        "project": ((r(3), r(4, 6), r(2, 3), r(2), r(2, 4), r(2), r(5, 4), r(5)), {}),
        "single_query_attention": ((r(3), r(4, 6), r(2, 3), r(2), r(2, 4), r(2), r(5, 4), r(5)), {}),
        "attention_moments": ((r(3), r(6, 3), r(6, 2)), {}),
        "retrieve": ((r(3), r(3, 6), r(2, 6), 0.8), {}),
    }


def _run_here(cells):
    """Execute hw01 cells in this process, with the real course package (no sandbox)."""
    namespace = {"__name__": "__main__"}

    class Grader_:
        def __getattr__(self, name):
            return lambda *a, **k: None

    for source in cells[1:]:  # cell 0 imports otter
        exec(compile(source, "<cell>", "exec"), namespace)
        namespace["grader"] = Grader_()
    return namespace


@pytest.mark.parametrize("name", [n for n in ROUTES if n != "monkeypatch_checks"])
@unit("isolation: without the batch")
# the runpy route runs an imported module afresh on purpose, which runpy warns about
@pytest.mark.filterwarnings("ignore:'attnbook.core.column_convention' found in sys.modules:RuntimeWarning")
def test_each_route_reaches_the_reference_where_it_is_reachable(name):
    """The control for the attacks above: run here, with the real ``attnbook``, each route gives
    the right answers, so its 0 in the sandbox is the reference's absence, not the attack's bug."""
    import torch

    table = attacks(Path("/nonexistent/class"), Path("/nonexistent/out"))
    honest = _run_here(table["honest"][0])
    # the routes reload and re-import the course package in this process: put every module back
    # as it was afterwards, so later tests see the same function objects as before
    saved = {
        k: (m, dict(vars(m)))
        for k, m in sys.modules.items()
        if m is not None and (k == "attnbook" or k.startswith("attnbook."))
    }
    try:
        attacked = _run_here(table[name][0])
        for function, (args, kwargs) in _sample_inputs().items():
            expected = honest[function](*args, **kwargs)
            got = attacked[function](*args, **kwargs)
            got, expected = (got, expected) if isinstance(expected, tuple) else ((got,), (expected,))
            assert len(got) == len(expected), function
            for a, b in zip(got, expected):
                assert isinstance(a, torch.Tensor) and a.shape == b.shape, function
                assert torch.allclose(a, b, atol=1e-6), function
    finally:
        for key in [k for k in sys.modules if k == "attnbook" or k.startswith("attnbook.")]:
            if key not in saved:
                del sys.modules[key]
        for key, (module, namespace) in saved.items():
            sys.modules[key] = module
            vars(module).clear()
            vars(module).update(namespace)
