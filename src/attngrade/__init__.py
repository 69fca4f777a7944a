"""The course's homework and class grader (the ``exercises/`` folder), apart from the formulas.

Modules by role:

* :mod:`.checks`: comparison helpers the homework tests use (imported by the student's notebook
  for ``grader.check``; needs only torch); :mod:`.integrity`: the run-time guard that tells whether
  an answer ran a reference implementation;
* :mod:`.homework`: a homework's folder, configuration and tests; :mod:`.assign`: builds every
  student version and autograder (``make assignments``); :mod:`.release`: the student-facing course;
* the class grader: :mod:`.notebook` (reading submissions), :mod:`.static` (flags for review),
  :mod:`.view` (what a sandbox sees), :mod:`.sandbox` (bubblewrap workers, one session per
  submission), :mod:`.worker` (what runs inside), :mod:`.protocol` (the wire format: plain data),
  :mod:`.grader` (orchestration), :mod:`.report` (gradebook, feedback, summary), :mod:`.cli`
  (``attnbook-grade``), :mod:`.bench` (against otter's ``grade_submission``).

Importing the package imports nothing heavy; the submodules import what they need.
"""
