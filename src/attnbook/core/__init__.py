"""The formulas of attention (chapters 1, 2 and 4), one module each; ``attnbook`` re-exports them.

* :mod:`attnbook.core.softmax`: the softargmax with an inverse temperature;
* :mod:`attnbook.core.masks`: the one home of mask building: what a mask is (keep, block and
  additive layouts, causal and padding masks, the multi-head layouts read by number of
  dimensions), its validation, how it meets the scores' dtype and how it is applied; the builders
  a chapter teaches (sliding windows in :mod:`attnbook.efficient.sliding_window`, groups in
  :mod:`attnbook.heads.grouped_query`) call its helpers;
* :mod:`attnbook.core.attention`: scores and scaled dot-product attention (and its fused path);
* :mod:`attnbook.core.hard_attention`: argmax attention;
* :mod:`attnbook.core.scoring`: the additive (Bahdanau) and general (Luong) scores (chapter 4);
* :mod:`attnbook.core.column_convention`: *Formal Algorithms for Transformers* (Phuong and
  Hutter, 2022) with tokens as columns, checked against the row-convention functions; the face
  re-exports the module as ``attnbook.formal``.

Imports only :mod:`attnbook.validators`. This package re-exports nothing, so that no dotted name is
both a module and a function: ``attnbook.core.softmax`` is the module, ``attnbook.softmax`` the function.
"""
