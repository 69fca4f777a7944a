"""Attention that never holds the (n, m) scores, or not all of them (chapter 8); ``attnbook`` re-exports the entry points.

* :mod:`attnbook.efficient.online_softmax`: the running maximum and sum, block by block;
* :mod:`attnbook.efficient.tiled_attention`: tiled attention (FlashAttention's loops), its tiles
  and its rounding bound;
* :mod:`attnbook.efficient.kv_cache`: the key-value cache for decoding, :class:`attnbook.KVCache`;
* :mod:`attnbook.efficient.sliding_window`: sliding-window and block-sparse masks and attention
  (the builders chapter 8 teaches; layouts and application are :mod:`attnbook.core.masks`').

* :mod:`attnbook.efficient.streaming`: chapter 13's streaming cache (StreamingLLM): the first
  tokens kept as attention sinks beside a rolling window (:class:`attnbook.RollingKVCache`,
  :class:`attnbook.StreamingCache`), its mask and the positions it gives the kept tokens.

Chapter 13 (the cache at scale) stores and rolls its cache here; what makes the cache smaller
per token goes to :mod:`attnbook.heads`. Chapter 11's kernels are :mod:`attnbook.kernels`.

Imports the wings below it (``core``, ``positions``, ``heads``) and :mod:`attnbook.validators`.
This package re-exports nothing, so that no dotted name is both a module and a function.
"""
