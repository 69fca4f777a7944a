"""The Gradescope path applies the integrity rule too: ``otter run`` on hw02's built autograder zip
gives the honest solution full marks, takes points from a wrong answer, and scores 0 on each question
whose answer ran a reference implementation; the class grader agrees (issue 11, item 6). The honest
notebook also writes q5's test in a ``%%ipytest`` cell, which runs under ``otter run`` only where the
autograder installs ipytest: every homework whose students write tests has it in its requirements
(issue 35).

Slow but included in the default run (CI runs it): two ``otter run`` in parallel, each starting
a Jupyter kernel and torch, about 15-30 s in all; the homework is built once per session (shared
with the other homework tests) and only rebuilt when its build is stale.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from attngrade.authoring.assign import STUDENT_TEST_REQUIREMENTS, students_write_tests
from attngrade.authoring.master import cell_source
from attngrade.homework import Homework, all_homework
from attngrade.sandboxed.integrity import INTEGRITY_FILE

from ..homework_support import autograder_zip, bwrap_available, homework, is_current
from ..submissions import comparing_submission

HW = "hw02"
FULL = {"q1": 4.0, "q2": 3.0, "q3": 6.0, "q4": 4.0, "q5": 4.0}
WRONG_CAUSAL_MASK = """    i = torch.arange(n).unsqueeze(-1)
    j = torch.arange(m).unsqueeze(0)
    return j < i"""


@pytest.fixture(scope="module")
def hw02() -> Homework:
    hw = homework(HW)  # built if missing or stale (homework_support.is_current)
    assert is_current(hw), "the autograder zip lacks the integrity list or attngrade's light modules"
    assert (hw.student_notebook.parent / INTEGRITY_FILE).exists(), "the student folder lacks the list"
    return hw


def _cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _replace_function(nb: dict, name: str, body: str) -> None:
    for cell in _cells(nb):
        src = "".join(cell["source"])
        if src.lstrip().startswith(f"def {name}("):
            head = src[: src.index(f"def {name}(")]
            rest = src[src.index(f"def {name}(") :]
            # the function ends where the next top-level def starts (q4's cell defines two)
            nxt = rest.find("\ndef ", 1)
            tail = rest[nxt:] if nxt >= 0 else ""
            signature = rest.splitlines()[0]
            cell["source"] = head + signature + "\n" + body + "\n" + tail
            return
    raise AssertionError(f"no cell defines {name}")


#: q5's test written in a ``%%ipytest`` cell, with ipytest set up in the cell above, as a student does
IPYTEST_SETUP = "import ipytest\nipytest.autoconfig()\n"
IPYTEST_TEST = (
    "%%ipytest\n"
    "def _expected(n, m):\n"
    "    return torch.tensor([[j <= i for j in range(m)] for i in range(n)], dtype=torch.bool)\n"
    "def test_causal_keep_mask(candidate):\n"
    "    for n, m in [(1, 1), (3, 3), (2, 5), (5, 2)]:\n"
    "        got = candidate(n, m)\n"
    "        assert got.dtype == torch.bool and torch.equal(got, _expected(n, m))\n"
)


def _with_ipytest_cell(nb: dict) -> dict:
    """``nb`` with q5's test replaced by :data:`IPYTEST_TEST`, after a cell that sets ipytest up."""
    i = next(k for k, c in enumerate(nb["cells"]) if "def test_causal_keep_mask(" in cell_source(c))
    nb["cells"][i]["source"] = IPYTEST_TEST
    setup = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": IPYTEST_SETUP}
    nb["cells"].insert(i, setup)
    return nb


def _notebooks(hw: Homework, folder: Path) -> dict[str, Path]:
    """The solutions, comparing with a reference above and below every answer and writing q5's test
    in a ``%%ipytest`` cell (honest habits both graders must forgive), and a notebook that is wrong in
    q1 and answers q3 and q4 with the course's references (two submissions, so two ``otter run``:
    each costs a kernel and torch)."""
    solutions = json.loads(hw.autograder_notebook.read_text(encoding="utf-8"))
    honest = _with_ipytest_cell(comparing_submission(hw))

    wrong_and_cheat = json.loads(json.dumps(solutions))
    _replace_function(wrong_and_cheat, "causal_keep_mask", WRONG_CAUSAL_MASK)  # off by one: j < i
    _replace_function(wrong_and_cheat, "masked_attention", "    return attnbook.attention(Q, K, V, mask=mask)")
    _replace_function(
        wrong_and_cheat,
        "to_additive",
        "    import operator\n    return operator.attrgetter('keep_to_additive')(attnbook)(keep, dtype)",
    )

    paths = {}
    for name, nb in {"honest": honest, "wrong_and_cheat": wrong_and_cheat}.items():
        sub = folder / name
        sub.mkdir()
        paths[name] = sub / f"{hw.name}.ipynb"
        paths[name].write_text(json.dumps(nb), encoding="utf-8")
    return paths


def _otter_run(zip_path: Path, notebook: Path) -> dict[str, float]:
    out = notebook.parent / "out"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "otter", "run", "--no-logo", "-a", str(zip_path), "-o", str(out), str(notebook)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=notebook.parent,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    scores = {t["name"]: float(t["score"]) for t in results["tests"] if t.get("name") in FULL}
    outputs = {t["name"]: t.get("output", "") for t in results["tests"] if t.get("name") in FULL}
    return {"scores": scores, "outputs": outputs}


@pytest.fixture(scope="module")
def graded(hw02: Homework, tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("gradescope")
    notebooks = _notebooks(hw02, folder)
    zip_path = autograder_zip(hw02)
    with ThreadPoolExecutor(max_workers=len(notebooks)) as pool:
        runs = dict(zip(notebooks, pool.map(lambda nb: _otter_run(zip_path, nb), notebooks.values())))
    return {"notebooks": notebooks, **runs}


def _pip_requirements(zip_path: Path) -> list[str]:
    """What Gradescope installs with pip from the autograder zip (its environment.yml)."""
    import zipfile

    import yaml

    with zipfile.ZipFile(zip_path) as zf:
        env = yaml.safe_load(zf.read("environment.yml").decode("utf-8"))
    return [r for d in env["dependencies"] if isinstance(d, dict) for r in d.get("pip", [])]


def test_the_autograder_installs_ipytest_where_students_write_tests(hw02: Homework) -> None:
    """A ``%%ipytest`` cell defines its test under ``otter run`` only where ipytest is installed."""
    assert students_write_tests(hw02)
    checked = []
    for hw in all_homework():  # hw02 built by the fixture; the others where they are built and current
        if not students_write_tests(hw) or (hw.name != HW and not is_current(hw)):
            continue
        installed = _pip_requirements(autograder_zip(hw))
        listed = (hw.dist / "autograder" / "requirements.txt").read_text(encoding="utf-8").split()
        for requirement in STUDENT_TEST_REQUIREMENTS:
            assert requirement in installed and requirement in listed, (hw.name, installed, listed)
        checked.append(hw.name)
    assert HW in checked, checked


def test_otter_run_gives_the_honest_solution_full_marks(graded) -> None:
    import importlib.util

    assert importlib.util.find_spec("ipytest") is not None, (
        "ipytest is not installed here, so otter run cannot run q5's %%ipytest cell "
        "(the autograder installs it for every homework whose students write tests): pip install ipytest"
    )
    assert graded["honest"]["scores"] == FULL


def test_otter_run_takes_points_from_a_wrong_solution(graded) -> None:
    scores = graded["wrong_and_cheat"]["scores"]
    assert scores["q1"] < FULL["q1"]
    assert scores["q2"] == FULL["q2"]
    # the report says what the check found, never which line of a (hidden) test raised
    output = graded["wrong_and_cheat"]["outputs"]["q1"]
    assert "failed:" in output and "Error at line" not in output and "check_call(" not in output


def test_otter_run_scores_0_where_the_answer_ran_a_reference(graded) -> None:
    scores, outputs = graded["wrong_and_cheat"]["scores"], graded["wrong_and_cheat"]["outputs"]
    # q4's tests check each function alone: the one that ran a reference scores 0, the other keeps its half
    assert scores["q3"] == 0.0 and scores["q4"] == FULL["q4"] / 2
    assert "`masked_attention` ran attnbook.attention" in outputs["q3"]
    assert "`to_additive` ran attnbook.keep_to_additive" in outputs["q4"]


def test_the_class_grader_agrees_with_otter_run(graded, hw02: Homework) -> None:
    from attngrade.grading.grader import Grader

    names = ["honest", "wrong_and_cheat"]
    with Grader(hw02, jobs=1, sandbox=bwrap_available() is None) as grader:
        results = grader.grade_paths([graded["notebooks"][n] for n in names])
    for name, res in zip(names, results):
        ours = {q.name: float(q.score) for q in res.questions}
        assert ours == graded[name]["scores"], (name, res.notes, res.error)
