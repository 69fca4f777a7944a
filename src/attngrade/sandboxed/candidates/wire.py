"""The messages between a test and its candidate (tensors and plain data, never an object of the
sender's choosing), the proxy a student's test receives, and the text of a student's exception."""

from __future__ import annotations

import builtins
import io
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

#: the largest message between a test and its candidate, in bytes
MAX_MESSAGE = 64 * 2**20


def describe(exc: BaseException) -> str:
    """``"TypeError: message"`` for an exception that student code raised (at most 2,000
    characters), or its type's name alone when its ``__str__`` itself fails; used wherever a
    student's code runs (the sandbox's worker, and a student's test in the notebook)."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # a student's exception whose __str__ fails
        text = type(exc).__name__
    return text[:2000]


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
