"""The candidate's side: compiling a candidate, the candidate's process (it answers the test's calls
and counts them), the candidate server that forks one per run and answers with the verdict, and
the calls that start the server and ask it for a run."""

from __future__ import annotations

import builtins
import contextlib
import json
import math
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from .factory import _factory
from .forks import _PR_SET_DUMPABLE, GRACE, _close_all_but, _prctl
from .sealing import sign, unseal
from .wire import _recv, _send, describe, dumps, loads

#: the file name candidates are compiled under (no file: ``inspect.getsource`` fails on them)
FILENAME = "<candidate>"


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
