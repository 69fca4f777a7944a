"""hard_attention (chapter 4): an explicit argmax loop, the limit of softmax as beta grows, ties,
masks, and errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import attention, causal_mask, hard_attention, softmax

from ..conftest import tolerances

F64 = torch.float64
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def draw(seed: int, *shape: int, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64).to(device)


def argmax_loop(query, key, value, keep=None):
    """For each query, the value of the first key with the largest dot product, written with loops."""
    n, m = query.shape[0], key.shape[0]
    weights = torch.zeros(n, m, dtype=query.dtype)
    for i in range(n):
        best, best_j = -math.inf, None
        for j in range(m):
            if keep is not None and not keep[i][j]:
                continue
            s = sum(float(query[i, a]) * float(key[j, a]) for a in range(query.shape[1]))
            if s > best:  # strictly greater: the first maximum wins
                best, best_j = s, j
        if best_j is not None:
            weights[i, best_j] = 1.0
    return weights @ value.cpu(), weights


@PROPERTY
@given(
    n=st.integers(1, 6),
    m=st.integers(1, 7),
    d_k=st.integers(1, 5),
    d_v=st.integers(1, 4),
    seed=st.integers(0, 10**6),
    masked=st.booleans(),
)
def test_matches_an_explicit_argmax_loop(device, n, m, d_k, d_v, seed, masked):
    q, k, v = (
        draw(seed, n, d_k, device=device),
        draw(seed + 1, m, d_k, device=device),
        draw(seed + 2, m, d_v, device=device),
    )
    keep = None
    if masked:
        g = torch.Generator().manual_seed(seed + 3)
        keep = (torch.rand(n, m, generator=g) < 0.6).to(device)
    out, w = hard_attention(q, k, v, mask=keep)
    expected_out, expected_w = argmax_loop(q.cpu(), k.cpu(), v, None if keep is None else keep.cpu().tolist())
    assert_close(w.cpu(), expected_w)
    assert_close(out.cpu(), expected_out)
    assert w.device.type == device.type and out.device.type == device.type


@PROPERTY
@given(n=st.integers(1, 5), m=st.integers(2, 8), d_k=st.integers(1, 6), seed=st.integers(0, 10**6))
def test_is_the_limit_of_softmax_as_beta_grows(device, n, m, d_k, seed):
    q, k, v = (
        draw(seed, n, d_k, device=device),
        draw(seed + 1, m, d_k, device=device),
        draw(seed + 2, m, 3, device=device),
    )
    scores = q @ k.T  # (n, m)
    top2 = scores.topk(2, dim=-1).values  # (n, 2)
    gap = float((top2[:, 0] - top2[:, 1]).min())
    assume(gap > 1e-3)  # a unique maximum in every row; with ties the limit splits the weight
    _, hard = hard_attention(q, k, v)
    errors = []
    for beta in (0.0, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5):
        soft = softmax(scores, beta=beta)
        error = float((soft - hard).abs().max())
        # the weight off the argmax is at most (m - 1) exp(-beta * gap) in every row
        assert error <= (m - 1) * math.exp(-beta * gap) + 1e-12
        errors.append(error)
    assert all(a >= b for a, b in zip(errors, errors[1:])), errors
    beta = 40.0 / gap  # (m - 1) e^-40 < 1e-15
    assert_close(softmax(scores, beta=beta), hard, atol=1e-12, rtol=0)
    # and so does the output of attention with the scale beta
    soft_out, _ = attention(q, k, v, scale=beta)
    hard_out, _ = hard_attention(q, k, v)
    assert_close(soft_out, hard_out, atol=1e-10, rtol=0)


def test_ties_go_to_the_lowest_key_index(device, dtype):
    q = torch.tensor([[1.0, 0.0]], dtype=dtype, device=device)
    k = torch.tensor([[0.0, 1.0], [2.0, 0.0], [2.0, 5.0], [1.0, 0.0]], dtype=dtype, device=device)  # scores 0, 2, 2, 1
    v = torch.arange(8, dtype=dtype, device=device).reshape(4, 2)
    out, w = hard_attention(q, k, v)
    assert_close(w, torch.tensor([[0.0, 1.0, 0.0, 0.0]], dtype=dtype, device=device))
    assert_close(out, v[1:2])
    # the softmax limit splits the weight between the tied keys instead
    assert_close(softmax(q @ k.T, beta=1e3), torch.tensor([[0.0, 0.5, 0.5, 0.0]], dtype=dtype, device=device))
    # masking the first tied key moves the choice to the second
    keep = torch.tensor([[True, False, True, True]], device=device)
    assert_close(
        hard_attention(q, k, v, mask=keep)[1], torch.tensor([[0.0, 0.0, 1.0, 0.0]], dtype=dtype, device=device)
    )


def test_exact_match_lookup_with_unit_keys(device, dtype):
    # a key-value store: querying with a stored key returns its value exactly
    g = torch.Generator().manual_seed(0)
    keys = torch.nn.functional.normalize(torch.randn(6, 5, generator=g, dtype=F64), dim=-1).to(device, dtype)
    values = torch.randn(6, 3, generator=g, dtype=F64).to(device, dtype)
    out, w = hard_attention(keys, keys, values)
    assert torch.equal(w, torch.eye(6, dtype=dtype, device=device))
    assert torch.equal(out, values)


def test_fully_masked_rows_give_zero_weights_and_output(device, dtype):
    q, k, v = (draw(s, *shape, device=device).to(dtype) for s, shape in ((0, (3, 4)), (1, (5, 4)), (2, (5, 2))))
    keep = causal_mask(3, 5, device=device).clone()
    keep[1] = False
    out, w = hard_attention(q, k, v, mask=keep)
    assert torch.equal(w[1], torch.zeros(5, dtype=dtype, device=device))
    assert torch.equal(out[1], torch.zeros(2, dtype=dtype, device=device))
    assert_close(w.sum(-1), torch.tensor([1.0, 0.0, 1.0], dtype=dtype, device=device))
    assert not bool(w[~keep].any())  # never a masked key
    # a float mask with -inf blocks the same keys
    additive = torch.zeros(3, 5, dtype=dtype, device=device).masked_fill(~keep, -math.inf)
    out_f, w_f = hard_attention(q, k, v, mask=additive)
    assert torch.equal(w_f, w) and torch.equal(out_f, out)
    # it agrees with attention's convention for fully masked rows
    assert_close(attention(q, k, v, mask=keep)[0][1], out[1])


def test_batches_broadcast(device, dtype):
    q = draw(0, 2, 3, 3, 4, device=device).to(dtype)  # (batch, heads, n, d_k)
    k = draw(1, 2, 1, 6, 4, device=device).to(dtype)  # shared by the heads
    v = draw(2, 2, 1, 6, 5, device=device).to(dtype)
    mask = causal_mask(3, 6, device=device)  # (n, m), for every batch and head
    out, w = hard_attention(q, k, v, mask=mask)
    assert out.shape == (2, 3, 3, 5) and w.shape == (2, 3, 3, 6)
    for b in range(2):
        for h in range(3):
            o, ww = hard_attention(q[b, h], k[b, 0], v[b, 0], mask=mask)
            assert_close(out[b, h], o, **tolerances(dtype))
            assert torch.equal(w[b, h], ww)


def test_bad_inputs_are_rejected():
    q, k, v = torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(5, 2)
    with pytest.raises(ValueError, match="share d_k"):
        hard_attention(q, torch.zeros(5, 3), v)
    with pytest.raises(ValueError, match="same number m"):
        hard_attention(q, k, torch.zeros(4, 2))
    with pytest.raises(ValueError, match="does not broadcast"):
        hard_attention(q, k, v, mask=torch.ones(5, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="floating-point"):
        hard_attention(q.long(), k, v)
    with pytest.raises(TypeError, match="mask"):
        hard_attention(q, k, v, mask=torch.ones(3, 5, dtype=torch.int64))
