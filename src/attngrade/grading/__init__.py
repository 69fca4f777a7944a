"""Grading a class on the host, outside the sandboxes.

A submission's path: :mod:`.notebook` finds and reads it (never running it), :mod:`.static` reads
its code for constructs an instructor may want to review, :mod:`.view` builds what a sandbox may
see, :mod:`.bubblewrap` starts bubblewrap workers, :mod:`.session` has one run a submission,
:mod:`.grader` runs the homework's tests against the sandboxed notebook, :mod:`.report` writes the
output folder: :mod:`.gradebook` (the CSV), :mod:`.feedback` (a student's feedback),
:mod:`.class_summary` (the class summary and what the class got wrong), :mod:`.histograms`,
:mod:`.file_names` (safe feedback file names) and :mod:`.output_files` (atomic writes, the run's
record).
"""
