"""What runs inside a submission's sandbox (the guest), and nothing else: the sandbox's view of the
grader is a copy of exactly this subpackage (:func:`attngrade.grading.view.build_view`).

The guest's own modules:

* :mod:`.worker`: the process bubblewrap starts, and its loop; it imports and warms up once, then
  forks one child per submission and cleans up after it;
* :mod:`.child`: one submission's process: runs the notebook's cells and answers the grader's calls;
* :mod:`.process_limits`: the child's resource limits, the worker's capabilities, dropping to an
  unprivileged user;
* :mod:`.cleanup`: killing what a submission left running, emptying the writable folders.

The modules the host reads too (one definition for both sides, owned here;
``tests/attngrade/test_grader_layout.py`` lists them and keeps the host to them):

* :mod:`.protocol`: the wire format between the sandbox and the grader (plain data, never pickle);
* :mod:`.integrity`: the run-time guard that tells whether a call ran a reference implementation
  (also used by the homework tests in the student's notebook and in otter's autograder);
* :mod:`.candidates`: the implementations a student's own test is run against;
* :mod:`.ipython`: a cell's IPython syntax as plain Python (the host's static review reads the same);
* :mod:`.warm_ups`: the slow first calls a worker makes before it forks (the host picks them).

These modules import only the standard library, numpy and torch, and nothing of the rest of
``attngrade``: no test, reference answer or grader code is ever inside a sandbox.
"""
