"""additive_scores (Bahdanau) and general_scores (Luong) against explicit loops (chapter 4)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import additive_scores, attention_scores, general_scores

from ..conftest import tolerances

F64 = torch.float64
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def randn(g: torch.Generator, *shape: int, device, dtype=F64) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=F64).to(device=device, dtype=dtype)


def additive_loop(Q, K, W_q, W_k, w_v):
    """e[i][j] = sum_a w_v[a] tanh(sum_b W_q[a][b] q_i[b] + sum_c W_k[a][c] k_j[c]), with loops."""
    h, d_q, d_k = W_q.shape[0], W_q.shape[1], W_k.shape[1]
    e = torch.zeros(Q.shape[0], K.shape[0], dtype=F64)
    for i in range(Q.shape[0]):
        for j in range(K.shape[0]):
            total = 0.0
            for a in range(h):
                pre = sum(float(W_q[a, b]) * float(Q[i, b]) for b in range(d_q))
                pre += sum(float(W_k[a, c]) * float(K[j, c]) for c in range(d_k))
                total += float(w_v[a]) * math.tanh(pre)
            e[i, j] = total
    return e


def general_loop(Q, K, W):
    """e[i][j] = sum_b sum_c q_i[b] W[b][c] k_j[c], with loops."""
    e = torch.zeros(Q.shape[0], K.shape[0], dtype=F64)
    for i in range(Q.shape[0]):
        for j in range(K.shape[0]):
            e[i, j] = sum(
                float(Q[i, b]) * float(W[b, c]) * float(K[j, c]) for b in range(W.shape[0]) for c in range(W.shape[1])
            )
    return e


@PROPERTY
@given(
    n=st.integers(1, 5),
    m=st.integers(1, 5),
    d_q=st.integers(1, 4),
    d_k=st.integers(1, 4),
    h=st.integers(1, 5),
    seed=st.integers(0, 10**6),
)
def test_additive_scores_match_loops(device, n, m, d_q, d_k, h, seed):
    g = torch.Generator().manual_seed(seed)
    Q, K = randn(g, n, d_q, device=device), randn(g, m, d_k, device=device)
    W_q, W_k, w_v = randn(g, h, d_q, device=device), randn(g, h, d_k, device=device), randn(g, h, device=device)
    e = additive_scores(Q, K, W_q, W_k, w_v)
    assert e.shape == (n, m) and e.device.type == device.type
    assert_close(e.cpu(), additive_loop(Q.cpu(), K.cpu(), W_q.cpu(), W_k.cpu(), w_v.cpu()))


@PROPERTY
@given(
    n=st.integers(1, 5), m=st.integers(1, 5), d_q=st.integers(1, 4), d_k=st.integers(1, 4), seed=st.integers(0, 10**6)
)
def test_general_scores_match_loops(device, n, m, d_q, d_k, seed):
    g = torch.Generator().manual_seed(seed)
    Q, K, W = randn(g, n, d_q, device=device), randn(g, m, d_k, device=device), randn(g, d_q, d_k, device=device)
    e = general_scores(Q, K, W)
    assert e.shape == (n, m) and e.device.type == device.type
    assert_close(e.cpu(), general_loop(Q.cpu(), K.cpu(), W.cpu()))


def test_batch_dimensions(device, dtype):
    g = torch.Generator().manual_seed(1)
    Q, K = randn(g, 2, 3, 4, 5, device=device, dtype=dtype), randn(g, 2, 1, 6, 3, device=device, dtype=dtype)
    W_q, W_k, w_v = (
        randn(g, 7, 5, device=device, dtype=dtype),
        randn(g, 7, 3, device=device, dtype=dtype),
        randn(g, 7, device=device, dtype=dtype),
    )
    W = randn(g, 5, 3, device=device, dtype=dtype)
    e_add, e_gen = additive_scores(Q, K, W_q, W_k, w_v), general_scores(Q, K, W)
    assert e_add.shape == e_gen.shape == (2, 3, 4, 6)
    for b in range(2):
        for c in range(3):
            assert_close(e_add[b, c], additive_scores(Q[b, c], K[b, 0], W_q, W_k, w_v), **tolerances(dtype))
            assert_close(e_gen[b, c], general_scores(Q[b, c], K[b, 0], W), **tolerances(dtype))


def test_general_with_scaled_identity_is_scaled_dot_product(device, dtype):
    g = torch.Generator().manual_seed(2)
    Q, K = randn(g, 4, 6, device=device, dtype=dtype), randn(g, 5, 6, device=device, dtype=dtype)
    eye = torch.eye(6, dtype=dtype, device=device)
    assert_close(general_scores(Q, K, eye), Q @ K.T, **tolerances(dtype))
    assert_close(general_scores(Q, K, eye / math.sqrt(6)), attention_scores(Q, K), **tolerances(dtype))
    # W and its transpose differ: the order q^T W k matters
    W = randn(g, 6, 6, device=device, dtype=dtype)
    assert not torch.allclose(general_scores(Q, K, W), general_scores(Q, K, W.T))


def test_additive_needs_the_pairwise_broadcast(device):
    # pairing q_i with k_i only (no broadcast) gives a different, n-by-h array, not n-by-m scores
    g = torch.Generator().manual_seed(3)
    Q, K = randn(g, 4, 3, device=device), randn(g, 4, 3, device=device)
    W_q, W_k, w_v = randn(g, 5, 3, device=device), randn(g, 5, 3, device=device), randn(g, 5, device=device)
    e = additive_scores(Q, K, W_q, W_k, w_v)
    paired = torch.tanh(Q @ W_q.T + K @ W_k.T) @ w_v  # (4,): only the diagonal pairs (i, i)
    assert_close(e.diagonal(), paired)
    assert not torch.allclose(e, torch.diag(paired))


def test_additive_bad_shapes():
    Q, K = torch.zeros(3, 4), torch.zeros(5, 2)
    W_q, W_k, w_v = torch.zeros(6, 4), torch.zeros(6, 2), torch.zeros(6)
    with pytest.raises(
        ValueError,
        match=r"query \(\.\.\., n, d_q\) and W_q \(h, d_q\) must share d_q, got query \(3, 4\) and W_q \(6, 3\)",
    ):
        additive_scores(Q, K, torch.zeros(6, 3), W_k, w_v)
    with pytest.raises(ValueError, match=r"key \(\.\.\., m, d_k\) and W_k \(h, d_k\) must share d_k"):
        additive_scores(Q, K, W_q, torch.zeros(6, 4), w_v)
    with pytest.raises(ValueError, match="hidden width h"):
        additive_scores(Q, K, W_q, W_k, torch.zeros(5))
    with pytest.raises(ValueError, match="hidden width h"):
        additive_scores(Q, K, W_q, torch.zeros(7, 2), w_v)
    with pytest.raises(ValueError, match=r"w_v must have exactly 1"):
        additive_scores(Q, K, W_q, W_k, torch.zeros(6, 1))
    with pytest.raises(ValueError, match="query must have at least 2"):
        additive_scores(torch.zeros(4), K, W_q, W_k, w_v)
    with pytest.raises(ValueError, match="batch dimensions do not broadcast"):
        additive_scores(torch.zeros(2, 3, 4), torch.zeros(3, 5, 2), W_q, W_k, w_v)
    with pytest.raises(TypeError, match="one dtype"):
        additive_scores(Q, K, W_q, W_k, w_v.double())
    with pytest.raises(TypeError, match="floating-point"):
        additive_scores(Q.long(), K, W_q, W_k, w_v)


def test_general_bad_shapes():
    Q, K = torch.zeros(3, 4), torch.zeros(5, 2)
    with pytest.raises(ValueError, match=r"and W \(d_q, d_k\) must share d_q, got query \(3, 4\) and W \(2, 4\)"):
        general_scores(Q, K, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="W must have exactly 2"):
        general_scores(Q, K, torch.zeros(4))
    with pytest.raises(TypeError, match="one dtype"):
        general_scores(Q, K, torch.zeros(4, 2, dtype=F64))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        general_scores(Q, K, [[1.0, 0.0]] * 4)
