"""A cell's IPython syntax (magics, ``!cmd``, ``obj?``) as plain Python.

Owned by the sandbox (the child runs each cell through :func:`to_python`,
:mod:`attngrade.sandboxed.child`); the host reads it too, to look at the same Python the sandbox
runs (:mod:`attngrade.grading.static`). Standard library only at import (IPython when present).
"""

from __future__ import annotations

#: the cell magics whose body runs (the timing and capture magics; ``ipytest`` defines the tests of
#: its cell, which the grader runs; pytest itself does not run here): the others do nothing
RUN_BODY = {"time", "timeit", "capture", "prun", "debug", "ipytest"}


def to_python(source: str) -> str:
    """A cell's IPython syntax (magics, ``!cmd``, ``obj?``) as plain Python, as IPython does it."""
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except Exception:
        return strip_magics(source)
    try:
        return TransformerManager().transform_cell(source)
    except Exception:
        return strip_magics(source)


def strip_magics(source: str) -> str:
    """Without IPython: a ``%%cell magic`` runs its body for timing magics; other magic and shell
    lines become ``pass``."""
    lines = source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        name = lines[0].lstrip()[2:].split(maxsplit=1)[0] if lines[0].strip() != "%%" else ""
        return "\n".join(lines[1:]) if name in RUN_BODY else ""
    out = []
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            indent = line[: len(line) - len(stripped)]
            out.append(indent + "pass")
        else:
            out.append(line)
    return "\n".join(out)
