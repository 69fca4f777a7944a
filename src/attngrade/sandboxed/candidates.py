"""The implementations a student's test is run on, in a test-writing question, and the processes
each run takes.

A test-writing question asks the student for one test, ``test_<function>(<function>)``: it receives
the function under test and asserts what a correct one must do. The grader runs it on candidate
implementations written by the instructor (the reference, and the known wrong versions of the
homework's ``mutants``), given as *source* in the tests. A test must carry the answer: whether it
passes may depend on nothing but what the candidate returns for the inputs the test chose. So every
run of a test on a candidate takes two fresh processes, sharing nothing with any earlier run:

* the **candidate's process**, forked by the candidate server (:func:`serve_candidates`): the
  candidate is compiled there, in a fresh namespace holding ``torch`` and ``math``; it answers
  calls, counts them, and no other process of the student's can trace or read it
  (``PR_SET_DUMPABLE`` 0). Its code, closure and frames never exist where the test runs;
* the **test's process**, which receives a *proxy*: a plain function that sends its arguments to
  the candidate's process and returns what comes back (tensors and plain data, through
  ``torch.save`` and ``torch.load(weights_only=True)``, which builds no object of the sender's
  choosing; a built-in exception comes back as itself). It is cut off from everything but its
  candidate (:func:`isolate_test_process`): no inherited file descriptor, shared memory made
  private, and where the system allows it its own user, network, IPC, pid and mount namespaces with
  an empty ``/tmp`` and ``/dev/shm``; elsewhere it may write no file contents, and what it created
  is deleted after it.

At the end the test's process tells the candidate's process whether the test passed; the verdict and
the number of calls come back from the candidate's side.

In the class grader (:mod:`.worker`) both come from processes forked before the notebook's first
cell runs: the candidate server, which alone keeps the key the grader seals each source and signs
each verdict with (:func:`seal`, :func:`sign`; the notebook's process wipes its copy), and the test
factory (:func:`_factory`), which never holds a candidate or a key and forks each test's process,
which runs the notebook's cells afresh, then the test. While a test runs, every other process of
the student's is stopped. So nothing a cell patches or starts in the notebook's process reaches a
run, and that process only passes sealed requests and signed verdicts on. In ``grader.check`` and
``otter run`` (:mod:`attngrade.student_tests`) the server and each test's process are forked from the
notebook's own process instead (no pristine one exists there).
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import hashlib
import hmac
import io
import json
import math
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

#: the file name candidates are compiled under (no file: ``inspect.getsource`` fails on them)
FILENAME = "<candidate>"
#: the largest message between a test and its candidate, in bytes
MAX_MESSAGE = 64 * 2**20
#: seconds a run may take beyond its time limit before its processes are killed
GRACE = 2.0
KEY_BYTES = 32

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4


def _one_thread_after_fork() -> None:
    """Every child forked here computes on one thread. A notebook under ``grader.check`` or ``otter
    run`` has torch's default threads; once its torch has run an OpenMP parallel region, a forked
    child inherits libgomp's idea of a thread pool but none of its threads, and its next parallel
    region (``torch.tril`` on a mask, say) waits for them forever. With one thread libgomp makes no
    team. (The class grader's worker sets one thread before any fork anyway.)"""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


os.register_at_fork(after_in_child=_one_thread_after_fork)


def describe(exc: BaseException) -> str:
    """``"TypeError: message"`` for an exception that student code raised (at most 2,000
    characters), or its type's name alone when its ``__str__`` itself fails; used wherever a
    student's code runs (the sandbox's worker, and a student's test in the notebook)."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # a student's exception whose __str__ fails
        text = type(exc).__name__
    return text[:2000]


class CandidateError(Exception):
    """The instructor's candidate source does not compile or does not define the function."""


def compile_candidate(name: str, source: str) -> Callable[..., Any]:
    """The function ``name`` defined by ``source``, compiled in a fresh namespace (torch, math)."""
    import torch

    namespace: dict[str, Any] = {"__builtins__": builtins, "__name__": "candidate", "torch": torch, "math": math}
    try:
        exec(compile(str(source), FILENAME, "exec"), namespace)
    except Exception as exc:
        raise CandidateError(f"the candidate source does not run: {type(exc).__name__}: {exc}") from None
    func = namespace.get(str(name))
    if not callable(func):
        raise CandidateError(f"the candidate source defines no function `{name}`")
    return func


# -- sealing (the class grader's key) ---------------------------------------------------------


def _keystream(key: bytes, nonce: bytes, n: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(b"stream" + bytes(key) + nonce + counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:n])


def sign(key: bytes, nonce: bytes, payload: bytes) -> str:
    """HMAC-SHA256 of ``nonce + payload`` under ``key``, in hex."""
    return hmac.new(bytes(key), nonce + payload, hashlib.sha256).hexdigest()


def seal(key: bytes, nonce: bytes, data: bytes) -> str:
    """``data`` encrypted and authenticated under ``key`` (hex): SHA-256 in counter mode, then HMAC."""
    body = bytes(a ^ b for a, b in zip(data, _keystream(key, nonce, len(data))))
    return sign(key, nonce, body) + body.hex()


def unseal(key: bytes, nonce: bytes, sealed: str) -> bytes:
    """The data :func:`seal` sealed; ``ValueError`` if it was not sealed under ``key`` and ``nonce``."""
    mac, body = sealed[:64], bytes.fromhex(sealed[64:])
    if not hmac.compare_digest(mac, sign(key, nonce, body)):
        raise ValueError("not sealed by the grader")
    return bytes(a ^ b for a, b in zip(body, _keystream(key, nonce, len(body))))


# -- messages between a test and its candidate -----------------------------------------------


def dumps(value: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    """Plain data and tensors only (``weights_only``: no object of the sender's choosing is built)."""
    import torch

    return torch.load(io.BytesIO(data), weights_only=True)


def _send(sock: socket.socket, data: bytes) -> None:
    sock.sendall(struct.pack(">Q", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer in time")
            sock.settimeout(left)
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket, deadline: float | None = None) -> bytes:
    (n,) = struct.unpack(">Q", _recv_exact(sock, 8, deadline))
    if n > MAX_MESSAGE:
        raise ValueError(f"a message of {n} bytes exceeds the limit of {MAX_MESSAGE}")
    return _recv_exact(sock, n, deadline)


#: the exception types a proxy raises as themselves (any other arrives as a RuntimeError)
_BUILTIN_ERRORS = {
    name: cls
    for name, cls in vars(builtins).items()
    if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, (Warning, StopIteration))
}


def make_proxy(conn: socket.socket, name: str) -> Callable[..., Any]:
    """The function a student's test receives: each call is computed in the candidate's process."""

    def candidate(*args: Any, **kwargs: Any) -> Any:
        try:
            request = dumps({"op": "call", "args": args, "kwargs": kwargs})
        except Exception as exc:
            raise TypeError(
                f"`{name}` receives tensors and plain data (numbers, strings, lists, tuples, dicts): {describe(exc)}"
            ) from None
        _send(conn, request)
        reply = loads(_recv(conn))
        if reply.get("ok"):
            return reply.get("value")
        error = _BUILTIN_ERRORS.get(str(reply.get("type")), RuntimeError)
        raise error(str(reply.get("message", "")))

    candidate.__name__ = candidate.__qualname__ = str(name)
    candidate.__doc__ = f"The `{name}` your test is run on (it runs in a process of its own)."
    return candidate


# -- the candidate's side ---------------------------------------------------------------------


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


class _RunOut(BaseException):
    pass


def _candidate_main(conn: socket.socket, out: int, func: Callable[..., Any], seconds: float) -> None:
    """Serve the test's calls of ``func`` until it says it is done, the connection closes or the
    time is up; write the verdict (and the count of calls, kept here) to ``out``."""
    _prctl(_PR_SET_DUMPABLE, 0)
    calls = 0
    verdict: Any = None

    def alarm(signum: int, frame: Any) -> None:
        raise _RunOut

    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        while True:
            message = loads(_recv(conn))
            if not isinstance(message, dict):
                break
            if message.get("op") == "done":
                verdict = message
                break
            calls += 1
            try:
                value = func(*list(message.get("args") or ()), **dict(message.get("kwargs") or {}))
                reply = dumps({"ok": True, "value": value})
            except _RunOut:
                raise
            except Exception as exc:
                reply = dumps({"ok": False, "type": type(exc).__name__, "message": str(exc)[:2000]})
            _send(conn, reply)
    except _RunOut:
        why = "did not finish in time (an endless loop, or far too slow)"
    except (EOFError, OSError, ValueError, TypeError, RuntimeError, Exception):
        why = (
            "ended before it finished (it ran past its time limit, exited, crashed, ran out of memory, "
            "or sent something that is not data)"
        )
    else:
        why = ""
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if isinstance(verdict, dict):
        result = {
            "passed": verdict.get("passed") is True,
            "error": str(verdict.get("error") or "")[:2000],
            "forbidden": [str(r)[:200] for r in list(verdict.get("forbidden") or [])[:5]],
            "tampered": [str(r)[:200] for r in list(verdict.get("tampered") or [])[:3]],
        }
    else:
        result = {"passed": False, "error": f"the test {why or 'ended before it finished'}", "forbidden": []}
    result["calls"] = calls
    os.write(out, json.dumps(result).encode())


def serve_candidates(
    sock: socket.socket,
    key: bytes | None,
    factory: socket.socket | None = None,
    *,
    _compile: Callable[[str, str], Callable[..., Any]] = compile_candidate,
    _serve_one: Callable[..., None] = _candidate_main,
) -> None:
    """The candidate server: for each request (a candidate's name and source, sealed under ``key``
    when there is one), compile the candidate, fork its process, and answer over ``sock`` (a
    SOCK_SEQPACKET socket) with the verdict that process wrote (signed under ``key``). The test's
    end of the candidate's connection goes back over ``sock`` (``factory`` None: the requester forks
    the test's process), or to the test factory (:func:`_factory`, the class grader), which forks
    the test's process from a state that never held a candidate. Returns when ``sock`` closes."""
    _prctl(_PR_SET_DUMPABLE, 0)
    seen: set[bytes] = set()
    while True:
        try:
            frame = sock.recv(1 << 20)
        except OSError:
            return
        if not frame:
            return
        nonce = b""
        try:
            request = json.loads(frame)
            if key is not None:
                nonce = bytes.fromhex(str(request["nonce"]))
                if nonce in seen:
                    raise ValueError("a request sent twice")
                seen.add(nonce)
                spec = json.loads(unseal(key, nonce, str(request["sealed"])))
            else:
                spec = request
            func = _compile(str(spec["name"]), str(spec["source"]))  # as defined on import, whatever a cell patched
            seconds = float(spec.get("seconds", 10.0))
        except CandidateError as exc:
            _answer(sock, key, nonce, {"candidate_error": str(exc)[:2000]})
            continue
        except Exception as exc:
            _answer(sock, key, nonce, {"refused": describe(exc)})
            continue
        # while the test runs, every other process of the student's is stopped (the class grader):
        # none can watch, trace or answer it
        stopped = _signal_all(_others(), signal.SIGSTOP) if factory is not None and _STOP_OTHERS else []
        test_end, candidate_end = socket.socketpair()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                test_end.close()
                os.close(read)
                _serve_one(candidate_end, write, func, seconds)
            finally:
                os._exit(0)
        candidate_end.close()
        os.close(write)
        if factory is None:
            with contextlib.suppress(OSError):
                socket.send_fds(sock, [b'{"connected": true}'], [test_end.fileno()])
        else:
            order = json.dumps(
                {
                    "test": str(spec.get("test")),
                    "seconds": seconds,
                    "test_seconds": float(spec.get("test_seconds", seconds)),
                }
            ).encode()
            with contextlib.suppress(OSError):
                socket.send_fds(factory, [order], [test_end.fileno()])
        test_end.close()
        result = _read_until(read, time.monotonic() + seconds + GRACE)
        os.close(read)
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):
                kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        if factory is not None:  # the factory says when the test's process is gone and cleaned up
            factory.settimeout(seconds + 3 * GRACE)
            with contextlib.suppress(OSError):
                factory.recv(64)
            factory.settimeout(None)
        _signal_all(stopped, signal.SIGCONT)
        try:
            verdict = json.loads(result) if result else None
        except ValueError:
            verdict = None
        if not isinstance(verdict, dict):
            verdict = {"passed": False, "calls": 0, "error": "the test did not finish in time", "forbidden": []}
        _answer(sock, key, nonce, verdict)


_KEEP_RUNNING: set[int] = set()  # the test factory's pid, in the candidate server
#: whether the candidate server stops the other processes during a run: only inside a sandbox of the
#: student's own (every process there is the student's), never where it could reach anyone else's
_STOP_OTHERS = False


def _others() -> list[int]:
    """The other processes of this user that this one can see, but pid 1, itself and the factory."""
    me, found = os.getuid(), []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid in (1, os.getpid()) or pid in _KEEP_RUNNING:
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid == me:
                found.append(pid)
        except OSError:
            continue
    return found


def _signal_all(pids: list[int], sig: int) -> list[int]:
    """Send ``sig`` to each of ``pids``; the ones it reached (a root process is out of reach)."""
    reached = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            reached.append(pid)
        except OSError:
            pass
    return reached


def _read_until(fd: int, deadline: float) -> bytes:
    import select

    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _answer(sock: socket.socket, key: bytes | None, nonce: bytes, result: dict[str, Any]) -> None:
    payload = json.dumps(result).encode()
    message = {"payload": payload.decode()}
    if key is not None:
        message["mac"] = sign(key, nonce, payload)
    with contextlib.suppress(OSError):
        sock.send(json.dumps(message).encode())


def warm_up() -> None:
    """Make the first message's imports here, once, rather than in every forked process."""
    with contextlib.suppress(Exception):
        import torch

        loads(dumps({"ok": True, "value": (torch.ones(2, 2), 1, "x")}))


def _factory(sock: socket.socket, runner: Callable[[socket.socket, dict[str, Any]], None], watched: list[str]) -> None:
    """The test factory of the class grader: for each order from the candidate server (a test's
    name, a time budget, and the test's end of a candidate's connection), fork the test's process,
    which is cut off (:func:`isolate_test_process`) and calls ``runner(connection, order)``; kill it
    and all it started when its time is up. This process never holds a candidate or a key, so
    neither does any test's process."""
    _prctl(_PR_SET_DUMPABLE, 0)
    folders = [f for f in watched if os.path.isdir(f)]
    isolated = None  # probed at the first order: a homework with no test to run never pays for it
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, 1)
        except OSError:
            return
        if not data:
            return
        if not fds:
            continue
        conn = socket.socket(fileno=fds[0])
        try:
            order = json.loads(data)
            seconds = float(order.get("seconds", 10.0))
        except (ValueError, AttributeError, TypeError):
            conn.close()
            continue
        if isolated is None:
            isolated = namespaces_available()
        before = _snapshot(folders) if not isolated and folders else set()
        ready_read, ready_write = os.pipe()  # the test's process writes a byte when its cells have run
        order["ready"] = ready_write
        test_seconds = float(order.get("test_seconds", seconds))
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                os.close(ready_read)
                _tester(conn, order, runner, isolated)
            finally:
                os._exit(1)
        conn.close()
        os.close(ready_write)
        os.set_blocking(ready_read, False)
        deadline = time.monotonic() + seconds + GRACE
        cells_done = False
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if not cells_done:
                with contextlib.suppress(BlockingIOError, OSError):
                    if os.read(ready_read, 1):  # from now on, only the test's own time limit
                        cells_done = True
                        deadline = min(deadline, time.monotonic() + test_seconds + GRACE)
            time.sleep(0.001)
        os.close(ready_read)
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):
                kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        if not isolated and folders:
            _remove_new(folders, before)
        with contextlib.suppress(OSError):
            sock.send(b"done")


def _tester(
    conn: socket.socket, order: dict[str, Any], runner: Callable[[socket.socket, dict[str, Any]], None], isolated: bool
) -> None:
    isolate_test_process(conn, isolated, forget=False, keep=(int(order["ready"]),))
    runner(conn, order)


def _close_all_but(keep: set[int]) -> None:
    for fd in range(3, _max_fd()):
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def start_server(
    key: bytearray | bytes | None,
    runner: Callable[[socket.socket, dict[str, Any]], None] | None = None,
    watched: list[str] | None = None,
    stop_others: bool = False,
) -> tuple[socket.socket, list[int]]:
    """Fork the candidate server (:func:`serve_candidates`) from this process; return the socket to
    it and the pids of what was forked. The server keeps its own copy of ``key``: the caller wipes its own. With a
    ``runner`` (the class grader) a test factory is forked first (:func:`_factory`), before the
    server exists, and wipes the key at once; ``watched``: its folders to clean where namespaces
    are not available. ``stop_others``: stop every other process of this user while a test runs
    (only in a sandbox, where they are all the student's)."""
    warm_up()
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    factory_end, pids = None, []
    if runner is not None:
        factory_end, factory_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fpid = os.fork()
        if fpid == 0:
            try:
                if isinstance(key, bytearray):
                    key[:] = bytes(len(key))
                for other in (mine, theirs, factory_end):
                    other.close()
                _close_all_but({factory_in.fileno()})
                _factory(factory_in, runner, list(watched or []))
            finally:
                os._exit(0)
        factory_in.close()
        pids.append(fpid)
    pid = os.fork()
    if pid == 0:
        try:
            mine.close()
            keep = {theirs.fileno()} | ({factory_end.fileno()} if factory_end is not None else set())
            _close_all_but(keep)
            global _STOP_OTHERS
            _STOP_OTHERS = bool(stop_others)
            _KEEP_RUNNING.update(pids)
            serve_candidates(theirs, None if key is None else bytes(key), factory_end)
        finally:
            os._exit(0)
    theirs.close()
    if factory_end is not None:
        factory_end.close()
    return mine, [*pids, pid]


def request_run(server: socket.socket, request: bytes, deadline: float) -> tuple[socket.socket | None, dict[str, Any]]:
    """Send a request to the candidate server; ``(connection to the candidate, {})``, or ``(None,
    the server's answer)`` when it refused (a broken candidate)."""
    server.settimeout(max(deadline - time.monotonic(), 0.001))
    server.send(request)
    data, fds, _flags, _addr = socket.recv_fds(server, 1 << 20, 1)
    server.settimeout(None)
    if fds:
        return socket.socket(fileno=fds[0]), {}
    return None, json.loads(data or b"{}")


def receive_verdict(server: socket.socket, deadline: float) -> dict[str, Any]:
    """The server's answer after a run: ``{"payload": json, "mac": hex}``."""
    server.settimeout(max(deadline - time.monotonic(), 0.001))
    try:
        data = server.recv(1 << 20)
    finally:
        server.settimeout(None)
    return json.loads(data or b"{}")


# -- the test's side --------------------------------------------------------------------------

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = (
    0x00020000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 0x4000, 1 << 18
#: the folders a test's process gets empty and private (in its own mount namespace)
PRIVATE_FOLDERS = ("/tmp", "/dev/shm")
_NAMESPACES: bool | None = None  # whether this system gives a test's process its own namespaces


def _isolate_namespaces() -> bool:
    """Enter new user, mount, network, IPC and pid namespaces with empty private folders; a second
    user namespace leaves the process no power over those mounts. In the new pid namespace the
    caller forks: the child (pid 1 there) returns True, the parent waits and exits with it.
    False, with nothing changed, where the system refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWPID
    uid, gid = os.geteuid(), os.getegid()
    # writing our own id maps needs /proc/self owned by us: dumpable for these few lines (the
    # class grader has stopped every process of the notebook's meanwhile), then not again, so that
    # no process outside can read or trace this one
    _prctl(_PR_SET_DUMPABLE, 1)
    if libc.unshare(flags) != 0:
        _prctl(_PR_SET_DUMPABLE, 0)
        return False
    try:  # the same ids inside (a nested user namespace needs the caller's ids mapped)
        for name, text in (("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError:
        os._exit(3)
    finally:
        _prctl(_PR_SET_DUMPABLE, 0)
    libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None)
    for folder in PRIVATE_FOLDERS:
        if os.path.isdir(folder):
            if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=16m,mode=1777") != 0:
                os._exit(3)  # half isolated: run nothing
    if libc.unshare(_CLONE_NEWUSER) != 0:
        os._exit(3)
    outer = os.getpid()
    pid = os.fork()
    if pid:
        try:
            _, status = os.waitpid(pid, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        finally:
            os._exit(1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != outer and os.getpid() != 1:
        os._exit(1)
    work = "/tmp/work"
    os.makedirs(work, exist_ok=True)
    os.chdir(work)
    os.environ.update({"HOME": work, "TMPDIR": work})
    import tempfile

    tempfile.tempdir = work
    return True


def namespaces_available() -> bool:
    """Whether a test's process can get namespaces of its own here (probed once, in a fork)."""
    global _NAMESPACES
    if _NAMESPACES is None:
        if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
            _NAMESPACES = False
            return False
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                ok = _isolate_namespaces()
                os._exit(0 if ok else 2)
            finally:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        _NAMESPACES = os.waitstatus_to_exitcode(status) == 0
    return _NAMESPACES


def _privatize_shared_memory() -> None:
    """Make every writable shared mapping this process inherited (``mmap.mmap(-1, n)`` in a cell,
    say) a private copy, so that nothing the test writes there reaches another process."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for line in lines:
        fields = line.split()
        if len(fields) < 2 or len(fields[1]) < 4 or fields[1][3] != "s" or fields[1][1] != "w":
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        size = end - start
        readable = fields[1][0] == "r"
        data = ctypes.string_at(start, size) if readable else b""
        prot = 0x1 | 0x2  # PROT_READ | PROT_WRITE
        got = libc.mmap(start, size, prot, 0x02 | 0x20 | 0x10, -1, 0)  # MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED
        if got != start:
            os._exit(3)
        if data:
            ctypes.memmove(start, data, size)
        libc.mprotect(start, size, (0x1 if readable else 0) | 0x2 | (0x4 if fields[1][2] == "x" else 0))


def _snapshot(folders: list[str], limit: int = 2000) -> set[str]:
    """The entries of ``folders``, and of the folders in them while there are at most ``limit``."""
    seen: set[str] = set()
    for folder in folders:
        todo = [folder]
        while todo:
            current = todo.pop()
            try:
                entries = list(os.scandir(current))
            except OSError:
                continue
            for entry in entries:
                seen.add(entry.path)
                if len(seen) < limit and entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
    return seen


def _remove_new(folders: list[str], before: set[str]) -> None:
    import shutil

    for path in sorted(_snapshot(folders) - before, key=len):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def isolate_test_process(conn: socket.socket, isolated: bool, forget: bool = True, keep: tuple[int, ...] = ()) -> None:
    """Cut the test's process off from everything but its candidate: a session of its own, no file
    descriptor but ``conn``, no shared memory, the callers' frames emptied, and (``isolated``) new
    namespaces with empty private folders, or else no file contents written."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    kept = {0, 1, 2, conn.fileno(), *keep}
    for fd in range(3, _max_fd()):
        if fd not in kept:
            with contextlib.suppress(OSError):
                os.close(fd)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the process ends with os._exit
    if forget:  # where the callers held a candidate's source (not in the class grader's factory)
        _forget_callers(sys._getframe(2))  # the callers of the caller, which keeps what it needs
    _privatize_shared_memory()
    if isolated:
        if not _isolate_namespaces():
            os._exit(3)
    else:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # no file contents: nothing to read back
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        import torch

        torch.set_num_threads(1)


def _test_main(
    test: Callable[..., Any],
    conn: socket.socket,
    name: str,
    guard: Any,
    seconds: float,
    wall_factor: float,
    isolated: bool,
) -> None:
    """The test's process: cut it off (:func:`isolate_test_process`) and run the test."""
    isolate_test_process(conn, isolated)
    run_test_here(test, conn, name, guard, seconds, wall_factor)


def run_test_here(test: Any, conn: socket.socket, name: str, guard: Any, seconds: float, wall_factor: float) -> None:
    """Run ``test`` on the proxy for the candidate at the other end of ``conn``, tell the candidate's
    process how it went, and end this process."""
    if not callable(test):
        with contextlib.suppress(BaseException):
            _send(conn, dumps({"op": "done", "passed": False, "error": f"`{name}` is not defined as a function"}))
        os._exit(0)
    proxy = make_proxy(conn, name)

    def alarm(signum: int, frame: Any) -> None:
        raise TimeoutError("time limit reached")

    signal.signal(signal.SIGALRM, alarm)
    signal.signal(signal.SIGPROF, alarm)
    done: dict[str, Any] = {"op": "done", "passed": False}
    try:
        if guard is not None:
            guard.reset()
        signal.setitimer(signal.ITIMER_PROF, seconds)
        signal.setitimer(signal.ITIMER_REAL, seconds * wall_factor)
        try:
            if guard is not None:
                with guard.watch():
                    test(proxy)
            else:
                test(proxy)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
        done["passed"] = True
    except BaseException as exc:
        done["error"] = describe(exc)
    if guard is not None and getattr(guard, "hits", None):
        done["passed"] = False
        done["forbidden"] = [str(h) for h in list(guard.hits)[:5]]
        with contextlib.suppress(Exception):
            done["error"] = str(guard.message(name))
    tampered = list(getattr(guard, "tampered", []) or [])
    if tampered:
        done["tampered"] = [str(t) for t in tampered[:3]]
    with contextlib.suppress(BaseException):
        _send(conn, dumps(done))
    os._exit(0)


_FORGOTTEN: list[Any] = []


def _forget_callers(frame: Any) -> None:
    """Empty the local variables of every function that called this process's test (the grader's
    frames, which this process never returns to; a module's namespace is left alone): a test that
    walks up the stack finds no candidate's source there."""
    while frame is not None:
        if not frame.f_code.co_flags & 0x1:  # not a function's frame (CO_OPTIMIZED): a module's namespace
            frame = frame.f_back
            continue
        try:
            names = list(frame.f_locals)
            _FORGOTTEN.append(dict(frame.f_locals))  # kept alive: no object's finalizer runs here
            if sys.version_info >= (3, 13):
                for name in names:
                    frame.f_locals[name] = None
            else:
                local = frame.f_locals
                for name in names:
                    local[name] = None
                ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
        except Exception:
            pass
        frame = frame.f_back


def _max_fd() -> int:
    try:
        return max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return 1024


def run_test(
    test: Callable[..., Any],
    conn: socket.socket,
    name: str,
    *,
    guard: Any = None,
    seconds: float = 10.0,
    wall_factor: float = 3.0,
    watched: list[str] | None = None,
) -> None:
    """Run ``test`` on the proxy for the candidate at the other end of ``conn``, in a fresh process
    forked from this one; return when it has ended (killed, with all it started, after ``seconds``
    of CPU or ``wall_factor`` times that of wall time, plus :data:`GRACE`). ``watched``: the folders whose new
    entries are deleted afterwards where namespaces are not available."""
    isolated = namespaces_available()
    folders = [f for f in (watched or []) if os.path.isdir(f)]
    before = _snapshot(folders) if not isolated and folders else set()
    pid = os.fork()
    if pid == 0:
        try:
            _test_main(test, conn, name, guard, seconds, wall_factor, isolated)
        finally:
            os._exit(1)
    conn.close()
    deadline = time.monotonic() + seconds * wall_factor + GRACE
    try:
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.001)
    finally:
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            with contextlib.suppress(OSError):
                target()
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        if not isolated and folders:
            _remove_new(folders, before)


def prepare(name: str, source: str) -> tuple[Callable[..., Any], Callable[[], int]]:
    """The compiled candidate wrapped with a call counter, in this process (only where processes
    cannot be forked: see :mod:`attngrade.student_tests`)."""
    func = compile_candidate(name, source)
    count = [0]

    def candidate(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return func(*args, **kwargs)

    candidate.__name__ = candidate.__qualname__ = str(name)

    def calls() -> int:
        value = count[0] if isinstance(count, list) and count else 0
        return value if type(value) is int and value >= 0 else 0

    return candidate, calls
