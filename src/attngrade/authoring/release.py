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
tarballs) is scanned for what must not leak (:func:`.leaks.find_leaks`): a line of a master's solution, a
hidden test's name or a line of its body, a mutant, a master notebook, ``grading.yml``,
``mutants.py``, an autograder zip. Any finding fails the command and leaves the previous release
untouched. The tree is built beside the output folder and moved into place at the end.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from ..homework import Homework, all_homework
from .leaks import collect_secrets, find_leaks, repo_root

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
    # not conftest.py: it names the test plugins under tests/, which the public source leaves out
    ".gitignore",
    "LICENSE",
]
_IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints", "_build", ".jupyter_cache", ".DS_Store"
)


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
