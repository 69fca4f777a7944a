"""How arguments, calls and tensors are written in a failure message: arguments by dtype and
shape, a call on one line or one argument per line, small tensors as aligned matrices and larger
ones by their worst row or slice."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

#: tensors up to this many rows and columns (in their last two axes) print whole
MAX_ROWS = 8
MAX_COLS = 8
#: at most this many matrices of a batch print whole
MAX_SLICES = 4
#: a 1-D tensor (or one row) prints at most this many entries
MAX_ENTRIES = 12
#: a call whose one-line description is longer than this is written one argument per line
CALL_WIDTH = 100


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def describe(value: Any, *, depth: int = 0) -> str:
    """A short description of an argument or a result: a tensor by dtype and shape; a dict or a
    module's parameters by their names with shapes, nested at most two levels."""
    if isinstance(value, torch.Tensor):
        return f"tensor {_dtype_name(value.dtype)} {tuple(value.shape)}"
    if depth >= 2 and isinstance(value, (list, tuple, dict)):
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, (list, tuple)) and len(value) <= 8:
        inner = ", ".join(describe(v, depth=depth + 1) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        shown = [f"{k}: {describe(v, depth=depth + 1)}" for k, v in list(value.items())[:12]]
        more = f", ... {len(value) - 12} more" if len(value) > 12 else ""
        return "{" + ", ".join(shown) + more + "}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_call(name: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> str:
    """``name(arg, ..., key=value)`` with tensors described by dtype and shape; one argument per
    line when that is long."""
    parts = [describe(a) for a in args] + [f"{k}={describe(v)}" for k, v in (kwargs or {}).items()]
    line = f"{name}({', '.join(parts)})"
    if len(line) <= CALL_WIDTH:
        return line
    return f"{name}(\n" + "".join(f"      {part},\n" for part in parts) + "  )"


def _fmt(value: Any, kind: str) -> str:
    if kind == "bool":
        return "1" if value else "0"
    if kind == "int":
        return str(int(value))
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = f"{value:.4g}"
    return "0" if text == "-0" else text


def _kind(t: torch.Tensor) -> str:
    if t.dtype == torch.bool:
        return "bool"
    if t.is_floating_point() or t.is_complex():
        return "float"
    return "int"


def _window(length: int, center: int, size: int) -> range:
    if length <= size:
        return range(length)
    start = min(max(center - size // 2, 0), length - size)
    return range(start, start + size)


def _layout(shape: tuple[int, ...], focus: tuple[int, ...] | None) -> list[tuple[str, tuple[int, ...], range, range]]:
    """Which part of a tensor of ``shape`` to print: blocks of (label, leading index, rows, cols).

    Small tensors print whole; larger ones by the slice, row or window around ``focus`` (the index
    of the worst entry), each labelled with where it is.
    """
    ndim = len(shape)
    focus = tuple(focus) if focus is not None and len(focus) == ndim else (0,) * ndim
    if ndim == 1:
        cols = _window(shape[0], focus[0], MAX_ENTRIES)
        label = "" if len(cols) == shape[0] else f"entries {cols.start}..{cols.stop - 1} of {shape[0]}"
        return [(label, (), range(1), cols)]
    lead, (n_rows, n_cols) = shape[:-2], shape[-2:]
    n_slices = math.prod(lead)
    if n_rows <= MAX_ROWS and n_cols <= MAX_COLS:
        if n_slices <= MAX_SLICES:
            blocks = []
            for flat in range(n_slices):
                index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), lead)) if lead else ()
                label = f"[{', '.join(map(str, index))}, :, :]" if lead else ""
                blocks.append((label, index, range(n_rows), range(n_cols)))
            return blocks
        index = focus[:-2]
        return [
            (
                f"the matrix [{', '.join(map(str, index))}, :, :] (of {n_slices} in the batch)",
                index,
                range(n_rows),
                range(n_cols),
            )
        ]
    # a large matrix: the row of the focus (a window of its columns)
    index, row = focus[:-2], focus[-2]
    cols = _window(n_cols, focus[-1], MAX_ENTRIES)
    where = ", ".join(map(str, (*index, row)))
    part = ":" if len(cols) == n_cols else f"{cols.start}:{cols.stop}"
    return [
        (f"row [{where}, {part}] (of {n_rows} rows{' per matrix' if lead else ''})", index, range(row, row + 1), cols)
    ]


def _cells(t: torch.Tensor, block: tuple[str, tuple[int, ...], range, range]) -> list[list[str]]:
    _, index, rows, cols = block
    kind = _kind(t)
    if t.ndim == 1:
        return [[_fmt(t[c].item(), kind) for c in cols]]
    m = t[index] if index else t
    return [[_fmt(m[r, c].item(), kind) for c in cols] for r in rows]


def format_tensor(
    t: torch.Tensor,
    *,
    focus: tuple[int, ...] | None = None,
    marks: torch.Tensor | None = None,
    width: int | None = None,
    indent: str = "    ",
) -> str:
    """``t`` as aligned rows: masks as 1/0, floats with 4 significant digits.

    A tensor up to :data:`MAX_ROWS` x :data:`MAX_COLS` (and a batch of up to :data:`MAX_SLICES`
    such matrices) prints whole; a larger one by the matrix, row or window around ``focus``, with
    its index. Entries where ``marks`` (a boolean tensor of the same shape) is True get a ``*``.
    ``width``: the width of a column (default: the widest entry shown).
    """
    t = t.detach().to("cpu")
    if t.ndim == 0:
        return indent + _fmt(t.item(), _kind(t))
    if t.numel() == 0:
        return indent + f"(empty, shape {tuple(t.shape)})"
    blocks = _layout(tuple(t.shape), focus)
    cells = [_cells(t, b) for b in blocks]
    flags = [_cells(marks.to(torch.bool), b) if marks is not None and marks.shape == t.shape else None for b in blocks]
    if width is None:
        width = max(len(c) for block in cells for row in block for c in row)
    lines = []
    for block, rows, marked in zip(blocks, cells, flags):
        if block[0]:
            lines.append(f"{indent}{block[0]}:")
        for r, row in enumerate(rows):
            parts = [
                c.rjust(width) + ("*" if marked is not None and marked[r][i] == "1" else " ") for i, c in enumerate(row)
            ]
            lines.append(f"{indent}[{' '.join(parts).rstrip()}]")
    return "\n".join(lines)


def _show_pair(
    expected: torch.Tensor, got: torch.Tensor, focus: tuple[int, ...] | None, wrong: torch.Tensor | None = None
) -> str:
    """``expected`` and ``got`` printed the same way (same part, same column width)."""
    width = 0
    for t in (expected, got):
        if t.ndim and t.numel():
            blocks = _layout(tuple(t.shape), focus)
            width = max([width] + [len(c) for b in blocks for row in _cells(t.detach().cpu(), b) for c in row])
    return (
        f"  expected:\n{format_tensor(expected, focus=focus, width=width or None)}\n"
        f"  got{' (* = wrong)' if wrong is not None and bool(wrong.any()) else ''}:\n"
        f"{format_tensor(got, focus=focus, marks=wrong, width=width or None)}"
    )
