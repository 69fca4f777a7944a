"""``ast.parse`` for the grading threads, one at a time.

CPython 3.11 keeps the AST converter's recursion counter in one place for all threads
(``Python/Python-ast.c``: ``state->recursion_depth``, a per-interpreter value; CPython gh-106905,
pytest-dev/pytest#10763). When two grading threads parse at once and a garbage-collection finalizer lets the
other thread run in the middle of a conversion, ``ast.parse`` raises ``SystemError: AST
constructor recursion depth mismatch`` for a notebook that is fine: an internal grader error seen
once under load in the autograd-doors batch. Every parse in the grading process goes through
:func:`parse`, which holds one lock (re-entrant, so a parse inside a finalizer on the same thread
does not deadlock).
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.RLock()


def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, never concurrently with another parse in this process."""
    with _LOCK:
        return ast.parse(source)
