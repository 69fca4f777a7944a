"""Authoring: building the course's homework and releasing the course (the instructor's side,
before grading).

* :mod:`.master`: the format of a master notebook (solutions, prompts, tests), read in one place;
* :mod:`.assign`: every homework's student version and autograder (``make assignments``), with
  :mod:`.otter_batch` (otter assign for several homework in one process);
* :mod:`.release`: the student-facing course (``make release``), scanned by :mod:`.leaks` (what
  must not leak, and the scan of a tree that finds it);
* :mod:`.bench`: grading speed against otter's ``grade_submission``.
"""
