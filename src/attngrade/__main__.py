"""``python -m attnbook.grading HOMEWORK SUBMISSIONS``: see :mod:`attnbook.grading.cli`."""

import sys

from .cli import main

sys.exit(main())
