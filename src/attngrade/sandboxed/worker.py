"""What runs inside a bubblewrap sandbox: one worker, one forked child per submission.

The grader (:mod:`attngrade.grading.bubblewrap`) starts ``bwrap ... python -c <boot line> CTRL_FD``, whose boot line calls :func:`worker_main`. The worker
imports torch and the course package once (the package as the sandbox sees it: the homework's
reference implementations are stubs there, see :mod:`attngrade.grading.view`), drops to an unprivileged user when
it started as root, and then serves jobs on its control socket, strictly one at a time:

1. a job arrives with one end of a fresh socket pair (SCM_RIGHTS) and the sandbox limits;
2. the worker forks a child, which closes the control socket, applies the limits, receives the
   key of test-writing questions and the notebook's code cells on its own socket, forks the
   candidate server and test factory (:mod:`.candidates`) before any cell runs, executes the cells
   and answers the grader's ``lookup``, ``call`` and ``run_test`` requests (:func:`serve`) until
   the grader says goodbye;
3. the worker waits for the child, kills every other process left in the sandbox's pid namespace,
   empties the writable folders and the System V IPC objects, and answers ``done``.

The worker never reads a notebook, a test or an answer, so nothing in its memory (which every
child inherits) belongs to another student. The child never sees a test or a reference answer:
the grader compares the data it sends back in its own process.
"""

from __future__ import annotations

import builtins
import ctypes
import json
import os
import re
import resource
import shutil
import signal
import socket
import sys
import time
import types
from collections.abc import Sequence
from typing import Any

from . import candidates, protocol
from .candidates import describe

#: folders the sandbox may write to (tmpfs mounts, emptied after every submission)
WRITABLE = ("/tmp", "/dev/shm")
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_DUMPABLE = 4


class CellTimeout(BaseException):
    """Raised inside the student's code when a cell or a call runs past its soft time limit."""


# -- the worker ------------------------------------------------------------------------------


#: what a homework's notebook may call whose first call is slow (it imports more of torch): a worker
#: grading a homework whose master notebook calls it makes that call once before any fork (the host
#: names them: warm_ups)
WARM_UPS = {
    # torch.testing.assert_close imports torch.distributed.tensor and sympy at its first call:
    # half a second, more under the guard, in every submission's child otherwise
    "assert_close": lambda torch, x: torch.testing.assert_close(x, x),
    # homework 11's question 4 runs Triton kernels in Triton's interpreter: importing triton maps about
    # 190 MB of address space, more than a homework's memory allowance, so it is made once, here
    "triton": lambda torch, x: _import_triton_interpreted(),
}


def _import_triton_interpreted() -> None:
    """Import triton in its interpreter (TRITON_INTERPRET must be set before triton is imported)."""
    os.environ["TRITON_INTERPRET"] = "1"
    import triton  # noqa: F401
    import triton.language  # noqa: F401


def warm_ups(source: str) -> list[str]:
    """The WARM_UPS a notebook's source names (those a worker grading it should warm up). A name in
    its prose counts too: a needless warm-up costs a worker well under a second, once."""
    return [name for name in WARM_UPS if name in source]


def preload(forbidden_ops: list[str], warm: Sequence[str] = ()) -> Any:
    """Import and warm up what a homework uses, once, before any fork; return the guard.
    ``warm`` names WARM_UPS to call once too."""
    import numpy  # noqa: F401
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    # no score depends on uninitialised memory: torch.empty, empty_like, new_empty, ... are filled
    # with NaN (the largest integer for integer dtypes), so an answer that reads memory it never
    # wrote fails the same way on every run (warn_only: an operator with no deterministic version
    # still runs, with a warning in the notebook's output). The C++ switches that
    # torch.use_deterministic_algorithms sets: the Python function also imports inductor's config,
    # which imports triton, before a notebook can choose Triton's interpreter (homework 11)
    set_algorithms = getattr(torch._C, "_set_deterministic_algorithms", None)
    set_fill = getattr(torch._C, "_set_deterministic_fill_uninitialized_memory", None)
    if set_algorithms is not None and set_fill is not None:
        set_algorithms(True, warn_only=True)
        set_fill(True)
    else:  # pragma: no cover - a torch without them
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = True
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401

    import attnbook

    x = torch.randn(4, 3, 8, generator=torch.Generator().manual_seed(0))
    (x.double() @ x.double().transpose(-2, -1)).softmax(-1)
    torch.nn.functional.linear(x, torch.ones(8, 8))
    for name in warm:
        if name in WARM_UPS:
            WARM_UPS[name](torch, x)
    for name in getattr(attnbook, "__all__", []):
        getattr(attnbook, name, None)
    try:
        from IPython.core.inputtransformer2 import TransformerManager  # noqa: F401
    except Exception:  # IPython is optional: magics are then stripped by hand
        pass
    refuse_kernels(forbidden_ops)
    guard = make_guard(forbidden_ops)
    # the guard's first watched call, made here once so that no child makes it first (4 ms with torch 2.13)
    if guard is not None:
        with guard.watch():
            x.softmax(-1)
        guard.reset()
    return guard


_REFUSING: list[Any] = []  # the torch.library registrations below (kept alive)


def refuse_kernels(forbidden: list[str]) -> list[str]:
    """Replace the kernels of PyTorch's fused attention operators that ``forbidden`` names by
    kernels that raise, for every route to them (``torch.nn.functional``, ``torch._C._nn``,
    ``torch.ops.aten``, a fresh copy of a module): these built-ins have no source to leave out of
    the sandbox's view. Returns the operators refused."""
    try:
        import warnings

        import torch

        from .integrity import TORCH_OPS
    except ImportError:
        return []
    ops = sorted({op for name in forbidden for op in TORCH_OPS.get(name, ())})
    if not ops:
        return []
    lib = torch.library.Library("aten", "IMPL")
    _REFUSING.append(lib)
    refused = []
    for op in ops:
        message = (
            f"aten::{op} is PyTorch's fused implementation of what this homework asks you to "
            f"write; {protocol.REFERENCE_UNAVAILABLE}"
        )

        def refuse(*args: Any, _message: str = message, **kwargs: Any) -> Any:
            raise NotImplementedError(_message)

        for key in ("CPU", "CUDA", "CompositeImplicitAutograd", "CompositeExplicitAutograd"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    lib.impl(op, refuse, key)
                refused.append(op)
            except Exception:  # an operator this torch does not have, or a key it refuses
                continue
    return sorted(set(refused))


def make_guard(forbidden: list[str]) -> Any:
    """The run-time integrity guard (:mod:`.integrity`) for this homework, or None."""
    try:
        from .integrity import Guard
    except ImportError:
        return None
    return Guard(forbidden)


#: the user id each child takes when the worker runs as root (None: children keep the worker's)
CHILD_UID: int | None = None
#: CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_KILL, CAP_SETGID, CAP_SETUID
_WORKER_CAPABILITIES = (0, 1, 2, 3, 5, 6, 7)
_PR_CAPBSET_DROP = 24


def _keep_capabilities(keep: tuple[int, ...]) -> None:
    """Drop every other capability from the bounding set (nothing executed later can gain them)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        if cap not in keep:
            libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)


def drop_privileges(uid: int) -> None:
    """Become ``uid`` (the grader started the sandbox as root), with no capabilities left."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("could not drop privileges")


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


#: whether this worker runs in a sandbox of its own (False only with --unsafe-no-sandbox)
SANDBOXED = True


def _other_pids() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]


def clean_up(child: int | None = None) -> None:
    """Kill whatever a submission left running, and empty the folders it could write to.

    Outside a sandbox (``--unsafe-no-sandbox``) only the child's own session and folder."""
    if not SANDBOXED:
        if child is not None:
            try:
                os.killpg(child, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(_workdir(), ignore_errors=True)
        return
    for _ in range(200):
        pids = _other_pids()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, os.WNOHANG)
            except OSError:
                pass
        time.sleep(0.002)
    keep = _mounts_within(WRITABLE)
    for folder in WRITABLE:
        _empty(folder, keep)
    _remove_ipc()


def mount_points(mountinfo: str) -> list[str]:
    """The mount points listed in ``/proc/self/mountinfo`` (its fifth field), with the kernel's octal
    escapes decoded: a space is written ``\\040``, a tab ``\\011``, a newline ``\\012`` and a
    backslash ``\\134`` (a checkout at ``/tmp/my course`` is mounted at ``/tmp/my\\040course``)."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


def _mounts_within(folders: tuple[str, ...]) -> set[str]:
    """Mount points inside ``folders`` and the folders above them (e.g. a Python installed under
    /tmp, mounted read-only on top of the private /tmp): the clean-up leaves those alone."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            points = mount_points(f.read())
    except OSError:
        return set()
    return folders_to_keep(points, folders)


def folders_to_keep(points: list[str], folders: tuple[str, ...]) -> set[str]:
    """The mount points among ``points`` that lie inside ``folders``, and every folder between
    them and that folder: what emptying ``folders`` must not delete or descend into."""
    keep: set[str] = set()
    for point in points:
        for folder in folders:
            if point.startswith(folder.rstrip("/") + "/"):
                path = point
                while path != folder and path not in keep:
                    keep.add(path)
                    path = os.path.dirname(path)
    return keep


def _empty(folder: str, keep: set[str]) -> None:
    """Delete everything in ``folder`` except the mounts in ``keep`` (and the folders above them)."""
    try:
        entries = os.listdir(folder)
    except OSError:
        return
    for entry in entries:
        path = os.path.join(folder, entry)
        try:
            if path in keep:
                if not os.path.ismount(path):
                    _empty(path, keep)
            elif os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


def _remove_ipc() -> None:
    """Remove System V shared memory, semaphores and message queues (the sandbox's own)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for table, rm in (("shm", libc.shmctl), ("sem", libc.semctl), ("msg", libc.msgctl)):
        try:
            with open(f"/proc/sysvipc/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and fields[1].lstrip("-").isdigit():
                ident = int(fields[1])
                if table == "sem":
                    rm(ident, 0, 0)  # IPC_RMID = 0
                else:
                    rm(ident, 0, None)


def worker_main(fd: int) -> None:
    ctrl = socket.socket(fileno=fd)
    hello = json.loads(ctrl.recv(1 << 16) or b"{}")
    global SANDBOXED, _UNSAFE_WORKDIR
    SANDBOXED = bool(hello.get("sandboxed", True))
    if not SANDBOXED:
        import tempfile

        _UNSAFE_WORKDIR = tempfile.mkdtemp(prefix="attngrade-unsafe-")
    guard = preload(list(hello.get("forbidden", [])), [str(w) for w in hello.get("warm", [])])
    uid = hello.get("drop_uid")
    global CHILD_UID
    if os.getuid() == 0 and type(uid) is int and uid > 0:
        # the worker stays root inside the sandbox (so that no child can signal or trace it, and it
        # can kill and delete whatever a child leaves), with only the capabilities it needs; each
        # child becomes ``uid``
        CHILD_UID = uid
        _keep_capabilities(_WORKER_CAPABILITIES)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _prctl(_PR_SET_DUMPABLE, 0)  # a child may not read or trace the worker's memory
    ctrl.sendall(json.dumps({"ready": True, "uid": os.getuid(), "pid": os.getpid()}).encode())
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(ctrl, 1 << 16, 1)
        except OSError:
            break
        if not data:
            break
        try:
            job = json.loads(data)
        except ValueError:
            job = None
        if not isinstance(job, dict) or job.get("op") == "kill":
            for f in fds:
                os.close(f)
            clean_up()
            ctrl.sendall(json.dumps({"done": None}).encode())
            continue
        if not fds:
            break
        pid = os.fork()
        if pid == 0:
            try:
                ctrl.close()
                child_main(socket.socket(fileno=fds[0]), job, guard)
            finally:
                os._exit(1)
        os.close(fds[0])
        ctrl.sendall(json.dumps({"started": job.get("job"), "pid": pid}).encode())
        # wait for the child, or for the grader to ask that it be killed (a call that hangs)
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            ctrl.settimeout(0.02)
            try:
                msg = ctrl.recv(1 << 10)
            except TimeoutError:
                continue
            except OSError:
                msg = b""
            finally:
                ctrl.settimeout(None)
            if not msg:  # the grader is gone
                os.kill(pid, signal.SIGKILL)
                clean_up(pid)
                os._exit(0)
            os.kill(pid, signal.SIGKILL)  # any message while a child runs means: stop it
        clean_up(pid)
        ctrl.sendall(json.dumps({"done": job.get("job")}).encode())
    clean_up()
    os._exit(0)


# -- the child: one submission ---------------------------------------------------------------


def _workdir() -> str:
    """The child's working folder: in the sandbox's private /tmp, or (unsandboxed) the worker's own
    temporary folder, made when the worker starts."""
    return "/tmp/work" if SANDBOXED else _UNSAFE_WORKDIR


_UNSAFE_WORKDIR = ""


def apply_limits(limits: dict[str, Any]) -> None:
    """Resource limits of the child (inherited by anything it starts)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    mem = int(limits.get("memory_bytes", 0))
    if mem > 0:
        # the address space torch already maps, plus the student's allowance
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


def _vm_size() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _StubGrader:
    """Stands in for ``otter.Notebook`` while grading: checks and exports do nothing here."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class _Shell:
    """Stands in for IPython's ``get_ipython()``: the timing and capture magics run their code,
    the other magics and shell commands do nothing (a graded notebook needs neither)."""

    #: ``ipytest`` defines the tests of its cell (the grader runs them; pytest itself does not run here)
    RUN_BODY = {"time", "timeit", "capture", "prun", "debug", "ipytest"}

    def __init__(self, namespace: dict[str, Any]):
        self.namespace = namespace
        self.user_ns = namespace

    def run_cell_magic(self, name: str, line: str, cell: str) -> None:
        if name in self.RUN_BODY:
            exec(compile(to_python(cell), "<cell magic>", "exec"), self.namespace)

    def run_line_magic(self, name: str, line: str, *args: Any) -> Any:
        if name == "time" and line.strip():
            code = to_python(line)
            try:
                return eval(compile(code, "<line magic>", "eval"), self.namespace)
            except SyntaxError:
                exec(compile(code, "<line magic>", "exec"), self.namespace)
        return None

    def system(self, *args: Any, **kwargs: Any) -> None:
        return None

    def getoutput(self, *args: Any, **kwargs: Any) -> list[str]:
        return []

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def to_python(source: str) -> str:
    """A cell's IPython syntax (magics, ``!cmd``, ``obj?``) as plain Python, as IPython does it."""
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except Exception:
        return strip_magics(source)
    try:
        return TransformerManager().transform_cell(source)
    except Exception:
        return strip_magics(source)


def strip_magics(source: str) -> str:
    """Without IPython: a ``%%cell magic`` runs its body for timing magics; other magic and shell
    lines become ``pass``."""
    lines = source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        name = lines[0].lstrip()[2:].split(maxsplit=1)[0] if lines[0].strip() != "%%" else ""
        return "\n".join(lines[1:]) if name in _Shell.RUN_BODY else ""
    out = []
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            indent = line[: len(line) - len(stripped)]
            out.append(indent + "pass")
        else:
            out.append(line)
    return "\n".join(out)


def install_stubs(namespace: dict[str, Any]) -> None:
    """Make otter's and IPython's calls harmless in the sandbox."""
    otter = types.ModuleType("otter")
    otter.Notebook = _StubGrader  # type: ignore[attr-defined]
    sys.modules["otter"] = otter
    shell = _Shell(namespace)
    namespace["get_ipython"] = lambda: shell
    namespace["display"] = lambda *args, **kwargs: None
    try:
        import matplotlib.pyplot as plt

        plt.show = lambda *args, **kwargs: None  # figures are not graded
    except Exception:  # pragma: no cover - matplotlib is a dependency
        pass


def _on_alarm(signum, frame):
    raise CellTimeout("time limit reached")


#: a soft limit's wall-clock seconds are this many times its CPU seconds (set from the job)
WALL_FACTOR = 3.0


def _arm(seconds: float) -> None:
    """Stop the running code after ``seconds`` of CPU time, or WALL_FACTOR times that of wall time.

    CPU time (ITIMER_PROF: this process, all its threads) is what a busy machine does not change,
    so an honest notebook meets the same limit whatever runs beside it; the wall-clock timer stops
    code that waits without computing. ``_arm(0)`` disarms both.
    """
    seconds = max(seconds, 0.0)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, seconds * WALL_FACTOR)


def is_missing_reference(exc: BaseException) -> bool:
    """True for the error a reference implementation raises in the sandbox, where it is absent."""
    return isinstance(exc, NotImplementedError) and protocol.REFERENCE_UNAVAILABLE in describe(exc)


def statements(source: str, filename: str) -> list[Any]:
    """The top-level statements of a cell's Python, each compiled on its own (a cell that uses
    ``from __future__`` stays one piece, as its flags apply to every statement after them)."""
    import ast

    tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST)
    if any(isinstance(node, ast.ImportFrom) and node.module == "__future__" for node in tree.body):
        return [compile(tree, filename, "exec")]
    return [compile(ast.Module(body=[node], type_ignores=[]), filename, "exec") for node in tree.body]


def execute_cells(cells: list[str], namespace: dict[str, Any], cell_timeout: float) -> list[dict[str, Any]]:
    """Run each cell in ``namespace``; a failing cell is recorded and the next one runs.

    A cell stops at its first error, as in Jupyter, with one exception: a call of a reference
    implementation at top level, e.g. ``expected = attnbook.softmax(x)`` written to compare, works
    in the student's Jupyter but raises here, where the reference is absent. Such a statement is
    recorded and skipped, and the rest of the cell still runs (the statements that then fail for
    want of its result are recorded and skipped too), so that a comparison written above a ``def``
    never removes the definition, and the notebook gets the score it gets in Jupyter.
    """
    errors = []
    for index, source in enumerate(cells):
        try:
            _arm(cell_timeout)
            missing_reference = False
            for code in statements(to_python(source), f"<cell {index}>"):
                try:
                    exec(code, namespace)
                except Exception as exc:  # timeouts and SystemExit still end the cell
                    missing_reference = missing_reference or is_missing_reference(exc)
                    if not missing_reference:
                        raise
                    errors.append({"cell": index, "error": describe(exc)})
        except BaseException as exc:  # SystemExit, KeyboardInterrupt and timeouts included
            errors.append({"cell": index, "error": describe(exc)})
        finally:
            _arm(0)
    return errors


def _call(func: Any, args: list, kwargs: dict, guard: Any, call_timeout: float) -> dict[str, Any]:
    if guard is not None:
        guard.reset()
    try:
        _arm(call_timeout)
        if guard is not None:
            with guard.watch():
                value = func(*args, **kwargs)
        else:
            value = func(*args, **kwargs)
        _arm(0)
    except BaseException as exc:
        _arm(0)
        if guard is not None and guard.hits:
            return {"ok": False, "forbidden": list(guard.hits), "error": describe(exc)}
        return {"ok": False, "error": describe(exc)}
    if guard is not None and guard.hits:
        return {"ok": False, "forbidden": list(guard.hits), "error": "ran a reference implementation"}
    # the arguments go back too, so that the grader sees an input the answer modified in place
    reply = {"ok": True, "value": value, "args": args, "kwargs": kwargs}
    tampered = list(getattr(guard, "tampered", []) or [])
    if tampered:
        reply["tampered"] = tampered
    return reply


def _run_test(
    namespace: dict[str, Any], request: dict[str, Any], guard: Any, call_timeout: float, server: Any
) -> dict[str, Any]:
    """Run the student's test ``request["name"]`` on the candidate implementation the request
    carries, sealed by the grader (a test-writing question). This process only passes the sealed
    request on: the candidate server (forked before the notebook's first cell ran,
    :mod:`.candidates`) compiles the candidate in a process of its own, and runs the test in another
    fresh process that executes the notebook's cells first (:func:`_test_in_fresh_notebook`), so that
    nothing this process holds or learns, whatever its cells patched, reaches a run. The reply
    carries the server's signed verdict (pass or fail, why not, how often the candidate was
    called), which this process can neither read nor forge."""
    nonce, sealed = request.get("nonce"), request.get("sealed")
    if not isinstance(nonce, str) or not isinstance(sealed, str) or server is None:
        return {"ok": False, "error": "the request names no candidate", "calls": 0}
    if not callable(namespace.get(str(request.get("name")))):
        return {"ok": False, "error": f"`{request.get('name')}` is not defined as a function", "calls": 0}
    deadline = time.monotonic() + float(request.get("seconds") or call_timeout * WALL_FACTOR) + 4 * candidates.GRACE
    _end_strays()
    try:
        conn, answer = candidates.request_run(server, json.dumps({"nonce": nonce, "sealed": sealed}).encode(), deadline)
        if conn is not None:  # the server hands connections back only where no runner is set
            conn.close()
            answer = candidates.receive_verdict(server, deadline)
    except (OSError, ValueError, TimeoutError) as exc:
        return {"ok": False, "error": f"the test could not be run ({describe(exc)})", "calls": 0}
    finally:
        _end_strays()
    return {"ok": False, "signed": answer}


def _test_in_fresh_notebook(
    conn: socket.socket, order: dict[str, Any], cells: list[str], guard: Any, cell_timeout: float, call_timeout: float
) -> None:
    """A run of a student's test, in a fresh process forked by the test factory (already cut off by
    :func:`.candidates.isolate_test_process`): execute the notebook's cells, as the submission's own
    process did, then run the test ``order["test"]`` on the proxy at ``conn``."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    install_stubs(namespace)
    execute_cells(cells, namespace, cell_timeout)
    try:  # the factory gives the test its own time limit from now on
        os.write(int(order["ready"]), b"1")
        os.close(int(order["ready"]))
    except (KeyError, OSError, TypeError, ValueError):
        pass
    name = str(order.get("test"))
    candidates.run_test_here(namespace.get(name), conn, name, guard, call_timeout, WALL_FACTOR)


_SERVER_PIDS: set[int] = set()  # the candidate server's and the test factory's pids, in a submission's child


def _end_strays() -> None:
    """Kill every process of the notebook's but this one and the candidate server (what a cell or a
    test left running could carry from one run of a test to the next)."""
    if not SANDBOXED:
        return
    keep = {os.getpid(), os.getppid(), 1, *_SERVER_PIDS}
    for pid in _other_pids():
        if pid not in keep:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def serve(sock: socket.socket, namespace: dict[str, Any], call_timeout: float, guard: Any, server: Any = None) -> None:
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
            reply = _call(func, list(request.get("args", [])), dict(request.get("kwargs", {})), guard, call_timeout)
        elif op == "run_test":
            reply = _run_test(namespace, request, guard, call_timeout, server)
        else:
            reply = {"ok": False, "error": f"unknown request {op!r}"}
        try:
            body = protocol.encode(reply)
        except BaseException as exc:  # e.g. a result nested too deep, or a hostile __len__
            body = protocol.encode({"ok": False, "error": f"could not send the result back: {describe(exc)}"})
        try:
            protocol.send_frame(sock, body)
        except OSError:
            return


def child_main(sock: socket.socket, job: dict[str, Any], guard: Any) -> None:
    """The life of one submission's process. Never returns normally: it ends the process."""
    code = 0
    try:
        os.setsid()
        workdir = _workdir()
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        os.chdir(workdir)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        out = os.open(os.path.join(workdir, ".output"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if CHILD_UID is not None:
            os.chown(workdir, CHILD_UID, CHILD_UID)
            os.fchown(out, CHILD_UID, CHILD_UID)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.environ.update({"HOME": workdir, "TMPDIR": workdir, "MPLCONFIGDIR": workdir, "MPLBACKEND": "Agg"})
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails instead of killing
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.signal(signal.SIGPROF, _on_alarm)
        global WALL_FACTOR
        WALL_FACTOR = max(float(job.get("wall_factor", WALL_FACTOR)), 1.0)
        apply_limits(job.get("limits", {}))
        if CHILD_UID is not None:
            drop_privileges(CHILD_UID)
        _prctl(_PR_SET_NO_NEW_PRIVS, 1)

        # the key the grader seals candidates and verdicts with: received straight into this buffer,
        # kept by the candidate server forked below (with the cells, before any of them runs), then
        # wiped here
        key = bytearray(candidates.KEY_BYTES)
        view, got = memoryview(key), 0
        while got < len(key):
            n = sock.recv_into(view[got:])
            if not n:
                raise EOFError("no key")
            got += n
        request = protocol.recv_value(sock, as_torch=False)
        cells = [str(c) for c in request["cells"]]
        cell_timeout, call_timeout = float(job.get("cell_timeout", 10.0)), float(job.get("call_timeout", 10.0))

        def runner(conn: socket.socket, order: dict[str, Any]) -> None:
            _test_in_fresh_notebook(conn, order, cells, guard, cell_timeout, call_timeout)

        # outside a sandbox (--unsafe-no-sandbox) nothing but the child's own folder is cleaned
        watched = list(WRITABLE) if SANDBOXED else [_workdir()]
        server, server_pids = candidates.start_server(key, runner, watched, stop_others=SANDBOXED)
        key[:] = bytes(len(key))
        del view, key
        _SERVER_PIDS.update(server_pids)
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        install_stubs(namespace)
        errors = execute_cells(cells, namespace, float(job.get("cell_timeout", 10.0)))
        protocol.send_value(sock, {"op": "executed", "errors": errors})
        serve(sock, namespace, float(job.get("call_timeout", 10.0)), guard, server)
    except BaseException:
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)


if __name__ == "__main__":
    worker_main(int(sys.argv[1]))
