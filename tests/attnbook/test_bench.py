"""The benchmark compares like with like, and its machinery produces a table (no timing is asserted)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from attnbook import attention, causal_mask
from attnbook.lab.bench import Row, attention_rows, format_table, parse_dtypes, plain_attention, time_interleaved

from ..conftest import tolerances


def test_plain_reference_computes_the_same_attention(device, dtype):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g, dtype=dtype).to(device) for _ in range(3))
    for mask in (None, causal_mask(6, device=device)):
        out, weights = plain_attention(q, k, v, mask, 1 / math.sqrt(4))
        expected, expected_weights = attention(q, k, v, mask=mask)
        assert_close(out, expected, **tolerances(dtype))
        assert_close(weights, expected_weights, **tolerances(dtype))


def test_time_interleaved_runs_every_function_in_every_round():
    calls = {"a": 0, "b": 0}

    def bump(name):
        calls[name] += 1

    samples = time_interleaved(
        {"a": lambda: bump("a"), "b": lambda: bump("b")}, torch.device("cpu"), min_rounds=4, budget_s=0.0
    )
    assert calls == {"a": 5, "b": 5}  # one warm-up call and four rounds
    assert all(len(s) == 4 and min(s) >= 0 for s in samples.values())


def test_attention_rows_and_table():
    with torch.no_grad():
        rows = attention_rows(
            (1, 2, 16, 8), True, torch.float32, torch.device("cpu"), min_rounds=1, budget_s=0.0, memory=True
        )
    assert [r.comparison for r in rows] == [
        "attention(need_weights=False) / SDPA",
        "attention(need_weights=True) / plain torch",
        "tiled_attention / SDPA",
        "tiled_attention / plain torch",
    ]
    assert all(r.ours_ms > 0 and r.ref_ms > 0 and r.mask == "causal" for r in rows)
    assert rows[1].ours_mib >= 2 * 16 * 16 * 4 / 2**20  # scores and weights of 2 heads, 16 x 16 floats each
    table = format_table(rows)
    assert table.count("\n") == 1 + len(rows) and "(1, 2, 16, 8)" in table


def test_verdict():
    row = Row(
        "c", "none", "float32", "x / y", ours_ms=1.2, ref_ms=1.0, target=1.1, min_ratio=1.0, ours_mib=None, ref_mib=None
    )
    assert math.isclose(row.ratio, 1.2) and row.verdict == "MISS"
    row.ours_ms = 1.05
    assert row.verdict == "ok"
    row.target = None
    assert row.verdict == "-"


def test_dtype_option():
    assert parse_dtypes("float32,bfloat16", torch.device("cpu")) == [torch.float32, torch.bfloat16]
    assert parse_dtypes(None, torch.device("cpu")) == [torch.float32]
    with pytest.raises(SystemExit, match="'int64' is not a floating-point torch dtype"):
        parse_dtypes("int64", torch.device("cpu"))
