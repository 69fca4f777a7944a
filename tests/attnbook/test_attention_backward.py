"""The formulas of the backward pass of attention (chapter 11) against autograd of the plain formula."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import attnbook
from attnbook.kernels.attention_backward import (
    attention_backward,
    attention_probabilities,
    attention_scores_masked,
    backward_delta,
    grad_key,
    grad_query,
    grad_scores,
    grad_value,
    grad_weights,
    log_sum_exp,
    probabilities_from_lse,
)

EXACT = {"atol": 1e-10, "rtol": 1e-10}
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def skip_without_float64(device):
    if device.type == "mps":
        pytest.skip("MPS has no float64")


def draw(shape, g, device, dtype=torch.float64):
    return torch.randn(*shape, generator=g, dtype=dtype).to(device)


def plain_gradients(q, k, v, dO, is_causal, scale=None):
    """(O, dq, dk, dv) by autograd of attnbook.attention with the causal keep-mask."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    mask = attnbook.causal_mask(q.shape[-2], k.shape[-2], device=q.device) if is_causal else None
    O, _ = attnbook.attention(q, k, v, mask=mask, scale=scale)
    return (O.detach(), *torch.autograd.grad(O, (q, k, v), dO))


SHAPES = [  # (batch dims, n, m, d_k, d_v)
    ((2,), 7, 7, 4, 3),
    ((2, 3), 5, 9, 6, 2),
    ((1, 2), 9, 4, 3, 5),
    ((), 6, 6, 2, 2),
]


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}-n{s[1]}-m{s[2]}")
def test_attention_backward_equals_autograd(device, shape, is_causal):
    skip_without_float64(device)
    batch, n, m, d_k, d_v = shape
    g = torch.Generator().manual_seed(n * 100 + m)
    q, k, v = draw((*batch, n, d_k), g, device), draw((*batch, m, d_k), g, device), draw((*batch, m, d_v), g, device)
    dO = draw((*batch, n, d_v), g, device)
    _, *expected = plain_gradients(q, k, v, dO, is_causal)
    for got, want in zip(attention_backward(q, k, v, dO, is_causal), expected):
        assert got.shape == want.shape and got.device.type == device.type
        assert_close(got, want, **EXACT)


def test_attention_backward_with_a_scale(device):
    skip_without_float64(device)
    g = torch.Generator().manual_seed(1)
    q, k, v, dO = (draw((2, 5, 3), g, device) for _ in range(4))
    _, *expected = plain_gradients(q, k, v, dO, True, scale=0.7)
    for got, want in zip(attention_backward(q, k, v, dO, True, scale=0.7), expected):
        assert_close(got, want, **EXACT)


def test_each_formula_equals_autograd_of_its_step(device):
    """dV, dP through O = P V; dS through P = softmax(S); dQ, dK through S = scale Q K^T."""
    skip_without_float64(device)
    g = torch.Generator().manual_seed(2)
    n, m, d_k, d_v, scale = 5, 7, 4, 3, 0.6
    q, k = draw((2, n, d_k), g, device).requires_grad_(), draw((2, m, d_k), g, device).requires_grad_()
    v, dO = draw((2, m, d_v), g, device).requires_grad_(), draw((2, n, d_v), g, device)
    S = attention_scores_masked(q, k, True, scale)
    S_leaf = S.detach().requires_grad_()
    P = torch.softmax(S_leaf, dim=-1)
    P_leaf = P.detach().requires_grad_()
    O = P_leaf @ v
    dP_auto, dV_auto = torch.autograd.grad(O, (P_leaf, v), dO)
    assert_close(grad_value(P_leaf.detach(), dO), dV_auto, **EXACT)
    assert_close(grad_weights(dO, v.detach()), dP_auto, **EXACT)
    (dS_auto,) = torch.autograd.grad(P, S_leaf, dP_auto)
    D = backward_delta(dO, O.detach())
    assert D.shape == (2, n)
    dS = grad_scores(P.detach(), dP_auto, D)
    assert_close(dS, dS_auto, **EXACT)
    dQ_auto, dK_auto = torch.autograd.grad(S, (q, k), dS_auto)
    assert_close(grad_query(dS, k.detach(), scale), dQ_auto, **EXACT)
    assert_close(grad_key(dS, q.detach(), scale), dK_auto, **EXACT)
    # a masked entry has P = 0 and therefore dS = 0
    hidden = ~attnbook.causal_mask(n, m, device=device)
    assert bool((dS[..., hidden] == 0).all()) and bool((P[..., hidden] == 0).all())


def test_grad_scores_with_D_from_the_weights_is_the_same(device):
    """D = rowsum(dO o O) = rowsum(P o dP): both give the same dS."""
    skip_without_float64(device)
    g = torch.Generator().manual_seed(3)
    q, k, v, dO = (
        draw((3, 6, 4), g, device),
        draw((3, 8, 4), g, device),
        draw((3, 8, 2), g, device),
        draw((3, 6, 2), g, device),
    )
    P = attention_probabilities(q, k, True)
    dP = grad_weights(dO, v)
    from_weights = (P * dP).sum(dim=-1)
    assert_close(backward_delta(dO, P @ v), from_weights, **EXACT)
    assert_close(grad_scores(P, dP, backward_delta(dO, P @ v)), grad_scores(P, dP, from_weights), **EXACT)


@PROPERTY
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    n=st.integers(1, 9),
    m=st.integers(1, 9),
    d_k=st.integers(1, 5),
    d_v=st.integers(1, 5),
    is_causal=st.booleans(),
    seed=st.integers(0, 10**6),
)
def test_delta_identity_property(device, batch, n, m, d_k, d_v, is_causal, seed):
    """rowsum(P o dP) = rowsum(dO o O) for every query, on random shapes."""
    skip_without_float64(device)
    g = torch.Generator().manual_seed(seed)
    q, k = draw((*batch, n, d_k), g, device), draw((*batch, m, d_k), g, device)
    v, dO = draw((*batch, m, d_v), g, device), draw((*batch, n, d_v), g, device)
    P = attention_probabilities(q, k, is_causal)
    O = P @ v
    lhs = (P * grad_weights(dO, v)).sum(dim=-1)  # (..., n)
    rhs = backward_delta(dO, O)  # (..., n)
    scale = (dO.abs() @ v.abs().transpose(-2, -1)).amax(dim=-1) + 1  # the size of the terms summed
    assert_close(lhs / scale, rhs / scale, atol=1e-12, rtol=0)


def test_log_sum_exp_and_rebuilt_probabilities(device):
    skip_without_float64(device)
    g = torch.Generator().manual_seed(4)
    scores = 30 * draw((2, 5, 6), g, device)  # large scores: the shift by the maximum matters
    scores[0, 1, :] = -math.inf  # a fully masked row
    scores[1, 2, 3:] = -math.inf
    L = log_sum_exp(scores)
    assert L.shape == (2, 5)
    assert L[0, 1] == -math.inf
    assert_close(L, torch.logsumexp(scores, dim=-1), **EXACT)
    P = probabilities_from_lse(scores, L)
    assert not bool(P.isnan().any())
    assert bool((P[0, 1] == 0).all())
    assert_close(P, attnbook.softmax(scores, dim=-1), **EXACT)


def test_log_sum_exp_does_not_overflow(device):
    skip_without_float64(device)
    scores = torch.tensor([[1000.0, 1000.0], [-1000.0, -1001.0]], dtype=torch.float64, device=device)
    expected = torch.tensor([1000 + math.log(2), -1000 + math.log1p(math.exp(-1))], dtype=torch.float64)
    assert_close(log_sum_exp(scores).cpu(), expected, **EXACT)


def test_float32_runs_in_float32(device):
    g = torch.Generator().manual_seed(5)
    q, k, v, dO = (draw((2, 4, 3), g, device, torch.float32) for _ in range(4))
    _, *expected = plain_gradients(q, k, v, dO, False)
    for got, want in zip(attention_backward(q, k, v, dO), expected):
        assert got.dtype == torch.float32
        assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_errors():
    q, k, v, dO = torch.zeros(2, 3, 4), torch.zeros(2, 5, 4), torch.zeros(2, 5, 2), torch.zeros(2, 3, 2)
    with pytest.raises(ValueError, match="d_k"):
        attention_backward(q, torch.zeros(2, 5, 3), v, dO)
    with pytest.raises(ValueError, match="same batch dimensions"):
        attention_backward(q, k[:1], v[:1], dO)
    with pytest.raises(ValueError, match="dO"):
        attention_backward(q, k, v, torch.zeros(2, 3, 3))
    with pytest.raises(TypeError, match="floating"):
        attention_backward(q, k, v, dO.long())
    with pytest.raises(TypeError, match="is_causal"):
        attention_backward(q, k, v, dO, is_causal=1)
    with pytest.raises(TypeError, match="torch.Tensor"):
        attention_backward(q.tolist(), k, v, dO)
