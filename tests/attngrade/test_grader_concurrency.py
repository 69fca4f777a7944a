"""The same notebook gets the same score: alone, in any class, in any order, with any number of
sandboxes, while another grading runs on the same machine, and as root or as an ordinary user.

(a) in one process: a few honest and wrong notebooks of hw01, graded alone, in a class full of
    hostile submissions (jobs=2), in reverse order (jobs=1); every test case's verdict must agree;
(b) two and three ``attnbook-grade`` processes at once (hw01 twice, hw02), each on its own output
    folder, give exactly the gradebook each gives alone, and all exit 0;
(c) as root, the command run by an ordinary user (uid 1000) gives the root run's gradebook, and
    nothing a submission left behind touches it after the command exits.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from shlex import quote

import pytest

from attngrade.grading.grader import Grader

from ..homework_support import bwrap_available, homework, running_as_root, user_namespace_available
from ..paths import ROOT  # noqa: E402
from ..submissions import code_cells, load_mutants, mutant_submission, stub_submission, submission_with
from ..units import unit
from .test_grader_isolation import LIMITS, attacks

pytestmark = pytest.mark.skipif(bwrap_available() is not None, reason=f"no sandbox here: {bwrap_available()}")

REPO = ROOT
HOSTILE = [
    "fork_bomb",
    "fills_tmp_and_shm",
    "kills_everything_it_can_in_a_cell",
    "leaves_a_background_process",
    "endless_loop_in_a_cell",
    "writes_garbage_to_the_grader_socket",
    "huge_allocation_in_a_cell",
    "kills_everything_in_q5",
    "signals_the_grader",
]
CHEAP_HOSTILE = ["fork_bomb", "fills_tmp_and_shm", "kills_everything_it_can_in_a_cell", "leaves_a_background_process"]


def mutant_notebook(hw, name):
    return mutant_submission(hw, load_mutants(hw)[name])


@functools.cache
def honest_set() -> dict[str, list[str]]:
    """hw01 notebooks whose scores must not depend on anything but themselves."""
    hw = homework("hw01")
    return {
        "solutions": code_cells(submission_with(hw, {})),
        "min_shift": code_cells(mutant_notebook(hw, "softmax subtracts the minimum instead of the maximum")),
        "no_key_bias": code_cells(mutant_notebook(hw, "key bias forgotten")),
        "retrieve_ignores_beta": code_cells(mutant_notebook(hw, "retrieve ignores beta")),
        "stub": code_cells(stub_submission(hw)),
    }


def hostile_set(names) -> list[tuple[str, list]]:
    table = attacks(Path("/nonexistent/class"), Path("/nonexistent/out"))
    return [(f"hostile_{n}", table[n][0]) for n in names]


def verdicts(result):
    return [(q.name, c.name, c.passed) for q in result.questions for c in q.cases]


def grade(items, jobs):
    with Grader(homework("hw01"), jobs=jobs, limits=LIMITS) as grader:
        return {r.submission: r for r in grader.grade_sources(items)}


@functools.cache
def graded_alone():
    out = {}
    with Grader(homework("hw01"), jobs=1, limits=LIMITS) as grader:
        for name, cells in honest_set().items():
            (out[name],) = grader.grade_sources([(name, cells)])
    return out


def _interleave(a, b):
    out = []
    for k in range(max(len(a), len(b))):
        out += a[k : k + 1] + b[k : k + 1]
    return out


SETTINGS = {
    "in_a_hostile_class_jobs2": lambda: grade(_interleave(hostile_set(HOSTILE), list(honest_set().items())), jobs=2),
    "in_reverse_order_with_hostile_jobs1": lambda: grade(
        list(reversed(_interleave(list(honest_set().items()), hostile_set(CHEAP_HOSTILE)))), jobs=1
    ),
}


@pytest.mark.parametrize("setting", list(SETTINGS))
@unit("concurrency: in one process")  # (a) shares nothing with (b) and (c)
def test_the_same_notebooks_get_the_same_scores(setting):
    alone = graded_alone()
    assert alone["solutions"].total == 22 and alone["stub"].total == 0
    assert all(0 < alone[n].total < 22 for n in ("min_shift", "no_key_bias", "retrieve_ignores_beta"))
    results = SETTINGS[setting]()
    for name in honest_set():
        got, want = results[name], alone[name]
        assert verdicts(got) == verdicts(want), (
            name,
            [c.message[:200] for q in got.questions for c in q.cases if not c.passed],
            got.notes,
        )
        assert got.total == want.total and got.status == want.status == "ok", (name, got.notes, got.error)
        assert not got.notes, (name, got.notes)
    assert all(r.status != "error" for r in results.values()), {n: r.error for n, r in results.items() if r.error}


# -- (b) and (c): the command line ---------------------------------------------------------------


def _write_class(folder: Path, notebooks: dict[str, dict | list]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, nb in notebooks.items():
        if isinstance(nb, list):  # code cells
            nb = {
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {},
                "cells": [
                    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": c}
                    for c in nb
                ],
            }
        (folder / f"{name}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    return folder


#: a folder on the instructor's PYTHONPATH (set by ``shared``), as ``pip install --target`` or a
#: module system makes one: every grading run of this module has it, and dana's notebook imports from it
PYTHONPATH: list[str] = []


def imports_from_pythonpath(hw) -> dict:
    """The solutions, with an answer cell that starts by importing a module found only on PYTHONPATH."""
    nb = submission_with(hw, {})
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and "def softmax_beta(" in "".join(c["source"]))
    cell["source"] = "import course_extra\nassert course_extra.GREETING\n\n\n" + "".join(cell["source"])
    return nb


def hw01_class(folder: Path, out: Path) -> Path:
    table = attacks(folder, out)  # the attacks aim at this class's own folders
    return _write_class(
        folder,
        {
            "alice": submission_with(homework("hw01"), {}),
            "dana": imports_from_pythonpath(homework("hw01")),
            "bob": mutant_notebook(homework("hw01"), "key bias forgotten"),
            "carol": stub_submission(homework("hw01")),
            "mallory": table["kills_everything_it_can_in_a_cell"][0],
            "trudy": table["leaves_a_background_process"][0],
            "eve": table["signals_the_grader"][0],
        },
    )


def hw02_class(folder: Path) -> Path:
    hw = homework("hw02")
    return _write_class(
        folder,
        {
            "alice": submission_with(hw, {}),
            "bob": mutant_notebook(hw, "attention fills -1e9 (fully masked rows become uniform)"),
            "carol": stub_submission(hw),
        },
    )


CLI_ARGS = ["--jobs", "1", "--no-build", "--no-progress", "--timeout", "30", "--call-timeout", "3"]


def cli(homework_name: str, folder: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "attngrade.cli", homework_name, str(folder), "--out", str(out), *CLI_ARGS]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(PYTHONPATH)
    return env


def gradebook(out: Path) -> list[dict[str, str]]:
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        return sorted(csv.DictReader(f), key=lambda row: row["submission"])


def run_alone(argv) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)


def run_together(argvs) -> list[subprocess.CompletedProcess]:
    procs = [
        subprocess.Popen(a, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for a in argvs
    ]
    done = []
    for a, p in zip(argvs, procs):
        try:
            stdout, stderr = p.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        done.append(subprocess.CompletedProcess(a, p.returncode, stdout, stderr))
    return done


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A work folder every user can reach (for (c)), with hw01's and hw02's classes, and hw01's
    gradebook graded alone by this (root or not) user."""
    homework("hw01"), homework("hw02")  # built before anything runs
    work = Path(tempfile.mkdtemp(prefix="attngrade-concurrency-"))
    try:
        os.chmod(work, 0o755)
        (work / "home").mkdir()
        extra = work / "course packages"
        extra.mkdir(mode=0o755)
        (extra / "course_extra.py").write_text("GREETING = 'found on PYTHONPATH'\n")
        os.chmod(extra / "course_extra.py", 0o644)
        PYTHONPATH[:] = [str(extra)]
        c1 = hw01_class(work / "hw01_class", work / "user_out")  # its background process aims at (c)'s output
        c2 = hw02_class(work / "hw02_class")
        alone1 = run_alone(cli("hw01", c1, work / "alone1"))
        assert alone1.returncode == 0, (alone1.stdout[-2000:], alone1.stderr[-3000:])
        yield {"work": work, "hw01_class": c1, "hw02_class": c2, "hw01_book": gradebook(work / "alone1")}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_concurrent_gradings_give_what_each_gives_alone(shared):
    """hw01 twice (two instructors, one class folder) and hw02, all at once; each alone first."""
    work, c1, c2, book1 = shared["work"], shared["hw01_class"], shared["hw02_class"], shared["hw01_book"]
    alone2 = run_alone(cli("hw02", c2, work / "alone2"))
    assert alone2.returncode == 0, (alone2.stdout[-2000:], alone2.stderr[-3000:])
    book2 = gradebook(work / "alone2")
    together = run_together(
        [
            cli("hw01", c1, work / "together1a"),
            cli("hw01", c1, work / "together1b"),
            cli("hw02", c2, work / "together2"),
        ]
    )
    for proc in together:
        assert proc.returncode == 0, (proc.args, proc.stdout[-2000:], proc.stderr[-3000:])
    assert [r["total"] for r in book1 if r["submission"] in ("alice", "carol")] == ["22", "0"]
    assert 0 < float(next(r["total"] for r in book1 if r["submission"] == "bob")) < 22
    assert next(r["total"] for r in book2 if r["submission"] == "alice") == next(
        r["possible"] for r in book2 if r["submission"] == "alice"
    )
    assert (
        0
        < float(next(r["total"] for r in book2 if r["submission"] == "bob"))
        < float(next(r["possible"] for r in book2 if r["submission"] == "bob"))
    )
    assert all(r.get("status", "ok") != "error" for r in book1 + book2), book1 + book2
    assert gradebook(work / "together1a") == book1
    assert gradebook(work / "together1b") == book1
    assert gradebook(work / "together2") == book2


# -- (c) as an ordinary user --------------------------------------------------------------------


def _untraversable_top(path: str) -> str | None:
    """The highest folder above ``path`` that other users may not enter (no o+x), or None."""
    for parent in reversed(Path(path).parents):
        if str(parent) != "/" and not os.stat(parent).st_mode & 0o001:
            return str(parent)
    return None


def _as_ordinary_user_with_setpriv(argv, work: Path) -> list[str]:
    """uid 1000 on this machine (setpriv), in a mount namespace where each folder it could not
    enter on the way to the Python install, the checkout and its virtual environment (/root, where
    the Python install may live; a private folder made by mktemp -d holding the checkout) is a
    traversable tmpfs with those folders bound back into it."""
    needed = list(dict.fromkeys(os.path.realpath(p) for p in (sys.base_prefix, REPO, sys.prefix)))
    closed = sorted({top for p in needed if (top := _untraversable_top(p))})
    stashes, rebinds = [], []
    for k, path in enumerate(needed):
        if any(path.startswith(top + "/") for top in closed):
            stash = work / f"mount-{k}"
            stash.mkdir(exist_ok=True)
            stashes.append(f"mount --bind {quote(path)} {quote(str(stash))}")
            rebinds.append(f"mkdir -p {quote(path)} && mount --bind {quote(str(stash))} {quote(path)}")
    covers = [f"mount -t tmpfs -o mode=0755 tmpfs {quote(top)}" for top in closed]
    script = " && ".join([*stashes, *covers, *rebinds, 'exec "$@"'])
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        script,
        "sh",
        "setpriv",
        "--reuid",
        "1000",
        "--regid",
        "1000",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "env",
        f"HOME={work / 'home'}",
        f"MPLCONFIGDIR={work / 'home'}",
        "PYTHONDONTWRITEBYTECODE=1",
        *argv,
    ]


def _as_ordinary_user_with_bwrap(argv, work: Path) -> list[str]:
    """uid 1000 in a user namespace of its own, made by bubblewrap. The host's /proc is bound (not
    a new one): the grader's own bubblewrap could not mount a proc inside a bwrap-made one."""
    base = os.path.realpath(sys.base_prefix)
    # the checkout and its virtual environment go back on top of the fresh /root and /tmp (a CI
    # checkout may live under either)
    again = list(dict.fromkeys([base, str(REPO), os.path.realpath(sys.prefix)]))
    rebind = [a for p in again for a in ("--ro-bind", p, p)]
    return [
        "bwrap",
        "--unshare-user",
        "--uid",
        "1000",
        "--gid",
        "1000",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--bind",
        "/proc",
        "/proc",
        "--tmpfs",
        "/root",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        *rebind,
        "--bind",
        str(work),
        str(work),
        "--setenv",
        "HOME",
        str(work / "home"),
        "--setenv",
        "MPLCONFIGDIR",
        str(work / "home"),
        "--setenv",
        "PYTHONDONTWRITEBYTECODE",
        "1",
        "--chdir",
        str(REPO),
        *argv,
    ]


def _ordinary_user_reason(method: str) -> str | None:
    if not running_as_root():
        return "already an ordinary user: every other grading test runs as one"
    if method == "setpriv":
        for tool in ("unshare", "setpriv"):
            if shutil.which(tool) is None:
                return f"{tool} (util-linux) is not installed"
        return bwrap_available()
    return user_namespace_available()


@pytest.mark.parametrize("method", ["setpriv", "bwrap"])
def test_an_ordinary_user_gets_the_gradebook_root_gets(method, shared):
    why = _ordinary_user_reason(method)
    if why:
        pytest.skip(why)
    work = shared["work"]
    out = work / "user_out"
    shutil.rmtree(out, ignore_errors=True)
    for p in [work, *work.rglob("*")]:
        if not p.is_symlink():
            os.chmod(p, 0o777 if p.is_dir() else 0o666)
    wrap = _as_ordinary_user_with_setpriv if method == "setpriv" else _as_ordinary_user_with_bwrap
    argv = wrap(cli("hw01", shared["hw01_class"], out), work)
    proc = subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    book = gradebook(out)
    assert book == shared["hw01_book"]  # root's run of the same class
    assert next(r["total"] for r in book if r["submission"] == "alice") == "22"
    assert next(r["total"] for r in book if r["submission"] == "dana") == "22"  # its import on PYTHONPATH was found
    if method == "setpriv":
        assert (out / "gradebook.csv").stat().st_uid == 1000
    # a process a submission left behind would have woken up and rewritten the gradebook by now
    before = (out / "gradebook.csv").read_bytes()
    time.sleep(3)
    assert (out / "gradebook.csv").read_bytes() == before
