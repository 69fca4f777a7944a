"""The lab bench: tools for measuring, not formulas the course teaches.

* :mod:`attnbook.lab.device`: the default device (CUDA when there is one);
* :mod:`attnbook.lab.random_tensors`: ``seeded_randn``, seeded standard-normal tensors for the
  chapters' examples;
* :mod:`attnbook.lab.memory`: peak memory of one call (what a call *holds*);
* :mod:`attnbook.lab.memory_traffic`: bytes read and written by each operation of a call (what a
  call *moves*);
* :mod:`attnbook.lab.thresholds`: ``assert_at_least``, ``assert_at_most``: the thresholds of
  trained-model claims, each recording its margin for ``make check-seeds``;
* :mod:`attnbook.lab.bench`: the benchmark of chapters 2, 3 and 8 (``python -m attnbook.lab.bench``)
  and the one ``plain_attention`` (the formula written out in torch) every benchmark compares with;
* :mod:`attnbook.lab.bench_flash`: chapter 11's benchmark of FlashAttention-2
  (``python -m attnbook.lab.bench_flash``).

Imports the wings below it (up to ``kernels``) and :mod:`attnbook.validators`. Re-exports nothing.
"""
