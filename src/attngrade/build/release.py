"""Build the student-facing course for publishing: ``python -m attngrade release`` (``make release``).

The course repository is the instructor's copy: ``exercises/`` holds every homework's master
notebook (solutions and hidden tests), its mutants (wrong solutions) and its grading settings,
and ``exercises/*/dist/autograder`` the solutions again. None of it may reach students. This
command assembles, in one folder (default ``dist/course/``), what may:

* ``site/``: the built website (``_build/html``; reused when it is newer than every source of the
  book, otherwise built with the strict ``jupyter-book build -W -n --keep-going .``);
* ``packages/``: a wheel and an sdist of ``attnbook`` (with ``attngrade``, whose ``checks`` the
  homework notebooks' public tests import; the grader holds no secret), built from a staging copy
  of ``pyproject.toml``, ``README.md`` and ``src/`` only;
* ``homework/``: each homework's student notebook (``exercises/*/dist/student``, built with
  ``python -m attngrade assign`` when missing or older than its master);
* ``source/``: the public source of the course (book, package, Binder and book configuration),
  to publish as the public repository that the website's launch buttons and readers clone;
* ``README.md`` and ``MANIFEST.json``: what is in it, and how students install and use it.

Before anything is kept, every file of the new tree (and every member of its wheels, zips and
tarballs) is scanned for what must not leak (:func:`find_leaks`): a line of a master's solution, a
hidden test's name or a line of its body, a mutant, a master notebook, ``grading.yml``,
``mutants.py``, an autograder zip. Any finding fails the command and leaves the previous release
untouched. The tree is built beside the output folder and moved into place at the end.
"""

from __future__ import annotations

import ast
import hashlib
import html
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..homework import Homework, all_homework
from .master import TEST_CONFIG, cell_source, code_lines, norm, solution_and_prompt_lines

MARKER = "RELEASE.json"  # written into every release folder; an --out folder without it is not replaced

#: what of the repository the public source copy holds (``exercises/`` and ``tests/`` never)
SOURCE_ENTRIES = [
    "book",
    "src/attnbook",
    "src/attngrade",
    "src/jupyterlab_settings",
    "binder",
    "_config.yml",
    "_toc.yml",
    "pyproject.toml",
    "README.md",
    "Makefile",
    "conftest.py",
    ".gitignore",
    "LICENSE",
]
_IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints", "_build", ".jupyter_cache", ".DS_Store"
)

#: files that must never be published, whatever their content
FORBIDDEN_NAMES = {"mutants.py", "grading.yml", "otter_config.json", "run_autograder"}
_AUTOGRADER_ZIP = re.compile(r"-autograder_.*\.zip$")
#: a notebook holding any of these lines (stripped) is a master, not a student version
MASTER_MARKERS = {
    "# ASSIGNMENT CONFIG",
    "# BEGIN SOLUTION",
    "# END SOLUTION",
    "# BEGIN QUESTION",
    "# BEGIN TESTS",
    "# END TESTS",
    '""" # BEGIN TEST CONFIG',
}
_MIN_LINE = 8  # shorter lines ("return x") say nothing about a solution
_MAX_SCAN_BYTES = 64 * 2**20  # larger single files are not read (none is expected)


def repo_root() -> Path:
    """The course repository: the folder above ``exercises/`` (``$ATTNBOOK_EXERCISES`` or
    ``./exercises``, see :func:`attngrade.homework.exercises_root`), else the checkout this module
    is in (``src/attngrade/release.py``)."""
    from ..homework import exercises_root

    exercises = exercises_root()
    if exercises.is_dir():
        return exercises.resolve().parent
    return Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------
# what must not leak


def hidden_test_parts(hw: Homework) -> tuple[set[str], set[str], set[str]]:
    """(hidden test names, lines of hidden test bodies, lines of public test bodies) of a built
    homework: from the master's test cells as written, and from the autograder notebook (where
    ``otter assign`` put every test, reformatted)."""
    import yaml

    names, hidden_lines, public_lines = set(), set(), set()
    nb = json.loads(hw.master.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        m = TEST_CONFIG.match(cell_source(cell)) if cell.get("cell_type") == "code" else None
        if not m:
            continue
        config = yaml.safe_load(m.group(1)) or {}
        body = cell_source(cell)[m.end() :]
        if isinstance(config, dict) and config.get("hidden"):
            names.update(re.findall(r"^def\s+(\w+)", body, re.M))
            hidden_lines.update(code_lines(body))
        else:
            public_lines.update(code_lines(body))
    for question in hw.questions():
        hidden = {c.func.__name__ for c in question.cases if c.hidden}
        tree = ast.parse(question.source)
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            segment = ast.get_source_segment(question.source, node) or ""
            if node.name in hidden:
                names.add(node.name)
                hidden_lines.update(code_lines(segment))
            else:
                public_lines.update(code_lines(segment))
    return names, hidden_lines, public_lines


def public_lines(root: Path) -> set[str]:
    """Every stripped line of the sources the course publishes anyway (chapters, the package, the
    grader): a solution line that also occurs there is not a leak of the master."""
    lines: set[str] = set()
    for folder, patterns in (
        (root / "book", ("*.md", "*.py", "*.yml", "*.bib", "*.css", "*.json")),
        (root / "src" / "attnbook", ("*.py",)),
        (root / "src" / "attngrade", ("*.py",)),
    ):
        for pattern in patterns:
            for path in folder.rglob(pattern):
                if "_build" in path.parts or ".ipynb_checkpoints" in path.parts:
                    continue
                lines.update(code_lines(path.read_text(encoding="utf-8", errors="replace")))
    return lines


def _meaningful(line: str, min_len: int = _MIN_LINE) -> bool:
    return len(line) >= min_len and not line.startswith("#") and line not in {'"""', "'''"}


@dataclass
class Secrets:
    """What the released tree must not contain."""

    solution_lines: set[str] = field(default_factory=set)
    hidden_names: set[str] = field(default_factory=set)
    hidden_lines: set[str] = field(default_factory=set)
    mutant_lines: set[str] = field(default_factory=set)
    #: how many lines were left out because the public sources contain them too
    shared_with_public: int = 0

    def lines(self) -> dict[str, str]:
        """Each secret line with the kind of secret it is."""
        out = {line: "a line of a hidden test" for line in self.hidden_lines}
        out.update({line: "a line of a mutant (wrong solution)" for line in self.mutant_lines})
        out.update({line: "a solution line" for line in self.solution_lines})
        return out


def collect_secrets(homeworks: list[Homework], root: Path | None = None) -> Secrets:
    """The solution lines, hidden tests and mutants of ``homeworks`` (which must be built).

    A solution line counts unless a master's prompt (text and code outside solutions and tests)
    or the published sources hold it too (:func:`public_lines`: the package implements the
    formulas the homework asks for, so a few solution lines coincide with it); a solution line in
    a public test *is* a leak, since the public tests travel in the student notebook. A hidden
    test or mutant line counts unless a prompt, a public test, a student notebook or the published
    sources hold it.
    """
    root = root or repo_root()
    public = public_lines(root)
    solution, hidden, mutants, seen, prompts = set(), set(), set(), set(), set()
    secrets = Secrets()
    for hw in homeworks:
        sol, prompt = solution_and_prompt_lines(hw.master)
        names, hid, public_tests = hidden_test_parts(hw)
        solution |= {s for s in sol if _meaningful(s)}
        hidden |= {s for s in hid if _meaningful(s, 12)}
        secrets.hidden_names |= names
        prompts |= prompt
        seen |= public_tests | prompt
        if hw.student_notebook.exists():
            student = json.loads(hw.student_notebook.read_text(encoding="utf-8"))
            strings: list[str] = []
            _json_strings(student, strings)
            seen |= {line for text in strings for line in code_lines(text)}
        mutants |= {s for s in _mutant_code(hw) for s in code_lines(s) if _meaningful(s, 20)}
    secrets.solution_lines = solution - prompts - public
    secrets.hidden_lines = hidden - seen - public
    secrets.mutant_lines = mutants - seen - public - solution - hidden
    secrets.shared_with_public = len((solution - prompts) & public) + len((hidden | mutants) & public - seen)
    return secrets


def _mutant_code(hw) -> list[str]:
    """The wrong code of a homework's mutants: each one-line edit's replacement ``(question, old, new)``,
    or each replaced definition ``(question, {function: source})``, and the file's own text."""
    import runpy

    path = hw.folder / "mutants.py"
    if not path.exists():
        return []
    code = [path.read_text(encoding="utf-8")]
    for mutant in runpy.run_path(str(path)).get("MUTANTS", {}).values():
        if len(mutant) == 3:
            code.append(str(mutant[2]))
        else:
            code += [str(source) for source in mutant[1].values()]
    return code


# --------------------------------------------------------------------------------------------
# scanning a tree, archives included


def _json_strings(value, out: list[str], depth: int = 0) -> None:
    if depth > 200:
        return
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list):
        for v in value:
            _json_strings(v, out, depth + 1)
    elif isinstance(value, dict):
        for k, v in value.items():
            out.append(str(k))
            _json_strings(v, out, depth + 1)


_TAG = re.compile(r"<[^>]*>")


def _texts(name: str, data: bytes) -> list[str]:
    """Readings of one file's content in which a leaked line would appear as a line."""
    if b"\x00" in data[:8192]:
        return []
    text = data.decode("utf-8", errors="replace")
    texts = [text]
    lower = name.lower()
    if lower.endswith((".ipynb", ".json")) or text.lstrip().startswith("{"):
        try:
            strings: list[str] = []
            _json_strings(json.loads(text), strings)
            texts.append("\n".join("".join(s) for s in strings))
        except (ValueError, RecursionError):
            pass
    if lower.endswith((".html", ".htm", ".xml", ".svg")):
        texts.append(html.unescape(_TAG.sub("", text)))
    if lower.endswith(".js"):  # strings in scripts: \n escapes
        texts.append(text.replace("\\n", "\n").replace('\\"', '"'))
    return texts


def _is_master(texts: list[str]) -> bool:
    for text in texts[1:]:  # the JSON reading: cell sources
        if any(line.strip() in MASTER_MARKERS for line in text.splitlines()):
            return True
    return False


def _members(name: str, data: bytes):
    """(member name, bytes) of an archive, or None if ``data`` is not one."""
    lower = name.lower()
    try:
        if zipfile.is_zipfile(io.BytesIO(data)):
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                return [(f"{name}!{i.filename}", z.read(i)) for i in z.infolist() if not i.is_dir()]
        if lower.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz")):
            with tarfile.open(fileobj=io.BytesIO(data)) as t:
                return [(f"{name}!{m.name}", t.extractfile(m).read()) for m in t.getmembers() if m.isfile()]
    except (zipfile.BadZipFile, tarfile.TarError, OSError, RuntimeError, NotImplementedError) as e:
        return [(name, f"<unreadable archive: {e}>".encode())]
    return None


def find_leaks(root: Path, secrets: Secrets) -> list[str]:
    """Everything in the tree ``root`` (archives opened, recursively) that must not be there."""
    problems: list[str] = []
    lines = secrets.lines()
    names = (
        re.compile(r"\b(" + "|".join(sorted(map(re.escape, secrets.hidden_names))) + r")\b")
        if secrets.hidden_names
        else None
    )

    def scan(name: str, data: bytes, depth: int = 0) -> None:
        base = name.replace("\\", "/").rsplit("!", 1)[-1].rsplit("/", 1)[-1]
        if base in FORBIDDEN_NAMES:
            problems.append(f"{name}: {base} must not be published")
        if _AUTOGRADER_ZIP.search(base):
            problems.append(f"{name}: an autograder zip must not be published")
        members = _members(name, data) if depth < 4 else None
        if members is not None:
            for member, content in members:
                scan(member, content, depth + 1)
            return
        texts = _texts(name, data)
        if not texts:
            return
        if name.lower().endswith(".ipynb") and _is_master(texts):
            problems.append(f"{name}: a master notebook (it holds the solution or test markers)")
        found: dict[str, str] = {}
        for text in texts:
            for line in text.splitlines():
                s = norm(line)
                if s in lines:
                    found.setdefault(s, lines[s])
            if names is not None:
                for m in names.finditer(text):
                    found.setdefault(m.group(1), "the name of a hidden test")
        for s, kind in sorted(found.items()):
            problems.append(f"{name}: {kind}: {s!r}")

    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            problems.append(f"{path.relative_to(root)}: a symbolic link (not published)")
            continue
        if not path.is_file():
            continue
        if path.stat().st_size > _MAX_SCAN_BYTES:
            problems.append(f"{path.relative_to(root)}: too large to check ({path.stat().st_size} bytes)")
            continue
        scan(str(path.relative_to(root)), path.read_bytes())
    return problems


# --------------------------------------------------------------------------------------------
# building the parts


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ensure_homework(homeworks: list[Homework], build: bool) -> list[str]:
    """Build the student versions that are missing or stale (``python -m attngrade assign``)."""
    stale = [hw for hw in homeworks if not hw.is_built()]
    if not stale:
        return []
    names = [hw.name for hw in stale]
    if not build:
        return [
            f"{', '.join(names)}: not built or older than the master; run "
            f"`python -m attngrade assign {' '.join(names)}` (or drop --no-assign)"
        ]
    _log(f"building the homework {', '.join(names)} (python -m attngrade assign) ...")
    proc = subprocess.run([sys.executable, "-m", "attngrade", "assign", *names], cwd=repo_root())
    if proc.returncode != 0:
        return [f"python -m attngrade assign {' '.join(names)} failed (exit {proc.returncode})"]
    return []


def copy_homework(homeworks: list[Homework], target: Path) -> list[str]:
    """Each homework's student folder (the notebook and any file ``python -m attngrade assign`` put beside
    it, which ``grader.check`` reads) into ``target/hwNN/``, and the same as ``target/hwNN.zip``."""
    target.mkdir(parents=True)
    copied = []
    for hw in homeworks:
        folder = target / hw.name
        folder.mkdir()
        files = sorted(p for p in hw.student_notebook.parent.iterdir() if p.is_file())
        with zipfile.ZipFile(target / f"{hw.name}.zip", "w", zipfile.ZIP_DEFLATED) as z:
            for path in files:
                shutil.copy2(path, folder / path.name)
                z.write(path, f"{hw.name}/{path.name}")
        copied += [f"{hw.name}/", f"{hw.name}.zip"]
    return copied


def _book_inputs(root: Path) -> list[Path]:
    files = [root / "_config.yml", root / "_toc.yml"]
    for folder in (root / "book", root / "src" / "attnbook"):
        files += [
            p
            for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts
        ]
    return [p for p in files if p.exists()]


def site_is_fresh(root: Path) -> bool:
    """Whether ``_build/html`` was written after the last change to any source of the book."""
    html_dir = root / "_build" / "html"
    if not (html_dir / "index.html").exists():
        return False
    built = max(p.stat().st_mtime for p in html_dir.rglob("*") if p.is_file())
    return built >= max(p.stat().st_mtime for p in _book_inputs(root))


def build_site(root: Path, rebuild: bool) -> Path:
    """The built website: reused if fresh, else the strict build. Raises if the build fails."""
    html_dir = root / "_build" / "html"
    if not rebuild and site_is_fresh(root):
        _log(f"reusing the website in {html_dir} (newer than every source of the book)")
        return html_dir
    jb = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", "-W", "-n", "--keep-going", "."]
    _log(f"building the website: {' '.join(cmd)} ...")
    proc = subprocess.run(cmd, cwd=root)
    if proc.returncode != 0:
        raise RuntimeError(f"the strict book build failed (exit {proc.returncode}); see its log above")
    return html_dir


_BUILD_PACKAGES = """\
import sys
from setuptools import build_meta
out = sys.argv[1]
print(build_meta.build_sdist(out))
print(build_meta.build_wheel(out))
"""


def build_packages(root: Path, target: Path, work: Path) -> list[str]:
    """Wheel and sdist of the course package, built from a copy without exercises/ or tests/."""
    stage = work / "package"
    (stage / "src").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (root / name).exists():
            shutil.copy2(root / name, stage / name)
    for folder in ("attnbook", "attngrade", "jupyterlab_settings"):  # the last: JupyterLab's settings (data-files)
        shutil.copytree(root / "src" / folder, stage / "src" / folder, ignore=_IGNORE)
    target.mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-c", _BUILD_PACKAGES, str(target)], cwd=stage, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building the package failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return sorted(p.name for p in target.iterdir())


def copycell_source(root: Path, target: Path) -> list[str]:
    """The public source of the course: :data:`SOURCE_ENTRIES` (never exercises/ or tests/)."""
    copied = []
    for entry in SOURCE_ENTRIES:
        src = root / entry
        if not src.exists():
            continue
        dest = target / entry
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dest, ignore=_IGNORE)
        else:
            shutil.copy2(src, dest)
        copied.append(entry)
    return copied


# --------------------------------------------------------------------------------------------
# the release's own README and manifest

_README = """\
# {title}: the student-facing release

Built by `python -m attngrade release` (`make release`) on {date}.
This folder holds only what students may see: no master notebook, no solution, no hidden test,
no wrong solutions (mutants), no grading settings and no autograder. It was scanned for all of
these before it was written (`MANIFEST.json` lists every file with its size and SHA-256).

| path | what it is | how it is published |
|---|---|---|
{rows}

## For students

**Read** the course on its website (`site/index.html`; it works offline too: open the file).

**Install** the course package (Python 3.10 or newer). It needs PyTorch, NumPy and Matplotlib:

```bash
python -m venv .venv && . .venv/bin/activate
pip install {wheel}                  # the package alone (light)
pip install "{wheel}[grade]" jupyterlab   # for the homework: otter-grader (grader.check) and JupyterLab
```

(If the course is published on PyPI, `pip install attnbook` and `pip install "attnbook[grade]"`
do the same. On a machine without an NVIDIA GPU, `pip install torch --index-url
https://download.pytorch.org/whl/cpu` first avoids downloading the CUDA build.)

**Homework.** Your instructor hands out one notebook per homework (`homework/hwNN/hwNN.ipynb`,
with any file beside it; `homework/hwNN.zip` holds the same folder). Keep it in a folder of its
own, open it in JupyterLab (`jupyter lab`), fill in every `...` and run the `grader.check("qN")`
cell under each answer: it runs the public tests at once. Your instructor
grades your functions later with hidden tests too (other shapes, dtypes and masks). An answer that
calls the reference implementation it asks you to write (for example `attnbook.attention` where
you are asked to write attention) scores 0 on that test; comparing with it in a cell of your own
is fine. To submit, restart and run all cells, save, then run the export cell at the end and hand
in the `.zip` it writes (or the `.ipynb`) where your instructor says.

## For the instructor

* `site/`: copy to any static web host (GitHub Pages, a university server).
* `packages/`: upload to PyPI (`twine upload packages/*`) or hand out the wheel.
* `homework/`: hand out each homework's folder (or its zip) through your LMS when it starts.
* `source/`: the course's public source (chapters, package, book and Binder configuration,
  without `exercises/` and `tests/`). To give readers a repository to clone, and the chapters'
  launch buttons (Binder, Colab) something to open, make it a **new** public repository
  (`git init` in a copy of it): never publish the instructor's repository or a fork of it, whose
  files and history hold the masters.
"""


def write_readme(out: Path, parts: dict[str, list[str]], title: str) -> None:
    wheel = next(
        (f"packages/{p}" for p in parts.get("packages", []) if p.endswith(".whl")),
        "packages/attnbook-<version>-py3-none-any.whl",
    )
    desc = {
        "site": (
            "the website: every chapter, with math, figures and each chapter's notebook to download",
            "any static web host",
        ),
        "packages": (
            "the `attnbook` package (with `attngrade`, whose checks the homework "
            "notebooks import): " + ", ".join(f"`{p}`" for p in parts.get("packages", [])),
            "PyPI, or hand out the wheel",
        ),
        "homework": (
            "the student notebooks, one folder (and the same as a zip) per homework: "
            + ", ".join(f"`{p}`" for p in parts.get("homework", []) if p.endswith("/")),
            "your LMS, one per homework, when it starts",
        ),
        "source": (
            "the public course source: " + ", ".join(f"`{p}`" for p in parts.get("source", [])),
            "a new public git repository",
        ),
    }
    rows = "\n".join(
        f"| `{k}/` | {desc[k][0]} | {desc[k][1]} |" for k in ("site", "packages", "homework", "source") if k in parts
    )
    text = _README.format(title=title, date=time.strftime("%Y-%m-%d %H:%M"), rows=rows, wheel=wheel)
    (out / "README.md").write_text(text, encoding="utf-8")


def write_manifest(out: Path, info: dict) -> None:
    files = []
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.name != "MANIFEST.json":
            files.append(
                {
                    "path": str(path.relative_to(out)),
                    "bytes": path.stat().st_size,
                    "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                }
            )
    (out / "MANIFEST.json").write_text(json.dumps({**info, "files": files}, indent=1) + "\n", encoding="utf-8")


def _title(root: Path) -> str:
    m = (
        re.search(r'^title:\s*"?([^"\n]+)"?', (root / "_config.yml").read_text(encoding="utf-8"), re.M)
        if (root / "_config.yml").exists()
        else None
    )
    return m.group(1).strip() if m else "The course"


# --------------------------------------------------------------------------------------------


def release(
    out: Path,
    *,
    book: bool = True,
    rebuild_book: bool = False,
    assign: bool = True,
    source: bool = True,
    root: Path | None = None,
    homeworks: list[Homework] | None = None,
) -> tuple[list[str], dict]:
    """Build the release into ``out``; (problems, info). Nothing is written to ``out`` unless the
    tree is complete and clean; a previous release there (with its ``RELEASE.json``) is replaced."""
    root = (root or repo_root()).resolve()
    out = out.resolve()
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        return [f"{out} exists and is not a release folder (no {MARKER}): refusing to replace it"], {}
    if root == out or out in root.parents:
        return [f"--out {out} would contain the repository"], {}
    homeworks = all_homework() if homeworks is None else homeworks
    problems = ensure_homework(homeworks, assign)
    if problems:
        return problems, {}
    start = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".release-", dir=out.parent) as tmp:
        new = Path(tmp) / "course"
        new.mkdir()
        parts: dict[str, list[str]] = {}
        try:
            if book:
                html_dir = build_site(root, rebuild_book)
                shutil.copytree(html_dir, new / "site", ignore=shutil.ignore_patterns(".buildinfo"))
                parts["site"] = sorted(p.name for p in (new / "site").iterdir())
            parts["packages"] = build_packages(root, new / "packages", Path(tmp))
            parts["homework"] = copy_homework(homeworks, new / "homework")
            if source:
                parts["source"] = copycell_source(root, new / "source")
        except (RuntimeError, OSError) as e:
            return [str(e)], {}
        _log("checking the release for solutions, hidden tests, masters and mutants ...")
        secrets = collect_secrets(homeworks, root)
        problems = find_leaks(new, secrets)
        info = {
            "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "parts": {k: v for k, v in parts.items() if k != "site"},
            "homework": [hw.name for hw in homeworks],
            "checked": {
                "solution_lines": len(secrets.solution_lines),
                "hidden_tests": len(secrets.hidden_names),
                "hidden_test_lines": len(secrets.hidden_lines),
                "mutant_lines": len(secrets.mutant_lines),
                "lines_also_in_public_sources": secrets.shared_with_public,
            },
        }
        if problems:
            return problems, info
        write_readme(new, parts, _title(root))
        (new / MARKER).write_text(
            json.dumps({k: info[k] for k in ("built", "homework", "checked")}, indent=1) + "\n", encoding="utf-8"
        )
        write_manifest(new, info)
        if out.exists():
            old = Path(tmp) / "previous"
            out.rename(old)
        new.rename(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    info.update(
        size_bytes=size,
        files=sum(1 for p in out.rglob("*") if p.is_file()),
        seconds=round(time.perf_counter() - start, 1),
    )
    return [], info


def main(
    *,
    out: str | Path | None = None,
    no_book: bool = False,
    rebuild_book: bool = False,
    no_assign: bool = False,
    no_source: bool = False,
) -> int:
    """``python -m attngrade release``: :func:`release` into ``out`` (default ``dist/course`` in
    the repository), saying what was released or why not. Returns the exit status (0 or 1)."""
    root = repo_root()
    out = Path(out) if out is not None else root / "dist" / "course"
    problems, info = release(
        out,
        book=not no_book,
        rebuild_book=rebuild_book,
        assign=not no_assign,
        source=not no_source,
        root=root,
    )
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        print(f"FAILED: {len(problems)} problem(s); nothing was written to {out}", file=sys.stderr)
        return 1
    c = info["checked"]
    print(
        f"released into {out}: {info['files']} files, {info['size_bytes'] / 2**20:.1f} MiB, "
        f"in {info['seconds']:.0f} s; checked for {c['solution_lines']} solution lines, "
        f"{c['hidden_tests']} hidden tests ({c['hidden_test_lines']} lines) and "
        f"{c['mutant_lines']} mutant lines: none found. See {out / 'README.md'}."
    )
    return 0


if __name__ == "__main__":  # the one command line is attngrade.cli's
    sys.exit("run it as: python -m attngrade release ... (python -m attngrade release --help)")
