r"""A key-value cache for autoregressive decoding (chapter 8).

A decoder produces one token at a time, and under a causal mask token t attends to tokens
0, ..., t. Its query is new, but the keys and values of tokens 0, ..., t - 1 are the same as at the
previous step. A key-value cache stores them, so step t projects only the new token's query, key
and value and computes one row of attention,

.. math:: o_t = \operatorname{softmax}\!\left(\frac{q_t K_{0:t}^\top}{\sqrt{d_k}}\right) V_{0:t}.

What it saves is recomputing the past: without a cache step t would project the keys and values
of all t earlier tokens again, O(t d_model d) work per step and layer (the row of attention itself,
O(t d), is needed either way). In a decoder of several layers the lower layers would also have to
recompute their output at every earlier position, since the next layer's keys and values are made
from it; chapter 8 counts both. Stacking the rows :math:`o_0, \dots, o_{n-1}` gives causal
self-attention over the n tokens: exactly in exact arithmetic, and in floating point within the
rounding bound of :func:`attnbook.efficient.tiled_attention.attention_rounding_bound` (chapter 8 checks it).
"""

from __future__ import annotations

import torch

from ..core.attention import attention
from ..core.masks import causal_mask
from ..validators import check_floating, check_ndim, check_same_dtype_device, check_sizes


class KVCache:
    r"""Keys and values of the tokens decoded so far, in a buffer preallocated for ``max_len`` tokens (chapter 8).

    The buffer is allocated on the first :meth:`append` with the batch shape, widths, dtype and
    device of that call's keys and values, shape (..., max_len, d_k) and (..., max_len, d_v); every
    later append writes only the new tokens into it, in place, and never copies the tokens already
    stored (a cache that grows by concatenation would copy all of them at every step).
    Appending beyond ``max_len`` raises ``ValueError``. :attr:`keys` and :attr:`values` are views
    of the filled part.

    Args:
        max_len: the most tokens the cache can hold, an int >= 1.
    """

    def __init__(self, max_len: int) -> None:
        check_sizes(max_len=max_len)
        self.max_len = max_len
        self.length = 0
        self._keys: torch.Tensor | None = None  # (..., max_len, d_k)
        self._values: torch.Tensor | None = None  # (..., max_len, d_v)

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        shape = (
            "unallocated"
            if self._keys is None
            else f"keys {tuple(self._keys.shape)}, values {tuple(self._values.shape)}"
        )
        return f"KVCache(length={self.length}, max_len={self.max_len}, {shape})"

    @property
    def keys(self) -> torch.Tensor:
        """The stored keys (..., length, d_k), a view of the buffer."""
        if self._keys is None:
            raise ValueError("the cache is empty: append keys and values first")
        return self._keys[..., : self.length, :]  # (..., length, d_k)

    @property
    def values(self) -> torch.Tensor:
        """The stored values (..., length, d_v), a view of the buffer."""
        if self._values is None:
            raise ValueError("the cache is empty: append keys and values first")
        return self._values[..., : self.length, :]  # (..., length, d_v)

    def reset(self) -> None:
        """Forget the stored tokens (the buffer is kept for the next sequence of the same shape)."""
        self.length = 0

    # K_{0:L+t} = [K_{0:L}; K_new],  V_{0:L+t} = [V_{0:L}; V_new]
    def append(self, key: torch.Tensor, value: torch.Tensor) -> None:
        """Store the keys (..., t, d_k) and values (..., t, d_v) of the next t tokens (chapter 8).

        t = 1 for a decoding step; t > 1 for a prompt ("prefill"). The batch shape, widths,
        dtype and device must match those of the first append.
        """
        check_floating("key", key)
        check_floating("value", value)
        check_same_dtype_device(key=key, value=value)
        check_ndim("key", key, 2, "(..., t, d_k)", at_least=True)
        check_ndim("value", value, 2, "(..., t, d_v)", at_least=True)
        if key.shape[:-1] != value.shape[:-1]:
            raise ValueError(
                f"key (..., t, d_k) and value (..., t, d_v) must agree in all but the last dimension, "
                f"got key {tuple(key.shape)} and value {tuple(value.shape)}"
            )
        t = key.shape[-2]
        if self.length + t > self.max_len:
            raise ValueError(
                f"the cache holds at most max_len = {self.max_len} tokens; it has {self.length} and "
                f"{t} more were appended"
            )
        if self._keys is None:
            batch = key.shape[:-2]
            self._keys = torch.empty(*batch, self.max_len, key.shape[-1], dtype=key.dtype, device=key.device)
            self._values = torch.empty(*batch, self.max_len, value.shape[-1], dtype=value.dtype, device=value.device)
        else:
            expected_k = (*self._keys.shape[:-2], t, self._keys.shape[-1])
            expected_v = (*self._values.shape[:-2], t, self._values.shape[-1])
            if tuple(key.shape) != expected_k or tuple(value.shape) != expected_v:
                raise ValueError(
                    f"the cache holds keys {tuple(self._keys.shape)} and values {tuple(self._values.shape)} "
                    f"(..., max_len, d); appending t = {t} tokens needs key {expected_k} and value "
                    f"{expected_v}, got key {tuple(key.shape)} and value {tuple(value.shape)}"
                )
            check_same_dtype_device(cached=self._keys, key=key)
        self._keys[..., self.length : self.length + t, :] = key  # (..., t, d_k) into the buffer
        self._values[..., self.length : self.length + t, :] = value  # (..., t, d_v)
        self.length += t

    # o_i = softmax(q_i K_{0:L}^T / sqrt(d_k) restricted to keys j <= position of i) V_{0:L}
    def attend(self, query: torch.Tensor, *, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Causal attention of the queries of the last t stored tokens over all stored tokens (chapter 8).

        ``query`` (..., t, d_k) belongs to the *last* t tokens appended, so query i (position
        L - t + i, with L = len(self)) sees keys 0, ..., L - t + i: the lower-right aligned
        :func:`attnbook.causal_mask`. For t = 1 that is every stored key, and no mask is needed.

        Returns:
            ``(output, weights)`` as :func:`attnbook.attention`: output (..., t, d_v), weights
            (..., t, L) or None.
        """
        check_floating("query", query)
        check_ndim("query", query, 2, "(..., t, d_k)", at_least=True)
        keys, values = self.keys, self.values
        t = query.shape[-2]
        if t > self.length:
            raise ValueError(
                f"query {tuple(query.shape)} has t = {t} rows but the cache holds only {self.length} tokens; "
                f"append the new tokens' keys and values before attending"
            )
        mask = None if t == 1 else causal_mask(t, self.length, align="lower_right", device=query.device)  # (t, L)
        return attention(query, keys, values, mask=mask, need_weights=need_weights)

    def step(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One decoding step: :meth:`append` the new tokens' keys and values, then :meth:`attend` with their queries."""
        self.append(key, value)
        return self.attend(query, need_weights=need_weights)
