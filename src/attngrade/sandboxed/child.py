"""The child: one submission's process, forked by the worker (:mod:`.worker`).

It applies the limits (:mod:`.process_limits`), receives the key of test-writing questions and the
notebook's code cells, forks the candidate server and test factory (:mod:`.candidates`) before any
cell runs, executes the cells (their IPython syntax as Python, :mod:`.ipython`; otter's and
IPython's calls harmless) under a soft time limit, and answers the grader's ``lookup``, ``call``
and ``run_test`` requests (:func:`serve`) until the grader says goodbye.
"""

from __future__ import annotations

import builtins
import json
import os
import signal
import socket
import sys
import time
import types
from typing import Any

from . import candidates, cleanup, process_limits, protocol
from .candidates import describe
from .ipython import RUN_BODY, to_python


class CellTimeout(BaseException):
    """Raised inside the student's code when a cell or a call runs past its soft time limit."""


class _StubGrader:
    """Stands in for ``otter.Notebook`` while grading: checks and exports do nothing here."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class ShellStandIn:
    """Stands in for IPython's ``get_ipython()``: the timing and capture magics run their code,
    the other magics and shell commands do nothing (a graded notebook needs neither)."""

    def __init__(self, namespace: dict[str, Any]):
        self.namespace = namespace
        self.user_ns = namespace

    def run_cell_magic(self, name: str, line: str, cell: str) -> None:
        if name in RUN_BODY:
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


def install_stubs(namespace: dict[str, Any]) -> None:
    """Make otter's and IPython's calls harmless in the sandbox."""
    otter = types.ModuleType("otter")
    otter.Notebook = _StubGrader  # type: ignore[attr-defined]
    sys.modules["otter"] = otter
    shell = ShellStandIn(namespace)
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


def _set_time_limit(seconds: float) -> None:
    """Stop the running code after ``seconds`` of CPU time, or WALL_FACTOR times that of wall time.

    CPU time (ITIMER_PROF: this process, all its threads) is what a busy machine does not change,
    so an honest notebook meets the same limit whatever runs beside it; the wall-clock timer stops
    code that waits without computing. ``_set_time_limit(0)`` disarms both.
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
            _set_time_limit(cell_timeout)
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
            _set_time_limit(0)
    return errors


def _call(func: Any, args: list, kwargs: dict, guard: Any, call_timeout: float) -> dict[str, Any]:
    if guard is not None:
        guard.reset()
    try:
        _set_time_limit(call_timeout)
        if guard is not None:
            with guard.watch():
                value = func(*args, **kwargs)
        else:
            value = func(*args, **kwargs)
        _set_time_limit(0)
    except BaseException as exc:
        _set_time_limit(0)
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
    if not cleanup.SANDBOXED:
        return
    keep = {os.getpid(), os.getppid(), 1, *_SERVER_PIDS}
    for pid in cleanup.other_pids():
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
        workdir = cleanup.workdir()
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        os.chdir(workdir)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        out = os.open(os.path.join(workdir, ".output"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if process_limits.CHILD_UID is not None:
            os.chown(workdir, process_limits.CHILD_UID, process_limits.CHILD_UID)
            os.fchown(out, process_limits.CHILD_UID, process_limits.CHILD_UID)
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
        process_limits.apply_limits(job.get("limits", {}))
        if process_limits.CHILD_UID is not None:
            process_limits.drop_privileges(process_limits.CHILD_UID)
        process_limits.prctl(process_limits.PR_SET_NO_NEW_PRIVS, 1)

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
        watched = list(cleanup.WRITABLE) if cleanup.SANDBOXED else [cleanup.workdir()]
        server, server_pids = None, ()
        if job.get("candidates", True):  # the grader asks for them where a question has a test written
            server, server_pids = candidates.start_server(key, runner, watched, stop_others=cleanup.SANDBOXED)
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
