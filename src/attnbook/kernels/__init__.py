"""Attention as a kernel: the backward pass and FlashAttention-2, in PyTorch tiles and in Triton (chapter 11).

* :mod:`.attention_backward`: the formulas of the backward pass of softmax attention, one function
  each, and :func:`attention_backward` composing them;
* :mod:`.flash_attention`: FlashAttention-2's forward and backward passes with PyTorch tiles, and
  :class:`FlashAttention` (a ``torch.autograd.Function``);
* :mod:`.flash_triton`: the same as Triton kernels, and :class:`FlashAttentionTriton`; triton is
  imported only when a kernel first runs (interpreted on a CPU, compiled on CUDA);

The benchmark is :mod:`attnbook.lab.bench_flash`. This wing imports :mod:`attnbook.core` and
:mod:`attnbook.validators`, never the face ``attnbook``. Like :mod:`attnbook.core`, it re-exports nothing: its public functions are re-exported
at the top (``attnbook.flash_attention``, ``attnbook.FlashAttention``, ...), and a dotted name
``attnbook.kernels.X`` is always a module.
"""
