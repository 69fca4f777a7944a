"""Home of chapter 14, linear attention: feature maps in place of the softmax, attention as a
running sum (a recurrent state) and its causal form.

Empty until chapter 14 is written. Its modules will import :mod:`attnbook.core`,
:mod:`attnbook.efficient` and :mod:`attnbook.validators`, and nothing above them.
"""
