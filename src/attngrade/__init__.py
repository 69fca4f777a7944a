"""The course's homework and class grader (the ``exercises/`` folder), apart from the formulas.

The package is laid out by stage and trust zone; imports only point down this list
(``tests/attngrade/test_grader_layout.py`` checks it):

* :mod:`.sandboxed` — what runs **inside** a submission's bubblewrap sandbox (the guest), and all
  that the sandbox sees of the grader: :mod:`~.sandboxed.worker` (the loop: warm up, fork a child
  per submission, clean up), :mod:`~.sandboxed.child` (one submission's process: runs the notebook,
  answers calls), :mod:`~.sandboxed.process_limits`, :mod:`~.sandboxed.cleanup`; and the modules the
  host reads too, owned here: :mod:`~.sandboxed.protocol` (the wire format: plain data, never
  pickle), :mod:`~.sandboxed.integrity` (did a call run a reference implementation: the reference
  vocabulary, the run-time guard, the list's reader and writer), :mod:`~.sandboxed.candidates` (the
  implementations a student's own test is run against), :mod:`~.sandboxed.ipython` (a cell's
  IPython syntax as Python), :mod:`~.sandboxed.warm_ups` (slow first calls made before any fork).
* :mod:`.checks` — what the homework tests call (in the student's notebook for ``grader.check``, in
  otter's autograder and in the class grader; needs only torch), by job: display, matching,
  diagnosis, comparing, calling, homework helpers, otter's reports; :mod:`.homework` — a homework's
  folder, settings (``grading.yml``, with the groups of ``exercises/forbidden_groups.yml``) and tests;
  :mod:`.student_tests` — what a test-writing question's tests call: a student's test run against
  the reference and against each known wrong version (in the sandbox when grading a class).
* :mod:`.grading` — grading a class **on the host**: :mod:`~.grading.notebook` (finding and reading
  submissions), :mod:`~.grading.static` (flags for review), :mod:`~.grading.view` (the sandbox's
  read-only view), :mod:`~.grading.bubblewrap` (starting the bubblewrap workers),
  :mod:`~.grading.session` (one submission in a worker), :mod:`~.grading.grader` (running the
  tests), :mod:`~.grading.results` (what a grading run found), :mod:`~.grading.report` (writing the
  output folder, by job: :mod:`~.grading.gradebook`, :mod:`~.grading.feedback`,
  :mod:`~.grading.class_summary`, :mod:`~.grading.histograms`, :mod:`~.grading.file_names`,
  :mod:`~.grading.output_files`), :mod:`~.grading.compare` (a re-grade against an earlier gradebook),
  :mod:`~.grading.export` (the gradebook as an LMS's import file), :mod:`~.grading.course_report`
  (what a class got wrong across every homework).
* :mod:`.authoring` — **building and releasing**: :mod:`~.authoring.master` (the master-notebook
  format), :mod:`~.authoring.assign` (student versions and autograders), :mod:`~.authoring.release`
  (the student-facing course), :mod:`~.authoring.leaks` (what must not leak, and the scan),
  :mod:`~.authoring.bench` (grading speed), :mod:`~.authoring.mutation` (the homework's wrong
  solutions applied to its solutions), :mod:`~.authoring.sample_class` (a class made of them, to try
  the grader on).
* :mod:`.cli` — the one command line: ``attnbook-grade`` / ``python -m attngrade [grade]`` grades a
  class; ``python -m attngrade assign | release | bench | export | course-report | sample-class``
  builds, releases, measures, exports to an LMS, reports on a course, makes a sample class.

Importing the package imports nothing heavy; the submodules import what they need.
"""
