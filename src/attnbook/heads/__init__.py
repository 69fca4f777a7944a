"""Many heads (chapters 3 and 9); ``attnbook`` re-exports the public names.

* :mod:`attnbook.heads.multi_head`: multi-head attention, its projections one step at a time and
  :class:`attnbook.MultiHeadAttention`;
* :mod:`attnbook.heads.grouped_query`: grouped-query (and multi-query) attention and the key-value
  cache's size in bytes.

Latent attention (heads that share a compressed key-value cache) will go here, beside
grouped-query attention; with :mod:`attnbook.efficient` this is chapter 13's home (the cache at
scale): what shrinks the cache per token lives here, how the cache is stored and paged lives in
``efficient``.

Imports :mod:`attnbook.core`, :mod:`attnbook.positions` and :mod:`attnbook.validators`. Re-exports nothing.
"""
