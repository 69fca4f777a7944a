"""The homework themselves: structure, the student versions, the build command, the student's view."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from attngrade.authoring.assign import leaks
from attngrade.authoring.master import solution_only_lines
from attngrade.homework import all_homework, load_homework, parse_test_file
from attngrade.sandboxed.integrity import resolve_reference

from ..homework_support import homework
from ..units import unit

HOMEWORK = [hw.name for hw in all_homework()]


def master(name):
    return json.loads(homework(name).master.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", HOMEWORK)
def test_master_is_an_otter_master_without_outputs(name):
    nb = master(name)
    raw = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "raw"]
    config = next(r for r in raw if r.startswith("# ASSIGNMENT CONFIG"))
    assert re.search(r"ok_format:\s*false", config), "tests must use otter's pytest-style format"
    assert re.search(r"pdf:\s*false", config)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs", []) == [] and cell.get("execution_count") is None


@pytest.mark.parametrize("name", HOMEWORK)
def test_questions_have_points_public_and_hidden_tests(name):
    questions = homework(name).questions()
    assert 3 <= len(questions) <= 6
    for q in questions:
        assert q.possible > 0
        assert any(not c.hidden for c in q.cases), f"{q.name} has no public test"
        assert any(c.hidden for c in q.cases), f"{q.name} has no hidden test"
        assert all(c.points and c.points > 0 for c in q.cases), f"{q.name}: every test must be worth points"


@pytest.mark.parametrize("name", HOMEWORK)
def test_forbidden_references_exist(name):
    """A typo in grading.yml would silently leave a reference usable: every name must resolve (the
    guard, the sandbox's stubs and the static reading share one resolver)."""
    hw = homework(name)
    assert hw.forbidden  # reading them checks that each resolves (attngrade.homework.read_forbidden)
    for dotted in hw.forbidden:
        assert resolve_reference(dotted) is not None, f"{name}: {dotted} does not exist"


@pytest.mark.parametrize("name", HOMEWORK)
def test_student_version_has_no_solution_line_and_no_hidden_test(name):
    hw = homework(name)
    assert solution_only_lines(hw.master), "the master should have solution lines to hide"
    assert leaks(hw) == []
    student = hw.student_notebook.read_text(encoding="utf-8")
    assert "hidden=True" not in student and "BEGIN SOLUTION" not in student and "BEGIN TESTS" not in student


def test_leak_check_catches_planted_leaks(tmp_path):
    hw = homework("hw01")
    copy = tmp_path / hw.folder.name
    shutil.copytree(hw.folder, copy)
    leaky = load_homework(copy)
    nb = json.loads(leaky.student_notebook.read_text(encoding="utf-8"))
    line = sorted(solution_only_lines(leaky.master))[0]
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": line})
    ag = json.loads(leaky.autograder_notebook.read_text(encoding="utf-8"))
    nb["metadata"]["otter"]["tests"]["q1"] = ag["metadata"]["otter"]["tests"]["q1"]
    leaky.student_notebook.write_text(json.dumps(nb), encoding="utf-8")
    problems = leaks(leaky)
    assert any("solution line" in p for p in problems)
    assert any("hidden test" in p for p in problems)


@pytest.mark.parametrize("name", HOMEWORK)
def test_points_and_visibility_agree_with_otter(name):
    from otter.test_files import ExceptionTestFile

    nb = json.loads(homework(name).autograder_notebook.read_text(encoding="utf-8"))
    for q, src in nb["metadata"]["otter"]["tests"].items():
        ours = parse_test_file(src, q)
        theirs = ExceptionTestFile.from_metadata(src, q)
        assert ours.name == theirs.name
        assert [(c.points, c.hidden) for c in ours.cases] == [(c.points, c.hidden) for c in theirs.test_cases]
        assert ours.all_or_nothing == theirs.all_or_nothing


@pytest.mark.parametrize("name", HOMEWORK)
def test_gradescope_zip_carries_the_tests_and_the_package(name):
    zips = sorted(homework(name).dist.glob("autograder/*.zip"))
    assert zips, "otter assign writes the Gradescope autograder zip"
    with zipfile.ZipFile(zips[-1]) as zf:
        names = zf.namelist()
        env = zf.read("environment.yml").decode()
    assert any(n.startswith("tests/q") for n in names)
    assert "files/attnbook_pkg/pyproject.toml" in names
    assert "files/attnbook_pkg/src/attngrade/checks/__init__.py" in names
    assert "/autograder/source/files/attnbook_pkg" in env and "torch" in env


def test_student_notebook_runs_and_checks_read_well(tmp_path):
    """The student's view: the handed-out notebook runs top to bottom in a Jupyter kernel, and
    grader.check explains a wrong answer (what was called, expected vs got, shapes)."""
    import nbformat
    from nbclient import NotebookClient

    hw = homework("hw01")
    nb = nbformat.read(hw.student_notebook, as_version=4)
    wrong = "def softmax_beta(s, beta=1.0):\n    return torch.softmax(s, dim=-1)  # forgets beta\n"
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("def softmax_beta"):
            cell.source = wrong
    shutil.copy(hw.student_notebook, tmp_path / "hw01.ipynb")  # grader.check reads the tests from it
    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("grader.check"):
            text = json.dumps([o.get("data", {}).get("text/plain", "") + o.get("text", "") for o in cell.outputs])
            outputs[cell.source] = text
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    q1 = outputs['grader.check("q1")']
    assert "softmax_beta(tensor float64 (3,), beta=2.0)" in q1 and "expected" in q1 and "got" in q1
    q2 = outputs['grader.check("q2")']
    assert "expected a tuple of 3 results, got None" in q2
    assert list(tmp_path.glob("*.zip")), "the export cell writes the submission zip"


@unit("homework: a failing solution")  # a long command that shares nothing with the other tests
def test_assign_command_fails_when_a_solution_fails_its_tests(tmp_path):
    """``python -m attngrade.authoring.assign`` (make assignments) must refuse a broken master."""
    hw = homework("hw00")
    copy = tmp_path / hw.folder.name
    shutil.copytree(hw.folder, copy, ignore=shutil.ignore_patterns("dist"))
    nb = json.loads((copy / "hw00.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and "def mask_row_to_column" in src:
            cell["source"] = src.replace(
                "return M.transpose(0, 1)  # (n, m) -> (m, n)", "return M  # forgot the transpose"
            )
            assert cell["source"] != src
    (copy / "hw00.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "attngrade", "assign", str(copy)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode != 0
    assert "hw00" in proc.stderr and ("otter assign failed" in proc.stderr or "solutions get" in proc.stderr)


def test_batch_log_gives_each_homework_its_own_log_and_verdict():
    """One process builds a group of homework (attngrade.authoring.otter_batch); its output is split per
    master, and a master whose build died with the process counts as failed."""
    from attngrade.authoring.otter_batch import MARK, split_log

    output = "\n".join(
        [
            "a line before any master",
            f"{MARK}START /x/hw00.ipynb",
            "Generating views",
            f"{MARK}OK /x/hw00.ipynb",
            f"{MARK}START /x/hw01.ipynb",
            "Traceback (most recent call last):",
            "ValueError: no tests",
            f"{MARK}FAILED /x/hw01.ipynb",
            f"{MARK}START /x/hw02.ipynb",
            "Generating views",  # and then the process was killed
        ]
    )
    logs = split_log(output)
    assert logs == {
        "/x/hw00.ipynb": (True, "Generating views"),
        "/x/hw01.ipynb": (False, "Traceback (most recent call last):\nValueError: no tests"),
        "/x/hw02.ipynb": (False, "Generating views"),
    }


def test_a_master_that_breaks_otter_fails_alone_in_its_batch(tmp_path):
    """Two homework built by one otter process: the broken master is reported, the other built."""
    from attngrade.authoring.assign import build

    good, bad = (
        load_homework(
            shutil.copytree(
                homework(n).folder, tmp_path / homework(n).folder.name, ignore=shutil.ignore_patterns("dist")
            )
        )
        for n in ("hw00", "hw01")
    )
    nb = json.loads(bad.master.read_text(encoding="utf-8"))
    nb["cells"][0]["source"] = "# ASSIGNMENT CONFIG\nname: [unclosed\n"  # YAML otter cannot read
    bad.master.write_text(json.dumps(nb), encoding="utf-8")
    problems = build([good, bad], jobs=1, verify=False, otter_tests=False)
    assert len(problems) == 1 and problems[0].startswith("hw01: otter assign failed"), problems
    assert "Traceback" in problems[0], "the failed master's own log is in its problem"
    assert good.student_notebook.exists() and good.autograder_notebook.exists()
    assert not bad.student_notebook.exists()
