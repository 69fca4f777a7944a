r"""Streaming with attention sinks (StreamingLLM, Xiao et al. 2023): the first tokens and a rolling window (chapter 13).

A sliding window (chapter 9) caps the cache at ``window`` tokens, but once the first tokens leave
it a trained model's predictions degrade: its heads had parked their spare weight on them
(attention sinks). StreamingLLM keeps the first ``num_sinks`` tokens for ever beside a rolling
window of the most recent ones, so a query sees

.. math:: M_{ij} = [\, j \le i \,] \wedge \big([\, j < k \,] \vee [\, i - j < w - k \,]\big),

``window`` = w keys in all once the stream is longer than w (:func:`streaming_mask`); with k = 0
it is :func:`attnbook.sliding_window_mask`. The cache holds at most w tokens however long the
stream: its memory is constant.

**Positions.** StreamingLLM caches the keys *before* rotary positions and gives the kept tokens
their positions *inside the cache*, 0, ..., L - 1 in the order of the stream (the query last, at
L - 1), so that no offset exceeds what training saw. A key of the window then keeps its offset to
the query (i - j) and a sink token j gets the offset :math:`w - 1 - j` instead of i - j once the
cache is full (:func:`streaming_positions`). ``positions="original"`` keeps the stream positions
instead: the same as rotating once and caching the rotated keys.

* :class:`RollingKVCache`: a :class:`attnbook.KVCache` that, when full, overwrites its oldest token;
* :class:`StreamingCache`: k sink tokens (a :class:`attnbook.KVCache`) and a :class:`RollingKVCache`
  of w - k tokens, with rotary positions as StreamingLLM assigns them (or the original ones).
"""

from __future__ import annotations

import torch

from ..core.attention import attention
from ..core.masks import key_distances
from ..positions.rotary import PAIRINGS, apply_rotary
from ..validators import (
    check_floating,
    check_ndim,
    check_number,
    check_one_of,
    check_same_dtype_device,
    check_sink_window,
    check_sizes,
    check_type,
)
from .kv_cache import KVCache

POSITIONS = ("cache", "original")


# M[i, j] = [0 <= i - j] and ([j < k] or [i - j < w - k])
def streaming_mask(
    n: int, num_sinks: int, window: int, m: int | None = None, *, align: str = "upper_left", device=None
) -> torch.Tensor:
    r"""The keep-mask of a stream decoded with ``num_sinks`` sink tokens and ``window`` keys in all (chapter 13).

    .. math:: M_{ij} = [\, 0 \le (i + o) - j \,] \wedge \big([\, j < k \,] \vee [\, (i + o) - j < w - k \,]\big)

    Query i sees the first k tokens and the w - k most recent ones, itself included: ``window``
    keys once i >= w - 1, and all i + 1 before. ``num_sinks = 0`` gives
    :func:`attnbook.sliding_window_mask`. ``m`` and ``align`` as in :func:`attnbook.causal_mask`.
    Returns a boolean (n, m) tensor.
    """
    check_sink_window(window, num_sinks)
    distance = key_distances(n, m, align=align, device=device)  # (n, m): (i + o) - j
    j = torch.arange(distance.shape[-1], device=device)  # (m,)
    return (distance >= 0) & ((j < num_sinks) | (distance < window - num_sinks))  # (n, m)


# P[i, j] = the position key j carries when query i is decoded;  P[i, i] = the query's own
def streaming_positions(n: int, num_sinks: int, window: int, *, device=None) -> torch.Tensor:
    r"""The positions StreamingLLM gives the kept tokens inside the cache, for each query of a stream of n (chapter 13).

    When query i is decoded the cache holds L = min(i + 1, w) tokens; in stream order they carry
    positions 0, ..., L - 1, the query itself L - 1. So :math:`P_{ij} = j` for a sink token
    (j < k) or while the cache is not full (i < w), and :math:`P_{ij} = j - i + w - 1` for a key of the
    window once it is: the offset :math:`P_{ii} - P_{ij}` is i - j inside the window and
    :math:`w - 1 - j` for a sink. Entries of keys the query does not see (``~streaming_mask``) are -1.

    Returns:
        An int64 (n, n) tensor.
    """
    check_sink_window(window, num_sinks)
    check_sizes(minimum=0, n=n)
    i = torch.arange(n, device=device).unsqueeze(-1)  # (n, 1)
    j = torch.arange(n, device=device).unsqueeze(0)  # (1, n)
    shifted = torch.where((j >= num_sinks) & (i >= window), j - i + window - 1, j)  # (n, n)
    return torch.where(streaming_mask(n, num_sinks, window, device=device), shifted, -1)  # (n, n)


class RollingKVCache(KVCache):
    r"""A :class:`attnbook.KVCache` of ``max_len`` tokens that, when full, overwrites its oldest token (chapter 13).

    A ring buffer: token t of the stream lives in slot t mod ``max_len``. :attr:`keys` and
    :attr:`values` are the stored tokens in the order of the stream (a copy of at most ``max_len``
    tokens once the buffer has wrapped); :attr:`positions` their positions in the stream. Memory
    is the buffer's, ``max_len`` tokens, however many are appended.
    """

    def __init__(self, max_len: int) -> None:
        super().__init__(max_len)
        self.seen = 0  # tokens appended since the last reset

    def __repr__(self) -> str:
        return f"Rolling{super().__repr__()[:-1]}, seen={self.seen})"

    def reset(self) -> None:
        super().reset()
        self.seen = 0

    def _in_stream_order(self, buffer: torch.Tensor) -> torch.Tensor:
        if self.seen <= self.max_len:
            return buffer[..., : self.length, :]  # (..., L, d): no wrap yet
        oldest = self.seen % self.max_len  # the slot of the oldest stored token
        return torch.roll(buffer, -oldest, dims=-2)  # (..., max_len, d): oldest first

    @property
    def keys(self) -> torch.Tensor:
        """The stored keys (..., L, d_k), oldest first."""
        return self._in_stream_order(super().keys)

    @property
    def values(self) -> torch.Tensor:
        """The stored values (..., L, d_v), oldest first."""
        return self._in_stream_order(super().values)

    @property
    def positions(self) -> torch.Tensor:
        """The stream positions of the stored tokens, (L,) int64, oldest first (on the buffer's device)."""
        device = None if self._keys is None else self._keys.device
        return torch.arange(self.seen - self.length, self.seen, device=device)  # (L,)

    def attend(self, query: torch.Tensor, *, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As :meth:`attnbook.KVCache.attend`; once tokens have been overwritten only the last token's
        query (..., 1, d_k) may attend (earlier queries saw tokens no longer stored)."""
        check_ndim("query", query, 2, "(..., t, d_k)", at_least=True)
        if self.seen > self.max_len and query.shape[-2] != 1:
            raise ValueError(
                f"the cache has overwritten {self.seen - self.max_len} tokens, so only the last token's query "
                f"(..., 1, d_k) can attend as it did in the stream; got query {tuple(query.shape)}"
            )
        return super().attend(query, need_weights=need_weights)

    @property
    def nbytes(self) -> int:
        """Bytes held by the key and value buffers (0 before the first append)."""
        if self._keys is None:
            return 0
        return sum(b.numel() * b.element_size() for b in (self._keys, self._values))

    # slot(t) = t mod max_len:  K[slot(t)] = k_t,  V[slot(t)] = v_t
    def append(self, key: torch.Tensor, value: torch.Tensor) -> None:
        """Store the next t tokens' keys (..., t, d_k) and values (..., t, d_v), overwriting the oldest when full."""
        check_ndim("key", key, 2, "(..., t, d_k)", at_least=True)
        check_ndim("value", value, 2, "(..., t, d_v)", at_least=True)
        free = self.max_len - self.length
        if free:
            first = min(free, key.shape[-2])
            super().append(key[..., :first, :], value[..., :first, :])  # fills the buffer in place
            self.seen += first
            key, value = key[..., first:, :], value[..., first:, :]  # (..., t - first, d)
        t = key.shape[-2]
        if t == 0:
            return
        if t > self.max_len:  # the older ones would be overwritten within this call
            self.seen += t - self.max_len
            key, value = key[..., -self.max_len :, :], value[..., -self.max_len :, :]  # (..., max_len, d)
            t = self.max_len
        check_floating("key", key)
        check_floating("value", value)
        check_same_dtype_device(cached=self._keys, key=key, value=value)
        expected_k = (*self._keys.shape[:-2], t, self._keys.shape[-1])
        expected_v = (*self._values.shape[:-2], t, self._values.shape[-1])
        if tuple(key.shape) != expected_k or tuple(value.shape) != expected_v:
            raise ValueError(
                f"the cache holds keys {tuple(self._keys.shape)} and values {tuple(self._values.shape)}; appending "
                f"t = {t} tokens needs key {expected_k} and value {expected_v}, got key {tuple(key.shape)} and "
                f"value {tuple(value.shape)}"
            )
        slots = (self.seen + torch.arange(t, device=key.device)) % self.max_len  # (t,): the oldest tokens' slots
        self._keys[..., slots, :] = key  # (..., t, d_k) over the oldest
        self._values[..., slots, :] = value  # (..., t, d_v)
        self.seen += t


class StreamingCache:
    r"""StreamingLLM's cache: the first ``num_sinks`` tokens for ever and a rolling window, ``window`` tokens in all (chapter 13).

    The sink tokens go to a :class:`attnbook.KVCache` of ``num_sinks`` tokens and the rest to a
    :class:`RollingKVCache` of ``window - num_sinks``. Keys are stored *without* rotary positions;
    :meth:`attend` rotates the query and the stored keys at the positions of :attr:`positions`:
    ``positions="cache"`` (StreamingLLM) gives the kept tokens 0, ..., L - 1 in stream order,
    ``"original"`` their positions in the stream. ``rope_base=None`` applies no rotation (keys
    already carry their positions, or none are used). Decoding token by token with :meth:`step`
    equals attention over the whole stream under :func:`streaming_mask` with the positions of
    :func:`streaming_positions` (``"cache"``) or ``arange(n)`` (``"original"``).

    Args:
        num_sinks: k >= 0, the first tokens kept.
        window: w > k, the keys a query sees in all (sinks included, the query itself too).
        positions: ``"cache"`` or ``"original"``.
        rope_base: the rotary base, or None for no rotation.
        pairing: the rotary pairing, ``"interleaved"`` or ``"half"``.
    """

    def __init__(
        self,
        num_sinks: int,
        window: int,
        *,
        positions: str = "cache",
        rope_base: float | None = 10000.0,
        pairing: str = "interleaved",
    ) -> None:
        check_sink_window(window, num_sinks)
        check_one_of("positions", positions, POSITIONS)
        if rope_base is not None:
            check_number("rope_base", rope_base, positive=True)
        check_one_of("pairing", pairing, PAIRINGS)
        self.num_sinks, self.window = num_sinks, window
        self.position_mode, self.rope_base, self.pairing = positions, rope_base, pairing
        self.sinks = KVCache(num_sinks) if num_sinks else None
        self.recent = RollingKVCache(window - num_sinks)
        self.seen = 0  # tokens of the stream so far

    def __len__(self) -> int:
        return (len(self.sinks) if self.sinks is not None else 0) + len(self.recent)

    def __repr__(self) -> str:
        return (
            f"StreamingCache(num_sinks={self.num_sinks}, window={self.window}, positions={self.position_mode!r}, "
            f"length={len(self)}, seen={self.seen})"
        )

    def reset(self) -> None:
        if self.sinks is not None:
            self.sinks.reset()
        self.recent.reset()
        self.seen = 0

    def _parts(self, attribute: str) -> list[torch.Tensor]:
        parts = [] if self.sinks is None or len(self.sinks) == 0 else [getattr(self.sinks, attribute)]
        return parts + ([getattr(self.recent, attribute)] if len(self.recent) else [])

    @property
    def keys(self) -> torch.Tensor:
        """The kept keys without rotation, (..., L, d_k): the sink tokens, then the window, in stream order."""
        parts = self._parts("keys")
        if not parts:
            raise ValueError("the cache is empty: append keys and values first")
        return torch.cat(parts, dim=-2)  # (..., L, d_k)

    @property
    def values(self) -> torch.Tensor:
        """The kept values (..., L, d_v) in the order of :attr:`keys`."""
        parts = self._parts("values")
        if not parts:
            raise ValueError("the cache is empty: append keys and values first")
        return torch.cat(parts, dim=-2)  # (..., L, d_v)

    @property
    def original_positions(self) -> torch.Tensor:
        """The kept tokens' positions in the stream, (L,) int64."""
        device = self.keys.device  # (raises on an empty cache)
        recent = self.recent.positions.to(device) + self.num_sinks  # (L - k,): the window came after the k sinks
        sinks = [] if self.sinks is None else [torch.arange(len(self.sinks), device=device)]
        return torch.cat([*sinks, recent])  # (L,)

    @property
    def positions(self) -> torch.Tensor:
        """The positions the kept keys carry: 0, ..., L - 1 (``"cache"``) or :attr:`original_positions`."""
        original = self.original_positions  # (L,)
        if self.position_mode == "original":
            return original
        return torch.arange(len(original), device=original.device)  # (L,)

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers of the sink tokens and the window."""
        sinks = 0
        if self.sinks is not None and self.sinks._keys is not None:
            sinks = sum(b.numel() * b.element_size() for b in (self.sinks._keys, self.sinks._values))
        return sinks + self.recent.nbytes

    def append(self, key: torch.Tensor, value: torch.Tensor) -> None:
        """Store the next t tokens' keys (..., t, d_k), unrotated, and values (..., t, d_v)."""
        check_ndim("key", key, 2, "(..., t, d_k)", at_least=True)
        check_ndim("value", value, 2, "(..., t, d_v)", at_least=True)
        if self.sinks is not None and len(self.sinks) < self.num_sinks:
            first = min(self.num_sinks - len(self.sinks), key.shape[-2])
            self.sinks.append(key[..., :first, :], value[..., :first, :])
            self.seen += first
            key, value = key[..., first:, :], value[..., first:, :]
        if key.shape[-2]:
            self.recent.append(key, value)
            self.seen += key.shape[-2]

    def _rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.rope_base is None:
            return x
        return apply_rotary(x, positions, pairing=self.pairing, base=self.rope_base)

    # o = softmax(rot(q, P_q) rot(K, P)^T / sqrt(d_k)) V over the kept tokens
    def attend(self, query: torch.Tensor, *, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of the last appended token's query (..., 1, d_k), unrotated, over the kept tokens.

        The query is rotated at the last position of :attr:`positions` (its own), the keys at theirs.
        Returns ``(output (..., 1, d_v), weights (..., 1, L) or None)``.
        """
        check_floating("query", query)
        check_ndim("query", query, 2, "(..., 1, d_k)", at_least=True)
        if query.shape[-2] != 1:
            raise ValueError(
                f"attend takes the query of the last appended token, (..., 1, d_k), got {tuple(query.shape)}; "
                f"decode several tokens with step, which appends and attends one token at a time"
            )
        check_type("need_weights", need_weights, bool)
        positions = self.positions  # (L,)
        keys = self._rotate(self.keys, positions)  # (..., L, d_k)
        query = self._rotate(query, positions[-1:])  # (..., 1, d_k)
        return attention(query, keys, self.values, need_weights=need_weights)

    def step(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Decode t tokens (queries, keys unrotated; (..., t, d)) one at a time: append each, attend with its query.

        Returns the t outputs (..., t, d_v) and, with ``need_weights``, the list of each step's weights (..., 1, L).
        """
        check_ndim("query", query, 2, "(..., t, d_k)", at_least=True)
        t = query.shape[-2]
        if key.shape[-2:-1] != (t,) or value.shape[-2:-1] != (t,):
            raise ValueError(
                f"query, key and value must hold the same t tokens, got query {tuple(query.shape)}, key "
                f"{tuple(key.shape)} and value {tuple(value.shape)}"
            )
        outputs, weights = [], []
        for s in range(t):
            self.append(key[..., s : s + 1, :], value[..., s : s + 1, :])
            out, w = self.attend(query[..., s : s + 1, :], need_weights=need_weights)
            outputs.append(out)  # (..., 1, d_v)
            weights.append(w)
        return torch.cat(outputs, dim=-2), (weights if need_weights else None)  # (..., t, d_v)
