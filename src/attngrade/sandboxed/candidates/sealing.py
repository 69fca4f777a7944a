"""The class grader's seal: each candidate's source goes to the candidate server sealed under a key
that only the grader and the server hold, and each verdict comes back signed under it."""

from __future__ import annotations

import hashlib
import hmac

KEY_BYTES = 32


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
