"""Many heads (chapters 3 and 9); ``attnbook`` re-exports the public names.

* :mod:`attnbook.heads.multi_head`: multi-head attention, its projections one step at a time and
  :class:`attnbook.MultiHeadAttention`;
* :mod:`attnbook.heads.grouped_query`: grouped-query (and multi-query) attention and the key-value
  cache's size in bytes.

* :mod:`attnbook.heads.latent`: multi-head latent attention (DeepSeek-V2/V3, chapter 13): the
  down- and up-projections, the decoupled rotary key and queries, the naive and the absorbed
  paths, the counterexample of rotary on the compressed keys, :class:`attnbook.LatentCache` and
  :class:`attnbook.MultiHeadLatentAttention`;
* :mod:`attnbook.heads.sinks`: attention with one learned sink logit per head (gpt-oss) and the
  same as attention over a zero-valued virtual key (chapter 13);
* :mod:`attnbook.heads.cache_accounting`: the cache's numbers and bytes per token of multi-head,
  multi-query, grouped-query and latent attention (chapter 13).

With :mod:`attnbook.efficient` this is chapter 13's home (the cache at scale): what shrinks the
cache per token lives here, how the cache is stored and rolled lives in ``efficient``.

Imports :mod:`attnbook.core`, :mod:`attnbook.positions` and :mod:`attnbook.validators`. Re-exports nothing.
"""
