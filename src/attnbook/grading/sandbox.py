"""What runs inside a student's sandbox process (a child forked by :mod:`.zygote`).

The child confines itself (its own session, a private working folder, resource limits, and when
the grader runs as root a user id of its own), makes the reference implementations that the
homework asks students to write unusable ("poisoned"), executes the student's notebook cells, and
then answers the grader's requests over a socket:

* ``lookup NAME``: is NAME defined, and is it callable? (a non-callable value is sent as data);
* ``call NAME args kwargs``: call the student's function on inputs the grader chose and send the
  result back as plain data (:mod:`.protocol`).

The child never sees a test, a reference answer or a verdict: the grader compares the returned
data with ``attnbook``'s answers in its own process. Whatever the student's code does here
(patching torch, printing "all tests passed", exiting, looping, allocating, deleting files) can
only change what this child sends back, i.e. that student's own score.
"""

from __future__ import annotations

import builtins
import os
import resource
import signal
import socket
import sys
import types
from typing import Any

from . import protocol
from .static import resolve_loaded as _resolve


class CellTimeout(BaseException):
    """Raised inside the student's code when a cell or a call runs past its soft time limit."""


class ForbiddenReference(Exception):
    """Raised when student code calls a reference implementation this homework asks to write."""


def _vm_size() -> int:
    """Current virtual memory size of this process in bytes (0 if unknown)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def apply_limits(limits: dict[str, Any]) -> None:
    """Set the resource limits of this process (inherited by anything it forks)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    mem = int(limits.get("memory_bytes", 0))
    if mem > 0:
        # the address space already mapped (torch alone maps ~0.7 GB) plus the student's allowance
        cap = _vm_size() + mem
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    cpu = int(limits.get("cpu_seconds", 0))
    if cpu > 0:
        used = int(sum(os.times()[:2]))
        resource.setrlimit(resource.RLIMIT_CPU, (used + cpu, used + cpu + 2))
    fsize = int(limits.get("file_bytes", 0))
    if fsize > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    nproc = int(limits.get("nproc", 0))
    if nproc > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


_CAP_DAC_READ_SEARCH = 2
_PR_SET_KEEPCAPS = 8
_PR_SET_NO_NEW_PRIVS = 38


def _libc():
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def drop_privileges(uid: int | None, gid: int | None) -> None:
    """Become ``uid``/``gid`` (asked for only when the grader runs as root); keep read access only.

    The child takes a user id of its own, so it cannot signal the grader, the zygote or other
    sandboxes, nor write anything but its own folder (and world-writable places). It keeps one
    capability, CAP_DAC_READ_SEARCH (read any file), because the Python installation may live
    where other users cannot read it (e.g. under /root); and it sets no_new_privs, so no setuid
    program can give root back.
    """
    try:
        ctypes, libc = _libc()
    except OSError:  # pragma: no cover - no libc: not Linux
        ctypes = libc = None
    if libc is not None:
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if uid is None:
        return
    if libc is not None:
        libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0)
    os.setgroups([])
    os.setgid(gid if gid is not None else uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("could not drop privileges")
    if libc is not None:

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]

        header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
        data = (Data * 2)()
        data[0].effective = data[0].permitted = 1 << _CAP_DAC_READ_SEARCH
        libc.capset(ctypes.byref(header), data)
        libc.prctl(_PR_SET_KEEPCAPS, 0, 0, 0, 0)


def _poison(dotted: str) -> types.FunctionType:
    """A stand-in for the reference ``dotted`` that fails loudly and holds no reference to it."""
    message = (
        f"{dotted} is the reference implementation of what this homework asks you to write; "
        f"the grader does not let your answers call it"
    )

    def forbidden(*args, **kwargs):
        raise ForbiddenReference(message)

    forbidden.__name__ = dotted.rsplit(".", 1)[-1]
    forbidden.__qualname__ = forbidden.__name__
    forbidden.__doc__ = message
    return forbidden


def poison_references(forbidden: list[str]) -> list[str]:
    """Replace every forbidden function, wherever a loaded module holds it, by a poisoned stub.

    Each forbidden object is looked up by identity in the namespaces of all loaded ``attnbook``
    and ``torch`` modules (a function is reachable both as ``attnbook.softmax`` and as
    ``attnbook.softmax.softmax``, and a module that imported it holds it too). Once replaced
    everywhere, the original has no reference left and is freed, so it cannot be fished back out.
    Returns the names that were found and poisoned.
    """
    targets: dict[int, str] = {}
    for dotted in forbidden:
        obj = _resolve(dotted)
        if obj is not None and not isinstance(obj, types.ModuleType):
            targets[id(obj)] = dotted
    poisoned = set()
    for mod_name, module in list(sys.modules.items()):
        if module is None or not (mod_name == "attnbook" or mod_name.startswith(("attnbook.", "torch"))):
            continue
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for attr, value in list(namespace.items()):
            dotted = targets.get(id(value))
            if dotted is not None:
                try:
                    setattr(module, attr, _poison(dotted))
                    poisoned.add(dotted)
                except (AttributeError, TypeError):
                    pass
    del targets
    return sorted(poisoned)


class _StubGrader:
    """Stands in for ``otter.Notebook`` while grading: checks and exports do nothing here."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def install_stubs(namespace: dict[str, Any]) -> None:
    """Make the student notebook's otter and IPython calls harmless no-ops in the sandbox."""
    otter = types.ModuleType("otter")
    otter.Notebook = _StubGrader  # type: ignore[attr-defined]
    sys.modules["otter"] = otter
    namespace["display"] = lambda *args, **kwargs: None
    namespace["get_ipython"] = lambda: None
    try:
        import matplotlib.pyplot as plt

        plt.show = lambda *args, **kwargs: None  # the figures are not graded
    except Exception:  # pragma: no cover - matplotlib is a dependency
        pass


def strip_magics(source: str) -> str:
    """Drop IPython-only lines (``%magic``, ``!shell``); a ``%%cell magic`` drops the cell."""
    lines = source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        return ""
    return "\n".join("pass" if line.lstrip().startswith(("%", "!")) and not line.startswith((" ", "\t"))
                     else line for line in lines)


def _on_alarm(signum, frame):
    raise CellTimeout("time limit reached")


def _arm(seconds: float) -> None:
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.0))


def _describe(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # a student's exception whose __str__ fails
        text = type(exc).__name__
    return text[:2000]


def execute_cells(cells: list[str], namespace: dict[str, Any], cell_timeout: float) -> list[dict[str, Any]]:
    """Run each cell in ``namespace``; a failing cell is recorded and the next one runs."""
    errors = []
    for index, source in enumerate(cells):
        source = strip_magics(source)
        if not source.strip():
            continue
        try:
            _arm(cell_timeout)
            code = compile(source, f"<cell {index}>", "exec")
            exec(code, namespace)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt and timeouts included
            errors.append({"cell": index, "error": _describe(exc)})
        finally:
            _arm(0)
    return errors


def serve(sock: socket.socket, namespace: dict[str, Any], call_timeout: float) -> None:
    """Answer lookup and call requests until the grader says goodbye or closes the socket."""
    while True:
        try:
            request = protocol.recv_value(sock, as_torch=True)
        except (EOFError, OSError, protocol.ProtocolError):
            return
        op = request.get("op") if isinstance(request, dict) else None
        if op == "bye":
            return
        if op == "lookup":
            name = str(request.get("name"))
            if name not in namespace:
                reply: dict[str, Any] = {"kind": "missing"}
            elif callable(namespace[name]):
                reply = {"kind": "callable"}
            else:
                reply = {"kind": "value", "value": namespace[name]}
        elif op == "call":
            func = namespace.get(str(request.get("name")))
            args = request.get("args", [])
            kwargs = request.get("kwargs", {})
            try:
                _arm(call_timeout)
                value = func(*args, **kwargs)
                _arm(0)
                reply = {"ok": True, "value": value}
            except BaseException as exc:
                _arm(0)
                reply = {"ok": False, "error": _describe(exc)}
        else:
            reply = {"ok": False, "error": f"unknown request {op!r}"}
        try:
            body = protocol.encode(reply)
        except BaseException as exc:  # e.g. a result nested too deep
            body = protocol.encode({"ok": False, "error": f"could not send the result back: {_describe(exc)}"})
        try:
            protocol.send_frame(sock, body)
        except OSError:
            return


def run_child(sock: socket.socket, config: dict[str, Any]) -> None:
    """The whole life of a sandbox child. Never returns normally: it ends the process."""
    code = 0
    try:
        workdir = config["workdir"]
        os.chdir(workdir)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        out = os.open(os.path.join(workdir, "output.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if config.get("uid") is not None:
            os.fchown(out, config["uid"], config.get("gid", config["uid"]))
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.environ.update({"HOME": workdir, "TMPDIR": workdir, "MPLCONFIGDIR": workdir, "MPLBACKEND": "Agg"})
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails instead of killing
        signal.signal(signal.SIGALRM, _on_alarm)
        poison_references(list(config.get("forbidden", [])))
        apply_limits(config.get("limits", {}))
        drop_privileges(config.get("uid"), config.get("gid"))

        request = protocol.recv_value(sock, as_torch=False)
        cells = [str(c) for c in request["cells"]]
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        install_stubs(namespace)
        errors = execute_cells(cells, namespace, float(config.get("cell_timeout", 10.0)))
        protocol.send_value(sock, {"op": "executed", "errors": errors, "uid": os.getuid()})
        serve(sock, namespace, float(config.get("call_timeout", 10.0)))
    except BaseException:
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)
