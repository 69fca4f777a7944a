"""What a sandbox sees: a read-only view of the Python environment and of the course package, in
which the homework's reference implementations are absent.

:func:`build_view` writes, into a folder private to the grader,

* ``lib/attnbook/``: a copy of the course package in which every forbidden function (and every
  method of a forbidden class) is a stub that raises; the real code is not in the sandbox, so no
  route (an alias, ``operator.attrgetter``, a fresh import of the module's file, reading its
  source) leads back to it;
* ``lib/attngrade/``: the modules that run inside the sandbox (``attngrade.sandboxed``: the
  worker and its child, the wire protocol, the integrity guard), not the grader;
* ``overlays/``: stubbed copies of forbidden *Python* functions of PyTorch (e.g.
  ``torch.nn.functional.multi_head_attention_forward``), mounted over the originals; forbidden
  builtins (``scaled_dot_product_attention``) have no source and are caught at run time by the
  guard (:mod:`attngrade.sandboxed.integrity`).

:func:`bwrap_arguments` turns the view into bubblewrap's arguments: the system's ``/usr``, the
Python installation and its site-packages read-only, the view at ``/opt/attngrade``, the real
locations of the course package, the grader, the homework, the submissions and the output hidden
under empty folders, a private ``/proc``, ``/dev`` and size-limited ``/tmp``, and new pid,
network, ipc and uts namespaces.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import shutil
import site
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sandboxed.integrity import resolve_reference
from ..sandboxed.protocol import REFERENCE_UNAVAILABLE
from .parsing import parse

#: where the view's packages appear inside the sandbox
MOUNT = "/opt/attngrade"
#: the grader's package, and its subpackage that runs inside the sandbox: the view holds a copy of
#: exactly that subpackage (and an empty ``attngrade/__init__.py``), and nothing else of the grader
GRADER_DIR = Path(__file__).resolve().parent.parent
SANDBOXED = GRADER_DIR / "sandboxed"


@dataclass
class View:
    root: Path
    binds: list[tuple[str, str]] = field(default_factory=list)  # (source on the host, target in the sandbox)
    stubbed: list[str] = field(default_factory=list)  # forbidden references removed from the view
    runtime_only: list[str] = field(default_factory=list)  # builtins the guard must catch at run time


def _resolve(dotted: str) -> Any:
    """The object ``dotted`` names (:func:`attngrade.sandboxed.integrity.resolve_reference`), None if none."""
    try:
        return resolve_reference(dotted)
    except (ImportError, AttributeError):
        return None


def _stub_body(message: str) -> list[ast.stmt]:
    return [
        ast.Raise(
            exc=ast.Call(func=ast.Name("NotImplementedError", ast.Load()), args=[ast.Constant(message)], keywords=[]),
            cause=None,
        )
    ]


def stub_source(source: str, qualnames: dict[str, str]) -> str:
    """``source`` with the functions named by ``qualnames`` (qualname -> dotted reference)
    replaced by stubs that raise; a class's qualname stubs all of its methods."""
    tree = parse(source)

    def visit(body: list[ast.stmt], prefix: str, inherited: str | None) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}{node.name}"
                ref = qualnames.get(qual, inherited)
                if isinstance(node, ast.ClassDef):
                    visit(node.body, qual + ".", ref)
                elif ref is not None:
                    node.body = _stub_body(
                        f"{ref} is the reference implementation of what this homework asks you to "
                        f"write; {REFERENCE_UNAVAILABLE}"
                    )

    visit(tree.body, "", None)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _package_dir(name: str) -> Path:
    module = importlib.import_module(name)
    return Path(module.__file__).resolve().parent


def build_view(root: str | os.PathLike[str], forbidden: list[str]) -> View:
    """Write the sandbox's view of the course package for a homework that forbids ``forbidden``."""
    root = Path(root)
    view = View(root)
    lib = root / "lib"
    pkg = _package_dir("attnbook")
    shutil.copytree(pkg, lib / "attnbook", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (lib / "attngrade").mkdir(parents=True)
    (lib / "attngrade" / "__init__.py").write_text('"""The part of the grader that runs in a sandbox."""\n')
    shutil.copytree(SANDBOXED, lib / "attngrade" / "sandboxed", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    # group the forbidden references by the file that defines them
    by_file: dict[Path, dict[str, str]] = {}
    for dotted in forbidden:
        obj = _resolve(dotted)
        if obj is None:
            continue
        target = inspect.unwrap(obj) if callable(obj) else obj
        try:
            path = Path(inspect.getsourcefile(target) or "").resolve()
            qual = target.__qualname__
        except (TypeError, AttributeError):  # a builtin: no source to remove
            view.runtime_only.append(dotted)
            continue
        by_file.setdefault(path, {})[qual] = dotted
    overlays = root / "overlays"
    overlays.mkdir()
    empty_file = root / "empty"
    empty_file.write_bytes(b"")
    for path, quals in by_file.items():
        stubbed = stub_source(path.read_text(encoding="utf-8"), quals)
        if pkg in path.parents:
            (lib / "attnbook" / path.relative_to(pkg)).write_text(stubbed, encoding="utf-8")
        else:
            copy = overlays / f"{len(view.binds)}_{path.name}"
            copy.write_text(stubbed, encoding="utf-8")
            view.binds.append((str(copy), str(path)))
            # the compiled copy beside it would still hold the real code
            cache = path.parent / "__pycache__"
            if cache.is_dir():
                for pyc in cache.glob(f"{path.stem}.*.pyc"):
                    view.binds.append((str(empty_file), str(pyc)))
        view.stubbed.extend(quals.values())
    return view


def instructor_paths() -> tuple[list[str], list[str]]:
    """Where the grading Python finds packages beyond its installation: (the ``PYTHONPATH``
    entries, the user site-packages folder when this Python uses one). The sandbox mounts both
    read-only and puts them on its path in the same roles (:class:`attngrade.grading.bubblewrap.Worker`), so a
    course installed with ``pip install --target``, a module system or ``pip install --user`` works
    there as it does for the instructor. Entries that are not folders are left out, and so are
    ``/`` and the home folder itself, which would show the sandbox far more than packages."""
    home = os.path.realpath(os.path.expanduser("~"))
    entries = []
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        real = os.path.realpath(entry) if entry else ""
        if real and os.path.isdir(real) and real not in ("/", home) and real not in entries:
            entries.append(real)
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    users = [os.path.realpath(user)] if user and os.path.isdir(user) else []
    return entries, users


def _python_roots() -> list[str]:
    """The folders the sandbox's Python needs: its installation, the virtual environment, every
    site-packages folder and :func:`instructor_paths` (deduplicated, parents first)."""
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["platstdlib"],
        *site.getsitepackages(),
    }
    entries, users = instructor_paths()
    paths.update(entries + users)
    for p in list(paths):
        paths.add(os.path.realpath(p))
    exe = os.path.realpath(sys.executable)
    paths.add(os.path.dirname(exe))
    roots: list[str] = []
    for p in sorted(p for p in paths if p and os.path.isdir(p)):
        if not any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots):
            roots.append(p)
    return roots


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def bwrap_arguments(view: View, *, hide: list[str], as_root: bool, tmp_mb: int = 64) -> list[str]:
    """bubblewrap's command line (without the command) for a sandbox on ``view``."""
    args = [
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
    ]
    if not as_root:
        args.append("--unshare-user")
    system = []
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = f"/{top}"
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
            system.append(host)
    for name in ("ld.so.cache", "localtime", "nsswitch.conf", "passwd", "group", "hosts", "fonts"):
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    # the private folders first, so that a Python installed under /tmp (a checkout there) is
    # mounted on top of the fresh /tmp rather than hidden by it
    args += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(tmp_mb * 2**20),
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        str(16 * 2**20),
        "--tmpfs",
        "/dev/shm",
    ]
    roots = [r for r in _python_roots() if not _under(r, system)]
    # the folders above each mount must be traversable by the sandbox's unprivileged user (bwrap
    # would otherwise copy the host's modes, e.g. /root's 0700); /tmp and /dev/shm keep theirs
    fixed = {"/", "/tmp", "/dev", "/dev/shm", "/proc"}
    parents = sorted(
        {
            str(a)
            for r in [*roots, MOUNT]
            for a in Path(r).parents
            if str(a) not in fixed and not _under(str(a), system)
        },
        key=lambda p: p.count("/"),
    )
    for parent in parents:
        args += ["--perms", "0755", "--dir", parent]
    for r in roots:
        args += ["--ro-bind", r, r]
    args += ["--ro-bind", str(view.root / "lib"), MOUNT]
    for source, target in view.binds:
        args += ["--ro-bind", source, target]
    empty = view.root / "hidden"
    empty.mkdir(exist_ok=True)
    for path in dict.fromkeys(os.path.realpath(p) for p in hide):
        if _under(path, roots + system) and os.path.exists(path):
            args += ["--ro-bind", str(empty) if os.path.isdir(path) else str(view.root / "empty"), path]
    args += ["--chdir", "/tmp"]
    return args


def hidden_paths(extra: list[str]) -> list[str]:
    """Real locations the sandbox must not see: the course package and the grader as installed
    (the sandbox gets the view instead), plus ``extra`` (homework, submissions, output)."""
    paths = [str(_package_dir("attnbook")), str(GRADER_DIR)]
    return paths + [str(Path(p).resolve()) for p in extra]
