"""Grading a class on the host, outside the sandboxes.

A submission's path: :mod:`.notebook` finds and reads it (never running it), :mod:`.static` reads
its code for constructs an instructor may want to review, :mod:`.view` builds what a sandbox may
see, :mod:`.bubblewrap` starts bubblewrap workers, :mod:`.session` has one run a submission,
:mod:`.grader` runs the homework's tests against the sandboxed notebook, :mod:`.report` writes the
gradebook, feedback and summary.
"""
