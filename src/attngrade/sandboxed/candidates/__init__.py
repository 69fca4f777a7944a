"""The implementations a student's test is run on, in a test-writing question, and the processes
each run takes.

A test-writing question asks the student for one test, ``test_<function>(<function>)``: it receives
the function under test and asserts what a correct one must do. The grader runs it on candidate
implementations written by the instructor (the reference, and the known wrong versions of the
homework's ``mutants``), given as *source* in the tests. A test must carry the answer: whether it
passes may depend on nothing but what the candidate returns for the inputs the test chose. So every
run of a test on a candidate takes two fresh processes, sharing nothing with any earlier run:

* the **candidate's process**, forked by the candidate server (:func:`.server.serve_candidates`): the
  candidate is compiled there, in a fresh namespace holding ``torch`` and ``math``; it answers
  calls, counts them, and no other process of the student's can trace or read it
  (``PR_SET_DUMPABLE`` 0). Its code, closure and frames never exist where the test runs;
* the **test's process**, which receives a *proxy*: a plain function that sends its arguments to
  the candidate's process and returns what comes back (tensors and plain data, through
  ``torch.save`` and ``torch.load(weights_only=True)``, which builds no object of the sender's
  choosing; a built-in exception comes back as itself). It is cut off from everything but its
  candidate (:func:`.isolation.isolate_test_process`): no inherited file descriptor, shared memory made
  private, and where the system allows it its own user, network, IPC, pid and mount namespaces with
  an empty ``/tmp`` and ``/dev/shm``; elsewhere it may write no file contents, and what it created
  is deleted after it.

At the end the test's process tells the candidate's process whether the test passed; the verdict and
the number of calls come back from the candidate's side.

In the class grader (:mod:`attngrade.sandboxed.worker`) both come from processes forked before the notebook's first
cell runs: the candidate server, which alone keeps the key the grader seals each source and signs
each verdict with (:func:`.sealing.seal`, :func:`.sealing.sign`; the notebook's process wipes its copy), and the test
factory (:func:`.factory._factory`), which never holds a candidate or a key and forks each test's process,
which runs the notebook's cells afresh, then the test. While a test runs, every other process of
the student's is stopped. So nothing a cell patches or starts in the notebook's process reaches a
run, and that process only passes sealed requests and signed verdicts on. In ``grader.check`` and
``otter run`` (:mod:`attngrade.student_tests`) the server and each test's process are forked from the

The package, by job: :mod:`.forks` (what every process here shares), :mod:`.sealing` (the class
grader's key), :mod:`.wire` (the messages, the proxy), :mod:`.isolation` (the test's process),
:mod:`.factory` (the class grader's test factory), :mod:`.server` (the candidate, its process and
the server). The names the rest of the grader uses are importable from here.
"""

from __future__ import annotations

from .forks import GRACE
from .isolation import PRIVATE_FOLDERS, isolate_test_process, namespaces_available, run_test, run_test_here
from .sealing import KEY_BYTES, seal, sign, unseal
from .server import (
    FILENAME,
    CandidateError,
    compile_candidate,
    prepare,
    receive_verdict,
    request_run,
    serve_candidates,
    start_server,
    warm_up,
)
from .wire import MAX_MESSAGE, describe, dumps, loads, make_proxy

__all__ = [
    "FILENAME",
    "GRACE",
    "KEY_BYTES",
    "MAX_MESSAGE",
    "PRIVATE_FOLDERS",
    "CandidateError",
    "compile_candidate",
    "describe",
    "dumps",
    "isolate_test_process",
    "loads",
    "make_proxy",
    "namespaces_available",
    "prepare",
    "receive_verdict",
    "request_run",
    "run_test",
    "run_test_here",
    "seal",
    "serve_candidates",
    "sign",
    "start_server",
    "unseal",
    "warm_up",
]
