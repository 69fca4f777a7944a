"""``python -m attngrade HOMEWORK SUBMISSIONS``: see :mod:`attngrade.cli`."""

import sys

from .cli import main

sys.exit(main())
