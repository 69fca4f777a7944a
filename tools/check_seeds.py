"""Run the chapters that train models on other seeds and report every claim's worst margin.

A trained-model claim of a chapter ("accuracy at least 0.99") is written with
:func:`attnbook.lab.thresholds.assert_at_least` or ``assert_at_most``, which records its margin. Each
training chapter sets its seed in one line ``SEED = <n>`` of its first code cell and derives every
other seed from it. This script executes each such chapter once per seed, with that one line
changed, and prints for every claim its value on each seed and its worst margin::

    make check-seeds                                   # every training chapter, seeds 1 to 5
    .venv/bin/python tools/check_seeds.py book/07_attention_at_work.md --seeds 1 2 3 4 5 6 7

It exits with status 1 when a claim fails on some seed (negative margin) or a cell raises. The
claims are recorded without raising (``ATTNBOOK_MARGINS_SOFT=1``), so one run reports them all; any
other failing cell (an ``assert`` or ``assert_close``) stops that run and is reported with its error.
It is not part of ``make test``: a run takes minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
SEED_LINE = re.compile(r"^SEED = (\d+)\b.*$", re.MULTILINE)
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours of IPython's tracebacks


def seed_line_of(cells) -> tuple[int, int]:
    """(index of the first code cell, the seed it sets); ValueError unless it has one ``SEED = n`` line."""
    first = next((i for i, cell in enumerate(cells) if cell.cell_type == "code"), None)
    if first is None:
        raise ValueError("has no code cell")
    found = SEED_LINE.findall(cells[first].source)
    if len(found) != 1:
        raise ValueError(f"its first code cell has {len(found)} lines 'SEED = <n>' (needs exactly one)")
    return first, int(found[0])


def training_chapters() -> list[Path]:
    """The chapters whose first code cell sets ``SEED``."""
    import jupytext

    chosen = []
    for path in sorted(BOOK.glob("[0-9][0-9]_*.md")):
        try:
            seed_line_of(jupytext.read(path).cells)
        except ValueError:
            continue
        chosen.append(path)
    return chosen


@dataclass
class Run:
    chapter: str
    seed: int
    seconds: float = 0.0
    claims: list[dict] = field(default_factory=list)
    error: str | None = None


def run_chapter(chapter: Path, seed: int, timeout: int) -> Run:
    """Execute ``chapter`` with ``SEED = seed`` in a fresh kernel; collect the claims it recorded."""
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebook = jupytext.read(chapter)
    first, _ = seed_line_of(notebook.cells)
    cell = notebook.cells[first]
    cell.source = SEED_LINE.sub(f"SEED = {seed}", cell.source, count=1)
    run = Run(chapter.name, seed)
    with tempfile.TemporaryDirectory(prefix="check-seeds-") as scratch:
        sink = Path(scratch) / "margins.jsonl"
        sink.touch()
        os.environ["ATTNBOOK_MARGINS"] = str(sink)  # the kernel inherits this process's environment
        os.environ["ATTNBOOK_MARGINS_SOFT"] = "1"
        os.environ.setdefault("MPLBACKEND", "Agg")
        # the kernel inherits this worker's stderr, where it only warns about its transport; what a
        # cell raises comes back through nbclient
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        client = NotebookClient(
            notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(chapter.parent)}}
        )
        start = time.perf_counter()
        try:
            client.execute()
        except CellExecutionError as error:
            lines = [line for line in ANSI.sub("", str(error)).splitlines() if line.strip()]
            run.error = lines[-1] if lines else repr(error)
        except Exception as error:  # a kernel that died or timed out
            run.error = f"{type(error).__name__}: {error}"
        run.seconds = time.perf_counter() - start
        run.claims = [json.loads(line) for line in sink.read_text(encoding="utf-8").splitlines() if line]
    return run


def report(runs: list[Run]) -> bool:
    """Print each chapter's claims, one row per claim, one column per seed; True when all hold."""
    ok = True
    for chapter in sorted({run.chapter for run in runs}):
        mine = sorted((run for run in runs if run.chapter == chapter), key=lambda run: run.seed)
        seeds = [run.seed for run in mine]
        print(f"\n## {chapter}: seeds {', '.join(map(str, seeds))}")
        for run in mine:
            status = "ok" if run.error is None else f"FAILED: {run.error}"
            print(f"  seed {run.seed}: {run.seconds:6.1f} s, {len(run.claims)} claims checked, {status}")
            ok &= run.error is None
        names = list(dict.fromkeys(claim["claim"] for run in mine for claim in run.claims))
        if not names:
            print("  (no claim recorded: does the chapter use attnbook.lab.thresholds?)")
            continue
        width = max(len(name) for name in names)
        print(
            f"  {'claim':<{width}}  {'rel':>3} {'bound':>9}  "
            + " ".join(f"{'seed ' + str(s):>10}" for s in seeds)
            + f"  {'worst margin':>12}"
        )
        for name in names:
            values, margins, bounds, relation = [], [], set(), ""
            for run in mine:
                mine_here = [claim for claim in run.claims if claim["claim"] == name]
                if not mine_here:
                    values.append("—")
                    continue
                worst = min(mine_here, key=lambda claim: claim["margin"])  # a claim checked in a loop: its worst
                values.append(f"{worst['value']:.4g}")
                margins.append(worst["margin"])
                bounds.add(worst["bound"])
                relation = worst["relation"]
            worst_margin = min(margins) if margins else math.nan
            bound = f"{next(iter(bounds)):.4g}" if len(bounds) == 1 else "varies"
            flag = "" if worst_margin >= 0 else "   <-- FAILS"
            ok &= worst_margin >= 0
            print(
                f"  {name:<{width}}  {relation:>3} {bound:>9}  "
                + " ".join(f"{v:>10}" for v in values)
                + f"  {worst_margin:12.4g}{flag}"
            )
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "chapters",
        nargs="*",
        type=Path,
        help="chapters to run (default: every chapter whose first code cell sets SEED)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="chapters run at once")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may run")
    args = parser.parse_args(argv)
    chapters = [path.resolve() for path in args.chapters] or training_chapters()
    import jupytext

    for chapter in chapters:
        try:
            seed_line_of(jupytext.read(chapter).cells)
        except (ValueError, OSError) as error:
            parser.error(f"{chapter}: {error}")
    jobs = [(chapter, seed) for chapter in chapters for seed in args.seeds]
    print(f"check-seeds: {len(chapters)} chapter(s) x seeds {args.seeds}, {args.jobs} at a time", flush=True)
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_chapter, chapter, seed, args.timeout) for chapter, seed in jobs]
        runs = []
        for future in futures:
            runs.append(future.result())
            print(f"  done: {runs[-1].chapter} seed {runs[-1].seed} ({runs[-1].seconds:.0f} s)", flush=True)
    ok = report(runs)
    print("\ncheck-seeds:", "every claim holds on every seed" if ok else "FAILED (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
