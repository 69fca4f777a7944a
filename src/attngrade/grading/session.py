"""One submission in a sandbox's worker (:mod:`.bubblewrap`), as the grader sees it.

A :class:`Session` has a child execute the notebook, looks names up, and calls the student's
functions on the grader's inputs, each call with a deadline. A child that dies, hangs or sends
garbage is killed and, while the submission's budget lasts, replaced by a fresh one that executes
the notebook again, so one crashing answer costs only the tests that triggered it. A
:class:`StudentFunction` stands for one of the student's functions in the tests; a
:class:`ForbiddenCall` is a call that ran a reference implementation.
"""

from __future__ import annotations

import hmac
import json
import os
import socket
import time
from typing import Any

from ..sandboxed import candidates, protocol
from ..sandboxed.integrity import forbidden_what
from .bubblewrap import SandboxError, Worker


class Session:
    """One submission's session in a worker (see the module docstring)."""

    def __init__(
        self,
        worker: Worker,
        cells: list[str],
        *,
        limits: dict[str, Any],
        max_restarts: int = 4,
        candidates: bool = True,
    ):
        self.worker = worker
        self.cells = cells
        self.limits = limits
        # whether the child forks the candidate server and test factory (a test-writing question's
        # runs, :meth:`run_test`); without them a run_test is answered "no candidate" and fails
        self.candidates = candidates
        self.max_restarts = max_restarts
        self.deadline = time.monotonic() + float(limits["submission_timeout"])
        self.sock: socket.socket | None = None
        self.starts = 0
        self.execution_errors: list[dict[str, Any]] = []
        self.broken: str | None = None  # why the notebook cannot run; then every request fails
        self.events: list[str] = []
        self.worker_lost = False  # the whole sandbox died while this student's code ran
        self.tampered: list[str] = []  # the integrity guard was switched off during a call
        self._kinds: dict[str, str] = {}
        self._values: dict[str, Any] = {}
        self._test_runs: dict[tuple[str, str, str], dict[str, Any]] = {}  # run_test's answers
        self._key = b""  # the key of the running child (start)

    def _left(self) -> float:
        return self.deadline - time.monotonic()

    def _call_deadline(self) -> float:
        """Wall-clock seconds after which a call is killed: its soft limit's wall time, plus grace."""
        lim = self.limits
        return float(lim["call_timeout"]) * float(lim["wall_factor"]) + float(lim["call_grace"])

    def _job(self) -> dict[str, Any]:
        lim = self.limits
        return {
            "cell_timeout": float(lim["cell_timeout"]),
            "call_timeout": float(lim["call_timeout"]),
            "wall_factor": float(lim["wall_factor"]),
            "candidates": self.candidates,
            "limits": {
                "memory_bytes": int(lim["memory_mb"]) * 2**20,
                "cpu_seconds": int(lim["cpu_seconds"]),
                "file_bytes": int(lim["file_mb"]) * 2**20,
                "nproc": int(lim.get("nproc", 16)),
            },
        }

    def start(self) -> bool:
        """Start a child and execute the notebook; False if it could not (see ``broken``).
        InfrastructureError when the sandbox itself fails before the student's code runs."""
        if self.broken is not None:
            return False
        if self.worker_lost:
            self.broken = "the notebook's code ended its whole sandbox; the remaining tests fail"
            self.events.append(self.broken)
            return False
        if self.starts > self.max_restarts:
            self.broken = "its process was restarted too often; the remaining tests fail"
            self.events.append(self.broken)
            return False
        if self._left() <= 0:
            self.broken = "the submission's time budget is spent; the remaining tests fail"
            self.events.append(self.broken)
            return False
        self.starts += 1
        self.sock = self.worker.spawn(self._job())
        try:
            # the key that seals test-writing questions' candidates (candidates.seal), before any cell runs
            self._key = os.urandom(candidates.KEY_BYTES)
            self.sock.sendall(self._key)
            protocol.send_value(self.sock, {"op": "run", "cells": self.cells})
            budget = min(self._left(), float(self.limits["exec_timeout"]))
            reply = protocol.recv_value(self.sock, deadline=time.monotonic() + budget, as_torch=False)
            if not (isinstance(reply, dict) and reply.get("op") == "executed"):
                raise protocol.ProtocolError("unexpected reply")
            errors = reply.get("errors", [])
            self.execution_errors = (
                [
                    {"cell": int(e.get("cell", -1)), "error": str(e.get("error", ""))[:2000]}
                    for e in errors[:50]
                    if isinstance(e, dict)
                ]
                if isinstance(errors, list)
                else []
            )
            return True
        except TimeoutError:
            self.broken = "running the notebook took longer than its time limit (an endless loop?)"
        except EOFError:
            self.broken = "the notebook's process ended while running it (os._exit, a crash, or the memory limit)"
        except (protocol.ProtocolError, OSError, ValueError, TypeError) as exc:
            self.broken = f"the notebook's process sent back something the grader cannot read ({exc})"
        self.events.append(self.broken)
        self._end(kill=True)
        return False

    def _end(self, *, kill: bool) -> None:
        if self.sock is not None:
            sock, self.sock = self.sock, None
            if not self.worker.finish(sock, kill=kill):
                self.worker_lost = True

    def close(self) -> None:
        if self.sock is not None:
            try:
                protocol.send_value(self.sock, {"op": "bye"})
            except OSError:
                pass
        self._end(kill=False)

    # -- requests ---------------------------------------------------------------------------
    def _request(self, message: dict[str, Any], timeout: float) -> Any:
        if self.sock is None and not self.start():
            raise SandboxError(f"could not be run: {self.broken}")
        deadline = time.monotonic() + max(0.0, min(timeout, self._left()))
        try:
            protocol.send_value(self.sock, message)
            return protocol.recv_value(self.sock, deadline=deadline)
        except TimeoutError:
            reason = "did not return in time (an endless loop, or far too slow)"
        except EOFError:
            reason = "ended its process (sys.exit/os._exit, a crash, or the memory limit)"
        except protocol.ProtocolError as exc:
            reason = f"sent back something the grader cannot read ({exc})"
        except OSError as exc:
            reason = f"broke the connection to the grader ({exc})"
        self.events.append(f"{message.get('op')} {message.get('name')}: {reason}")
        self._end(kill=True)
        raise SandboxError(reason)

    def lookup(self, name: str) -> tuple[str, Any]:
        """('callable', None), ('value', value) or ('missing', None) for a notebook name."""
        if name not in self._kinds:
            reply = self._request({"op": "lookup", "name": name}, self._call_deadline())
            kind = reply.get("kind") if isinstance(reply, dict) else None
            if kind not in ("callable", "value", "missing"):
                raise SandboxError("the sandbox answered a lookup with nonsense")
            self._kinds[name] = kind
            if kind == "value":
                self._values[name] = reply.get("value")
        return self._kinds[name], self._values.get(name)

    def call(self, name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        """The student's ``name(*args, **kwargs)``, computed in the sandbox, returned as data."""
        return self.call_returning_inputs(name, args, kwargs)[0]

    def call_returning_inputs(self, name: str, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, list, dict]:
        """Like :meth:`call`, with the arguments as the student's function left them."""
        reply = self._request(
            {"op": "call", "name": name, "args": list(args), "kwargs": dict(kwargs)}, self._call_deadline()
        )
        if not isinstance(reply, dict) or "ok" not in reply:
            raise SandboxError("the sandbox answered a call with nonsense")
        tampered = reply.get("tampered")
        if isinstance(tampered, list):
            for t in tampered[:3]:
                self.tampered.append(f"`{name}`: {str(t)[:200]}")
        if reply.get("forbidden"):
            raise ForbiddenCall([str(r) for r in list(reply["forbidden"])[:5]])
        if not reply["ok"]:
            raise SandboxError("raised " + str(reply.get("error", "an error"))[:2000])
        args_after = reply.get("args")
        kwargs_after = reply.get("kwargs")
        if not isinstance(args_after, list) or len(args_after) != len(args):
            args_after = list(args)
        if not isinstance(kwargs_after, dict) or set(kwargs_after) != set(kwargs):
            kwargs_after = dict(kwargs)
        return reply.get("value"), args_after, kwargs_after

    def run_test(self, name: str, candidate_name: str, candidate_source: str) -> dict[str, Any]:
        """Run the student's test ``name`` on a candidate implementation (a test-writing question):
        the source of ``candidate_name`` goes sealed under this child's key to the sandbox's
        candidate server, which compiles it in a process of its own and runs the test on a proxy in
        a fresh process that executes the notebook's cells first
        (:func:`attngrade.sandboxed.child._run_test`), under the guard and the time limit of any
        call; only its signed verdict counts.

        Returns ``{"passed", "calls", "error", "forbidden"}`` as plain data, computed once per
        submission for each test and candidate. A test that ends its process or runs out of time
        did not pass (``calls`` is then unknown: 0). Raises
        ``ValueError`` when the candidate source itself is broken (the instructor's mistake).
        """
        key = (name, candidate_name, candidate_source)
        if key in self._test_runs:  # each hidden test checks the reference again: once is enough
            return dict(self._test_runs[key])
        if self.sock is None and not self.start():
            raise SandboxError(f"could not be run: {self.broken}")
        # sealed: only the candidate server the sandbox forked before the first cell can read it, and
        # only its signed verdict counts (see attngrade.sandboxed.candidates)
        # a run executes the notebook's cells again, in a fresh process, then the test
        nonce = os.urandom(16)
        lim = self.limits
        seconds = float(lim["exec_timeout"]) + float(lim["call_timeout"]) * float(lim["wall_factor"])
        test_seconds = float(lim["call_timeout"]) * float(lim["wall_factor"])
        spec = {
            "name": candidate_name,
            "source": candidate_source,
            "seconds": seconds,
            "test_seconds": test_seconds,
            "test": name,
        }
        request = {
            "op": "run_test",
            "name": name,
            "seconds": seconds,
            "nonce": nonce.hex(),
            "sealed": candidates.seal(self._key, nonce, json.dumps(spec).encode()),
        }
        try:
            reply = self._request(request, seconds + float(lim["call_grace"]) + 4 * candidates.GRACE)
        except SandboxError as exc:  # remembered too: a test that hangs costs its time once
            self._test_runs[key] = {"passed": False, "calls": 0, "error": f"the test {exc}", "forbidden": []}
            return dict(self._test_runs[key])
        if not isinstance(reply, dict) or "ok" not in reply:
            raise SandboxError("the sandbox answered a test run with nonsense")
        signed = reply.get("signed")
        verdict: dict[str, Any] | None = None
        if isinstance(signed, dict) and isinstance(signed.get("payload"), str) and isinstance(signed.get("mac"), str):
            payload = signed["payload"].encode()
            if hmac.compare_digest(signed["mac"], candidates.sign(self._key, nonce, payload)):
                try:
                    verdict = json.loads(payload)
                except ValueError:
                    verdict = None
        if not isinstance(verdict, dict):  # unsigned: a failure that caught nothing
            error = str(reply.get("error") or "the test could not be run")[:2000]
            self._test_runs[key] = {"passed": False, "calls": 0, "error": error, "forbidden": []}
            return dict(self._test_runs[key])
        if verdict.get("candidate_error"):
            raise ValueError(f"candidate `{candidate_name}`: {str(verdict['candidate_error'])[:2000]}")
        reply = {
            "ok": verdict.get("passed") is True,
            "error": verdict.get("error") or verdict.get("refused") or "",
            "calls": verdict.get("calls"),
            "forbidden": verdict.get("forbidden"),
            "tampered": verdict.get("tampered"),
        }
        tampered = reply.get("tampered")
        if isinstance(tampered, list):
            for t in tampered[:3]:
                self.tampered.append(f"`{name}`: {str(t)[:200]}")
        forbidden = reply.get("forbidden")
        calls = reply.get("calls")
        run = {
            "passed": reply["ok"] is True and not forbidden,
            "calls": calls if type(calls) is int and calls >= 0 else 0,
            "error": str(reply.get("error") or "")[:2000],
            "forbidden": [str(r)[:200] for r in forbidden[:5]] if isinstance(forbidden, list) else [],
        }
        self._test_runs[key] = run
        return dict(run)

    def proxy(self, name: str) -> StudentFunction:
        return StudentFunction(self, name)


class ForbiddenCall(SandboxError):
    """The student's function ran a reference implementation the homework asks them to write."""

    def __init__(self, refs: list[str]):
        super().__init__(f"ran {forbidden_what(refs)} (decided from what your function executed); this test scores 0")
        self.refs = ", ".join(refs)


class StudentFunction:
    """Stands for a student's function in the grader: calling it runs the function in the sandbox."""

    def __init__(self, session: Session, name: str):
        self._session = session
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.call(self.__name__, args, kwargs)

    def call_returning_inputs(self, args: Any, kwargs: dict[str, Any]) -> tuple[Any, list, dict]:
        """The call, and its arguments as they are after it (see :func:`attngrade.checks.calling._invoke`)."""
        return self._session.call_returning_inputs(self.__name__, tuple(args), dict(kwargs))

    def run_as_test(self, candidate_name: str, candidate_source: str) -> dict[str, Any]:
        """Run this function, a student's test, on a candidate implementation, in the sandbox
        (see :meth:`Session.run_test` and :mod:`attngrade.student_tests`)."""
        return self._session.run_test(self.__name__, str(candidate_name), str(candidate_source))

    def __repr__(self) -> str:
        return f"<student function {self.__name__}>"
