"""``otter assign`` on several homework in one process: ``python -m attngrade.authoring.otter_batch [--no-run-tests] MASTER...``.

Importing otter costs seconds (nbformat's schema validators compile their grammars), far more than
its ``assign`` on one of the course's masters, so :func:`attngrade.authoring.assign.build` runs one
such process for a group of homework instead of one ``otter assign`` per homework. Each master is
built into ``dist/`` beside it, in turn (otter changes the working directory while it works).

For each master the output holds a line ``@@attngrade START <master>``, otter's own log, and a
line ``@@attngrade OK <master>`` or ``@@attngrade FAILED <master>`` (after the traceback), so the
caller can give each homework its own log. The exit status is the
number of masters that failed (at most 100).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

#: the prefix of the lines that separate the masters in the output
MARK = "@@attngrade "


def split_log(output: str) -> dict[str, tuple[bool, str]]:
    """``{master: (ok, log)}`` from the output of one run of this module."""
    results: dict[str, tuple[bool, str]] = {}
    current, lines = None, []
    for line in output.split("\n"):
        if line.startswith(MARK):
            word, _, master = line[len(MARK) :].partition(" ")
            if word == "START":
                current, lines = master, []
            elif current is not None:
                results[current] = (word == "OK", "\n".join(lines))
                current = None
            continue
        lines.append(line)
    if current is not None:  # the process died inside this master
        results[current] = (False, "\n".join(lines))
    return results


def main(argv: list[str]) -> int:
    run_tests = "--no-run-tests" not in argv
    masters = [Path(a).resolve() for a in argv if a != "--no-run-tests"]
    from otter.assign import main as assign

    failed = 0
    for master in masters:
        print(f"{MARK}START {master}", flush=True)
        try:
            assign(str(master), str(master.parent / "dist"), no_pdfs=True, no_run_tests=not run_tests)
        except BaseException:  # otter leaves through sys.exit on some failures
            traceback.print_exc()
            sys.stderr.flush()
            print(f"{MARK}FAILED {master}", flush=True)
            failed += 1
        else:
            sys.stderr.flush()
            print(f"{MARK}OK {master}", flush=True)
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
