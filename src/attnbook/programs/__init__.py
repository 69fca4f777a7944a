"""Home of chapter 12, masks as programs: a mask or a score modification written as a function of
(batch, head, query index, key index), compiled to a block layout, in the manner of PyTorch's
FlexAttention (``mask_mod``, ``score_mod``).

Empty until chapter 12 is written. Its modules will import :mod:`attnbook.core` (the layouts, the
validation and the application of masks live in :mod:`attnbook.core.masks`) and
:mod:`attnbook.efficient` (block-sparse layouts), and nothing above them.
"""
