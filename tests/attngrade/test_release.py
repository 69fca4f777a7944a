"""The student-facing release (``python -m attngrade release``, ``make release``).

The release is built once into a temporary folder from the built homework, without the website
(the strict book build takes about a minute; ``make release`` runs it). Then every file of it, and
every member of its wheel, sdist and any other archive, is read and checked, independently of the
release command's own scan, for the masters' solution lines, the hidden tests' names and bodies,
master notebooks, mutants, grading settings and autograder zips. The release's own scan is then
shown to catch each kind of leak when one is planted.
"""

from __future__ import annotations

import ast
import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from attngrade import cli
from attngrade.authoring import leaks
from attngrade.authoring import release as rel
from attngrade.authoring.assign import build
from attngrade.authoring.master import norm, solution_and_prompt_lines, solution_only_lines
from attngrade.homework import all_homework


@pytest.fixture(scope="module")
def homeworks():
    """Every homework, built (student version and autograder) where missing or stale, as
    tests/homework_support.py does: otter's own run of the solutions is left to the homework tests."""
    homeworks = all_homework()
    stale = [hw for hw in homeworks if not hw.is_built()]
    if stale:
        problems = build(stale, verify=False, otter_tests=False)
        assert not problems, "\n".join(problems)
    return homeworks


@pytest.fixture(scope="module")
def released(homeworks, tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "course"
    problems, info = rel.release(out, book=False, assign=False, homeworks=homeworks)
    assert not problems, "\n".join(problems)
    return out


def _archive_members(name: str, data: bytes):
    if name.endswith((".whl", ".zip")) or zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return [(f"{name}!{i.filename}", z.read(i)) for i in z.infolist() if not i.is_dir()]
    if name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            return [(f"{name}!{m.name}", t.extractfile(m).read()) for m in t.getmembers() if m.isfile()]
    return None


def every_file(root: Path) -> dict[str, bytes]:
    """Every file under ``root``, archives opened (recursively), by path."""
    files: dict[str, bytes] = {}

    def add(name, data):
        members = _archive_members(name, data)
        if members is None:
            files[name] = data
        else:
            files[name] = b""
            for member, content in members:
                add(member, content)

    for path in sorted(root.rglob("*")):
        if path.is_file():
            add(str(path.relative_to(root)), path.read_bytes())
    return files


def readings(name: str, data: bytes) -> list[str]:
    """The file's text, and for a notebook or other JSON the text of every string in it."""
    text = data.decode("utf-8", errors="replace")
    out = [text]
    if name.endswith((".ipynb", ".json")):
        strings = []

        def walk(v):
            if isinstance(v, str):
                strings.append(v)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
            elif isinstance(v, dict):
                for x in v.values():
                    walk(x)

        walk(json.loads(text))
        out.append("\n".join(strings))
    return out


@pytest.fixture(scope="module")
def release_lines(released):
    """{normalised line: first file holding it} over the whole release, and its whole text."""
    lines: dict[str, str] = {}
    texts: dict[str, str] = {}
    for name, data in every_file(released).items():
        if b"\x00" in data[:8192]:
            continue
        for text in readings(name, data):
            texts[name] = texts.get(name, "") + "\n" + text
            for line in text.splitlines():
                lines.setdefault(norm(line), name)
    return lines, texts


def test_release_layout(released, homeworks):
    files = every_file(released)
    names = set(files)
    for hw in homeworks:
        assert f"homework/{hw.name}/{hw.name}.ipynb" in names
        assert f"homework/{hw.name}.zip!{hw.name}/{hw.name}.ipynb" in names
        for path in hw.student_notebook.parent.iterdir():  # what grader.check reads beside it
            assert f"homework/{hw.name}/{path.name}" in names
    wheels = sorted((released / "packages").glob("*.whl"))
    sdists = sorted((released / "packages").glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    in_wheel = {n.split("!", 1)[1] for n in names if n.startswith(f"packages/{wheels[0].name}!")}
    # the student's install has the package and the checks the public tests import
    assert {"attnbook/__init__.py", "attngrade/checks/__init__.py", "attngrade/checks/calling.py"} <= in_wheel
    # and JupyterLab's course settings (chapters open as notebooks; no news pop-up) for its environment
    name, version = wheels[0].name.split("-")[:2]
    settings = f"{name}-{version}.data/data/share/jupyter/lab/settings/overrides.json"
    assert settings in in_wheel, sorted(n for n in in_wheel if ".data/" in n)
    assert "jupyterlab_settings/overrides.json" not in in_wheel, "the settings folder was shipped as a package"
    assert not any("exercises" in n.split("!")[-1].split("/") for n in names), "exercises/ was shipped"
    assert not any(n.startswith(("tests/", "source/tests/")) for n in names), "tests/ was shipped"
    readme = (released / "README.md").read_text(encoding="utf-8")
    assert "pip install" in readme and "grader.check" in readme
    manifest = json.loads((released / "MANIFEST.json").read_text(encoding="utf-8"))
    listed = {f["path"] for f in manifest["files"]}
    on_disk = {str(p.relative_to(released)) for p in released.rglob("*") if p.is_file()}
    assert listed == on_disk - {"MANIFEST.json"}


def test_no_master_mutants_grading_settings_or_autograder(released):
    for name, data in every_file(released).items():
        base = name.split("!")[-1].rsplit("/", 1)[-1]
        assert base not in {"mutants.py", "grading.yml", "otter_config.json", "run_autograder"}, name
        assert "autograder" not in base, name
        if base.endswith(".ipynb"):
            nb = json.loads(data)
            sources = [
                "".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in nb.get("cells", [])
            ]
            for marker in ("# BEGIN SOLUTION", "# ASSIGNMENT CONFIG", "# BEGIN TESTS", "BEGIN TEST CONFIG"):
                assert not any(marker in s for s in sources), f"{name} is a master ({marker!r} in it)"


def test_no_solution_line(released, homeworks, release_lines):
    """No line of a master's solutions is in the release, unless the published package or
    chapters hold that very line anyway (the package implements what the homework asks for)."""
    lines, _ = release_lines
    public = leaks.public_lines(leaks.repo_root())
    checked, leaked = 0, []
    for hw in homeworks:
        # solution lines that the master's prompt does not show (a public test that repeats one
        # leaks it: public tests travel in the student notebook), read by attngrade.authoring.assign's
        # extraction and by the release's own
        inside, prompt = solution_and_prompt_lines(hw.master)
        solution = solution_only_lines(hw.master) - prompt
        solution |= {s for s in inside - prompt if len(s) >= 8}
        for line in solution:
            if line in public:
                continue
            checked += 1
            if line in lines:
                leaked.append(f"{hw.name}: {line!r} in {lines[line]}")
    assert checked >= 5 * len(homeworks), "too few solution lines: is the extraction broken?"
    assert not leaked, "\n".join(leaked)


def test_no_hidden_test(released, homeworks, release_lines):
    """No hidden test's name and no line of its body (as written in the master, or as otter wrote
    it into the autograder notebook) is in the release, beyond lines public tests share."""
    lines, texts = release_lines
    everything = "\n".join(texts.values())
    public = leaks.public_lines(leaks.repo_root())
    hidden_names, hidden_lines, shared = set(), set(), set()
    for hw in homeworks:
        for question in hw.questions():
            hidden = {c.func.__name__ for c in question.cases if c.hidden}
            assert question.cases, f"{hw.name} {question.name} has no tests"
            for node in ast.parse(question.source).body:
                if isinstance(node, ast.FunctionDef):
                    body = {norm(s) for s in ast.get_source_segment(question.source, node).splitlines()}
                    (hidden_lines if node.name in hidden else shared).update(body)
            hidden_names |= hidden
        names, master_hidden, master_public = leaks.hidden_test_parts(hw)
        assert names, f"{hw.name} has no hidden test"
        hidden_lines |= master_hidden
        shared |= master_public
    for name in sorted(hidden_names):
        assert name not in everything, f"hidden test {name} is in the release"
    student = set()
    for hw in homeworks:
        nb = json.loads(hw.student_notebook.read_text(encoding="utf-8"))
        for text in readings(".ipynb", json.dumps(nb).encode())[1:]:
            student |= {norm(s) for s in text.splitlines()}
    candidates = {s for s in hidden_lines - shared - student - public if len(s) >= 12}
    assert len(candidates) >= 5 * len(homeworks), "too few hidden test lines: is the extraction broken?"
    leaked = sorted(f"{s!r} in {lines[s]}" for s in candidates if s in lines)
    assert not leaked, "\n".join(leaked)


def test_release_scan_is_clean_and_counts_what_it_checked(released, homeworks):
    secrets = leaks.collect_secrets(homeworks)
    assert secrets.solution_lines and secrets.hidden_names and secrets.hidden_lines and secrets.mutant_lines
    assert leaks.find_leaks(released, secrets) == []


# --- the release's own scan catches every kind of leak ------------------------------------------


def _zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_scan_catches_planted_leaks(homeworks, tmp_path):
    secrets = leaks.collect_secrets(homeworks)
    hw = homeworks[0]
    solution = sorted(secrets.solution_lines)[0]
    hidden_name = sorted(secrets.hidden_names)[0]
    hidden_line = sorted(secrets.hidden_lines)[0]
    mutant_line = sorted(secrets.mutant_lines)[0]
    plants = {
        "master notebook": ("homework/hw.ipynb", hw.master.read_bytes()),
        "solution line in a text file": ("source/book/notes.md", f"text\n    {solution}\n".encode()),
        "solution line in html": (
            "site/page.html",
            f"<pre><span>{solution.replace('<', '&lt;')}</span></pre>".encode(),
        ),
        "solution line in a wheel": (
            "packages/x-1-py3-none-any.whl",
            _zip_bytes({"x/a.py": f"def f():\n    {solution}\n".encode()}),
        ),
        "solution line in a zip in a zip": (
            "homework/outer.zip",
            _zip_bytes({"inner.zip": _zip_bytes({"a.py": solution.encode()})}),
        ),
        "hidden test name": ("source/README.md", f"see {hidden_name} for details".encode()),
        "hidden test line in a notebook": (
            "homework/other.ipynb",
            json.dumps({"cells": [{"cell_type": "code", "source": [f"    {hidden_line}\n"]}]}).encode(),
        ),
        "mutant line": ("source/src/x.py", f"    {mutant_line}\n".encode()),
        "mutants.py": ("source/mutants.py", b"MUTANTS = {}\n"),
        "grading.yml": ("source/grading.yml", b"forbidden: []\n"),
        "autograder zip": ("homework/hw00-autograder_2026.zip", _zip_bytes({"x.txt": b"x"})),
    }
    for kind, (rel_path, data) in plants.items():
        root = tmp_path / kind.replace(" ", "_")
        (root / rel_path).parent.mkdir(parents=True)
        (root / rel_path).write_bytes(data)
        (root / "clean.txt").write_text("nothing to see\n")
        found = leaks.find_leaks(root, secrets)
        assert found and all(rel_path.split("/")[-1] in f for f in found), f"{kind} not caught: {found}"


def test_a_leak_fails_the_release_and_writes_nothing(homeworks, tmp_path, monkeypatch):
    copy = rel.copy_homework

    def leaky(hws, target):
        names = copy(hws, target)
        shutil.copy2(hws[0].master, target / "master.ipynb")
        return names

    monkeypatch.setattr(rel, "copy_homework", leaky)
    out = tmp_path / "course"
    problems, _ = rel.release(out, book=False, assign=False, source=False, homeworks=homeworks)
    assert any("master.ipynb" in p and "master notebook" in p for p in problems), problems
    assert not out.exists()


def test_out_folder_that_is_not_a_release_is_not_replaced(homeworks, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    problems, _ = rel.release(out, book=False, assign=False, source=False, homeworks=homeworks)
    assert problems and "not a release folder" in problems[0]
    assert (out / "precious.txt").read_text() == "keep me"


def test_command_line_replaces_a_previous_release(homeworks, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(rel, "all_homework", lambda: homeworks)
    out = tmp_path / "course"
    for _ in range(2):  # the second run replaces the first
        assert cli.main(["release", "--no-book", "--no-assign", "--no-source", "--out", str(out)]) == 0
    assert "none found" in capsys.readouterr().out
    assert (out / rel.MARKER).exists() and not (out / "source").exists()
    assert not list(tmp_path.glob(".release-*")), "temporary folders left behind"


def test_repo_root_without_an_exercises_folder_is_the_checkout(monkeypatch, tmp_path):
    """Run from a folder with no ``exercises/`` and no $ATTNBOOK_EXERCISES pointing at one, the
    release still finds the checkout holding the grader (the folder with ``pyproject.toml`` and
    ``src/attngrade``), not ``src/``."""
    monkeypatch.setenv("ATTNBOOK_EXERCISES", str(tmp_path / "nowhere"))
    root = leaks.repo_root()
    assert (root / "src" / "attngrade" / "authoring" / "leaks.py").is_file(), root
    assert (root / "pyproject.toml").is_file(), root
