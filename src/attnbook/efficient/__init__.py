"""Attention that never holds the (n, m) scores (chapter 8); ``attnbook`` re-exports the entry points.

* :mod:`attnbook.efficient.online_softmax`: the running maximum and sum, block by block;
* :mod:`attnbook.efficient.tiled_attention`: tiled attention (FlashAttention's loops), its tiles
  and its rounding bound.

(The key-value cache is :mod:`attnbook.kv_cache`; chapter 11's kernels are :mod:`attnbook.kernels`.)
This package re-exports nothing, so that no dotted name is both a module and a function.
"""
