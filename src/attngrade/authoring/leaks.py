"""What must not leak from the course, and the scan that finds it (:mod:`.release` runs it on every
file of a new release before anything is kept; the homework builder's own check is
:func:`attngrade.authoring.assign.leaks`).

The secrets (:func:`collect_secrets`): a line of a master's solution, a hidden test's name or a
line of its body, a line of a mutant, each unless the published sources, a prompt or a student
notebook hold it anyway. The scan (:func:`find_leaks`) reads every file of a tree, archives opened
(wheels, zips, tarballs, recursively), in each reading where a leaked line would appear as a line
(the text, a notebook's or JSON file's strings, HTML without tags, a script's strings), and also
refuses a master notebook, ``grading.yml``, ``mutants.py``, an autograder zip and symbolic links.
"""

from __future__ import annotations

import ast
import html
import io
import json
import re
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..homework import Homework
from .master import TEST_CONFIG, cell_source, code_lines, norm, solution_and_prompt_lines

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
    is in (this file is ``src/attngrade/authoring/leaks.py``: three folders below the checkout)."""
    from ..homework import exercises_root

    exercises = exercises_root()
    if exercises.is_dir():
        return exercises.resolve().parent
    return Path(__file__).resolve().parents[3]


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
