"""Which pages are chapters: MyST markdown notebooks (a jupytext front matter with a kernelspec).

Used by the book build (``notebook_downloads``) and by pytest (``conftest.py``, which runs every
chapter through nbval).
"""

from __future__ import annotations

from pathlib import Path


def is_chapter(source: Path) -> bool:
    """True for a ``.md`` file whose front matter names a Jupyter kernel."""
    if Path(source).suffix != ".md":
        return False
    with open(source, encoding="utf-8") as f:
        head = f.read(600)
    return head.startswith("---") and "kernelspec:" in head
