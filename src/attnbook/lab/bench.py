"""Benchmark: attnbook against PyTorch's own kernels, on the current device (issue 7, chapter 8).

Run ``python -m attnbook.lab.bench`` (or ``make bench``); ``--quick`` runs a small smoke version.
One run times, on one device, for several (batch, heads, n, d_head), with and without a causal
mask, and prints a table of ratios (ours / reference; below 1 is faster). Targets are set only
where a user feels the ratio, on the paths meant to be fast:

* ``attention(need_weights=False)`` / ``scaled_dot_product_attention`` with the same mask
  (target 1.1x: the fused path costs no more than calling the kernel directly);
* ``MultiHeadAttention`` / ``torch.nn.MultiheadAttention`` with the same weights, self-attention,
  no weights returned (target 1.2x).

Reported without a target:

* ``attention`` with weights / a plain matmul-softmax-matmul in torch, which also returns the
  weights: the explicit path is the formula written out, a reference to read, not a fast path
  (its softmax also turns fully masked rows into zeros, where the plain one gives nan);
* ``tiled_attention`` / each of those two: it is written in Python, one tile at a time, to
  save memory, not time.

Timing: every function of a case runs once or twice to warm up, then the functions run in
interleaved rounds (each round calls each once, in rotating order, so that a burst of load from
other processes hits them alike). The table shows the median over rounds of each, their ratio,
and, as a check on noise, the ratio of the fastest rounds (``min ratio``): on a machine shared
with other work, a ratio that misses its target while the min ratio meets it was disturbed by
that work. Everything runs under ``torch.no_grad()``. On CUDA each call is bracketed by
``torch.cuda.synchronize()``.

Memory: the peak bytes allocated by each call beyond its inputs, from :mod:`attnbook.lab.memory`
(``torch.cuda.max_memory_allocated`` on CUDA, the allocator's events recorded by
``torch.profiler`` on CPU), measured in a separate, untimed call.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.attention import attention
from ..core.masks import causal_mask, keep_to_block
from ..efficient.tiled_attention import tiled_attention
from .device import default_device
from .memory import peak_memory_bytes

TARGET_FAST = 1.1  # attention(need_weights=False) / scaled_dot_product_attention
TARGET_MHA = 1.2  # MultiHeadAttention / nn.MultiheadAttention

# (batch, heads, n, d_head)
FULL_SHAPES = [(8, 8, 128, 64), (4, 8, 512, 64), (2, 8, 1024, 64), (1, 4, 4096, 64)]
QUICK_SHAPES = [(2, 4, 64, 32), (1, 2, 256, 32)]
CUDA_EXTRA_SHAPES = [(8, 16, 4096, 64)]
# (batch, n, embed_dim, heads)
FULL_MHA_SHAPES = [(8, 128, 512, 8), (2, 1024, 512, 8), (1, 4096, 256, 4)]
QUICK_MHA_SHAPES = [(2, 64, 64, 4)]


# S = Q K^T * scale;  A = softmax(mask(S));  O = A V   -- the reference, in plain torch
def plain_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with weights written the obvious way in torch: matmul, softmax, matmul.

    Its fully masked rows are nan (``torch.softmax`` of a row of ``-inf``), which is why
    :func:`attnbook.attention` has to do a little more; the benchmark has none.
    """
    scores = query @ key.transpose(-2, -1) * scale  # (..., n, d_k) @ (..., d_k, m) -> (..., n, m)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.softmax(scores, dim=-1)  # (..., n, m)
    return weights @ value, weights  # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)


@dataclass
class Row:
    """One line of the table: ``ours`` compared with ``reference`` on one case."""

    case: str
    mask: str
    dtype: str
    comparison: str
    ours_ms: float
    ref_ms: float
    target: float | None
    min_ratio: float
    ours_mib: float | None
    ref_mib: float | None

    @property
    def ratio(self) -> float:
        return self.ours_ms / self.ref_ms

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "-"
        return "ok" if self.ratio <= self.target else "MISS"


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(
    fns: dict[str, Callable[[], object]], device: torch.device, *, min_rounds: int, budget_s: float
) -> dict[str, list[float]]:
    """Seconds per call of each function in each of the interleaved rounds after a warm-up."""
    names = list(fns)
    start = time.perf_counter()
    for name in names:  # warm-up: first-call allocations, kernel selection
        fns[name]()
        _synchronize(device)
    per_round = time.perf_counter() - start
    rounds = max(min_rounds, min(60, int(budget_s / max(per_round, 1e-9))))
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            _synchronize(device)
            t0 = time.perf_counter()
            fns[name]()
            _synchronize(device)
            samples[name].append(time.perf_counter() - t0)
    return samples


def _row(
    comparison: str,
    ours: list[float],
    ref: list[float],
    target: float | None,
    ours_mib: float | None,
    ref_mib: float | None,
    **common: str,
) -> Row:
    return Row(
        comparison=comparison,
        ours_ms=statistics.median(ours) * 1e3,
        ref_ms=statistics.median(ref) * 1e3,
        target=target,
        min_ratio=min(ours) / min(ref),
        ours_mib=ours_mib,
        ref_mib=ref_mib,
        **common,
    )


def _peaks(fns: dict[str, Callable[[], object]], device: torch.device, enabled: bool) -> dict[str, float | None]:
    if not enabled:
        return {name: None for name in fns}
    return {name: peak_memory_bytes(fn, device) / 2**20 for name, fn in fns.items()}


def attention_rows(
    shape: tuple[int, int, int, int],
    causal: bool,
    dtype: torch.dtype,
    device: torch.device,
    *,
    min_rounds: int,
    budget_s: float,
    memory: bool,
) -> list[Row]:
    """The attention rows of one case (batch, heads, n, d_head)."""
    batch, heads, n, d_head = shape
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(batch, heads, n, d_head, generator=g, device=device, dtype=dtype) for _ in range(3))
    mask = causal_mask(n, device=device) if causal else None  # (n, n) keep-mask
    scale = 1.0 / math.sqrt(d_head)
    fns = {
        "fast": lambda: attention(q, k, v, mask=mask, need_weights=False),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        "weights": lambda: attention(q, k, v, mask=mask),
        "plain": lambda: plain_attention(q, k, v, mask, scale),
        "tiled": lambda: tiled_attention(q, k, v, causal=causal),
    }
    times = time_interleaved(fns, device, min_rounds=min_rounds, budget_s=budget_s)
    peaks = _peaks(fns, device, memory)
    common = {"case": str(shape), "mask": "causal" if causal else "none", "dtype": str(dtype).replace("torch.", "")}

    def row(comparison, ours, ref, target):
        return _row(comparison, times[ours], times[ref], target, peaks[ours], peaks[ref], **common)

    return [
        row("attention(need_weights=False) / SDPA", "fast", "sdpa", TARGET_FAST),
        row("attention(need_weights=True) / plain torch", "weights", "plain", None),
        row("tiled_attention / SDPA", "tiled", "sdpa", None),
        row("tiled_attention / plain torch", "tiled", "plain", None),
    ]


def mha_rows(
    shape: tuple[int, int, int, int],
    causal: bool,
    dtype: torch.dtype,
    device: torch.device,
    *,
    min_rounds: int,
    budget_s: float,
    memory: bool,
    module: type,
) -> list[Row]:
    """The multi-head rows of one case (batch, n, embed_dim, heads): self-attention, no weights."""
    batch, n, embed_dim, heads = shape
    torch.manual_seed(0)
    reference = torch.nn.MultiheadAttention(embed_dim, heads, batch_first=True, device=device, dtype=dtype).eval()
    ours = module.from_torch(reference).eval()
    g = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(batch, n, embed_dim, generator=g, device=device, dtype=dtype)
    keep = causal_mask(n, device=device) if causal else None  # (n, n), True = may attend
    block = None if keep is None else keep_to_block(keep)  # torch's meaning: True = blocked
    fns = {
        "ours": lambda: ours(x, x, x, mask=keep, need_weights=False),
        "torch": lambda: reference(x, x, x, attn_mask=block, need_weights=False),
    }
    times = time_interleaved(fns, device, min_rounds=min_rounds, budget_s=budget_s)
    peaks = _peaks(fns, device, memory)
    return [
        _row(
            "MultiHeadAttention / nn.MultiheadAttention",
            times["ours"],
            times["torch"],
            TARGET_MHA,
            peaks["ours"],
            peaks["torch"],
            case=f"MHA {shape}",
            mask="causal" if causal else "none",
            dtype=str(dtype).replace("torch.", ""),
        )
    ]


def _mib(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def format_table(rows: list[Row]) -> str:
    """The rows as a fixed-width text table."""
    header = (
        "case",
        "mask",
        "dtype",
        "comparison (ours / reference)",
        "ours ms",
        "ref ms",
        "ratio",
        "target",
        "",
        "min ratio",
        "peak MiB ours",
        "ref",
    )
    lines = [
        (
            r.case,
            r.mask,
            r.dtype,
            r.comparison,
            f"{r.ours_ms:.2f}",
            f"{r.ref_ms:.2f}",
            f"{r.ratio:.2f}",
            "-" if r.target is None else f"{r.target:.1f}",
            r.verdict,
            f"{r.min_ratio:.2f}",
            _mib(r.ours_mib),
            _mib(r.ref_mib),
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *lines)]
    right = {4, 5, 6, 7, 9, 10, 11}

    def fmt(cells):
        return "  ".join(
            str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    rule = "-" * len(fmt(header))
    return "\n".join([fmt(header), rule, *map(fmt, lines)])


def parse_dtypes(text: str | None, device: torch.device) -> list[torch.dtype]:
    if text is None:
        return [torch.float32, torch.bfloat16, torch.float16] if device.type == "cuda" else [torch.float32]
    out = []
    for name in text.split(","):
        dtype = getattr(torch, name.strip(), None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise SystemExit(f"--dtypes: {name.strip()!r} is not a floating-point torch dtype")
        out.append(dtype)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnbook.lab.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes and few rounds: a smoke run")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: attnbook.default_device())")
    parser.add_argument(
        "--dtypes",
        default=None,
        help="comma-separated, e.g. float32,bfloat16 (default: float32 on CPU; float32,bfloat16,float16 on CUDA)",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    parser.add_argument("--check", action="store_true", help="exit with status 1 if a target is missed")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads(N) first (CPU)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)

    device = torch.device(args.device) if args.device else default_device()
    dtypes = parse_dtypes(args.dtypes, device)
    memory = not args.no_memory and device.type in ("cpu", "cuda")
    shapes = QUICK_SHAPES if args.quick else FULL_SHAPES + (CUDA_EXTRA_SHAPES if device.type == "cuda" else [])
    mha_shapes = QUICK_MHA_SHAPES if args.quick else FULL_MHA_SHAPES
    timing = {"min_rounds": 3 if args.quick else 7, "budget_s": 0.2 if args.quick else 2.5, "memory": memory}

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    print(
        f"attnbook.lab.bench on {name}: torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"dtypes {', '.join(str(d).replace('torch.', '') for d in dtypes)}{', quick' if args.quick else ''}"
    )
    print(
        "times: median ms per call over interleaved rounds after warm-up, under torch.no_grad(); "
        "ratio = ours / reference (of the medians); min ratio = the same of the fastest rounds"
    )
    if memory:
        how = "torch.cuda.max_memory_allocated" if device.type == "cuda" else "allocator events of torch.profiler"
        print(f"peak MiB: bytes allocated by the call beyond its inputs ({how}), one untimed call")
    sys.stdout.flush()

    try:
        from ..heads.multi_head import MultiHeadAttention
    except ImportError as error:
        MultiHeadAttention = None
        print(f"note: skipping the MultiHeadAttention rows, attnbook.MultiHeadAttention does not import ({error})")

    started = time.perf_counter()
    rows: list[Row] = []
    with torch.no_grad():
        for dtype in dtypes:
            for shape in shapes:
                for causal in (False, True):
                    rows += attention_rows(shape, causal, dtype, device, **timing)
            if MultiHeadAttention is not None:
                for shape in mha_shapes:
                    for causal in (False, True):
                        rows += mha_rows(shape, causal, dtype, device, module=MultiHeadAttention, **timing)
    print()
    print(format_table(rows))
    targeted = [r for r in rows if r.target is not None]
    missed = [r for r in targeted if r.verdict == "MISS"]
    print()
    print(
        f"targets met: {len(targeted) - len(missed)} of {len(targeted)} "
        f"(attention without weights <= {TARGET_FAST}x SDPA, MultiHeadAttention <= {TARGET_MHA}x "
        f"nn.MultiheadAttention; the other rows are reported without a target); "
        f"benchmark took {time.perf_counter() - started:.0f} s"
    )
    for r in missed:
        print(f"  missed: {r.case} {r.mask} {r.dtype} {r.comparison}: {r.ratio:.2f} > {r.target}")
    if args.quick:
        print(
            "quick run: calls of well under a millisecond, where Python overhead and other processes' load "
            "dominate; the targets are meant for the full run"
        )
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
