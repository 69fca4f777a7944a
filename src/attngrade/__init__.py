"""Homework and grading for the course (the ``exercises/`` folder).

* :mod:`.checks`: assertions with readable messages, used by the homework tests;
* :mod:`.homework`: a homework's folder, configuration and tests;
* :mod:`.assign`: builds every student version and autograder (``make assignments``);
* :mod:`.grader`, :mod:`.sandboxes`, :mod:`.sandbox`, :mod:`.zygote`, :mod:`.protocol`,
  :mod:`.static`: the class grader, which runs each submission in its own sandbox process and
  computes every verdict in its own process;
* :mod:`.report`: the gradebook and feedback files; :mod:`.cli`: ``attnbook-grade``;
* :mod:`.bench`: the benchmark against otter's own ``grade_submission``.

Nothing here is imported by ``import attnbook``; the submodules import what they need.
"""
