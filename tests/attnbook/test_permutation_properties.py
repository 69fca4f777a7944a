"""The permutation theorems of chapter 6, and the permutation helpers behind them.

softmax(A D B) = A softmax(D) B; Attention(AQ, BK, BV) = A Attention(Q, K, V) (query equivariance,
key-value invariance); multi-head self-attention is equivariant; a mask moves with the
permutation (A^T M B), so a causal mask breaks equivariance for every non-identity permutation;
positional encodings break it as well: f(AX + P) = A f(X + A^T P).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import attnbook
from attnbook import (
    attention,
    causal_mask,
    is_permutation_matrix,
    permutation_matrix,
    random_permutation,
    random_permutation_matrix,
    sinusoidal_encoding,
    softmax,
)

F64 = torch.float64
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def permutations(draw, n: int) -> list[int]:
    return draw(st.permutations(list(range(n))))


@st.composite
def nontrivial_permutations(draw, n: int) -> list[int]:
    perm = draw(st.permutations(list(range(n))))
    if perm == list(range(n)):
        perm = perm[1:] + perm[:1]  # a cyclic shift, never the identity for n >= 2
    return perm


def randn(seed: int, *shape: int, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64).to(device)


def P(perm, device) -> torch.Tensor:
    return permutation_matrix(perm, dtype=F64, device=device)


def self_attention(X, W_q, W_k, W_v, mask=None):
    """f(X) = Attention(X W_q, X W_k, X W_v), single head, no biases."""
    return attention(X @ W_q, X @ W_k, X @ W_v, mask=mask)[0]  # (n, d_model) @ (d_model, d) -> (n, d)


# ---------------------------------------------------------------- the helpers


@PROPERTY
@given(data=st.data(), n=st.integers(0, 8), seed=st.integers(0, 10**6))
def test_permutation_matrix_reorders_rows_and_columns(device, data, n, seed):
    perm = data.draw(permutations(n))
    A = P(perm, device)
    X, D = randn(seed, n, 3, device=device), randn(seed + 1, 2, n, device=device)
    idx = torch.tensor(perm, dtype=torch.long, device=device)
    assert torch.equal(A @ X, X[idx])  # row i of A X is row perm[i] of X
    assert torch.equal(D @ A.T, D[:, idx])  # D A^T reorders the columns the same way
    assert_close(A.T @ A, torch.eye(n, dtype=F64, device=device))  # orthogonal: A^T = A^{-1}
    assert is_permutation_matrix(A)


def test_random_permutation_matrix_is_seeded_and_valid(device):
    A1 = random_permutation_matrix(7, generator=torch.Generator().manual_seed(5), dtype=F64, device=device)
    A2 = random_permutation_matrix(7, generator=torch.Generator().manual_seed(5), dtype=F64, device=device)
    assert torch.equal(A1, A2) and is_permutation_matrix(A1)
    assert A1.dtype == F64 and A1.device.type == device.type
    perms = {tuple(random_permutation(4, generator=torch.Generator().manual_seed(s)).tolist()) for s in range(200)}
    assert len(perms) == 24  # all 4! orders occur


def test_is_permutation_matrix_rejects_non_permutations():
    assert not is_permutation_matrix(torch.ones(2, 2))
    assert not is_permutation_matrix(torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
    assert not is_permutation_matrix(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    assert not is_permutation_matrix(torch.eye(3)[:2])
    assert is_permutation_matrix(torch.eye(3)[[2, 0, 1]])


@pytest.mark.parametrize("perm", [[0, 0, 1], [1, 2, 3], [-1, 0]])
def test_permutation_matrix_rejects_non_permutations(perm):
    with pytest.raises(ValueError, match="exactly once"):
        permutation_matrix(torch.tensor(perm))


def test_permutation_matrix_rejects_bad_types():
    with pytest.raises(TypeError, match="1-D integer"):
        permutation_matrix(torch.tensor([0.0, 1.0]))
    with pytest.raises(TypeError, match="1-D integer"):
        permutation_matrix(torch.tensor([[0, 1], [1, 0]]))
    with pytest.raises(TypeError, match="list of ints"):
        permutation_matrix([0.0, 1.0])
    with pytest.raises(TypeError, match="n must be an int"):
        random_permutation(2.0)
    with pytest.raises(ValueError, match="n must be >= 0"):
        random_permutation(-1)


# ---------------------------------------------------------------- softmax(A D B) = A softmax(D) B


@PROPERTY
@given(
    data=st.data(),
    n=st.integers(1, 7),
    m=st.integers(1, 7),
    seed=st.integers(0, 10**6),
    beta=st.floats(0.0, 20.0),
    masked=st.booleans(),
)
def test_softmax_commutes_with_permutations(device, data, n, m, seed, beta, masked):
    A, B = P(data.draw(permutations(n)), device), P(data.draw(permutations(m)), device)
    D = 3 * randn(seed, n, m, device=device)
    if masked:  # -inf entries (masked scores) and fully masked rows obey the same identity
        g = torch.Generator().manual_seed(seed + 1)
        D = D.masked_fill((torch.rand(n, m, generator=g) < 0.4).to(device), -math.inf)
        ADB = D[torch.argmax(A, dim=1)][:, torch.argmax(B, dim=0)]  # A D B by indexing: 0 * inf is nan
    else:
        ADB = A @ D @ B
    assert_close(softmax(ADB, beta=beta), A @ softmax(D, beta=beta) @ B, atol=1e-12, rtol=1e-12)


# ---------------------------------------------------------------- attention


@PROPERTY
@given(
    data=st.data(),
    n=st.integers(1, 6),
    m=st.integers(1, 6),
    d_k=st.integers(1, 4),
    d_v=st.integers(1, 4),
    seed=st.integers(0, 10**6),
)
def test_query_equivariance_and_key_value_invariance(device, data, n, m, d_k, d_v, seed):
    A, B = P(data.draw(permutations(n)), device), P(data.draw(permutations(m)), device)
    Q, K, V = (
        randn(seed, n, d_k, device=device),
        randn(seed + 1, m, d_k, device=device),
        randn(seed + 2, m, d_v, device=device),
    )
    out, w = attention(Q, K, V)
    out_AB, w_AB = attention(A @ Q, B @ K, B @ V)
    assert_close(out_AB, A @ out)  # Attention(AQ, BK, BV) = A Attention(Q, K, V)
    assert_close(w_AB, A @ w @ B.T)  # the weights move with both
    assert_close(attention(A @ Q, K, V)[0], A @ out)  # equivariant in the queries
    assert_close(attention(Q, B @ K, B @ V)[0], out)  # invariant to reordering the pairs
    assert_close(attention(A @ Q, B @ K, B @ V, need_weights=False)[0], A @ out)  # also the fused path


@PROPERTY
@given(data=st.data(), n=st.integers(2, 6), d_model=st.integers(1, 5), d=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_self_attention_is_equivariant(device, data, n, d_model, d, seed):
    A = P(data.draw(permutations(n)), device)
    X = randn(seed, n, d_model, device=device)
    W_q, W_k, W_v = (randn(seed + s, d_model, d, device=device) for s in (1, 2, 3))
    assert_close(self_attention(A @ X, W_q, W_k, W_v), A @ self_attention(X, W_q, W_k, W_v))


@PROPERTY
@given(
    data=st.data(),
    batch=st.integers(1, 2),
    n=st.integers(1, 6),
    m=st.integers(1, 6),
    heads=st.sampled_from([1, 2, 4]),
    head_dim=st.integers(1, 3),
    seed=st.integers(0, 10**6),
    bias=st.booleans(),
)
def test_multi_head_attention_is_equivariant(device, data, batch, n, m, heads, head_dim, seed, bias):
    torch.manual_seed(seed)
    d_model = heads * head_dim
    mha = attnbook.MultiHeadAttention(d_model, heads, bias=bias, device=device, dtype=F64)
    with torch.no_grad():  # random biases too, so that they are exercised
        for p in mha.parameters():
            p.normal_()
    A, B = P(data.draw(permutations(n)), device), P(data.draw(permutations(m)), device)
    X = randn(seed, batch, n, d_model, device=device)
    Z = randn(seed + 1, batch, m, d_model, device=device)
    # self-attention: MHA(AX, AX, AX) = A MHA(X, X, X)
    assert_close(mha(A @ X, A @ X, A @ X)[0], A @ mha(X, X, X)[0])
    # in general: MultiHead(AQ, BK, BV) = A MultiHead(Q, K, V), per head as well
    out, w = mha(X, Z, Z, need_weights=True)
    out_AB, w_AB = mha(A @ X, B @ Z, B @ Z, need_weights=True)
    assert_close(out_AB, A @ out)
    assert_close(w_AB, A @ w @ B.T)


# ---------------------------------------------------------------- masks break it


def permute_mask(keep: torch.Tensor, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """A^T M B for a boolean mask M (computed on 0/1 and read back)."""
    return (A.T @ keep.to(A.dtype) @ B) > 0.5


@PROPERTY
@given(data=st.data(), n=st.integers(1, 6), m=st.integers(1, 6), d=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_a_mask_moves_with_the_permutation(device, data, n, m, d, seed):
    A, B = P(data.draw(permutations(n)), device), P(data.draw(permutations(m)), device)
    Q, K, V = (
        randn(seed, n, d, device=device),
        randn(seed + 1, m, d, device=device),
        randn(seed + 2, m, 2, device=device),
    )
    g = torch.Generator().manual_seed(seed + 3)
    keep = (torch.rand(n, m, generator=g) < 0.6).to(device)
    # Attention_M(AQ, BK, BV) = A Attention_{A^T M B}(Q, K, V)
    assert_close(attention(A @ Q, B @ K, B @ V, mask=keep)[0], A @ attention(Q, K, V, mask=permute_mask(keep, A, B))[0])


@PROPERTY
@given(data=st.data(), n=st.integers(2, 7))
def test_no_reordering_preserves_the_causal_mask(device, data, n):
    A = P(data.draw(nontrivial_permutations(n)), device)
    C = causal_mask(n, device=device)
    assert not torch.equal(permute_mask(C, A, A), C)
    assert torch.equal(
        permute_mask(C, torch.eye(n, dtype=F64, device=device), torch.eye(n, dtype=F64, device=device)), C
    )


@PROPERTY
@given(data=st.data(), n=st.integers(2, 6), d_model=st.integers(2, 5), seed=st.integers(0, 10**6))
def test_causal_self_attention_is_not_equivariant(device, data, n, d_model, seed):
    A = P(data.draw(nontrivial_permutations(n)), device)
    X = randn(seed, n, d_model, device=device)
    # small query and key weights keep the scores of order 1: a saturated softmax (a score gap of
    # 15 or more) can make the two sides agree to 1e-6 by accident, which says nothing either way
    W_q, W_k = (0.3 * randn(seed + s, d_model, d_model, device=device) for s in (1, 2))
    W_v = randn(seed + 3, d_model, d_model, device=device)
    C = causal_mask(n, device=device)
    permuted, expected_if_equivariant = self_attention(A @ X, W_q, W_k, W_v, C), A @ self_attention(X, W_q, W_k, W_v, C)
    assert float((permuted - expected_if_equivariant).abs().max()) > 1e-6
    # what does hold: the mask must be permuted along with the tokens
    assert_close(permuted, A @ self_attention(X, W_q, W_k, W_v, permute_mask(C, A, A)))


# ---------------------------------------------------------------- positional encodings break it


@PROPERTY
@given(data=st.data(), n=st.integers(2, 6), half=st.integers(1, 3), seed=st.integers(0, 10**6))
def test_positional_encoding_breaks_equivariance(device, data, n, half, seed):
    d_model = 2 * half
    A = P(data.draw(nontrivial_permutations(n)), device)
    X = randn(seed, n, d_model, device=device)
    W_q, W_k, W_v = (randn(seed + s, d_model, d_model, device=device) for s in (1, 2, 3))
    pos = sinusoidal_encoding(n, d_model, device=device, dtype=F64)

    def f(Y):
        return self_attention(Y, W_q, W_k, W_v)

    # the identity: shuffling the tokens but not the positions = shuffling the positions instead
    assert_close(f(A @ X + pos), A @ f(X + A.T @ pos))
    # moving tokens and positions together keeps equivariance
    assert_close(f(A @ (X + pos)), A @ f(X + pos))
    # but the shuffled sentence with fresh positions is not the shuffled output
    assert float((f(A @ X + pos) - A @ f(X + pos)).abs().max()) > 1e-6
