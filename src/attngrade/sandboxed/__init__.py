"""What runs inside a submission's sandbox, and nothing else: the sandbox's view of the grader is a
copy of exactly this subpackage (:func:`attngrade.grading.view.build_view`).

* :mod:`.worker`: the process bubblewrap starts; it forks one child per submission, runs the
  notebook's cells and answers the grader's calls;
* :mod:`.protocol`: the wire format between the sandbox and the grader (plain data, never pickle);
* :mod:`.integrity`: the run-time guard that tells whether a call ran a reference implementation
  (also used by the homework tests in the student's notebook and in otter's autograder).

These modules import only the standard library, numpy and torch, and nothing of the rest of
``attngrade``: no test, reference answer or grader code is ever inside a sandbox.
"""
