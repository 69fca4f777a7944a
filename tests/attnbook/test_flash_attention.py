"""FlashAttention-2 in PyTorch tiles (chapter 11): values, L and all three gradients against autograd of
the plain formula, gradcheck, the saved tensors, causal tile skipping in both passes, dtypes, errors."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close
from torch.utils.flop_counter import FlopCounterMode

import attnbook
from attnbook.kernels.attention_backward import attention_scores_masked, log_sum_exp
from attnbook.kernels.flash_attention import (
    FlashAttention,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    flash_attention_tiles,
)

EXACT = {"atol": 1e-10, "rtol": 1e-10}


def skip_without_float64(device):
    if device.type == "mps":
        pytest.skip("MPS has no float64")


def draw(shape, g, device, dtype=torch.float64):
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)


def inputs(batch, n, m, d_k, d_v, device, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        draw((*batch, n, d_k), g, device, dtype),
        draw((*batch, m, d_k), g, device, dtype),
        draw((*batch, m, d_v), g, device, dtype),
    )
    return q, k, v, draw((*batch, n, d_v), g, device, dtype)


def plain(q, k, v, dO, is_causal):
    """O and (dq, dk, dv) by autograd of attnbook.attention with the causal keep-mask."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    mask = attnbook.causal_mask(q.shape[-2], k.shape[-2], device=q.device) if is_causal else None
    O, _ = attnbook.attention(q, k, v, mask=mask)
    return O.detach(), torch.autograd.grad(O, (q, k, v), dO)


CASES = [  # (batch dims, n, m, d_k, d_v), (block_q, block_k)
    (((2,), 37, 37, 8, 8), (16, 16)),  # (batch, n, d), n not a multiple of the block
    (((2,), 37, 37, 8, 8), (7, 13)),  # blocks that divide nothing
    (((2, 3), 32, 32, 6, 4), (16, 16)),  # (batch, heads, n, d), n a multiple of the block
    (((2, 3), 32, 32, 6, 4), (64, 64)),  # one block holds everything
    (((1, 2), 20, 45, 5, 7), (16, 8)),  # n < m
    (((1, 2), 20, 45, 5, 7), (8, 16)),
    (((2, 2), 50, 23, 4, 4), (16, 8)),  # n > m
    (((2, 2), 50, 23, 4, 4), (13, 7)),
    (((1,), 1, 9, 3, 3), (16, 4)),  # one query
    (((1,), 9, 1, 3, 3), (4, 16)),  # one key
]


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case, blocks", CASES, ids=lambda c: str(c))
def test_forward_and_backward_equal_the_plain_formula(device, case, blocks, is_causal):
    skip_without_float64(device)
    batch, n, m, d_k, d_v = case
    block_q, block_k = blocks
    q, k, v, dO = inputs(batch, n, m, d_k, d_v, device, seed=n + 100 * m)
    O_ref, grads_ref = plain(q, k, v, dO, is_causal)
    O, L = flash_attention_forward(q, k, v, is_causal, block_q=block_q, block_k=block_k)
    assert O.shape == O_ref.shape and L.shape == (*batch, n)
    assert_close(O, O_ref, **EXACT)
    assert_close(L, log_sum_exp(attention_scores_masked(q, k, is_causal)), **EXACT)
    grads = flash_attention_backward(q, k, v, O, L, dO, is_causal, block_q=block_q, block_k=block_k)
    for got, want in zip(grads, grads_ref):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert_close(got, want, **EXACT)


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_autograd_function_equals_the_plain_formula(device, is_causal):
    skip_without_float64(device)
    q, k, v, dO = inputs((2, 2), 45, 30, 8, 6, device, seed=7)
    O_ref, grads_ref = plain(q, k, v, dO, is_causal)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    O = FlashAttention.apply(*leaves, is_causal)  # the default blocks of 64
    assert_close(O, O_ref, **EXACT)
    O.backward(dO)
    for leaf, want in zip(leaves, grads_ref):
        assert_close(leaf.grad, want, **EXACT)
    leaves2 = [x.clone().requires_grad_() for x in (q, k, v)]
    O2 = flash_attention(*leaves2, is_causal, block_q=16, block_k=8)
    assert_close(O2, O_ref, **EXACT)
    assert_close(torch.autograd.grad(O2, leaves2, dO)[1], grads_ref[1], **EXACT)


def test_non_contiguous_inputs(device):
    """(batch, n, heads, d) transposed to (batch, heads, n, d): views with other strides."""
    skip_without_float64(device)
    q, k, v, dO = (x.transpose(1, 2) for x in inputs((2, 3), 21, 19, 4, 4, device, seed=3))  # (2, 21|19, 3, 4)
    q, k, v, dO = (x.transpose(1, 2) for x in (q.contiguous(), k.contiguous(), v.contiguous(), dO.contiguous()))
    assert not q.is_contiguous()
    O_ref, grads_ref = plain(q, k, v, dO, True)
    O, L = flash_attention_forward(q, k, v, True, block_q=8, block_k=8)
    assert_close(O, O_ref, **EXACT)
    for got, want in zip(flash_attention_backward(q, k, v, O, L, dO, True, block_q=8, block_k=8), grads_ref):
        assert_close(got, want, **EXACT)


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_gradcheck(device, is_causal):
    skip_without_float64(device)
    q, k, v, _ = inputs((1, 2), 5, 7, 3, 2, device, seed=11)
    leaves = tuple(x.requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: FlashAttention.apply(q, k, v, is_causal, 2, 3), leaves)


def test_saves_exactly_q_k_v_O_and_L(device):
    skip_without_float64(device)
    q, k, v, _ = inputs((2, 3), 10, 12, 4, 5, device, seed=5)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    O = FlashAttention.apply(q, k, v, True)
    saved = O.grad_fn.saved_tensors
    assert len(saved) == 5
    for got, want in zip(saved[:3], (q, k, v)):  # the inputs themselves, not copies
        assert got.data_ptr() == want.data_ptr() and got.shape == want.shape
    assert_close(saved[3], O.detach(), rtol=0, atol=0)
    assert saved[4].shape == (2, 3, 10)  # L: n numbers per head, not (n, m)
    assert_close(saved[4], log_sum_exp(attention_scores_masked(q.detach(), k.detach(), True)), **EXACT)


def test_visited_tiles_are_those_with_a_visible_entry():
    """Both passes visit the same tiles: each tile with a visible (query, key) pair, no other."""
    for n, m, block_q, block_k in [(64, 64, 16, 16), (37, 50, 16, 8), (50, 23, 7, 13), (5, 40, 16, 4)]:
        keep = attnbook.causal_mask(n, m)
        needed = {
            (i0, j0)
            for i0 in range(0, n, block_q)
            for j0 in range(0, m, block_k)
            if bool(keep[i0 : i0 + block_q, j0 : j0 + block_k].any())
        }
        for pass_ in ("forward", "backward"):
            tiles = flash_attention_tiles(n, m, block_q=block_q, block_k=block_k, is_causal=True, pass_=pass_)
            visited = [(t.queries.start, t.keys.start) for t in tiles]
            assert len(visited) == len(set(visited)) and set(visited) == needed
            for t in tiles:  # "full" tiles have no hidden entry, "diagonal" ones have one
                assert (t.kind == "full") == bool(keep[t.queries, t.keys].all())
        full = flash_attention_tiles(n, m, block_q=block_q, block_k=block_k)
        assert len(full) == -(-n // block_q) * -(-m // block_k)
    forward = flash_attention_tiles(64, 64, block_q=16, block_k=16, is_causal=True)
    backward = flash_attention_tiles(64, 64, block_q=16, block_k=16, is_causal=True, pass_="backward")
    assert len(forward) == 4 * 5 // 2  # T (T + 1) / 2 of the T^2 = 16 tiles
    assert [t.queries.start for t in forward[:2]] == [0, 16]  # query blocks outside
    assert [t.keys.start for t in backward[:5]] == [0, 0, 0, 0, 16]  # key blocks outside


def tile_flops(tiles, batch, d_k, d_v, pass_):
    """Matmul flops of the tiles: forward S, P V; backward S, P^T dO, dO V^T, dS K, dS^T Q."""
    per_entry = (d_k + d_v) if pass_ == "forward" else (3 * d_k + 2 * d_v)
    rows = sum((t.queries.stop - t.queries.start) * (t.keys.stop - t.keys.start) for t in tiles)
    return 2 * batch * rows * per_entry


@pytest.mark.parametrize("n, m", [(64, 64), (40, 70), (70, 40)])
def test_causal_tiles_are_skipped_in_both_passes(n, m):
    """The matmul flops each pass performs are exactly those of the tiles it lists: causal skipping happens."""
    q, k, v, dO = inputs((2,), n, m, 8, 4, "cpu", seed=1)
    for is_causal in (False, True):
        fwd = flash_attention_tiles(n, m, block_q=16, block_k=16, is_causal=is_causal)
        bwd = flash_attention_tiles(n, m, block_q=16, block_k=16, is_causal=is_causal, pass_="backward")
        with FlopCounterMode(display=False) as counter:
            O, L = flash_attention_forward(q, k, v, is_causal, block_q=16, block_k=16)
        assert counter.get_total_flops() == tile_flops(fwd, 2, 8, 4, "forward")
        with FlopCounterMode(display=False) as counter:
            flash_attention_backward(q, k, v, O, L, dO, is_causal, block_q=16, block_k=16)
        assert counter.get_total_flops() == tile_flops(bwd, 2, 8, 4, "backward")
    full = flash_attention_tiles(64, 64, block_q=16, block_k=16, pass_="backward")
    causal = flash_attention_tiles(64, 64, block_q=16, block_k=16, is_causal=True, pass_="backward")
    assert tile_flops(causal, 1, 8, 4, "backward") * 16 == tile_flops(full, 1, 8, 4, "backward") * 10


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_lower_precision_accumulates_in_float32(device, dtype):
    if device.type == "mps" and dtype == torch.bfloat16:
        pytest.skip("bfloat16 on MPS varies by macOS version")
    q, k, v, dO = inputs((2, 2), 40, 33, 16, 16, device, dtype=dtype, seed=2)
    wide = [x.to(torch.float32 if device.type == "mps" else torch.float64) for x in (q, k, v, dO)]
    O_ref, grads_ref = plain(*wide, True)
    O, L = flash_attention_forward(q, k, v, True, block_q=16, block_k=16)
    assert O.dtype == dtype and L.dtype == torch.float32
    tol = {"atol": 2e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    assert_close(O.to(O_ref.dtype), O_ref, **tol)
    grads = flash_attention_backward(q, k, v, O, L, dO, True, block_q=16, block_k=16)
    for got, want in zip(grads, grads_ref):
        assert got.dtype == dtype
        assert_close(got.to(want.dtype), want, **tol)


def test_no_queries_gives_empty_outputs(device):
    q, k, v, dO = inputs((2,), 0, 5, 3, 3, device, dtype=torch.float32)
    O, L = flash_attention_forward(q, k, v, True)
    assert O.shape == (2, 0, 3) and L.shape == (2, 0)
    dq, dk, dv = flash_attention_backward(q, k, v, O, L, dO, True)
    assert dq.shape == (2, 0, 3) and bool((dk == 0).all()) and bool((dv == 0).all())


def test_no_keys_is_refused():
    q, k, v = torch.zeros(2, 4, 3), torch.zeros(2, 0, 3), torch.zeros(2, 0, 3)
    with pytest.raises(ValueError, match="at least one key"):
        flash_attention_forward(q, k, v)
    with pytest.raises(ValueError, match="at least one key"):
        flash_attention(q, k, v, True)


def test_no_row_is_fully_masked_when_n_exceeds_m():
    """Upper-left alignment: query i sees key 0, so L is finite for every query (here n = 9 > m = 2)."""
    q, k, v, _ = inputs((1,), 9, 2, 3, 3, "cpu", seed=4)
    O, L = flash_attention_forward(q, k, v, True, block_q=4, block_k=1)
    assert bool(L.isfinite().all()) and bool(O.isfinite().all())
    assert_close(O[0, 0], v[0, 0], **EXACT)  # query 0 sees key 0 alone


def test_errors():
    q, k, v = torch.zeros(2, 4, 3), torch.zeros(2, 5, 3), torch.zeros(2, 5, 2)
    with pytest.raises(ValueError, match="d_k"):
        flash_attention_forward(q, torch.zeros(2, 5, 4), v)
    with pytest.raises(ValueError, match=r"\bm\b"):
        flash_attention_forward(q, k, torch.zeros(2, 6, 2))
    with pytest.raises(ValueError, match="same batch dimensions"):
        flash_attention_forward(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        flash_attention_forward(torch.zeros(3), k, v)
    with pytest.raises(TypeError, match="dtype"):
        flash_attention_forward(q.double(), k, v)
    with pytest.raises(TypeError, match="floating"):
        flash_attention_forward(q.int(), k.int(), v.int())
    with pytest.raises(ValueError, match="one device"):
        flash_attention_forward(q, k.to("meta"), v)
    with pytest.raises(TypeError, match="is_causal"):
        flash_attention_forward(q, k, v, "yes")
    with pytest.raises(ValueError, match="block_q"):
        flash_attention_forward(q, k, v, block_q=0)
    with pytest.raises(TypeError, match="block_k"):
        flash_attention_forward(q, k, v, block_k=2.0)
    O, L = flash_attention_forward(q, k, v)
    with pytest.raises(ValueError, match="L"):
        flash_attention_backward(q, k, v, O, L[:, :3], torch.zeros_like(O))
    with pytest.raises(ValueError, match="dO"):
        flash_attention_backward(q, k, v, O, L, torch.zeros(2, 4, 3))
    with pytest.raises(ValueError, match="pass_"):
        flash_attention_tiles(4, 4, pass_="sideways")
    with pytest.raises(ValueError, match="delta"):
        flash_attention_backward(q, k, v, O, L, torch.zeros_like(O), delta=L[:, :3])
    with pytest.raises(TypeError, match="delta"):
        flash_attention_backward(q, k, v, O, L, torch.zeros_like(O), delta=[0.0] * 4)


def test_delta_given_is_used_in_place_of_rowsum_dO_O(device):
    """delta=D computed elsewhere: the same gradients as D from O when it is that D; dV never depends on it."""
    skip_without_float64(device)
    q, k, v, dO = inputs((2,), 9, 11, 4, 3, device, seed=7)
    O, L = flash_attention_forward(q, k, v, True, block_q=4, block_k=4)
    D = (dO * O).sum(dim=-1)  # (2, 9)
    default = flash_attention_backward(q, k, v, O, L, dO, True, block_q=4, block_k=4)
    given = flash_attention_backward(q, k, v, O, L, dO, True, block_q=4, block_k=4, delta=D)
    for a, b in zip(default, given):
        assert torch.equal(a, b)
    moved = flash_attention_backward(q, k, v, O, L, dO, True, block_q=4, block_k=4, delta=D + 1.0)
    assert torch.equal(moved[2], default[2])  # dV = P^T dO does not use D
    assert not torch.allclose(moved[0], default[0]) and not torch.allclose(moved[1], default[1])
