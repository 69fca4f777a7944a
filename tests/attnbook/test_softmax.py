"""softmax: against torch.softmax, stability, masking, the temperature, and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from torch.testing import assert_close

from attnbook import softmax

from ..conftest import tolerances


def test_matches_torch_softmax(device, dtype):
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 4, 7, generator=g, dtype=dtype).to(device)
    for dim in (0, 1, -1):
        assert_close(softmax(scores, dim=dim), torch.softmax(scores, dim=dim), **tolerances(dtype))


def test_beta_scales_the_scores(device, dtype):
    scores = torch.linspace(-2, 3, 6, dtype=dtype, device=device)
    assert_close(softmax(scores, beta=2.5), torch.softmax(2.5 * scores, dim=-1), **tolerances(dtype))


def test_huge_scores_do_not_overflow(device, dtype):
    # exp(1e4) overflows in every floating dtype; the max-subtraction makes it harmless
    scores = torch.tensor([[1e4, 1e4 - 1.0, -1e4], [3e38, 3e38, 0.0]], dtype=dtype, device=device)
    weights = softmax(scores)
    assert torch.isfinite(weights).all()
    expected = torch.tensor(
        [[1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1)), 0.0], [0.5, 0.5, 0.0]], dtype=dtype, device=device
    )
    assert_close(weights, expected, **tolerances(dtype))
    # the naive formula really does overflow here, so the test exercises the stabilisation
    naive = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)
    assert torch.isnan(naive).any()


def test_masked_entries_get_zero_and_fully_masked_rows_give_zeros(device, dtype):
    inf = math.inf
    scores = torch.tensor([[0.0, -inf, 1.0], [-inf, -inf, -inf]], dtype=dtype, device=device)
    weights = softmax(scores)
    e = 1 / (1 + math.e)
    expected = torch.tensor([[e, 0.0, 1 - e], [0.0, 0.0, 0.0]], dtype=dtype, device=device)
    assert_close(weights, expected, **tolerances(dtype))
    assert not torch.isnan(softmax(scores, beta=0.0)).any()
    assert_close(softmax(scores, beta=0.0)[0], torch.tensor([0.5, 0.0, 0.5], dtype=dtype, device=device))


def test_beta_zero_is_uniform_and_large_beta_is_argmax(device):
    scores = torch.tensor([0.3, 2.0, -1.0, 1.9], dtype=torch.float64, device=device)
    assert_close(softmax(scores, beta=0.0), torch.full((4,), 0.25, dtype=torch.float64, device=device))
    one_hot = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64, device=device)
    gaps = [(softmax(scores, beta=b) - one_hot).abs().max().item() for b in (1.0, 10.0, 100.0, 1000.0)]
    assert all(a > b for a, b in zip(gaps, gaps[1:])), gaps  # strictly closer as beta grows
    assert_close(softmax(scores, beta=1e4), one_hot)


def test_keeps_device_and_dtype(device, dtype):
    scores = torch.zeros(2, 3, dtype=dtype, device=device)
    out = softmax(scores)
    assert out.dtype == dtype and out.device.type == device.type


@pytest.mark.parametrize("bad", [torch.arange(3), torch.tensor([True, False]), [1.0, 2.0]])
def test_rejects_non_float_input(bad):
    with pytest.raises(TypeError, match="scores"):
        softmax(bad)


@pytest.mark.parametrize("beta", [-1.0, math.inf, math.nan, "2"])
def test_rejects_bad_beta(beta):
    with pytest.raises(ValueError, match="beta"):
        softmax(torch.zeros(3), beta=beta)


finite_rows = arrays(
    np.float64, st.tuples(st.integers(1, 4), st.integers(1, 6)), elements=st.floats(-1e3, 1e3, allow_nan=False)
)


@settings(max_examples=60, deadline=None)
@given(finite_rows, st.floats(-1e3, 1e3), st.floats(0.0, 50.0))
def test_rows_are_distributions_and_shift_invariant(scores, shift, beta):
    s = torch.from_numpy(scores)
    w = softmax(s, beta=beta)
    assert (w >= 0).all()
    assert_close(w.sum(-1), torch.ones(s.shape[0], dtype=torch.float64))
    # adding one constant to a whole row leaves the distribution unchanged
    assert_close(softmax(s + shift, beta=beta), w, atol=1e-9, rtol=1e-7)


@settings(max_examples=40, deadline=None)
@given(finite_rows, st.data())
def test_masked_softmax_renormalises_the_kept_entries(scores, data):
    s = torch.from_numpy(scores)
    keep = torch.tensor(data.draw(arrays(np.bool_, s.shape)))
    w = softmax(s.masked_fill(~keep, -math.inf))
    assert (w[~keep] == 0).all()
    for row, k in zip(range(s.shape[0]), keep):
        if k.any():
            assert_close(w[row, k], torch.softmax(s[row, k], dim=-1))
        else:
            assert (w[row] == 0).all()
