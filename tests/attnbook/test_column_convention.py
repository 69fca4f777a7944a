"""attnbook.core.column_convention (column convention) against the row-convention functions, transposed."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import attention, causal_mask, formal

from ..conftest import tolerances


def weights(d_x, d_z, d_attn, d_out, *, seed, dtype=torch.float64, device="cpu"):
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    return r(d_attn, d_x), r(d_attn), r(d_attn, d_z), r(d_attn), r(d_out, d_z), r(d_out)


def row_convention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    """The same computation with tokens as rows: inputs, weights, mask and output transposed."""
    Q = X.T @ W_q.T + b_q  # (l_x, d_x) @ (d_x, d_attn) -> (l_x, d_attn)
    K = Z.T @ W_k.T + b_k  # (l_z, d_z) @ (d_z, d_attn) -> (l_z, d_attn)
    V = Z.T @ W_v.T + b_v  # (l_z, d_z) @ (d_z, d_out) -> (l_z, d_out)
    out, _ = attention(Q, K, V, mask=None if mask is None else mask.T.bool())
    return out.T  # (d_out, l_x)


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 5),
    st.integers(1, 6),
    st.integers(1, 6),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(0, 10**6),
    st.sampled_from(["none", "random", "unidirectional"]),
)
def test_attention_equals_row_convention(l_x, l_z, d_x, d_z, d_attn, d_out, seed, kind):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(d_x, l_x, generator=g, dtype=torch.float64)
    Z = torch.randn(d_z, l_z, generator=g, dtype=torch.float64)
    params = weights(d_x, d_z, d_attn, d_out, seed=seed + 1)
    mask = None
    if kind == "random":
        mask = (torch.rand(l_z, l_x, generator=g) > 0.4).to(torch.int64)  # {0, 1}, may mask whole columns
    elif kind == "unidirectional" and l_x == l_z:
        mask = formal.unidirectional_mask(l_x)
    got = formal.attention(X, Z, *params, mask=mask)
    assert got.shape == (d_out, l_x)
    assert_close(got, row_convention(X, Z, *params, mask=mask), atol=1e-10, rtol=1e-10)
    if mask is not None:  # a primary token with no context to attend to gets output 0
        empty = ~mask.bool().any(dim=0)
        assert (got[:, empty] == 0).all()


def test_columns_of_the_weights_sum_to_one_without_mask(device, dtype):
    X = torch.randn(3, 4, dtype=dtype, device=device)
    params = weights(3, 3, 2, 5, seed=0, dtype=dtype, device=device)
    out = formal.attention(X, X, *params)
    # with W_v = I, b_v = 0 the output columns are convex combinations of the columns of Z
    eye, zero = torch.eye(3, dtype=dtype, device=device), torch.zeros(3, dtype=dtype, device=device)
    mixed = formal.attention(X, X, *params[:4], eye, zero)
    assert out.shape == (5, 4) and mixed.shape == (3, 4)
    assert (mixed.max(dim=1).values <= X.max(dim=1).values + 1e-6).all()
    assert (mixed.min(dim=1).values >= X.min(dim=1).values - 1e-6).all()


def test_single_query_is_one_column_of_attention(device, dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, generator=g, dtype=dtype).to(device)
    z = torch.randn(6, 7, generator=g, dtype=dtype).to(device)
    params = weights(4, 6, 3, 2, seed=4, dtype=dtype, device=device)
    out = formal.single_query_attention(x, z, *params)
    assert out.shape == (2,)
    assert_close(out, formal.attention(x[:, None], z, *params)[:, 0], **tolerances(dtype))
    assert_close(out, row_convention(x[:, None], z, *params)[:, 0], **tolerances(dtype))


def test_unidirectional_mask_is_the_transpose_of_causal_mask():
    M = formal.unidirectional_mask(5)
    assert torch.equal(M, causal_mask(5).T)
    assert torch.equal(M, torch.ones(5, 5, dtype=torch.bool).triu())  # upper triangular: M[t, t'] iff t <= t'
    for t in range(5):
        for t_prime in range(5):
            assert bool(M[t, t_prime]) == (t <= t_prime)


def mh_heads(H, d_x, d_z, d_attn, d_mid, seed):
    return [weights(d_x, d_z, d_attn, d_mid, seed=seed + h) for h in range(H)]


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 5),
    st.integers(1, 5),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(0, 10**6),
)
def test_mh_attention_sum_over_heads_equals_concatenation(H, l_x, l_z, d_attn, d_mid, d_out, seed):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(3, l_x, generator=g, dtype=torch.float64)
    Z = torch.randn(4, l_z, generator=g, dtype=torch.float64)
    heads = mh_heads(H, 3, 4, d_attn, d_mid, seed)
    W_o = torch.randn(d_out, H * d_mid, generator=g, dtype=torch.float64)
    b_o = torch.randn(d_out, generator=g, dtype=torch.float64)
    Y = torch.cat([formal.attention(X, Z, *p) for p in heads], dim=0)  # (H * d_mid, l_x), heads stacked
    concat = W_o @ Y + b_o[:, None]  # (d_out, H * d_mid) @ (H * d_mid, l_x) -> (d_out, l_x)
    as_matrix = formal.mh_attention(X, Z, heads, W_o, b_o)
    as_blocks = formal.mh_attention(X, Z, heads, list(W_o.split(d_mid, dim=1)), b_o)
    assert_close(as_matrix, concat, atol=1e-10, rtol=1e-10)
    assert_close(as_blocks, concat, atol=1e-10, rtol=1e-10)


def test_mh_attention_with_a_mask_masks_every_head():
    heads = mh_heads(2, 3, 3, 2, 2, seed=0)
    X = torch.randn(3, 4, dtype=torch.float64)
    W_o, b_o = torch.randn(3, 4, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    M = formal.unidirectional_mask(4)
    out = formal.mh_attention(X, X, heads, W_o, b_o, mask=M)
    X2 = X.clone()
    X2[:, 3] += 5.0  # change the last token: earlier primary tokens cannot see it
    out2 = formal.mh_attention(X2, X2, heads, W_o, b_o, mask=M)
    assert_close(out[:, :3], out2[:, :3])


class TestErrors:
    def test_weight_shape(self):
        X = torch.zeros(3, 4)
        W_q, b_q, W_k, b_k, W_v, b_v = weights(3, 3, 2, 2, seed=0, dtype=torch.float32)
        with pytest.raises(
            ValueError, match=r"Z \(d_z, l_z\) and W_k \(d_attn, d_z\) must share d_z, got Z \(5, 4\) and W_k \(2, 3\)"
        ):
            formal.attention(X, torch.zeros(5, 4), W_q, b_q, W_k, b_k, W_v, b_v)

    def test_bias_shape(self):
        W_q, b_q, W_k, b_k, W_v, b_v = weights(3, 3, 2, 2, seed=0, dtype=torch.float32)
        with pytest.raises(
            ValueError,
            match=r"W_q \(d_attn, d_x\) and b_q \(d_attn,\) must share d_attn, got W_q \(2, 3\) and b_q \(3,\)",
        ):
            formal.attention(torch.zeros(3, 4), torch.zeros(3, 4), W_q, torch.zeros(3), W_k, b_k, W_v, b_v)

    def test_row_convention_input(self):
        params = weights(3, 3, 2, 2, seed=0, dtype=torch.float32)
        with pytest.raises(ValueError, match=r"x must have exactly 1 dimensions \(d_x,\), got shape \(1, 3\)"):
            formal.single_query_attention(torch.zeros(1, 3), torch.zeros(3, 4), *params)

    def test_mask_shape_is_context_by_primary(self):
        params = weights(3, 3, 2, 2, seed=0, dtype=torch.float32)
        with pytest.raises(ValueError, match=r"and mask \(l_z, l_x\) must share l_z, got Z \(3, 5\) and mask \(4, 5\)"):
            formal.attention(torch.zeros(3, 4), torch.zeros(3, 5), *params, mask=torch.ones(4, 5))

    def test_mask_values(self):
        params = weights(3, 3, 2, 2, seed=0, dtype=torch.float32)
        with pytest.raises(ValueError, match="only 0 and 1"):
            formal.attention(torch.zeros(3, 4), torch.zeros(3, 4), *params, mask=torch.full((4, 4), 2.0))

    def test_w_o_width(self):
        heads = mh_heads(2, 3, 3, 2, 2, seed=0)
        X = torch.zeros(3, 4, dtype=torch.float64)
        with pytest.raises(ValueError, match=r"W_o has shape \(3, 5\) but the 2 heads output 4 rows"):
            formal.mh_attention(
                X, X, heads, torch.zeros(3, 5, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
            )

    def test_no_heads(self):
        with pytest.raises(ValueError, match="at least one"):
            formal.mh_attention(torch.zeros(3, 4), torch.zeros(3, 4), [], torch.zeros(3, 0), torch.zeros(3))
