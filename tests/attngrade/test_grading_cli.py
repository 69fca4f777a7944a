"""The class grader's commands: ``python -m attngrade``, ``attnbook-grade`` and the benchmark; one
parser, whose options are the keyword arguments of each command's function."""

from __future__ import annotations

import csv
import inspect
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from attngrade import cli

from ..homework_support import homework
from ..submissions import stub_submission, submission_with, write_notebook
from ..units import unit

WRONG_SCORES_ROW = "def scores_row(Q, K):\n    return Q @ K.T\n"
CLASS = ["alice", "bob", "carol", "dana", "erin", "frank"]


def grade_command(folder: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "attngrade", "hw00", str(folder), "--out", str(out), "--no-build", *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def read_gradebook(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "gradebook.csv", newline="") as f:
        return {r["submission"]: r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory) -> SimpleNamespace:
    """One hw00 class, graded once by the command: notebooks (right, wrong, as handed out) and the
    zips students export (``grader.export()``: the notebook and otter's log; a zip holding two
    notebooks; a file that is not a zip). The output folder holds a stale feedback file from an
    older run, which a full run must remove."""
    hw = homework("hw00")
    root = tmp_path_factory.mktemp("cli")
    subs = root / "submitted"
    subs.mkdir()
    write_notebook(submission_with(hw, {}), subs / "alice.ipynb")
    write_notebook(submission_with(hw, {"scores_row": WRONG_SCORES_ROW}), subs / "bob.ipynb")
    write_notebook(stub_submission(hw), subs / "carol.ipynb")
    right = write_notebook(submission_with(hw, {}), root / "hw00.ipynb")
    wrong = write_notebook(submission_with(hw, {"scores_row": WRONG_SCORES_ROW}), root / "wrong.ipynb")
    with zipfile.ZipFile(subs / "dana.zip", "w") as z:  # the layout of otter's export
        z.write(right, "hw00.ipynb")
        z.writestr(".OTTER_LOG", b"\x80binary log")
    with zipfile.ZipFile(subs / "erin.zip", "w") as z:
        z.write(right, "hw00.ipynb")
        z.write(wrong, "copy/hw00.ipynb")
    (subs / "frank.zip").write_bytes(b"PK\x03\x04 this is not a zip")
    # what a class folder also holds, which is no submission: each is listed with its reason
    (subs / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (subs / "notes.txt").write_text("grade these by Friday")
    (subs / "empty folder").mkdir()
    out = root / "grades"
    (out / "feedback").mkdir(parents=True)
    (out / "feedback" / "stale.md").write_text("left from an older run")
    proc = grade_command(subs, out)
    assert proc.returncode == 0, proc.stderr
    return SimpleNamespace(hw=hw, root=root, submitted=subs, out=out, proc=proc, rows=read_gradebook(out))


def test_grade_a_folder_writes_gradebook_and_feedback(graded_class):
    out, rows = graded_class.out, graded_class.rows
    assert "graded 6 submissions" in graded_class.proc.stdout
    with open(out / "gradebook.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header == ["submission", "q1", "q2", "q3", "q4", "q5", "total", "possible", "status", "error"]
    assert sorted(rows) == CLASS
    assert {r["status"] for r in rows.values()} == {"ok"}
    summary = (out / "summary.md").read_text()
    assert "| q2 |" in summary and "Hidden tests failed" in summary
    not_graded = summary[summary.index("Not graded (3 entries") :]
    for line in ("'.DS_Store': a hidden file", "'empty folder': a folder with no", "'notes.txt': not a .ipynb"):
        assert line in not_graded and line in graded_class.proc.stderr
    assert (out / "histogram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rows["alice"]["total"] == rows["alice"]["possible"] == "20"
    assert rows["carol"]["total"] == "0"
    bob = rows["bob"]
    assert float(bob["q2"]) < 4 and bob["q1"] == "3" and bob["q5"] == "5"
    feedback = (out / "feedback" / "bob.md").read_text()
    assert "## q2" in feedback and "FAILED" in feedback and "expected" in feedback
    # after grading, hidden tests have run: the feedback says so once, never that they "will run"
    assert "run when your notebook is graded" not in feedback
    assert feedback.count("Hidden tests (other shapes, dtypes and edge cases) ran at grading") == 1
    # a full run replaces the feedback folder: the stale file of an older run is gone
    assert sorted(p.name for p in (out / "feedback").iterdir()) == [f"{n}.md" for n in CLASS]


COMMANDS = ["grade", "assign", "release", "bench", "export", "course-report", "sample-class"]


def test_console_script_is_installed_and_explains_itself():
    script = shutil.which("attnbook-grade", path=str(Path(sys.executable).parent))
    assert script, "pip install -e . installs the attnbook-grade console script"
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "submissions" in proc.stdout
    listed = proc.stdout[proc.stdout.index("commands:") :]
    for command in COMMANDS:
        assert f"\n    {command}" in listed, command


@pytest.mark.parametrize("command", COMMANDS)
def test_one_command_line_with_subcommands(command, capsys):
    """``python -m attngrade COMMAND --help`` explains each command, under the name its usage had
    when each had its own parser (``attnbook-grade`` for grading)."""
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    prog = "attnbook-grade" if command == "grade" else f"python -m attngrade {command}"
    assert capsys.readouterr().out.startswith(f"usage: {prog} [-h]")


def _stage(command: str):
    """The function a command runs, from its stage's module."""
    from attngrade.authoring import assign, bench, release, sample_class
    from attngrade.grading import course_report, export, run

    return {
        "grade": run.grade,
        "assign": assign.main,
        "release": release.main,
        "bench": bench.main,
        "export": export.main,
        "course-report": course_report.main,
        "sample-class": sample_class.main,
    }[command]


@pytest.mark.parametrize("command", COMMANDS)
def test_each_option_is_a_keyword_argument_of_the_commands_function(command):
    """The parser's options are exactly the keyword-only parameters of the command's function
    (grade's also takes the builder, which the command line passes): a renamed option or parameter
    fails here, not when an instructor runs the command."""
    _, parsers = cli.build_parser()
    options = {a.dest for a in parsers[command]._actions if a.dest not in ("help", "run")}
    parameters = inspect.signature(_stage(command)).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())
    assert options == set(parameters) - ({"build"} if command == "grade" else set())
    assert cli.NAMES == tuple(COMMANDS)


def test_without_a_command_the_arguments_are_grades(capsys):
    """``attnbook-grade HOMEWORK FOLDER`` and ``python -m attngrade grade HOMEWORK FOLDER`` are one
    command; an unknown option is reported with grade's own usage."""
    for argv in (["hw00", "x", "--bogus"], ["grade", "hw00", "x", "--bogus"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: attnbook-grade [-h]") and "unrecognized arguments: --bogus" in err


def test_unknown_homework_is_a_clear_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "attngrade", "hw99", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0 and "no homework 'hw99'" in proc.stderr


@unit("cli: benchmark")  # a long command that shares nothing with the other tests
def test_benchmark_reports_both_graders():
    homework("hw01")  # built
    proc = subprocess.run(
        [sys.executable, "-m", "attngrade", "bench", "hw01", "-n", "4", "--otter-n", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "class grader, 4 submissions" in proc.stdout and "full marks: 4/4" in proc.stdout
    assert "otter grade_submission, 1 submissions" in proc.stdout and "full marks: 1/1" in proc.stdout


def test_zips_exported_by_students_are_graded_and_bad_zips_score_zero(graded_class):
    """``grader.export()`` hands students a zip holding their notebook (and otter's log): the
    grader reads the notebook from it. A zip with no single notebook, or a corrupt one, scores 0
    with a note saying why, and does not stop the run."""
    rows, feedback = graded_class.rows, graded_class.out / "feedback"
    assert rows["dana"]["total"] == rows["dana"]["possible"] == "20"
    assert rows["erin"]["total"] == "0" and rows["frank"]["total"] == "0"
    assert "must hold exactly one notebook" in (feedback / "erin.md").read_text()
    assert "not a valid zip" in (feedback / "frank.md").read_text()


def test_a_student_with_both_a_notebook_and_a_zip_is_a_clear_error(tmp_path):
    hw = homework("hw00")
    write_notebook(stub_submission(hw), tmp_path / "gina.ipynb")
    with zipfile.ZipFile(tmp_path / "gina.zip", "w") as z:
        z.write(tmp_path / "gina.ipynb", "hw00.ipynb")
    proc = subprocess.run(
        [sys.executable, "-m", "attngrade", "hw00", str(tmp_path), "--no-build"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "gina" in proc.stderr and ".zip" in proc.stderr


def test_only_regrades_some_students_and_merges(graded_class, tmp_path):
    """Carol hands in a corrected notebook late: ``--only carol`` grades her alone and merges her
    row and feedback into the class's gradebook, leaving every other row and feedback file as it was.
    The same run compares with the old gradebook (``--compare``: carol's scores raised, none
    lowered, no test changed) and writes Canvas's import file for the whole class (``--export``);
    a roster that misses students stops an export with exit 2 and their names."""
    subs, out = tmp_path / "submitted", tmp_path / "grades"
    shutil.copytree(graded_class.submitted, subs)
    shutil.copytree(graded_class.out, out)
    old = tmp_path / "old" / "gradebook.csv"
    old.parent.mkdir()
    shutil.copy(graded_class.out / "gradebook.csv", old)
    shutil.copy(graded_class.out / "tests.json", old.parent / "tests.json")
    roster = tmp_path / "roster.csv"
    roster.write_text("submission,id,name\n" + "".join(f"{n},{k},{n.title()}\n" for k, n in enumerate(CLASS, start=1)))
    write_notebook(submission_with(graded_class.hw, {}), subs / "carol.ipynb")
    lms = ["--compare", str(old), "--export", "canvas", "--roster", str(roster)]
    proc = grade_command(subs, out, "--no-progress", "--only", "carol", *lms)
    assert proc.returncode == 0, proc.stderr
    assert "graded 1 submissions" in proc.stdout
    comparison = (out / "comparison.md").read_text()
    assert "## Lowered scores (0)" in comparison and "- carol, q1: 0 → " in comparison, comparison
    assert "- changed: none" in comparison and "- added: none" in comparison
    assert "LOWERED" not in proc.stdout and "0 scores lowered" in proc.stdout
    canvas = list(csv.reader(io.StringIO((out / "canvas.csv").read_text())))
    assert canvas[0][-1] == "hw00" and canvas[1][0] == "Points Possible" and len(canvas) == 2 + len(CLASS)
    assert {row[1]: row[-1] for row in canvas[2:]}["3"] == "20"  # carol (id 3): full marks now
    roster.write_text("submission,id\nalice,1\n")
    assert cli.main(["export", str(out / "gradebook.csv"), "--roster", str(roster), "--format", "moodle"]) == 2
    rows = read_gradebook(out)
    assert sorted(rows) == CLASS
    assert rows["carol"]["total"] == "20"
    assert {n: r for n, r in rows.items() if n != "carol"} == {
        n: r for n, r in graded_class.rows.items() if n != "carol"
    }
    before, after = graded_class.out / "feedback", out / "feedback"
    assert sorted(p.name for p in after.iterdir()) == [f"{n}.md" for n in CLASS]
    assert (after / "carol.md").read_text() != (before / "carol.md").read_text()
    assert all((after / f"{n}.md").read_text() == (before / f"{n}.md").read_text() for n in CLASS if n != "carol")
    # the summary is the whole class's: the hidden tests bob failed are still counted, carol's are gone
    failed_before = json.loads((graded_class.out / "hidden_failures.json").read_text())
    failed_after = json.loads((out / "hidden_failures.json").read_text())
    assert failed_before["bob"] and failed_before["carol"] and failed_after["carol"] == []
    assert {n: f for n, f in failed_after.items() if n != "carol"} == {
        n: f for n, f in failed_before.items() if n != "carol"
    }
    summary = (out / "summary.md").read_text()
    for case in failed_before["bob"]:
        assert f"- {case}: " in summary, summary
    unknown = grade_command(subs, out, "--no-progress", "--only", "dave")
    assert unknown.returncode == 2 and "dave" in unknown.stderr


def test_refuses_to_grade_without_bubblewrap(tmp_path):
    hw = homework("hw00")
    subs = tmp_path / "submitted"
    subs.mkdir()
    write_notebook(submission_with(hw, {}), subs / "alice.ipynb")
    env = {"PATH": str(tmp_path / "nothing-here"), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "attngrade", "hw00", str(subs), "--out", str(tmp_path / "g"), "--no-build"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2
    assert "bubblewrap" in proc.stderr and "--unsafe-no-sandbox" in proc.stderr
    assert not (tmp_path / "g" / "gradebook.csv").exists()


def test_a_sandbox_that_fails_twice_is_status_error_and_exit_1(tmp_path, monkeypatch, capsys):
    from attngrade.grading import bubblewrap, export, gradebook, report, run

    hw = homework("hw00")
    subs = tmp_path / "submitted"
    subs.mkdir()
    write_notebook(submission_with(hw, {}), subs / "alice.ipynb")
    calls = []
    real_start, real_spawn = bubblewrap.Worker.start, bubblewrap.Worker.spawn

    def broken_spawn(self, job):
        calls.append(1)
        raise bubblewrap.InfrastructureError("simulated: the worker did not answer")

    # no sandbox is needed where every spawn fails (starting one costs seconds)
    monkeypatch.setattr(bubblewrap.Worker, "start", lambda self: None)
    monkeypatch.setattr(bubblewrap.Worker, "spawn", broken_spawn)
    code = cli.main([hw.name, str(subs), "--out", str(tmp_path / "g"), "--no-build", "--no-progress"])
    assert code == 1
    assert len(calls) == 2, "retried once"
    with open(tmp_path / "g" / "gradebook.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["status"] == "error" and "simulated" in row["error"]
    assert "not the students' fault" in capsys.readouterr().err
    # the same failure once, then a working sandbox: the retry grades it fully
    state = {"n": 0}

    def flaky_spawn(self, job):
        state["n"] += 1
        if state["n"] == 1:
            raise bubblewrap.InfrastructureError("simulated once")
        return real_spawn(self, job)

    monkeypatch.setattr(bubblewrap.Worker, "start", real_start)
    monkeypatch.setattr(bubblewrap.Worker, "spawn", flaky_spawn)
    # the comparison and the export read the run's own rows: the only gradebook read is the old one
    read = []

    def recording(path):
        read.append(Path(path))
        return real_read(path)

    real_read = gradebook.read_gradebook
    for module in (report, run, export):
        monkeypatch.setattr(module, "read_gradebook", recording)
    roster = tmp_path / "roster.csv"
    roster.write_text("submission,id\nalice,1\n")
    lms = ["--compare", str(tmp_path / "g" / "gradebook.csv"), "--export", "canvas", "--roster", str(roster)]
    assert cli.main([hw.name, str(subs), "--out", str(tmp_path / "h"), "--no-build", "--no-progress", *lms]) == 0
    assert read == [tmp_path / "g" / "gradebook.csv"]
    with open(tmp_path / "h" / "gradebook.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["status"] == "ok" and row["total"] == row["possible"]
    canvas = list(csv.reader(io.StringIO((tmp_path / "h" / "canvas.csv").read_text())))
    assert canvas[2][1] == "1" and canvas[2][-1] == row["total"]
    assert "## Lowered scores (0)" in (tmp_path / "h" / "comparison.md").read_text()
    assert f"alice,total,0,{row['total']},+{row['total']}" in (tmp_path / "h" / "comparison.csv").read_text()


def test_unsafe_no_sandbox_grades_trusted_notebooks_the_same(graded_class, tmp_path):
    """--unsafe-no-sandbox (a trusted setting) runs the same worker without namespaces and writes
    the gradebook the sandboxes give; it cleans up its own working folder."""
    import glob
    import tempfile

    before = set(glob.glob(f"{tempfile.gettempdir()}/attngrade-unsafe-*"))
    out = tmp_path / "unsafe"
    proc = grade_command(graded_class.submitted, out, "--no-progress", "--unsafe-no-sandbox")
    assert proc.returncode == 0, proc.stderr
    assert "WITHOUT a sandbox" in proc.stderr
    assert (out / "gradebook.csv").read_text() == (graded_class.out / "gradebook.csv").read_text()
    assert set(glob.glob(f"{tempfile.gettempdir()}/attngrade-unsafe-*")) == before


@unit("cli: PYTHONPATH")  # a long command that shares nothing with the other tests
def test_the_sandbox_sees_the_packages_on_the_instructors_pythonpath(tmp_path):
    """A course whose packages are found through ``PYTHONPATH`` (``pip install --target``, a module
    system): the sandbox mounts those folders read-only and puts them on its path, so a notebook
    that imports from them gets the score it gets in Jupyter. Without the variable, it cannot."""
    hw = homework("hw00")
    extra = tmp_path / "course packages"
    extra.mkdir()
    (extra / "course_extra.py").write_text("GREETING = 'hello from PYTHONPATH'\n")
    subs = tmp_path / "submitted"
    subs.mkdir()
    answer = "import course_extra\nassert course_extra.GREETING\n\n\n"
    nb = submission_with(hw, {})
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and "def scores_row(" in "".join(c["source"]))
    cell["source"] = answer + "".join(cell["source"])
    write_notebook(nb, subs / "uses_extra.ipynb")
    argv = [sys.executable, "-m", "attngrade", "hw00", str(subs), "--no-build", "--no-progress", "--out"]
    seen = subprocess.run(
        [*argv, str(tmp_path / "with")],
        env={**os.environ, "PYTHONPATH": f"{extra}{os.pathsep}/nonexistent"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert seen.returncode == 0, seen.stderr
    row = read_gradebook(tmp_path / "with")["uses_extra"]
    assert row["total"] == row["possible"] == "20", row
    unseen = subprocess.run(
        [*argv, str(tmp_path / "without")],
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert unseen.returncode == 0, unseen.stderr
    assert float(read_gradebook(tmp_path / "without")["uses_extra"]["total"]) < 20
