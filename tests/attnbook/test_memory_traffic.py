"""Bytes moved, counted op by op (chapter 9): the size of what a tensor addresses, element-wise ops,
views and in-place ops, matrix products, and one decoding step of grouped-query attention computed
three ways; the errors."""

from __future__ import annotations

import pytest
import torch

from attnbook import attention, grouped_query_attention
from attnbook.lab.memory_traffic import ByteCounter, bytes_moved, tensor_bytes


def test_tensor_bytes_counts_a_broadcast_axis_once():
    x = torch.zeros(3, 4, dtype=torch.float64)
    assert tensor_bytes(x) == 3 * 4 * 8
    assert tensor_bytes(x.T) == 3 * 4 * 8  # a transpose addresses the same elements
    assert tensor_bytes(x.expand(5, 3, 4)) == 3 * 4 * 8  # stride 0 along the new axis
    assert tensor_bytes(x[:, :1].expand(3, 7)) == 3 * 8
    assert tensor_bytes(torch.zeros(0, 4)) == 0
    assert tensor_bytes(torch.zeros(2, dtype=torch.float16)) == 4


def test_element_wise_views_and_in_place(device):
    a, b = (torch.ones(64, 32, device=device) for _ in range(2))  # float32, 8 KiB each
    size = 64 * 32 * 4
    moved = bytes_moved(lambda: a + b)
    assert (moved.read, moved.written, moved.total) == (2 * size, size, 3 * size)
    assert [op.op for op in moved.ops] == ["add"]
    views = bytes_moved(lambda: (a.view(32, 64), a.T, a.unsqueeze(0).expand(3, 64, 32), a[::2]))
    assert views.total == 0 and views.ops == ()
    c = a.clone()
    in_place = bytes_moved(lambda: c.add_(b))  # the result aliases c but is written
    assert (in_place.read, in_place.written) == (2 * size, size)
    broadcast = bytes_moved(lambda: a + torch.ones(32, device=device).expand(64, 32))  # reads the row once
    assert broadcast.read >= size + 32 * 4 and broadcast.read <= size + 2 * 32 * 4 + size


def test_matrix_product(device):
    x, w = torch.ones(8, 16, 64, device=device), torch.ones(64, 32, device=device)
    moved = bytes_moved(lambda: x @ w)  # (8, 16, 64) @ (64, 32): one product of (128, 64) by (64, 32)
    assert moved.read == (8 * 16 * 64 + 64 * 32) * 4
    assert moved.written == 8 * 16 * 32 * 4  # the reshapes around the product move nothing


def test_counter_as_a_context_manager():
    a = torch.ones(10)
    with ByteCounter() as counter:
        a * 2
        a.exp()
    traffic = counter.traffic()
    assert [op.op for op in traffic.ops] == ["mul", "exp"]
    assert traffic.read == 2 * 40 and traffic.written == 2 * 40


@pytest.mark.parametrize("on_meta", [False, True])
def test_one_decoding_step_of_grouped_query_attention(on_meta):
    """Grouped: the cache once, plus what every way moves (query, scores, weights, output).
    Repeated: multi-head attention's bytes plus reading the cache and writing a g times larger copy."""
    h_q, h_kv, m, d = 8, 2, 256, 64
    g = h_q // h_kv
    device = "meta" if on_meta else "cpu"  # the meta device counts the same without computing
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, h_q, 1, d, generator=gen).to(device)  # (batch, H_q, 1, d_head)
    k, v = (torch.randn(1, h_kv, m, d, generator=gen).to(device) for _ in range(2))  # (batch, H_kv, m, d_head)
    k_full, v_full = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # (batch, H_q, m, d_head)
    cache = k.nbytes + v.nbytes
    grouped = bytes_moved(lambda: grouped_query_attention(q, k, v)).total
    repeated = bytes_moved(lambda: attention(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1))).total
    multi_head = bytes_moved(lambda: attention(q, k_full, v_full)).total
    rest = multi_head - g * cache
    assert 0 < rest < cache
    assert grouped - cache == rest
    assert repeated - multi_head == (1 + g) * cache
    assert grouped < multi_head < repeated


def test_errors():
    with pytest.raises(TypeError, match="callable"):
        bytes_moved(42)
    with pytest.raises(TypeError, match="torch.Tensor"):
        tensor_bytes([1, 2])
