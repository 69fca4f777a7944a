"""The FlashAttention benchmark (chapter 11): the quick run prints its table, and the table's ratios and
verdicts follow from the times (no time is asserted)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

from attnbook.lab import bench_flash
from attnbook.lab.bench_flash import IMPLEMENTATIONS, Row, format_table
from tests.paths import ROOT

CHECK_GPU = ROOT / "tools" / "check_gpu.py"


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


def test_quick_run_prints_the_table(capsys, tmp_path):
    threads = torch.get_num_threads()
    record_path = tmp_path / "run.json"
    assert bench_flash.main(["--quick", "--device", "cpu", "--json", str(record_path)]) == 0
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
    record = json.loads(record_path.read_text(encoding="utf-8"))  # --json: the same rows, with the machine
    assert record["device"] == "cpu" and record["torch"] == torch.__version__ and record["targets"] == 0
    assert len(record["rows"]) == len(rows)
    for saved, cells in zip(record["rows"], rows):
        assert (str(saved["n"]), str(saved["d"]), saved["pass_"]) == (cells[0], cells[1], cells[4])
        assert f"{saved['seconds']['sdpa'] * 1e3:.2f}" == cells[5]


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


@pytest.fixture(scope="module")
def check_gpu():
    """tools/check_gpu.py (make check-gpu), loaded as a module."""
    spec = importlib.util.spec_from_file_location("check_gpu", CHECK_GPU)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks the module up while it is built
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_check_gpu_dry_run_lists_the_steps():
    out = subprocess.run([sys.executable, str(CHECK_GPU), "--dry-run"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.lstrip()[:3] in ("1. ", "2. ", "3. ", "4. ")]
    assert len(lines) == 4
    assert "-k cuda" in lines[0] and "tests/attnbook/test_flash_triton.py" in lines[0]
    assert "tests/attnbook/test_thresholds.py" not in lines[0]  # no device tests (and it needs nbformat)
    assert "--run-chapter book/08_efficient_attention.md" in lines[1]
    assert "--run-chapter book/11_attention_as_a_kernel.md" in lines[2]
    assert "attnbook.lab.bench_flash --check" in lines[3] and "--json" in lines[3]
    caps = [int(line.split("at most ")[1].split(" s")[0]) for line in lines]
    assert sum(caps) <= 8 * 60  # the device window


def test_check_gpu_without_a_gpu_says_so_and_fails():
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: check-gpu would run")
    out = subprocess.run([sys.executable, str(CHECK_GPU)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "no CUDA GPU on this machine" in out.stderr and "nothing was run" in out.stderr


def test_check_gpu_reads_the_code_cells_of_a_chapter(check_gpu):
    text = "\n".join([
        "# A chapter", "", "```{code-cell} ipython3", "x = 1", "```", "", "Prose with ```inline``` fences.", "",
        "```{code-cell} ipython3", "---", "mystnb:", "  figure:", "    caption: a figure", "---", "y = x + 1", "```",
        "```{code-cell} ipython3", ":tags: [hide-output]", "", "z = y * 2", "print(z)", "```",
        "```python", "not_a_cell = 1", "```",
    ])  # fmt: skip
    cells = check_gpu.chapter_cells(text)
    assert cells == ["x = 1", "y = x + 1", "\nz = y * 2\nprint(z)"]
    namespace = {}
    for cell in cells:
        exec(cell, namespace)
    assert namespace["z"] == 4
    chapter = (ROOT / "book" / "11_attention_as_a_kernel.md").read_text(encoding="utf-8")
    assert len(check_gpu.chapter_cells(chapter)) == chapter.count("```{code-cell}")
    assert all("mystnb:" not in cell for cell in check_gpu.chapter_cells(chapter))


def test_check_gpu_table_from_the_benchmark_record(check_gpu):
    def row(n, d, causal, pass_, triton_s, triton_mib):
        seconds = {"sdpa": 0.010, "triton": triton_s, "tiles": None, "plain": None}
        return {"n": n, "d": d, "causal": causal, "dtype": "bfloat16", "pass_": pass_, "seconds": seconds,
                "peak": {"sdpa": 100.0, "triton": triton_mib, "tiles": None, "plain": None}, "target": None}  # fmt: skip

    record = {
        "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cuda": "13.0", "triton": "3.6.0",
        "dtype": "bfloat16", "batch": 1, "heads": 16, "block": 64, "sdpa_backend": "flash backend",
        "date": "2026-11-27", "targets_met": 3, "targets": 4,
        "rows": [row(4096, 64, False, "fwd", 0.012, 50.0), row(4096, 64, False, "fwd+bwd", 0.025, 80.0),
                 row(4096, 64, True, "fwd", 0.011, 50.0)],
    }  # fmt: skip
    table = check_gpu.chapter_table(record).splitlines()
    assert "NVIDIA H100 80GB HBM3" in table[0] and "Triton 3.6.0" in table[0] and "2026-11-27" in table[0]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table[4:]]
    assert [c[2:5] for c in cells] == [["4096", "64", "no"], ["4096", "64", "yes"], ["16384", "128", "yes"]]
    assert cells[0][5:] == ["1.20", "2.50", "0.80"]  # fwd, fwd+bwd time ratios, fwd+bwd memory ratio
    assert cells[1][5:] == ["1.10", "-", "-"] and cells[2][5:] == ["-", "-", "-"]  # not in the run: '-'
