"""The formulas of attention (chapters 1, 2 and 4), one module each; ``attnbook`` re-exports them.

* :mod:`attnbook.core.softmax`: the softargmax with an inverse temperature;
* :mod:`attnbook.core.masks`: what a mask is (keep, block and additive layouts, causal and
  padding masks, the multi-head layouts read by number of dimensions), how it meets the scores'
  dtype and how it is applied;
* :mod:`attnbook.core.attention`: scores and scaled dot-product attention (and its fused path);
* :mod:`attnbook.core.hard_attention`: argmax attention.

This package re-exports nothing, so that no dotted name is both a module and a function:
``attnbook.core.softmax`` is the module, ``attnbook.softmax`` the function.
"""
