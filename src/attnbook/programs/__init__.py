"""Home of chapter 12, masks as programs: packed documents, and masks and score modifications written
as functions of (batch, head, query index, key index), in the manner of PyTorch's FlexAttention
(``mask_mod``, ``score_mod``), with the tiles of the scores they let a kernel skip.

* :mod:`attnbook.programs.documents`: several documents packed into one row: document ids,
  ``cu_seqlens`` (the offsets of FlashAttention's variable-length layout) and the conversions
  between them and from lengths, positions that restart in each document, the document-causal
  (block-diagonal) mask;
* :mod:`attnbook.programs.mask_mods`: mask functions ``mask_mod(b, h, q_idx, kv_idx)`` (causal,
  document, sliding window, prefix-LM, their "and" and "or") and their dense keep-masks
  (``mask_from_mask_mod``);
* :mod:`attnbook.programs.score_mods`: score functions ``score_mod(score, b, h, q_idx, kv_idx)``
  (soft-capping as in Gemma 2, ALiBi), applied densely, and ``attention_with_mods``, the dense
  reference of ``flex_attention`` built on :mod:`attnbook.core`;
* :mod:`attnbook.programs.block_masks`: the kind of each tile (empty, partial, full), the work a
  kernel skips, and attention computed on the non-empty tiles only (``block_sparse_attention``).

The wing imports :mod:`attnbook.core` (masks, attention, softmax), :mod:`attnbook.efficient` (the
online softmax of the tiled loop) and the validators, and nothing above them.
"""
