"""The GPU check of the course, for a short device window (``make check-gpu``; at most 7.5 minutes by its caps).

On a machine with a CUDA GPU it runs, one after another, each as its own process:

1. the CUDA variants of the package's tests (``pytest <the files of tests/attnbook with device tests>
   -m "not course" -k cuda``);
2. chapters 8 and 11 on CUDA, with Triton compiled (``TRITON_INTERPRET`` unset): their code cells in
   order in one Python process, as nbval runs them (nbval is not needed: the cells are read from the
   MyST source here); chapter 11 must say that its kernels ran compiled;
3. the benchmark, ``python -m attnbook.lab.bench_flash --check`` in bfloat16 at the sizes of
   chapter 11's table (exit status 1 when a target is missed);

then prints each step's status and time, and the table chapter 11 wants (GPU, versions of PyTorch,
Triton and CUDA, the date, and per case the Triton / SDPA ratios), ready to paste under the
chapter's section "Measured: time and memory".

``--dry-run`` lists what it would run and exits 0, on any machine. Without a CUDA GPU (and without
``--dry-run``) it says so and exits with status 2: nothing here is measured on a CPU. The exit
status is 0 only when every step passed.

Usage: ``python tools/check_gpu.py [--dry-run] [--only tests,chapters,bench]``, or
``make check-gpu ARGS=--dry-run``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ["book/08_efficient_attention.md", "book/11_attention_as_a_kernel.md"]
#: the benchmark's sizes: chapter 11's table (bfloat16; n = 4096 with d = 64, n = 16384 with d = 128),
#: both widths at both lengths, causal and not; the PyTorch tiles (Python loops) only up to 1024 tiles
#: and the plain formula only up to 16 GiB of (n, n) matrices, so that the run fits the window
BENCH_ARGS = [
    "--check", "--device", "cuda", "--dtype", "bfloat16", "--n", "4096,16384", "--d", "64,128",
    "--max-tiles", "1024", "--max-plain-gib", "16",
]  # fmt: skip
#: the rows of chapter 11's table: (n, d, causal)
TABLE_CASES = [(4096, 64, False), (4096, 64, True), (16384, 128, True)]
#: the marker chapter 11 prints when its Triton cell ran compiled on a GPU
COMPILED_MARKER = re.compile(r"Triton kernels compiled on cuda")


@dataclass
class Step:
    """One step of the check: a command, the seconds it may take, and what its output must contain."""

    kind: str  # tests, chapters or bench (for --only)
    name: str
    command: list[str]
    timeout_s: int
    must_print: re.Pattern | None = None


#: a test with a CUDA variant takes the ``device`` fixture (or ``triton_device``, built on it)
_DEVICE_TEST = re.compile(r"def test_\w+\([^)]*\b(device|triton_device)\b", re.DOTALL)


def device_test_files() -> list[str]:
    """The package's test files that have CUDA variants (relative paths). Only these are collected: a
    device machine may lack a tool some other test file imports (nbformat, say), and a file that fails
    to import would fail the step without having a CUDA test to run."""
    files = sorted((ROOT / "tests" / "attnbook").rglob("test_*.py"))
    return [str(f.relative_to(ROOT)) for f in files if _DEVICE_TEST.search(f.read_text(encoding="utf-8"))]


def steps(python: str, json_path: str) -> list[Step]:
    """The steps in the order they run."""
    pytest = [python, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:randomly", "-p", "no:cacheprovider"]
    chapter_steps = [
        Step(
            "chapters",
            f"chapter {Path(chapter).name} on CUDA",
            [python, str(Path(__file__).resolve()), "--run-chapter", chapter],
            90,
            COMPILED_MARKER if chapter.startswith("book/11") else None,
        )
        for chapter in CHAPTERS
    ]
    return [
        Step(
            "tests",
            "tests: the CUDA variants",
            [*pytest, *device_test_files(), "-m", "not course", "-k", "cuda", "-rs"],
            120,
        ),
        *chapter_steps,
        Step(
            "bench",
            "bench-flash --check",
            [python, "-m", "attnbook.lab.bench_flash", *BENCH_ARGS, "--json", json_path],
            150,
        ),
    ]


# ---------------------------------------------------------------- running a chapter without nbval

_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def chapter_cells(text: str) -> list[str]:
    """The code cells of a MyST markdown notebook, in order, without their options (``---`` front
    matter or ``:key: value`` lines at the top of a cell)."""
    cells = []
    for body in _CELL.findall(text):
        lines = body.split("\n")
        if lines and lines[0].strip() == "---":
            end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
            lines = lines[end + 1 :]
        else:
            while lines and re.match(r"^:[\w-]+:", lines[0]):
                lines = lines[1:]
        cells.append("\n".join(lines).rstrip("\n"))
    return cells


def run_chapter(path: Path) -> int:
    """Execute a chapter's code cells in order in this process (one namespace, as one kernel would).

    ``plt.show()`` closes the figure (the Agg backend). A failing cell is reported with its number
    (counting code cells from 1) and stops the run, as nbval would.
    """
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib.pyplot as plt

    namespace: dict[str, object] = {"__name__": "__main__"}
    os.chdir(path.parent)  # a notebook runs in its own folder
    cells = chapter_cells(path.read_text(encoding="utf-8"))
    for number, source in enumerate(cells, start=1):
        started = time.perf_counter()
        try:
            exec(compile(source, f"{path.name}, code cell {number}", "exec"), namespace)
        except Exception:
            import traceback

            traceback.print_exc()
            print(f"FAILED: {path.name}, code cell {number} of {len(cells)}", flush=True)
            return 1
        finally:
            plt.close("all")
        print(f"[cell {number}/{len(cells)} ok, {time.perf_counter() - started:.1f} s]", flush=True)
    return 0


# ---------------------------------------------------------------- the report


def environment() -> dict[str, str]:
    """The machine and the versions, for the table."""
    import torch

    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    }
    try:
        from importlib.metadata import version

        info["triton"] = version("triton")
    except Exception:  # not installed
        info["triton"] = "not installed"
    return info


def chapter_table(record: dict) -> str:
    """Chapter 11's table (markdown) from the benchmark's JSON record: one row per case of
    TABLE_CASES, the Triton / SDPA time ratios of both passes and the peak-memory ratio of
    forward plus backward; ``-`` where the run has no number."""

    def find(n, d, causal, pass_):
        return next(
            (r for r in record["rows"] if (r["n"], r["d"], r["causal"], r["pass_"]) == (n, d, causal, pass_)), None
        )

    def ratio(row, what):
        if row is None or not row[what].get("sdpa") or row[what].get("triton") is None:
            return "-"
        return f"{row[what]['triton'] / row[what]['sdpa']:.2f}"

    lines = [
        f"{record['device']}; PyTorch {record['torch']} (CUDA {record['cuda']}), Triton {record['triton']}; "
        f"{record['dtype']}, batch {record['batch']}, {record['heads']} heads, blocks of {record['block']}, "
        f"SDPA's {record['sdpa_backend']}; {record['date']}; targets met: {record['targets_met']} of {record['targets']}",
        "",
        "| GPU | dtype | $n$ | $d$ | causal | Triton fwd / SDPA fwd | Triton fwd+bwd / SDPA fwd+bwd "
        "| peak memory fwd+bwd, Triton / SDPA |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, d, causal in TABLE_CASES:
        forward, both = find(n, d, causal, "fwd"), find(n, d, causal, "fwd+bwd")
        lines.append(
            f"| {record['device']} | {record['dtype']} | {n} | {d} | {'yes' if causal else 'no'} "
            f"| {ratio(forward, 'seconds')} | {ratio(both, 'seconds')} | {ratio(both, 'peak')} |"
        )
    return "\n".join(lines)


def child_environment() -> dict[str, str]:
    """The environment of the steps: Triton compiled (no TRITON_INTERPRET), the package importable from src/."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    env["MPLBACKEND"] = "Agg"
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/check_gpu.py", description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="list the steps and exit (any machine)")
    parser.add_argument(
        "--only", default=None, help="comma-separated: tests, chapters, bench (default: all of them, in that order)"
    )
    parser.add_argument("--run-chapter", default=None, help=argparse.SUPPRESS)  # internal: one chapter's cells
    args = parser.parse_args(argv)
    if args.run_chapter:
        return run_chapter((ROOT / args.run_chapter).resolve())

    json_path = str(Path(tempfile.gettempdir()) / f"attnbook-check-gpu-{os.getpid()}.json")
    todo = steps(sys.executable, json_path)
    if args.only:
        kinds = {k.strip() for k in args.only.split(",")}
        unknown = kinds - {"tests", "chapters", "bench"}
        if unknown:
            raise SystemExit(f"--only: unknown step(s) {sorted(unknown)}; choose from tests, chapters, bench")
        todo = [step for step in todo if step.kind in kinds]

    if args.dry_run:
        print(f"make check-gpu would run, in {ROOT}, with TRITON_INTERPRET unset and PYTHONPATH=src:")
        for number, step in enumerate(todo, start=1):
            print(f"  {number}. {step.name} (at most {step.timeout_s} s): {shlex.join(step.command)}")
        total = sum(step.timeout_s for step in todo)
        print(f"then print chapter 11's table from the benchmark's JSON. At most {total} s ({total / 60:.1f} min).")
        return 0

    import torch

    if not torch.cuda.is_available():
        print(
            "check-gpu: no CUDA GPU on this machine (torch.cuda.is_available() is False; "
            f"torch {torch.__version__}): nothing was run. Run it on a machine with an NVIDIA GPU, "
            "or list the steps with --dry-run (make check-gpu ARGS=--dry-run).",
            file=sys.stderr,
        )
        return 2
    if os.environ.get("TRITON_INTERPRET"):
        print("note: TRITON_INTERPRET is set here; the steps run without it (Triton compiled)")
    info = environment()
    print("check-gpu on " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)

    results = []
    for step in todo:
        print(f"\n=== {step.name}: {shlex.join(step.command)}", flush=True)
        started = time.perf_counter()
        try:
            done = subprocess.run(
                step.command, cwd=ROOT, env=child_environment(), capture_output=True, text=True, timeout=step.timeout_s
            )
            output, status = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as error:
            output = (error.stdout or b"").decode() if isinstance(error.stdout, bytes) else (error.stdout or "")
            status = f"timed out after {step.timeout_s} s"
        seconds = time.perf_counter() - started
        print(output[-6000:], flush=True)
        ok = status == 0 and (step.must_print is None or step.must_print.search(output) is not None)
        if status == 0 and not ok:
            status = f"ran, but did not print {step.must_print.pattern!r}"
        results.append((step.name, ok, status, seconds))

    print("\n=== summary")
    for name, ok, status, seconds in results:
        print(f"  {'ok  ' if ok else 'FAIL'} {name}: {seconds:.0f} s" + ("" if ok else f" (exit status {status})"))
    if Path(json_path).exists():
        record = json.loads(Path(json_path).read_text(encoding="utf-8"))
        print("\n=== chapter 11's table (book/11_attention_as_a_kernel.md, section 'Measured: time and memory')\n")
        print(chapter_table(record))
        Path(json_path).unlink()
    return 0 if all(ok for _, ok, _, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
