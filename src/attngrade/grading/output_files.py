"""Writing a run's output files, and what the run records about itself.

Every file is written to a temporary name and renamed into place (:func:`atomic_write`), so a link
planted at an output path is replaced, not followed; ``run.json`` (:data:`RUN_FILE`) records the
homework graded and when, which ``export`` and ``course-report`` name the folder by.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # a failed write leaves no temporary file behind
        raise


#: what a grading run records about itself beside the gradebook: the homework and when
RUN_FILE = "run.json"


def recorded_homework(folder: Path) -> str | None:
    """The homework graded into ``folder``, as the run recorded it (``run.json``; for an output
    folder of an older version, the title of its ``summary.md``), or None without either."""
    try:
        name = json.loads((folder / RUN_FILE).read_text(encoding="utf-8")).get("homework")
        if isinstance(name, str) and name:
            return name
    except (OSError, ValueError, AttributeError):
        pass
    try:
        with open(folder / "summary.md", encoding="utf-8") as f:
            found = re.match(r"# (.+): class summary$", f.readline().rstrip("\n"))
    except (OSError, UnicodeDecodeError):
        return None
    return found.group(1) if found else None


def recorded_time(folder: Path) -> float:
    """When the homework in ``folder`` was last graded (seconds since the epoch): the run's record,
    else the gradebook's modification time."""
    try:
        when = json.loads((folder / RUN_FILE).read_text(encoding="utf-8")).get("graded_at")
        if isinstance(when, (int, float)):
            return float(when)
    except (OSError, ValueError, AttributeError):
        pass
    try:
        return (folder / "gradebook.csv").stat().st_mtime
    except OSError:
        return 0.0
