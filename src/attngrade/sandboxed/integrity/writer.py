"""The build-time writer: the homework builder (:mod:`attngrade.authoring.assign`) writes a
homework's forbidden list as the :data:`~.homework_list.INTEGRITY_FILE` that
:mod:`.homework_list` reads where the tests run."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .homework_list import INTEGRITY_FILE


def write_integrity_file(
    folder: str | os.PathLike[str], homework: str, forbidden: list[str], name: str = INTEGRITY_FILE
) -> Path:
    """Write the forbidden list of ``homework`` as ``folder/name`` (see :data:`INTEGRITY_FILE`)."""
    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"homework": homework, "forbidden": list(forbidden)}, indent=1) + "\n"
    path.write_text(text, encoding="utf-8")
    return path
