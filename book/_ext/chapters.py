"""Which pages are chapters: MyST markdown notebooks (a jupytext front matter with a kernelspec).

Used by the book build (``notebook_downloads``) and by pytest (``conftest.py``, which runs every
chapter through nbval).
"""

from __future__ import annotations

import os
from pathlib import Path


def is_chapter(source: Path) -> bool:
    """True for a ``.md`` file whose front matter names a Jupyter kernel."""
    if Path(source).suffix != ".md":
        return False
    with open(source, encoding="utf-8") as f:
        head = f.read(600)
    return head.startswith("---") and "kernelspec:" in head


def finished_folder(root: Path) -> Path:
    """Where pytest marks each chapter that has finished running in this test run (one empty file per
    chapter), so that the book build in another pytest-xdist worker can wait for all of them."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    return Path(root) / "_build" / ".chapters-run" / run
