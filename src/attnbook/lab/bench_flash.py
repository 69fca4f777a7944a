"""Benchmark: FlashAttention-2 (Triton kernels, PyTorch tiles) against SDPA and the plain formula (chapter 11).

Run ``python -m attnbook.lab.bench_flash``; ``--quick`` runs a small smoke version (on a CPU in
seconds); ``--json FILE`` also writes the run (machine, versions, date, every row) to a file,
from which ``tools/check_gpu.py`` (``make check-gpu``) prints chapter 11's table. One run times,
on one device, the forward pass and the forward plus backward pass of

* ``triton``: :class:`attnbook.kernels.FlashAttentionTriton` (compiled on CUDA; in Triton's
  interpreter on a CPU, where it measures the interpreter, not the algorithm);
* ``tiles``: :class:`attnbook.kernels.FlashAttention`, the same algorithm in PyTorch tiles (Python loops);
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, with its flash backend on CUDA
  for float16 and bfloat16 (``torch.nn.attention.sdpa_kernel``), its default backend otherwise;
* ``plain``: the formula written out, ``softmax(Q K^T / sqrt(d) + M) V``, which forms the (n, n) weights;

for n from 512 to 16k, head widths 64 and 128, causal and not, and prints each time and each
peak memory as a ratio to SDPA's (below 1: faster or smaller than SDPA), in one table.

Targets (CUDA, bfloat16, n >= 4096 only): the Triton forward within 1.5x of SDPA's time and the
Triton forward plus backward within 2x. On a CPU the table is reported without targets.

Timing: :func:`attnbook.lab.bench.time_interleaved` (warm-up, then interleaved rounds; the median of
each). Memory: :func:`attnbook.lab.memory.peak_memory_bytes` of one untimed call (bytes allocated
beyond the inputs; for forward plus backward, the gradients included). A case whose plain path
would need more than ``--max-plain-gib`` for its (n, n) matrices, whose PyTorch tiles would
loop over more than ``--max-tiles`` tiles, or that runs out of memory, is left out for that path
and shows ``-``. On a CPU the Triton column's memory counts the tensors torch allocates (O, L, D,
the gradients), not the numpy arrays of the interpreter's tiles, which torch's profiler does not see.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..core.masks import causal_mask
from ..kernels.flash_attention import FlashAttention
from ..kernels.flash_triton import FlashAttentionTriton, triton_available, triton_interpreted
from .bench import plain_attention, time_interleaved
from .device import default_device
from .memory import peak_memory_bytes

TARGET_FORWARD = 1.5  # Triton forward / SDPA forward, CUDA, bfloat16, n >= 4096
TARGET_FORWARD_BACKWARD = 2.0  # Triton forward+backward / SDPA forward+backward
TARGET_MIN_N = 4096
IMPLEMENTATIONS = ("sdpa", "triton", "tiles", "plain")

FULL_N = [512, 1024, 2048, 4096, 8192, 16384]
CPU_N = [256, 512, 1024]  # the CPU default: the interpreter and the Python tiles grow too slow beyond
QUICK_N = [40]  # ragged: 40 is not a multiple of the block of 16
FULL_D = [64, 128]
QUICK_D = [16]


@dataclass
class Row:
    """One line of the table: one case and pass, each implementation's median seconds and peak bytes."""

    n: int
    d: int
    causal: bool
    dtype: str
    pass_: str  # "fwd" or "fwd+bwd"
    seconds: dict[str, float | None] = field(default_factory=dict)
    peak: dict[str, float | None] = field(default_factory=dict)
    target: float | None = None

    def ratio(self, name: str) -> float | None:
        if self.seconds.get(name) is None or not self.seconds.get("sdpa"):
            return None
        return self.seconds[name] / self.seconds["sdpa"]

    def memory_ratio(self, name: str) -> float | None:
        if self.peak.get(name) is None or not self.peak.get("sdpa"):
            return None
        return self.peak[name] / self.peak["sdpa"]

    @property
    def verdict(self) -> str:
        if self.target is None or self.ratio("triton") is None:
            return "-"
        return "ok" if self.ratio("triton") <= self.target else "MISS"


def _plain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """:func:`attnbook.lab.bench.plain_attention` with the causal mask or none and scale 1/sqrt(d), its output only."""
    mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device) if is_causal else None  # (n, m) or None
    return plain_attention(q, k, v, mask, 1 / math.sqrt(q.shape[-1]))[0]  # (..., n, d)


def _sdpa(device: torch.device, dtype: torch.dtype) -> tuple[Callable, str]:
    """SDPA with the flash backend where PyTorch has it for this device and dtype, and the backend's name."""
    if device.type == "cuda" and dtype in (torch.float16, torch.bfloat16):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def flash(q, k, v, is_causal):
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

        return flash, "flash backend"
    return (lambda q, k, v, is_causal: F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)), "default backend"


def case_rows(
    batch: int,
    heads: int,
    n: int,
    d: int,
    causal: bool,
    dtype: torch.dtype,
    device: torch.device,
    *,
    implementations: tuple[str, ...],
    min_rounds: int,
    budget_s: float,
    memory: bool,
    max_plain_bytes: float,
    max_tiles: int,
    block: int,
) -> list[Row]:
    """The two rows (forward, forward+backward) of one case (batch, heads, n, d)."""
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v, dO = (torch.randn(batch, heads, n, d, generator=g, device=device, dtype=dtype) for _ in range(4))
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    sdpa, _ = _sdpa(device, dtype)
    attend = {
        "sdpa": sdpa,
        "triton": lambda q, k, v, c: FlashAttentionTriton.apply(q, k, v, c, block, block),
        "tiles": lambda q, k, v, c: FlashAttention.apply(q, k, v, c, block, block),
        "plain": _plain,
    }
    skip = set()
    if 4 * batch * heads * n * n * q.element_size() > max_plain_bytes:  # scores, weights and their gradients
        skip.add("plain")
    if math.ceil(n / block) ** 2 > max_tiles:  # Python iterations of the tile loops (the batch is vectorised)
        skip.add("tiles")
    names = [name for name in implementations if name not in skip]

    def forward(name):
        def run():
            with torch.no_grad():
                return attend[name](q, k, v, causal)

        return run

    def forward_backward(name):
        def run():
            O = attend[name](*leaves, causal)
            return torch.autograd.grad(O, leaves, dO)

        return run

    target_ok = device.type == "cuda" and dtype == torch.bfloat16 and n >= TARGET_MIN_N
    rows = []
    for pass_, make, target in (
        ("fwd", forward, TARGET_FORWARD),
        ("fwd+bwd", forward_backward, TARGET_FORWARD_BACKWARD),
    ):
        fns = {}
        for name in names:  # a path that runs out of memory on this case is left out of it ('-')
            try:
                make(name)()
                fns[name] = make(name)
            except torch.OutOfMemoryError:
                print(f"note: {name} ran out of memory at n={n}, d={d}, {pass_}; left out", file=sys.stderr)
            finally:
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        samples = time_interleaved(fns, device, min_rounds=min_rounds, budget_s=budget_s)
        seconds = {name: statistics.median(samples[name]) if name in samples else None for name in implementations}
        peak = {name: None for name in implementations}
        if memory:
            peak.update({name: peak_memory_bytes(fn, device) / 2**20 for name, fn in fns.items()})
        rows.append(
            Row(n, d, causal, str(dtype).replace("torch.", ""), pass_, seconds, peak, target if target_ok else None)
        )
    return rows


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_table(rows: list[Row], implementations: tuple[str, ...] = IMPLEMENTATIONS) -> str:
    """The rows as a fixed-width text table: SDPA's time and memory, the others as ratios to SDPA's."""
    others = [name for name in implementations if name != "sdpa"]
    header = (
        "n",
        "d",
        "mask",
        "dtype",
        "pass",
        "sdpa ms",
        *(f"{name}/sdpa" for name in others),
        "target",
        "",
        "sdpa MiB",
        *(f"{name} mem/sdpa" for name in others),
    )
    lines = [
        (
            str(r.n),
            str(r.d),
            "causal" if r.causal else "none",
            r.dtype,
            r.pass_,
            _fmt(r.seconds.get("sdpa") and r.seconds["sdpa"] * 1e3, ".2f"),
            *(_fmt(r.ratio(name), ".2f") for name in others),
            _fmt(r.target, ".1f"),
            r.verdict,
            _fmt(r.peak.get("sdpa"), ".1f"),
            *(_fmt(r.memory_ratio(name), ".2f") for name in others),
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *lines)]
    left = {2, 3, 4, 7 + len(others) - 1}

    def fmt(cells):
        return "  ".join(
            str(c).ljust(w) if i in left else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    return "\n".join([fmt(header), "-" * len(fmt(header)), *map(fmt, lines)])


def _parse_ints(text: str, name: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise SystemExit(f"{name}: expected comma-separated ints, got {text!r}") from None
    if any(x < 1 for x in values):
        raise SystemExit(f"{name}: every value must be >= 1, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook.lab.bench_flash", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few rounds: a smoke run")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: attnbook.default_device())")
    parser.add_argument(
        "--dtype", default=None, help="float32, float16 or bfloat16 (default: bfloat16 on CUDA, float32 on CPU)"
    )
    parser.add_argument("--n", default=None, help="comma-separated sequence lengths (default: 512,...,16384 on CUDA)")
    parser.add_argument("--d", default=None, help="comma-separated head widths (default: 64,128)")
    parser.add_argument("--batch", type=int, default=None, help="batch size (default: 1)")
    parser.add_argument("--heads", type=int, default=None, help="heads (default: 16 on CUDA, 2 on CPU, 1 quick)")
    parser.add_argument("--block", type=int, default=64, help="block rows of the Triton kernels and the tiles")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    parser.add_argument("--max-plain-gib", type=float, default=None, help="skip the plain path above this (GiB)")
    parser.add_argument("--max-tiles", type=int, default=20000, help="skip the PyTorch tiles above this many tiles")
    parser.add_argument("--check", action="store_true", help="exit with status 1 if a target is missed")
    parser.add_argument(
        "--json", default=None, help="also write the run (machine, versions, date, every row) to this JSON file"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads(N) for the run (default on CPU: 1, see below)"
    )
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        raise SystemExit(f"--threads must be >= 1, got {args.threads}")
    threads = torch.get_num_threads()
    try:
        return _run(args)
    finally:
        torch.set_num_threads(threads)  # as it was: main() may run inside another process (a test)


def _run(args: argparse.Namespace) -> int:

    device = torch.device(args.device) if args.device else default_device()
    if device.type not in ("cpu", "cuda"):
        raise SystemExit(f"--device: the benchmark runs on cpu or cuda, got {device}")
    cuda = device.type == "cuda"
    dtype = getattr(torch, args.dtype, None) if args.dtype else (torch.bfloat16 if cuda else torch.float32)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise SystemExit(f"--dtype: {args.dtype!r} is not a floating-point torch dtype")
    ns = _parse_ints(args.n, "--n") if args.n else QUICK_N if args.quick else FULL_N if cuda else CPU_N
    ds = _parse_ints(args.d, "--d") if args.d else QUICK_D if args.quick else FULL_D
    batch = args.batch or 1
    heads = args.heads or (1 if args.quick else 2 if not cuda else 16)
    block = 16 if args.quick else args.block
    memory = not args.no_memory
    max_plain = (args.max_plain_gib if args.max_plain_gib is not None else (40.0 if cuda else 4.0)) * 2**30
    implementations = IMPLEMENTATIONS if triton_available() else tuple(x for x in IMPLEMENTATIONS if x != "triton")
    timing = {"min_rounds": 3 if args.quick else 5, "budget_s": 0.1 if args.quick else 2.0}

    # On a CPU the interpreter (numpy) and torch's thread pool take turns; with several torch threads the
    # first torch call after an interpreted kernel can be far slower on a busy machine (compare the
    # sdpa column of --quick with --threads 2 and without), so the CPU run uses one torch thread
    # unless told otherwise.
    if args.threads is not None or not cuda:
        torch.set_num_threads(args.threads or 1)
    _, backend = _sdpa(device, dtype)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    if "triton" in implementations:
        mode = "interpreted (TRITON_INTERPRET=1)" if triton_interpreted() else "compiled"
        triton_note = f"triton kernels {mode}"
    else:
        triton_note = 'triton not installed: pip install triton (or "attnbook[test]"); its column is left out'
    print(
        f"attnbook.lab.bench_flash on {name}: torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{str(dtype).replace('torch.', '')}, batch {batch}, heads {heads}, block {block}, SDPA {backend}, "
        f"{triton_note}{', quick' if args.quick else ''}"
    )
    print(
        "times: median over interleaved rounds after warm-up; x/sdpa = that path's time / SDPA's (below 1: faster); "
        "mem/sdpa = peak bytes allocated beyond the inputs / SDPA's; '-' = left out (too large for that path, or out of memory)"
    )
    if not cuda:
        print("CPU: no targets (the Triton column times Triton's interpreter, not a compiled kernel)")
    sys.stdout.flush()

    started = time.perf_counter()
    rows: list[Row] = []
    for d in ds:
        for n in ns:
            for causal in (False, True):
                print(f"  n={n} d={d} {'causal' if causal else 'full'} ...", file=sys.stderr, flush=True)
                rows += case_rows(
                    batch,
                    heads,
                    n,
                    d,
                    causal,
                    dtype,
                    device,
                    implementations=implementations,
                    memory=memory,
                    max_plain_bytes=max_plain,
                    max_tiles=args.max_tiles,
                    block=block,
                    **timing,
                )
    print()
    print(format_table(rows, implementations))
    targeted = [r for r in rows if r.target is not None]
    missed = [r for r in targeted if r.verdict == "MISS"]
    print()
    if targeted:
        print(
            f"targets met: {len(targeted) - len(missed)} of {len(targeted)} (Triton forward <= {TARGET_FORWARD}x "
            f"SDPA, forward+backward <= {TARGET_FORWARD_BACKWARD}x, bfloat16, n >= {TARGET_MIN_N})"
        )
    else:
        print(f"no targets in this run (they apply on CUDA in bfloat16 at n >= {TARGET_MIN_N})")
    print(f"benchmark took {time.perf_counter() - started:.0f} s")
    if args.json:
        record = {
            "device": name,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "triton": _triton_version(),
            "triton_mode": triton_note,
            "dtype": str(dtype).replace("torch.", ""),
            "batch": batch,
            "heads": heads,
            "block": block,
            "sdpa_backend": backend,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "rows": [dataclasses.asdict(row) for row in rows],
            "targets_met": len(targeted) - len(missed),
            "targets": len(targeted),
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
    return 1 if args.check and missed else 0


def _triton_version() -> str | None:
    """The installed triton's version, or None (read without importing triton)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("triton")
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
