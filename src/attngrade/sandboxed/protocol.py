"""The wire format between the grader and a student's sandbox: plain data, never pickle.

The grader process must never run code that a student wrote, and unpickling runs code, so
everything that crosses the socket is encoded here into a JSON header plus raw array bytes:

* ``None``, ``bool``, ``int``, ``float`` (``nan`` and ``inf`` included), ``str``;
* ``list``, ``tuple`` and ``dict`` with string keys, nested at most :data:`MAX_DEPTH` deep;
* ``torch.Tensor`` and ``numpy.ndarray`` of a numeric or boolean dtype (sent as their bytes,
  decoded with ``numpy.frombuffer``: a fixed dtype and a checked shape, nothing executed);
* ``torch.dtype``; anything else becomes an :class:`Opaque` that only names its type.

A frame is ``8-byte big-endian length`` + ``4-byte header length`` + header JSON + blobs. The reader
refuses frames larger than a limit, so a hostile sandbox cannot make the grader allocate without
bound, and every read has a deadline, so it cannot make the grader wait forever.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from typing import Any

import numpy as np

#: the words every stand-in for a reference implementation ends its error with, inside the sandbox:
#: the stubs of the package's view (:mod:`attngrade.grading.view`) and PyTorch's refused fused kernels
#: (:func:`.worker.refuse_kernels`); the worker recognises a reference called at top level by them
REFERENCE_UNAVAILABLE = "it is not available while grading"

#: deepest nesting of lists/tuples/dicts accepted in either direction
MAX_DEPTH = 16
#: most items (array elements not counted) in one message
MAX_ITEMS = 100_000
#: default cap on one frame, in bytes
DEFAULT_MAX_FRAME = 64 * 2**20

# dtypes that cross the wire, by name; torch.bfloat16 (which numpy lacks) travels as its 16 bits
_NUMPY_DTYPES = {
    "bfloat16": np.uint16,  # the raw bits, viewed as torch.bfloat16 again on arrival
    "bool": np.bool_,
    "uint8": np.uint8,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "complex64": np.complex64,
    "complex128": np.complex128,
}


class ProtocolError(Exception):
    """A frame or a value that breaks the wire format (too large, malformed, too deep)."""


class Opaque:
    """Stands for a value the sandbox could not send as data (an arbitrary object)."""

    def __init__(self, type_name: str):
        self.type_name = str(type_name)[:200]

    def __repr__(self) -> str:
        return f"<object of type {self.type_name} (not a tensor, array, number or container)>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.type_name == self.type_name

    def __hash__(self) -> int:
        return hash(self.type_name)


def _torch():
    import torch

    return torch


def encode(value: Any) -> bytes:
    """Encode ``value`` as a frame body (header length + header + blobs); see the module doc."""
    blobs: list[bytes] = []
    count = [0]

    def enc(v: Any, depth: int) -> Any:
        count[0] += 1
        if count[0] > MAX_ITEMS:
            raise ProtocolError(f"value has more than {MAX_ITEMS} items")
        if depth > MAX_DEPTH:
            raise ProtocolError(f"value is nested more than {MAX_DEPTH} deep")
        # exact types only: a subclass of int or str could carry behaviour the grader must not see
        if v is None or type(v) is bool or type(v) is str:
            return {"t": "v", "v": v}
        if type(v) is int:
            if abs(v) >= 2**63:
                return {"t": "bigint", "v": str(v)}
            return {"t": "v", "v": v}
        if type(v) is float:
            return {"t": "f", "v": repr(v)}
        if type(v) in (list, tuple):
            return {"t": type(v).__name__, "v": [enc(x, depth + 1) for x in v]}
        if type(v) is dict:
            if not all(type(k) is str for k in v):
                return {"t": "opaque", "v": "dict with non-string keys"}
            return {"t": "dict", "v": {k: enc(x, depth + 1) for k, x in v.items()}}
        torch = _torch()
        if isinstance(v, torch.dtype):
            return {"t": "torch.dtype", "v": str(v)}
        if isinstance(v, torch.Size):
            return {"t": "tuple", "v": [enc(int(x), depth + 1) for x in v]}
        if isinstance(v, torch.Tensor):
            t = torch.Tensor.detach(v)
            t = torch.Tensor.to(t, "cpu")
            name = str(t.dtype).removeprefix("torch.")
            if name == "bfloat16":
                t = torch.Tensor.view(torch.Tensor.contiguous(t), torch.int16)  # the bits, same shape
            elif name not in _NUMPY_DTYPES:
                return {"t": "opaque", "v": f"torch.Tensor of dtype {name}"}
            # .copy(order="C"), not np.ascontiguousarray, which turns a 0-d array into a 1-d one
            arr = torch.Tensor.numpy(torch.Tensor.resolve_conj(torch.Tensor.resolve_neg(t))).copy(order="C")
            blobs.append(arr.tobytes())
            return {"t": "tensor", "dtype": name, "shape": list(arr.shape), "blob": len(blobs) - 1}
        if isinstance(v, (np.ndarray, np.generic)):
            arr = np.asarray(v)
            name = arr.dtype.name
            if name not in _NUMPY_DTYPES or arr.dtype.byteorder == ">":
                return {"t": "opaque", "v": f"numpy array of dtype {arr.dtype}"}
            blobs.append(arr.copy(order="C").tobytes())
            kind = "ndarray" if isinstance(v, np.ndarray) else "npscalar"
            return {"t": kind, "dtype": name, "shape": list(arr.shape), "blob": len(blobs) - 1}
        return {"t": "opaque", "v": f"{type(v).__module__}.{type(v).__qualname__}"}

    header = json.dumps(enc(value, 0), allow_nan=False).encode()
    sizes = [len(b) for b in blobs]
    head = json.dumps({"sizes": sizes}).encode()
    return struct.pack(">I", len(head)) + head + struct.pack(">I", len(header)) + header + b"".join(blobs)


def decode(body: bytes, *, as_torch: bool = True) -> Any:
    """Decode a frame body made by :func:`encode`; arrays become tensors if ``as_torch``.

    Nothing in ``body`` can make this function run code: the JSON is data, and arrays are read
    with a dtype from a fixed table and a shape checked against the number of bytes.
    """
    try:
        view = memoryview(body)
        (n_head,) = struct.unpack(">I", view[:4])
        head = json.loads(bytes(view[4 : 4 + n_head]))
        pos = 4 + n_head
        (n_header,) = struct.unpack(">I", view[pos : pos + 4])
        tree = json.loads(bytes(view[pos + 4 : pos + 4 + n_header]))
        pos += 4 + n_header
        sizes = head["sizes"]
        if not isinstance(sizes, list) or not all(type(s) is int and s >= 0 for s in sizes):
            raise ProtocolError("bad blob table")
        offsets = []
        for s in sizes:
            offsets.append((pos, pos + s))
            pos += s
        if pos != len(body):
            raise ProtocolError("frame length does not match its blob table")
    except RecursionError:  # JSON nested deeper than the interpreter's stack
        raise ProtocolError("malformed frame: nested too deep") from None
    except (struct.error, ValueError, KeyError, TypeError) as e:
        raise ProtocolError(f"malformed frame: {e}") from None

    count = [0]

    def dec(node: Any, depth: int) -> Any:
        count[0] += 1
        if count[0] > MAX_ITEMS or depth > MAX_DEPTH:
            raise ProtocolError("value too large or too deep")
        if not isinstance(node, dict) or "t" not in node:
            raise ProtocolError("malformed value")
        t = node["t"]
        if t == "v":
            v = node["v"]
            if v is not None and type(v) not in (bool, int, str):
                raise ProtocolError("malformed scalar")
            return v
        if t == "bigint":
            return int(str(node["v"])[:400])
        if t == "f":
            s = str(node["v"])
            if s not in ("nan", "inf", "-inf"):
                try:
                    return float(s)
                except ValueError:
                    raise ProtocolError("malformed float") from None
            return float(s)
        if t in ("list", "tuple"):
            items = [dec(x, depth + 1) for x in node["v"]]
            return items if t == "list" else tuple(items)
        if t == "dict":
            return {str(k): dec(x, depth + 1) for k, x in dict(node["v"]).items()}
        if t == "torch.dtype":
            name = str(node["v"]).removeprefix("torch.")
            torch = _torch()
            dtype = getattr(torch, name, None)
            return dtype if isinstance(dtype, torch.dtype) else Opaque(f"torch.dtype {name}")
        if t in ("tensor", "ndarray", "npscalar"):
            name = node["dtype"]
            if name not in _NUMPY_DTYPES:
                raise ProtocolError(f"dtype {name!r} not allowed")
            shape = node["shape"]
            if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
                raise ProtocolError("malformed shape")
            lo, hi = offsets[int(node["blob"])]
            dtype = np.dtype(_NUMPY_DTYPES[name])
            n = math.prod(shape)
            if n * dtype.itemsize != hi - lo:
                raise ProtocolError("array bytes do not match its shape and dtype")
            arr = np.frombuffer(body, dtype=dtype, count=n, offset=lo).reshape(shape).copy()
            if name == "bfloat16":
                if t != "tensor":
                    raise ProtocolError("bfloat16 travels only as a tensor")
                torch = _torch()
                bits = torch.from_numpy(arr.view(np.int16))
                value = bits.view(torch.bfloat16)  # the same 16 bits, read as bfloat16
                return value if as_torch else value.float().numpy()
            if t == "npscalar":
                return arr[()]
            if t == "tensor" and as_torch:
                return _torch().from_numpy(arr)
            return arr
        if t == "opaque":
            return Opaque(str(node["v"]))
        raise ProtocolError(f"unknown value kind {t!r}")

    return dec(tree, 0)


def send_frame(sock: socket.socket, body: bytes) -> None:
    """Send one frame (length-prefixed)."""
    sock.sendall(struct.pack(">Q", len(body)) + body)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks = []
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer in time")
            sock.settimeout(left)
        else:
            sock.settimeout(None)
        try:
            chunk = sock.recv(min(n - got, 1 << 20))
        except TimeoutError:
            raise TimeoutError("no answer in time") from None
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket, *, deadline: float | None = None, max_bytes: int = DEFAULT_MAX_FRAME) -> bytes:
    """Receive one frame; ``TimeoutError`` after ``deadline`` (monotonic), ``EOFError`` on close."""
    (n,) = struct.unpack(">Q", _recv_exact(sock, 8, deadline))
    if n > max_bytes:
        raise ProtocolError(f"frame of {n} bytes exceeds the limit of {max_bytes}")
    return _recv_exact(sock, n, deadline)


def send_value(sock: socket.socket, value: Any) -> None:
    """Encode and send ``value``."""
    send_frame(sock, encode(value))


def recv_value(
    sock: socket.socket, *, deadline: float | None = None, max_bytes: int = DEFAULT_MAX_FRAME, as_torch: bool = True
) -> Any:
    """Receive and decode one value."""
    return decode(recv_frame(sock, deadline=deadline, max_bytes=max_bytes), as_torch=as_torch)
