"""The FlashAttention benchmark (chapter 11): the quick run prints its table, and the table's ratios and
verdicts follow from the times (no time is asserted)."""

from __future__ import annotations

import torch

from attnbook.kernels import bench_flash
from attnbook.kernels.bench_flash import IMPLEMENTATIONS, Row, format_table


def table_lines(text: str) -> tuple[list[str], list[list[str]]]:
    """The header cells and the rows' cells of the printed table."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["n", "d"])
    assert set(lines[start + 1]) == {"-"}
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        rows.append(line.split())
    return lines[start].split(), rows


def test_quick_run_prints_the_table(capsys):
    threads = torch.get_num_threads()
    assert bench_flash.main(["--quick", "--device", "cpu"]) == 0
    assert torch.get_num_threads() == threads  # the run gives the thread count back
    out = capsys.readouterr().out
    _, rows = table_lines(out)
    others = [name for name in IMPLEMENTATIONS if name != "sdpa"]
    if not bench_flash.triton_available():
        others.remove("triton")
    # one row per (n, d, mask, pass): the quick sizes, causal and not, forward and forward+backward
    assert len(rows) == len(bench_flash.QUICK_N) * len(bench_flash.QUICK_D) * 2 * 2
    assert {(r[2], r[4]) for r in rows} == {(mask, p) for mask in ("none", "causal") for p in ("fwd", "fwd+bwd")}
    for cells in rows:
        assert len(cells) == 5 + 1 + len(others) + 2 + 1 + len(others)
        assert int(cells[0]) in bench_flash.QUICK_N and int(cells[1]) in bench_flash.QUICK_D
        times = [float(x) for x in cells[5 : 6 + len(others)]]  # sdpa ms and each ratio to it
        assert all(t > 0 for t in times)
        assert cells[6 + len(others) : 8 + len(others)] == ["-", "-"]  # no target on a CPU
        memory = [float(x) for x in cells[8 + len(others) :]]
        assert all(x >= 0 for x in memory)
    assert "no targets in this run" in out


def test_ratios_and_verdicts():
    seconds = {"sdpa": 0.010, "triton": 0.012, "tiles": 0.5, "plain": None}
    peak = {"sdpa": 4.0, "triton": 2.0, "tiles": 3.0, "plain": None}
    ok = Row(4096, 64, True, "bfloat16", "fwd", seconds, peak, target=1.5)
    miss = Row(4096, 64, True, "bfloat16", "fwd+bwd", {**seconds, "triton": 0.025}, peak, target=2.0)
    free = Row(512, 64, False, "float32", "fwd", seconds, peak)
    assert abs(ok.ratio("triton") - 1.2) < 1e-12 and ok.verdict == "ok"
    assert abs(miss.ratio("triton") - 2.5) < 1e-12 and miss.verdict == "MISS"
    assert free.verdict == "-" and ok.ratio("plain") is None and ok.memory_ratio("triton") == 0.5
    header, rows = table_lines(format_table([ok, miss, free]))
    assert header[:6] == ["n", "d", "mask", "dtype", "pass", "sdpa"]
    assert rows[0][5:9] == ["10.00", "1.20", "50.00", "-"] and rows[0][9:11] == ["1.5", "ok"]
    assert rows[1][6] == "2.50" and rows[1][10] == "MISS"
    assert rows[2][9:11] == ["-", "-"] and rows[2][11:] == ["4.0", "0.50", "0.75", "-"]
