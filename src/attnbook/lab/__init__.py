"""The lab bench: tools for measuring, not formulas the course teaches.

* :mod:`attnbook.lab.device`: the default device (CUDA when there is one);
* :mod:`attnbook.lab.sampling`: a seeded sampler of random tensors;
* :mod:`attnbook.lab.memory`: peak memory of one call;
* :mod:`attnbook.lab.traffic`: bytes read and written by the operations of a call;
* :mod:`attnbook.lab.margins`: thresholds for trained-model claims with their margins recorded
  (``assert_at_least``, ``assert_at_most``);
* :mod:`attnbook.lab.bench`: the benchmark of chapters 2, 3 and 8 (``python -m attnbook.lab.bench``)
  and the one ``plain_attention`` (the formula written out in torch) every benchmark compares with;
* :mod:`attnbook.lab.bench_flash`: chapter 11's benchmark of FlashAttention-2
  (``python -m attnbook.lab.bench_flash``).

Imports the wings below it (up to ``kernels``) and :mod:`attnbook.validators`. Re-exports nothing.
"""
