"""Test-writing questions (attngrade.student_tests): honest, empty, always-failing, partial and
hostile student tests get the same verdicts run here (grader.check, otter run) and in the sandbox
(the class grader)."""

from __future__ import annotations

import builtins

import pytest

from attngrade.checks import CheckFailure
from attngrade.homework import DEFAULT_LIMITS
from attngrade.sandboxed import integrity
from attngrade.student_tests import (
    TestRun,
    check_test_catches,
    check_test_passes_on_reference,
    run_student_test,
)

from ..homework_support import bwrap_available

NAME = "causal_keep_mask"
REFERENCE = "def causal_keep_mask(n, m):\n    return torch.ones(n, m, dtype=torch.bool).tril()\n"
#: the known mistakes, each with the words of its feedback
MUTANTS = {
    "the diagonal left out": "def causal_keep_mask(n, m):\n    return torch.ones(n, m, dtype=torch.bool).tril(-1)\n",
    "the mask transposed": "def causal_keep_mask(n, m):\n    return torch.ones(n, m, dtype=torch.bool).triu()\n",
    "a float mask": "def causal_keep_mask(n, m):\n    return torch.ones(n, m).tril()\n",
}
SECRET = "tril(-1)"  # a piece of a hidden candidate's code, which must never come back

#: tests that do not know the answer, each trying to score anyway: (passes on the reference,
#: mutants caught; passes None: either way); every one scores nothing on the question
ATTACKS = {
    # remembers the first candidate's outputs and fails every candidate that differs: every run is
    # a fresh process, so every run is its first
    "stateful oracle (a global)": (
        "SEEN = []\n"
        "def test_causal_keep_mask(f):\n"
        "    got = [f(n, m) for n, m in [(3, 3), (2, 4), (4, 2)]]\n"
        "    if SEEN:\n"
        "        assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(got, SEEN[0]))\n"
        "    SEEN.append(got)\n",
        True,
        set(),
    ),
    "stateful oracle (builtins and a file)": (
        "import builtins, os, pickle\n"
        "def test_causal_keep_mask(f):\n"
        "    got = [f(3, 3).tolist(), str(f(3, 3).dtype), f(2, 4).tolist()]\n"
        "    path = os.path.join('/tmp', 'oracle.pkl')\n"
        "    seen = getattr(builtins, '_oracle', None)\n"
        "    if seen is None and os.path.exists(path):\n"
        "        seen = pickle.load(open(path, 'rb'))\n"
        "    if seen is not None:\n"
        "        assert got == seen\n"
        "    builtins._oracle = got\n"
        "    try:\n"
        "        pickle.dump(got, open(path, 'wb'))\n"
        "    except OSError:\n"
        "        pass\n",
        True,
        set(),
    ),
    "stateful oracle (shared memory from a cell)": (
        "import mmap, pickle\n"
        "MEM = mmap.mmap(-1, 1 << 16)\n"
        "def test_causal_keep_mask(f):\n"
        "    got = pickle.dumps([f(3, 3).tolist(), str(f(3, 3).dtype), f(2, 4).tolist()])\n"
        "    n = int.from_bytes(MEM[:4], 'big')\n"
        "    if n:\n"
        "        assert MEM[4:4 + n] == got\n"
        "    else:\n"
        "        MEM[4:4 + len(got)] = got\n"
        "        MEM[:4] = len(got).to_bytes(4, 'big')\n",
        True,
        set(),
    ),
    "passes only the first time": (
        "def test_causal_keep_mask(f):\n"
        "    f(2, 2)\n"
        "    runs = test_causal_keep_mask.__dict__.setdefault('runs', [])\n"
        "    runs.append(1)\n"
        "    assert len(runs) == 1\n",
        True,
        set(),
    ),
    # every way of reading the candidate: it is not in the test's process
    "dis, getclosurevars and gc": (
        "import dis, gc, inspect, io, types\n"
        "def test_causal_keep_mask(f):\n"
        "    f(2, 2)\n"
        "    text = io.StringIO()\n"
        "    for obj in gc.get_objects():\n"
        "        if isinstance(obj, types.FunctionType) and obj.__code__.co_filename == '<candidate>':\n"
        "            dis.dis(obj, file=text)\n"
        "        if isinstance(obj, str) and 'def causal_keep_mask' in obj:\n"
        "            text.write(obj)\n"
        "    found = inspect.getclosurevars(f).nonlocals\n"
        "    for v in found.values():\n"
        "        if callable(v):\n"
        "            dis.dis(v, file=text)\n"
        "    assert 'tril(-1)' not in text.getvalue() and '-1' not in text.getvalue()\n"
        "    assert 'triu' not in text.getvalue() and 'tril' in text.getvalue()\n",
        False,
        set(),
    ),
    "frames up to the request": (
        "import sys\n"
        "def test_causal_keep_mask(f):\n"
        "    f(2, 2)\n"
        "    needle = 'dtype=torch.bool)' + '.tril()'  # the reference's code, not this cell's\n"
        "    frame, text = sys._getframe(), ''\n"
        "    while frame is not None:\n"
        "        text += repr(frame.f_locals)\n"
        "        frame = frame.f_back\n"
        "    assert needle in text\n",
        None,  # in the class grader it finds nothing; locally it may find the hidden test's own code
        set(),  # and passes every candidate: either way it scores nothing
    ),
    "a torch tracer": (
        "from torch.overrides import TorchFunctionMode\n"
        "class Trace(TorchFunctionMode):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.calls = []\n"
        "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
        "        self.calls.append((getattr(func, '__name__', str(func)), args[1:], kwargs))\n"
        "        return func(*args, **(kwargs or {}))\n"
        "def test_causal_keep_mask(f):\n"
        "    with Trace() as t:\n"
        "        f(3, 3)\n"
        "    assert ('tril', (), {}) in t.calls or ('tril', (0,), {}) in t.calls\n",
        False,
        set(),
    ),
    # a cell that leaves a server running in the notebook's process, to keep what each run saw:
    # a run has its own network namespace (or the notebook's processes are stopped while it runs)
    "a server thread started by a cell": (
        "import pickle, socket, threading\n"
        "_state = {}\n"
        "def _serve():\n"
        "    srv = socket.socket(socket.AF_UNIX)\n"
        "    try:\n"
        "        srv.bind('\\0attngrade-oracle')\n"
        "    except OSError:\n"
        "        return\n"
        "    srv.listen(8)\n"
        "    while True:\n"
        "        c, _ = srv.accept()\n"
        "        data = c.recv(1 << 16)\n"
        "        if data == b'get':\n"
        "            c.sendall(_state.get('x', b''))\n"
        "        else:\n"
        "            _state.setdefault('x', data)\n"
        "        c.close()\n"
        "threading.Thread(target=_serve, daemon=True).start()\n"
        "def _ask(message):\n"
        "    c = socket.socket(socket.AF_UNIX)\n"
        "    c.settimeout(0.5)\n"
        "    c.connect('\\0attngrade-oracle')\n"
        "    c.sendall(message)\n"
        "    c.shutdown(socket.SHUT_WR)\n"
        "    return c.recv(1 << 16)\n"
        "def test_causal_keep_mask(f):\n"
        "    got = pickle.dumps([f(3, 3).tolist(), str(f(3, 3).dtype), f(2, 4).tolist()])\n"
        "    try:\n"
        "        seen = _ask(b'get')\n"
        "    except OSError:\n"
        "        return\n"
        "    if seen:\n"
        "        assert seen == got\n"
        "    else:\n"
        "        _ask(got)\n",
        None,
        set(),
    ),
    # the grader's own code in the notebook's process, patched to claim a verdict: in the class
    # grader only the candidate server's signed verdict counts
    "patches the worker's answer": (
        "import sys\n"
        "_w = sys.modules.get('attngrade.sandboxed.child')\n"
        "if _w is not None:\n"
        "    _w._run_test = lambda *a, **k: {'ok': True, 'calls': 5, 'error': '',\n"
        "        'signed': {'payload': '{\"passed\": true, \"calls\": 5}', 'mac': '0' * 64}}\n"
        "def test_causal_keep_mask(f):\n"
        "    assert False\n",
        False,
        set(),
    ),
    # a top-level cell that patches the grader's own code in the notebook's process
    "patches candidates.prepare": (
        "import attngrade.sandboxed.candidates as _c\n"
        "import attngrade.sandboxed.candidates.server as _s\n"
        "_real = _c.compile_candidate\n"
        "def _spy(name, source, *rest):\n"
        "    func = _real(name, source)\n"
        "    def wrapped(*a, **k):\n"
        "        if 'tril()' not in source:\n"
        "            raise AssertionError('a mutant')\n"
        "        return func(*a, **k)\n"
        "    return wrapped, (lambda: 1)\n"
        "for _m in (_c, _s):  # the package's face and the module that defines them\n"
        "    _m.prepare = _spy\n"
        "    _m.compile_candidate = lambda name, source: _spy(name, source)[0]\n"
        "def test_causal_keep_mask(f):\n"
        "    f(2, 2)\n",
        True,
        set(),
    ),
}


def scores_nothing(passes: bool, caught: set[str]) -> bool:
    """A test-writing question scores 0 for a test that fails on the reference or catches nothing."""
    return not passes or not caught


#: student tests (notebook cells) -> (passes on the reference, mutants caught)
STUDENT_TESTS = {
    "honest": (
        "def test_causal_keep_mask(f):\n"
        "    got = f(3, 3)\n"
        "    assert got.dtype == torch.bool\n"
        "    assert torch.equal(got, torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))\n"
        "    assert f(2, 4).shape == (2, 4)\n",
        True,
        set(MUTANTS),
    ),
    "partial (shape and diagonal only)": (
        "def test_causal_keep_mask(f):\n"
        "    got = f(3, 3)\n"
        "    assert got.shape == (3, 3)\n"
        "    assert bool(got.diagonal().all())\n",
        True,
        {"the diagonal left out"},
    ),
    "empty (assert True)": ("def test_causal_keep_mask(f):\n    assert True\n", False, set()),
    "never calls, always fails": ("def test_causal_keep_mask(f):\n    assert False, 'no'\n", False, set()),
    "always fails after calling": ("def test_causal_keep_mask(f):\n    f(2, 2)\n    assert False\n", False, set()),
    "loops forever": ("def test_causal_keep_mask(f):\n    f(2, 2)\n    while True:\n        pass\n", False, set()),
    "huge message": (
        "def test_causal_keep_mask(f):\n    f(2, 2)\n    raise AssertionError('x' * 10_000_000)\n",
        False,
        set(),
    ),
    "sys.exit": ("import sys\ndef test_causal_keep_mask(f):\n    f(2, 2)\n    sys.exit(0)\n", False, set()),
    # the candidate runs in a process of its own: the test holds a proxy, with no closure to read
    "reads the candidate": (
        "import dis, inspect, io\n"
        "def test_causal_keep_mask(f):\n"
        "    f(1, 1)\n"
        "    inner = [c.cell_contents for c in f.__closure__ if callable(c.cell_contents)][0]\n"
        "    out = io.StringIO()\n"
        "    dis.dis(inner, file=out)\n"
        "    assert '-1' not in out.getvalue()\n",
        False,
        set(),
    ),
    # a run_as_test of its own does not make the grader trust its answer
    "claims to be the grader's proxy": (
        "def test_causal_keep_mask(f):\n"
        "    assert False\n"
        "test_causal_keep_mask.run_as_test = lambda *a, **k: {'passed': True, 'calls': 5}\n"
        "class _Proxy:\n"
        "    __module__ = 'attngrade.grading.session'\n"
        "    __name__ = 'test_causal_keep_mask'\n"
        "    def run_as_test(self, *a, **k):\n"
        "        return {'passed': True, 'calls': 5}\n"
        "    def __call__(self, f):\n"
        "        assert False\n"
        "test_causal_keep_mask = _Proxy()\n",
        False,
        set(),
    ),
    # the calls are counted on the candidate's side: a test that never calls it cannot fake them
    "fakes the call count": (
        "def test_causal_keep_mask(f):\n"
        "    f.calls = 10\n"
        "    for cell in f.__closure__ or ():\n"
        "        if isinstance(cell.cell_contents, list):\n"
        "            cell.cell_contents[:] = [10]\n",
        False,
        set(),
    ),
    **ATTACKS,
}

FORBIDDEN_TEST = (
    "import attnbook\ndef test_causal_keep_mask(f):\n    assert torch.equal(f(3, 3), attnbook.causal_mask(3, 3))\n"
)


@pytest.fixture(autouse=True)
def _restore_the_grader():
    """A hostile cell run here (local_test) patches this process's own copy of the grader."""
    from attngrade.sandboxed import candidates
    from attngrade.sandboxed.candidates import server

    saved = [(m, m.prepare, m.compile_candidate) for m in (candidates, server)]
    yield
    for m, prepare, compile_candidate in saved:
        m.prepare, m.compile_candidate = prepare, compile_candidate


def verdicts(run: callable) -> tuple[bool, set[str]]:
    """(passes on the reference, mutants caught) with ``run(name, source) -> TestRun``; a test that
    fails on the reference catches nothing (the question scores 0 whatever it does on the rest)."""
    ref = run(NAME, REFERENCE)
    passes = ref.passed and ref.calls >= 1
    caught = set()
    for mistake, source in MUTANTS.items():
        result = run(NAME, source)
        if not result.passed and result.calls >= 1:
            caught.add(mistake)
    return passes, caught if passes else set()


def local_test(cell: str):
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    exec("import torch\n" + cell, namespace)
    return namespace["test_causal_keep_mask"]


@pytest.mark.parametrize("kind", [k for k in STUDENT_TESTS if k != "loops forever"])
def test_local_verdicts(kind):
    cell, passes, caught = STUDENT_TESTS[kind]
    test = local_test(cell)
    got = verdicts(lambda name, source: run_student_test(test, name, source))
    if passes is None:
        assert scores_nothing(*got), got
    else:
        assert got == (passes, caught if passes else set())


def test_the_checks_score_an_honest_test_and_nothing_for_an_empty_or_failing_one():
    honest = local_test(STUDENT_TESTS["honest"][0])
    run = check_test_passes_on_reference(honest, NAME, REFERENCE)
    assert isinstance(run, TestRun) and run.passed and run.calls == 2
    for mistake, source in MUTANTS.items():
        check_test_catches(honest, NAME, source, mistake, reference=REFERENCE)

    empty = local_test(STUDENT_TESTS["empty (assert True)"][0])
    with pytest.raises(CheckFailure, match="never calls"):
        check_test_passes_on_reference(empty, NAME, REFERENCE)
    with pytest.raises(CheckFailure, match="never calls"):
        check_test_catches(empty, NAME, MUTANTS["the mask transposed"], "the mask transposed", reference=REFERENCE)

    failing = local_test(STUDENT_TESTS["always fails after calling"][0])
    with pytest.raises(CheckFailure, match="fails on a correct"):
        check_test_passes_on_reference(failing, NAME, REFERENCE)
    # a hidden test checks the reference first, and does not repeat the test's own message
    with pytest.raises(CheckFailure, match="fails on a correct") as info:
        check_test_catches(failing, NAME, MUTANTS["a float mask"], "a float mask", reference=REFERENCE)
    assert "AssertionError" not in str(info.value)

    partial = local_test(STUDENT_TESTS["partial (shape and diagonal only)"][0])
    with pytest.raises(CheckFailure, match="your test does not notice: the mask transposed") as info:
        check_test_catches(partial, NAME, MUTANTS["the mask transposed"], "the mask transposed", reference=REFERENCE)
    assert "triu" not in str(info.value), "feedback names the kind of mistake, never its code"


def test_a_huge_message_is_cut_short():
    test = local_test(STUDENT_TESTS["huge message"][0])
    with pytest.raises(CheckFailure) as info:
        check_test_passes_on_reference(test, NAME, REFERENCE)
    assert len(str(info.value)) < 1500


def test_a_test_that_is_not_a_function_fails():
    assert not run_student_test(None, NAME, REFERENCE).passed
    with pytest.raises(CheckFailure, match="fails on a correct"):
        check_test_passes_on_reference(42, NAME, REFERENCE)


def test_a_broken_candidate_is_the_instructors_error():
    from attngrade.sandboxed.candidates import CandidateError

    test = local_test(STUDENT_TESTS["honest"][0])
    with pytest.raises(CandidateError):
        run_student_test(test, NAME, "def other(n, m):\n    return None\n")


def test_a_test_that_calls_a_forbidden_reference_fails_locally():
    test = local_test(FORBIDDEN_TEST)
    integrity.configure(["attnbook.causal_mask"])
    try:
        run = run_student_test(test, NAME, REFERENCE)
        assert not run.passed and run.forbidden == ("attnbook.causal_mask",)
        with pytest.raises(CheckFailure, match="scores 0"):
            check_test_passes_on_reference(test, NAME, REFERENCE)
    finally:
        integrity.configure(None)
    # without the rule (no forbidden list), the same test passes on the reference
    assert integrity.current_guard() is None or "attnbook.causal_mask" not in integrity.current_guard().forbidden
    assert run_student_test(test, NAME, REFERENCE).passed


# -- the sandbox ------------------------------------------------------------------------------

SANDBOX_REASON = bwrap_available()


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    if SANDBOX_REASON is not None:
        pytest.skip(SANDBOX_REASON)
    from attngrade.grading.bubblewrap import Worker
    from attngrade.grading.view import build_view, hidden_paths

    root = tmp_path_factory.mktemp("student-tests")
    forbidden = ["attnbook.causal_mask"]
    view = build_view(root / "view", forbidden)
    w = Worker(view, hide=hidden_paths([]), forbidden=forbidden, sandbox=True)
    w.start()
    yield w
    w.close()


LIMITS = {**DEFAULT_LIMITS, "call_timeout": 1.0, "call_grace": 2.0, "submission_timeout": 120.0}


def sandbox_session(worker, cell: str):
    from attngrade.grading.session import Session

    session = Session(worker, ["import torch\n" + cell], limits=LIMITS)
    assert session.start(), session.broken
    return session


@pytest.mark.parametrize("kind", list(STUDENT_TESTS))
def test_the_sandbox_gives_the_same_verdicts(worker, kind):
    cell, passes, caught = STUDENT_TESTS[kind]
    session = sandbox_session(worker, cell)
    try:
        proxy = session.proxy("test_causal_keep_mask")
        runs = []

        def run(name, source):
            runs.append(run_student_test(proxy, name, source))
            return runs[-1]

        got = verdicts(run)
        # locally, an endless test runs as long as the student lets it
        local = verdicts(lambda n, s: run_student_test(local_test(cell), n, s)) if kind != "loops forever" else got
        if passes is None:
            assert scores_nothing(*got) and scores_nothing(*local), (got, local)
        else:
            assert got == local == (passes, caught if passes else set())
        for r in runs:  # what comes back: pass/fail, the number of calls, a bounded message
            assert isinstance(r.calls, int) and len(r.error) <= 2000
            assert SECRET not in r.error
    finally:
        session.close()


def test_the_sandbox_checks_give_the_local_messages(worker):
    session = sandbox_session(worker, STUDENT_TESTS["partial (shape and diagonal only)"][0])
    try:
        proxy = session.proxy("test_causal_keep_mask")
        check_test_passes_on_reference(proxy, NAME, REFERENCE)
        check_test_catches(proxy, NAME, MUTANTS["the diagonal left out"], "the diagonal left out", reference=REFERENCE)
        with pytest.raises(CheckFailure, match="your test does not notice: the mask transposed"):
            check_test_catches(proxy, NAME, MUTANTS["the mask transposed"], "the mask transposed", reference=REFERENCE)
    finally:
        session.close()


def test_a_test_that_calls_a_forbidden_reference_fails_in_the_sandbox(worker):
    session = sandbox_session(worker, FORBIDDEN_TEST)
    try:
        proxy = session.proxy("test_causal_keep_mask")
        run = run_student_test(proxy, NAME, REFERENCE)
        assert not run.passed
        with pytest.raises(CheckFailure, match="scores 0"):
            check_test_passes_on_reference(proxy, NAME, REFERENCE)
    finally:
        session.close()


def test_an_endless_test_fails_in_the_sandbox_and_the_session_goes_on(worker):
    session = sandbox_session(
        worker,
        STUDENT_TESTS["loops forever"][0] + STUDENT_TESTS["honest"][0].replace("test_causal_keep_mask", "test_other"),
    )
    try:
        run = run_student_test(session.proxy("test_causal_keep_mask"), NAME, REFERENCE)
        assert not run.passed and "time" in run.error
        assert run_student_test(session.proxy("test_other"), NAME, REFERENCE).passed
    finally:
        session.close()


def test_a_test_that_swallows_the_time_limit_is_stopped_once(worker):
    """A test that catches the soft time limit and goes on is killed; every check of the same
    test and implementation then reuses that verdict (its time is spent once)."""
    cell = (
        "def test_causal_keep_mask(f):\n"
        "    f(2, 2)\n"
        "    while True:\n"
        "        try:\n"
        "            while True:\n"
        "                pass\n"
        "        except BaseException:\n"
        "            pass\n"
    )
    session = sandbox_session(worker, cell)
    try:
        proxy = session.proxy("test_causal_keep_mask")
        first = run_student_test(proxy, NAME, REFERENCE)
        assert not first.passed and "time" in first.error
        starts = session.starts
        assert run_student_test(proxy, NAME, REFERENCE) == first
        assert session.starts == starts, "the verdict was reused, not computed again"
        with pytest.raises(CheckFailure, match="fails on a correct"):
            check_test_catches(proxy, NAME, MUTANTS["a float mask"], "a float mask", reference=REFERENCE)
    finally:
        session.close()


# -- a whole class: hw02's test-writing question (q5) in the class grader ------------------------

HW02_HONEST = (
    "def _expected(n, m):\n"
    "    return torch.tensor([[j <= i for j in range(m)] for i in range(n)], dtype=torch.bool)\n"
    "def test_causal_keep_mask(candidate):\n"
    "    for n, m in [(1, 1), (3, 3), (2, 5), (5, 2)]:\n"
    "        got = candidate(n, m)\n"
    "        assert got.dtype == torch.bool and torch.equal(got, _expected(n, m))\n"
)
#: hw02's q5 answered by each test (None: the master's own), in a notebook otherwise the solutions;
#: "(honest)" ones score full, the others 0 on q5, in every grader (tools/check_otter.py compares)
HW02_TESTS = {
    "solutions": None,
    "ipytest cell (honest)": "%%ipytest\n" + HW02_HONEST,
    "fixture, parametrize and pytest.approx (honest)": (
        "import pytest\n"
        "@pytest.fixture\n"
        "def sizes():\n"
        "    return [(1, 1), (3, 3), (2, 5), (5, 2)]\n"
        + HW02_HONEST.replace(
            "def test_causal_keep_mask", "@pytest.mark.parametrize('k', [0])\ndef test_causal_keep_mask"
        )
        + "    assert float(candidate(3, 3).sum()) == pytest.approx(6.0)\n"
    ),
    **{name: cell for name, (cell, _passes, _caught) in ATTACKS.items()},
}


def hw02_notebooks() -> dict[str, dict]:
    """hw02's solutions with q5's test replaced by each of HW02_TESTS."""
    from attngrade.authoring.master import cell_source

    from ..homework_support import homework
    from ..submissions import submission_with

    hw = homework("hw02")
    notebooks = {}
    for label, cell in HW02_TESTS.items():
        nb = submission_with(hw, {})
        if cell is not None:
            target = next(c for c in nb["cells"] if "def test_causal_keep_mask(" in cell_source(c))
            target["source"] = cell
            if cell.startswith("%%ipytest"):  # as a student would: the magic registered in a cell above
                setup = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": []}
                setup["source"] = "import ipytest\nipytest.autoconfig()"
                nb["cells"].insert(nb["cells"].index(target), setup)
        notebooks[label] = nb
    return notebooks


@pytest.fixture(scope="module")
def hw02_class(tmp_path_factory):
    if SANDBOX_REASON is not None:
        pytest.skip(SANDBOX_REASON)
    import json
    import time

    from attngrade.grading.grader import Grader

    from ..homework_support import homework

    hw = homework("hw02")
    folder = tmp_path_factory.mktemp("hw02-tests") / "class"
    folder.mkdir()
    files = {}
    for k, (label, nb) in enumerate(hw02_notebooks().items()):
        files[label] = f"student{k:02d}"
        (folder / f"student{k:02d}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    start = time.perf_counter()
    with Grader(hw, jobs=2, hide=[folder]) as grader:
        results = grader.grade_paths(sorted(folder.iterdir()))
    seconds = time.perf_counter() - start
    by_name = {r.submission: r for r in results}
    return {label: by_name[stem] for label, stem in files.items()}, seconds


@pytest.mark.parametrize("label", list(HW02_TESTS))
def test_the_class_grader_scores_a_test_by_what_it_knows(label, hw02_class):
    results, _seconds = hw02_class
    full = {q.name: q.possible for q in results["solutions"].questions}
    result = results[label]
    got = {q.name: q.score for q in result.questions}
    detail = "\n".join(f"{q.name}/{c.name}: {c.message}" for q in result.questions for c in q.cases if not c.passed)
    expected = dict(full) if label in ("solutions",) or "(honest)" in label else {**full, "q5": 0}
    assert got == expected, detail


def test_a_python_environment_under_tmp_stays_importable_in_the_test_process(tmp_path, monkeypatch):
    """The test's process gets an empty private /tmp; a checkout or virtual environment under /tmp
    (a fresh clone in /tmp, say) comes back read-only at its own path, so the test's first
    ``import pytest`` still works (it failed with "not defined as a function" before)."""
    import os
    import socket

    from attngrade.sandboxed.candidates import isolation

    if not isolation.namespaces_available():
        pytest.skip("this system gives a process no namespaces of its own")
    if not str(tmp_path.resolve()).startswith("/tmp/"):
        pytest.skip(f"pytest's temporary folder {tmp_path} is not under /tmp")
    environment = tmp_path / "site-packages"
    environment.mkdir()
    (environment / "late_import_probe.py").write_text("VALUE = 41 + 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(environment))
    assert str(environment.resolve()) in isolation._import_paths_inside("/tmp")  # (with the checkout, if it is in /tmp)
    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the test's process
        code = 1
        try:
            parent.close()
            isolation.isolate_test_process(child, True, forget=False)
            import late_import_probe  # imported only now, after the private /tmp is mounted

            writable = os.access(str(environment), os.W_OK)
            empty_elsewhere = not os.path.exists(str(tmp_path / "late_import_probe.py"))
            child.sendall(f"{late_import_probe.VALUE} {writable} {empty_elsewhere}".encode())
            code = 0
        finally:
            os._exit(code)
    child.close()
    parent.settimeout(60)
    reply = parent.recv(100).decode()
    os.waitpid(pid, 0)
    assert reply == "42 False True", reply
