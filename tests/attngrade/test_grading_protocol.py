"""The grader's wire format: data round-trips exactly, and nothing a sandbox sends can run code."""

from __future__ import annotations

import json
import math
import pickle
import socket
import struct
import threading

import numpy as np
import pytest
import torch

from attngrade.sandboxed import protocol


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -5,
        2**70,
        1.5,
        math.inf,
        -math.inf,
        "text",
        [1, [2, 3]],
        (1, "a"),
        {"k": (1.0, None)},
    ],
)
def test_plain_values_round_trip(value):
    assert protocol.decode(protocol.encode(value)) == value


def test_nan_round_trips():
    assert math.isnan(protocol.decode(protocol.encode(math.nan)))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.bool, torch.int64, torch.int32, torch.uint8]
)
def test_tensors_round_trip_with_dtype_and_shape(dtype):
    x = (torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(0)) * 10).to(dtype)
    y = protocol.decode(protocol.encode(x))
    assert isinstance(y, torch.Tensor) and y.dtype == dtype and y.shape == x.shape
    assert torch.equal(y, x)


def test_zero_dimensional_tensors_and_arrays_keep_their_shape():
    x, a = protocol.decode(protocol.encode((torch.tensor(2.5, dtype=torch.float64), np.array(3))))
    assert x.shape == () and x.item() == 2.5 and a.shape == () and a == 3


def test_bfloat16_keeps_its_dtype_and_bits_and_views_are_materialised():
    """A bfloat16 answer arrives as bfloat16 (so a test sees the wrong dtype), bit for bit."""
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))
    b = x.bfloat16()
    y = protocol.decode(protocol.encode((x.T, b, b.T, x[:, 1], b[0, 0])))
    assert torch.equal(y[0], x.T) and torch.equal(y[3], x[:, 1])
    for got, sent in zip(y[1:3] + y[4:], (b, b.T, b[0, 0])):
        assert got.dtype == torch.bfloat16 and got.shape == sent.shape and torch.equal(got, sent)
    (as_numpy,) = protocol.decode(protocol.encode((b,)), as_torch=False)  # numpy has no bfloat16
    assert as_numpy.dtype == np.float32 and np.array_equal(as_numpy, b.float().numpy())


def test_a_bfloat16_scalar_of_numpy_kind_is_refused():
    head = json.dumps({"sizes": [2]}).encode()
    tree = json.dumps({"t": "npscalar", "dtype": "bfloat16", "shape": [], "blob": 0}).encode()
    body = struct.pack(">I", len(head)) + head + struct.pack(">I", len(tree)) + tree + b"\x00" * 2
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(body)


def test_numpy_arrays_and_scalars_keep_their_type():
    a = np.arange(4, dtype=np.float64).reshape(2, 2)
    b, s = protocol.decode(protocol.encode((a, np.float32(2.5))))
    assert isinstance(b, np.ndarray) and np.array_equal(a, b)
    assert isinstance(s, np.floating) and s == np.float32(2.5)


def test_arbitrary_objects_become_opaque_and_do_not_compare_equal_to_data():
    class Sneaky(float):
        def __eq__(self, other):
            return True

    got = protocol.decode(protocol.encode([object(), Sneaky(1.0), lambda: 1]))
    assert all(isinstance(g, protocol.Opaque) for g in got)
    assert got[1] != 1.0 and "Sneaky" in repr(got[1])


def test_depth_and_size_limits():
    deep = []
    for _ in range(protocol.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(protocol.ProtocolError):
        protocol.encode(deep)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x00\x00\x00\x05{}",
        pickle.dumps(object()),
        struct.pack(">I", 2) + b"{}" + struct.pack(">I", 2) + b"[]",
        # JSON nested deeper than Python's recursion limit (json.loads raises RecursionError)
        struct.pack(">I", 13) + b'{"sizes": []}' + struct.pack(">I", 200_000) + b"[" * 100_000 + b"]" * 100_000,
        struct.pack(">I", 200_000) + b"[" * 100_000 + b"]" * 100_000 + struct.pack(">I", 2) + b"{}",
    ],
)
def test_malformed_frames_raise_protocol_error(body):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(body)


def test_a_pickle_payload_is_never_unpickled():
    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('pickle ran')",))

    with pytest.raises(protocol.ProtocolError):
        protocol.decode(pickle.dumps(Boom()))


def test_array_whose_bytes_do_not_match_its_shape_is_refused():
    head = json.dumps({"sizes": [8]}).encode()
    tree = json.dumps({"t": "tensor", "dtype": "float64", "shape": [1000, 1000], "blob": 0}).encode()
    body = struct.pack(">I", len(head)) + head + struct.pack(">I", len(tree)) + tree + b"\x00" * 8
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(body)


def test_disallowed_dtype_is_refused():
    head = json.dumps({"sizes": [8]}).encode()
    tree = json.dumps({"t": "ndarray", "dtype": "object", "shape": [1], "blob": 0}).encode()
    body = struct.pack(">I", len(head)) + head + struct.pack(">I", len(tree)) + tree + b"\x00" * 8
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(body)


def test_oversized_frame_is_refused_before_reading_it():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">Q", 10**12))
        with pytest.raises(protocol.ProtocolError):
            protocol.recv_frame(b, deadline=None, max_bytes=1024)


def test_reads_time_out_and_detect_closed_sockets():
    import time

    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">Q", 100) + b"x")  # promises 100 bytes, sends 1
        with pytest.raises(TimeoutError):
            protocol.recv_frame(b, deadline=time.monotonic() + 0.2)
    a, b = socket.socketpair()
    with b:
        a.close()
        with pytest.raises(EOFError):
            protocol.recv_frame(b, deadline=time.monotonic() + 1)


def test_send_and_receive_values_over_a_socket():
    a, b = socket.socketpair()
    value = {"op": "call", "args": [torch.eye(3)], "kwargs": {"beta": 2.0}}
    with a, b:
        t = threading.Thread(target=protocol.send_value, args=(a, value))
        t.start()
        got = protocol.recv_value(b)
        t.join()
    assert got["op"] == "call" and torch.equal(got["args"][0], torch.eye(3)) and got["kwargs"] == {"beta": 2.0}
