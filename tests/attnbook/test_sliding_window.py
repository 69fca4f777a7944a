"""Sliding-window and block-sparse keep-masks (chapter 9): the definitions written with loops, how
they combine with causal and padding masks, the entries they keep, the block layout, attention on
the band only, and PyTorch's ``flex_attention`` block masks where it runs."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close
from torch.utils.flop_counter import FlopCounterMode

from attnbook import (
    attention,
    block_layout,
    block_sparse_mask,
    causal_mask,
    padding_mask,
    sliding_window_attention,
    sliding_window_mask,
)

from ..conftest import tolerances
from ..paths import BOOK  # noqa: E402

F64 = torch.float64
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def qkv(batch, n, d_k, d_v, *, dtype=F64, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(*batch, n, d, generator=g, dtype=F64).to(device=device, dtype=dtype) for d in (d_k, d_k, d_v)
    )


def window_by_loops(n, m, w, causal, offset):
    return [[(0 <= i + offset - j < w) if causal else (abs(i + offset - j) < w) for j in range(m)] for i in range(n)]


@PROPERTY
@given(
    n=st.integers(0, 12),
    m=st.integers(0, 12),
    w=st.integers(1, 14),
    causal=st.booleans(),
    align=st.sampled_from(["upper_left", "lower_right"]),
)
def test_matches_the_definition_written_with_loops(device, n, m, w, causal, align):
    mask = sliding_window_mask(n, w, m, causal=causal, align=align, device=device)
    offset = 0 if align == "upper_left" else m - n
    assert mask.dtype == torch.bool and mask.shape == (n, m) and mask.device.type == device.type
    assert mask.cpu().tolist() == window_by_loops(n, m, w, causal, offset)


@PROPERTY
@given(n=st.integers(1, 20), w=st.integers(1, 25))
def test_composes_with_the_causal_mask_and_counts(device, n, w):
    causal = causal_mask(n, device=device)
    window = sliding_window_mask(n, w, device=device)
    assert torch.equal(sliding_window_mask(n, w, causal=False, device=device) & causal, window)
    assert torch.equal(window & causal, window)  # the causal window is inside the causal mask
    assert (window.sum(-1).cpu() == torch.clamp(torch.arange(1, n + 1), max=w)).all()  # min(i + 1, w) keys
    kept = int(window.sum())
    assert kept == sum(min(i + 1, w) for i in range(n))
    if n >= w:
        assert kept == n * w - w * (w - 1) // 2
    if w >= n:
        assert torch.equal(window, causal)
    assert torch.equal(sliding_window_mask(n, 1, device=device), torch.eye(n, dtype=torch.bool, device=device))
    both_sides = sliding_window_mask(n, w, causal=False, device=device)
    assert torch.equal(both_sides, both_sides.T)


def test_lower_right_is_the_last_rows_of_the_full_mask(device):
    full = sliding_window_mask(20, 6, device=device)
    for c in (1, 4, 20):
        assert torch.equal(sliding_window_mask(c, 6, 20, align="lower_right", device=device), full[20 - c :])


@pytest.mark.parametrize("causal", [True, False])
def test_attention_sees_only_the_window(device, dtype, causal):
    """Each query's output is attention over its own window of keys, sliced out by hand."""
    n, w = 11, 4
    q, k, v = qkv((2,), n, 3, 5, dtype=dtype, device=device, seed=1)
    out, weights = attention(q, k, v, mask=sliding_window_mask(n, w, causal=causal, device=device))
    for i in range(n):
        lo, hi = max(0, i - w + 1), (i + 1 if causal else min(n, i + w))
        expected, _ = attention(q[:, i : i + 1], k[:, lo:hi], v[:, lo:hi])
        assert_close(out[:, i : i + 1], expected, **tolerances(dtype))
        assert (weights[:, i, :lo] == 0).all() and (weights[:, i, hi:] == 0).all()


def test_composes_with_padding(device):
    n, w = 9, 3
    q, k, v = qkv((2,), n, 4, 4, device=device, seed=2)
    lengths = [9, 5]
    keep = (
        sliding_window_mask(n, w, device=device) & padding_mask(lengths, n, device=device)[:, None, :]
    )  # (batch, n, m)
    out, _ = attention(q, k, v, mask=keep)
    short, _ = attention(q[1:, :5], k[1:, :5], v[1:, :5], mask=sliding_window_mask(5, w, device=device))
    assert_close(out[1:, :5], short)  # the real tokens of the short sequence never see the padding
    assert_close(out[0], attention(q[0], k[0], v[0], mask=sliding_window_mask(n, w, device=device))[0])


@PROPERTY
@given(
    n_q=st.integers(1, 5),
    n_k=st.integers(1, 5),
    block=st.integers(1, 4),
    cut_n=st.integers(0, 3),
    cut_m=st.integers(0, 3),
    seed=st.integers(0, 10**6),
)
def test_block_sparse_mask_and_layout(device, n_q, n_k, block, cut_n, cut_m, seed):
    g = torch.Generator().manual_seed(seed)
    layout = (torch.rand(n_q, n_k, generator=g) > 0.5).to(device)
    n, m = n_q * block - min(cut_n, block - 1), n_k * block - min(cut_m, block - 1)
    mask = block_sparse_mask(layout, block, n, m)
    assert mask.shape == (n, m) and mask.dtype == torch.bool
    assert mask.cpu().tolist() == [[bool(layout[i // block, j // block]) for j in range(m)] for i in range(n)]
    assert torch.equal(block_layout(mask, block), layout)  # every block holds at least one entry
    keep = torch.rand(n, m, generator=g).to(device) > 0.7  # any mask
    blocks = block_layout(keep, block)
    by_loops = [
        [bool(keep[a * block : (a + 1) * block, b * block : (b + 1) * block].any()) for b in range(n_k)]
        for a in range(n_q)
    ]
    assert blocks.cpu().tolist() == by_loops
    assert torch.equal(block_sparse_mask(blocks, block, n, m) & keep, keep)  # the kept blocks cover the mask


def test_block_layout_of_a_window_is_a_band(device):
    n, w, block = 64, 16, 16
    blocks = block_layout(sliding_window_mask(n, w, device=device), block)
    expected = (
        torch.eye(4, dtype=torch.bool, device=device) | torch.eye(4, dtype=torch.bool, device=device).roll(-1, 1).tril()
    )
    assert torch.equal(blocks, expected)  # the diagonal block and the one to its left
    assert int(blocks.sum()) == 7 < 10  # against the 4 * 5 / 2 blocks of the causal mask


@pytest.mark.parametrize(
    "n,w,block_size", [(1, 1, None), (10, 3, None), (37, 8, None), (37, 8, 5), (16, 40, 7), (9, 1, 2)]
)
def test_sliding_window_attention_equals_masked_attention(device, dtype, n, w, block_size):
    q, k, v = qkv((2, 3), n, 4, 6, dtype=dtype, device=device, seed=3)
    expected, _ = attention(q, k, v, mask=sliding_window_mask(n, w, device=device))
    out = sliding_window_attention(q, k, v, w, block_size=block_size)
    assert out.shape == expected.shape and out.dtype == dtype
    assert_close(out, expected, **tolerances(dtype))
    assert_close(
        sliding_window_attention(q, k, v, w, scale=0.5),
        attention(q, k, v, mask=sliding_window_mask(n, w, device=device), scale=0.5)[0],
        **tolerances(dtype),
    )


def test_sliding_window_attention_does_band_work_only():
    n, w, d = 256, 16, 8
    q, k, v = qkv((), n, d, d, seed=4)

    def flops(fn):
        with FlopCounterMode(display=False) as counter:
            fn()
        return counter.get_total_flops()

    band = flops(lambda: sliding_window_attention(q, k, v, w))
    blocks = [(min(s + w, n) - s, min(s + w, n) - max(0, s - w + 1)) for s in range(0, n, w)]  # (B, B + w - 1)
    assert band == sum(2 * rows * cols * (d + d) for rows, cols in blocks)
    assert band < 2.1 * 2 * n * w * (d + d) < 2 * n * n * (d + d) / 3


def test_errors():
    with pytest.raises(ValueError, match="window"):
        sliding_window_mask(4, 0)
    with pytest.raises(TypeError, match="window"):
        sliding_window_mask(4, 2.0)
    with pytest.raises(ValueError, match="align"):
        sliding_window_mask(4, 2, align="center")
    with pytest.raises(TypeError, match="boolean"):
        block_sparse_mask(torch.ones(2, 2), 2)
    with pytest.raises(ValueError, match="blocks"):
        block_sparse_mask(torch.ones(2, 2, dtype=torch.bool), 2, n=5)
    with pytest.raises(TypeError, match="boolean"):
        block_layout(torch.ones(4, 4), 2)
    q, k, v = qkv((), 5, 3, 3)
    with pytest.raises(ValueError, match="n"):
        sliding_window_attention(q, k[:4], v[:4], 2)
    with pytest.raises(ValueError, match="window"):
        sliding_window_attention(q, k, v, 0)


def test_flex_attention_block_mask(device):
    """PyTorch's flex_attention with the same window as a mask_mod: the same blocks, the same output.

    Without torch.compile flex_attention runs an unfused reference implementation (on any device);
    the first call imports torch._dynamo, which takes a few seconds.
    """
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as error:  # torch < 2.5
        pytest.skip(f"flex_attention is not available: {error}")
    n, w, block = 256, 40, 64

    def window_mod(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx >= 0) & (q_idx - kv_idx < w)

    q, k, v = qkv((1, 2), n, 16, 16, device=device, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        try:
            blocks = create_block_mask(window_mod, None, None, n, n, device=device, BLOCK_SIZE=block)
            out = flex_attention(q, k, v, block_mask=blocks)
        except Exception as error:  # a backend that cannot run it here
            pytest.skip(f"flex_attention does not run on {device}: {type(error).__name__}: {error}")
    keep = sliding_window_mask(n, w, device=device)
    assert torch.equal(blocks.to_dense()[0, 0].bool(), block_layout(keep, block))
    assert blocks.sparsity() == pytest.approx(100 * (1 - int(block_layout(keep, block).sum()) / (n // block) ** 2))
    assert_close(out, attention(q, k, v, mask=keep)[0], atol=1e-10, rtol=1e-10)
    assert_close(out, sliding_window_attention(q, k, v, w), atol=1e-10, rtol=1e-10)
    assert math.isclose(int(keep.sum()), n * w - w * (w - 1) // 2)


def flex_snippet() -> str:
    """The ``flex_attention`` code block of chapter 9, as the reader sees it."""

    text = (BOOK / "09_modern_attention.md").read_text(encoding="utf-8")
    blocks = [block.split("```", 1)[0] for block in text.split("```{code-block} python\n")[1:]]
    (snippet,) = [block for block in blocks if "create_block_mask" in block]
    return snippet


def test_chapter_flex_attention_snippet_runs(device, monkeypatch):
    """The chapter's snippet runs on the device it names (without one, ``create_block_mask`` builds its
    blocks on CUDA in early PyTorch versions) and gives the masked attention. Compiling takes more than ten
    seconds on a CPU, so ``torch.compile`` is replaced by the identity here: flex_attention then runs
    its unfused reference."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    snippet = flex_snippet()
    assert "device=device" in snippet
    n, w = 256, 40
    q, k, v = qkv((1, 2), n, 16, 16, device=device, seed=6)  # (batch, heads, n, d_head)
    monkeypatch.setattr(torch, "compile", lambda fn, *args, **kwargs: fn)
    namespace = {"torch": torch, "device": device, "n": n, "w": w, "q": q, "k": k, "v": v}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        try:
            exec(compile(snippet, "chapter 9, flex_attention snippet", "exec"), namespace)
        except Exception as error:  # a backend that cannot run it here
            if device.type == "cpu":
                raise
            pytest.skip(f"flex_attention does not run on {device}: {type(error).__name__}: {error}")
    assert_close(namespace["out"], attention(q, k, v, mask=sliding_window_mask(n, w, device=device))[0])
