"""The online softmax (running maximum and running sum) against attnbook.softmax."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import softmax
from attnbook.efficient.online_softmax import (
    block_exponentials,
    online_normalizer,
    online_softmax,
    rescale_factor,
    running_max,
    running_sum,
    safe_shift,
    softmax_rounding_bound,
)

from ..conftest import tolerances

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def scores_with_masks(shape, seed, masked_fraction, *, dtype, device):
    g = torch.Generator().manual_seed(seed)
    scores = 3 * torch.randn(*shape, generator=g, dtype=dtype)
    scores[torch.rand(*shape, generator=g) < masked_fraction] = -math.inf
    return scores.to(device)


@PROPERTY
@given(
    rows=st.integers(1, 4),
    m=st.integers(1, 20),
    block_size=st.integers(1, 25),
    seed=st.integers(0, 10**6),
    masked_fraction=st.sampled_from([0.0, 0.3, 0.8, 1.0]),
)
def test_online_softmax_equals_softmax(device, dtype, rows, m, block_size, seed, masked_fraction):
    """Equal within the derived rounding bound, weight by weight (chapter 8), in float32 as in float64."""
    scores = scores_with_masks((rows, m), seed, masked_fraction, dtype=dtype, device=device)
    blocks = math.ceil(m / block_size)
    bound = softmax_rounding_bound(scores, blocks=blocks) + softmax_rounding_bound(scores)
    assert ((online_softmax(scores, block_size=block_size) - softmax(scores)).abs() <= bound).all()


@pytest.mark.parametrize("spread", [0.1, 3.0, 30.0])
def test_rounding_bound_holds_and_is_small(device, dtype, spread):
    """The bound holds for scores of any spread, masked entries and fully masked rows get bound 0, and in
    float64 it is far below 1e-12 (not a vacuous tolerance)."""
    scores = spread * scores_with_masks((64, 40), 7, 0.2, dtype=dtype, device=device)
    scores[3] = -math.inf  # a fully masked row
    worst = 0.0
    for block_size in (1, 3, 8, 40):
        bound = softmax_rounding_bound(scores, blocks=math.ceil(40 / block_size)) + softmax_rounding_bound(scores)
        difference = (online_softmax(scores, block_size=block_size) - softmax(scores)).abs()
        assert (difference <= bound).all()
        worst = max(worst, (difference / bound).nan_to_num(0.0).max().item())
    assert (softmax_rounding_bound(scores)[scores == -math.inf] == 0).all()
    assert worst < 1  # (measured well below: the bound is a worst case)
    if dtype == torch.float64 and spread <= 3.0:
        assert softmax_rounding_bound(scores, blocks=40).max() < 1e-12


def test_rounding_bound_refuses_bad_blocks():
    with pytest.raises(TypeError, match="blocks"):
        softmax_rounding_bound(torch.zeros(3), blocks=None)
    with pytest.raises((TypeError, ValueError), match="blocks"):
        softmax_rounding_bound(torch.zeros(3), blocks=0)


@PROPERTY
@given(m=st.integers(1, 30), block_size=st.integers(1, 31), seed=st.integers(0, 10**6))
def test_normalizer_is_max_and_sum_of_shifted_exponentials(device, dtype, m, block_size, seed):
    scores = scores_with_masks((3, m), seed, 0.2, dtype=dtype, device=device)
    scores[:, 0] = 1.0  # every row has an unmasked entry here
    big_m, big_l = online_normalizer(scores, block_size)
    assert torch.equal(big_m, scores.amax(dim=-1))  # the running maximum ends at the true maximum, exactly
    assert_close(big_l, torch.exp(scores - big_m[:, None]).sum(dim=-1), **tolerances(dtype))


def test_online_softmax_along_other_axes(device, dtype):
    scores = scores_with_masks((3, 5, 7), 0, 0.3, dtype=dtype, device=device)
    for dim in (0, 1, 2, -1, -2):
        assert_close(online_softmax(scores, dim=dim, block_size=2), softmax(scores, dim=dim), **tolerances(dtype))


def test_one_step_of_the_recurrence_by_hand(device):
    # two blocks [1, 2] and [4, -inf]: M_1 = 2, L_1 = e^-1 + 1; M_2 = 4, L_2 = L_1 e^-2 + 1
    dtype = torch.float64
    b1 = torch.tensor([[1.0, 2.0]], dtype=dtype, device=device)
    b2 = torch.tensor([[4.0, -math.inf]], dtype=dtype, device=device)
    m0 = torch.tensor([-math.inf], dtype=dtype, device=device)
    l0 = torch.zeros(1, dtype=dtype, device=device)
    m1 = running_max(m0, b1)
    l1 = running_sum(l0, rescale_factor(m0, m1), block_exponentials(b1, m1))
    assert m1.item() == 2.0 and math.isclose(l1.item(), math.exp(-1) + 1)
    m2 = running_max(m1, b2)
    l2 = running_sum(l1, rescale_factor(m1, m2), block_exponentials(b2, m2))
    assert m2.item() == 4.0 and math.isclose(l2.item(), (math.exp(-1) + 1) * math.exp(-2) + 1)
    assert math.isclose(l2.item(), sum(math.exp(s - 4.0) for s in (1.0, 2.0, 4.0)))


def test_fully_masked_rows_stay_finite_and_give_zeros(device, dtype):
    scores = torch.full((2, 6), -math.inf, dtype=dtype, device=device)
    scores[1, 4] = 0.5
    big_m, big_l = online_normalizer(scores, 4)
    assert big_m[0] == -math.inf and big_l[0] == 0 and big_l[1] == 1
    weights = online_softmax(scores, block_size=4)
    assert not torch.isnan(weights).any()
    assert (weights[0] == 0).all() and weights[1, 4] == 1


def test_safe_shift_and_rescale_factor_at_minus_infinity(device):
    m = torch.tensor([-math.inf, 3.0], dtype=torch.float64, device=device)
    assert safe_shift(m).tolist() == [0.0, 3.0]
    # nothing unmasked yet on either side: the factor is 0, not nan
    assert rescale_factor(m[:1], m[:1]).item() == 0.0
    assert rescale_factor(m[:1], m[1:]).item() == 0.0
    assert math.isclose(
        rescale_factor(torch.tensor([1.0], dtype=torch.float64, device=device), m[1:]).item(), math.exp(-2)
    )


def test_a_wrong_rescaling_is_caught(device):
    """Leaving out the factor alpha (a classic slip) gives a different normaliser; the checks above would fail."""
    scores = torch.tensor([[0.0, 1.0, 5.0, 2.0]], dtype=torch.float64, device=device)
    m_t = torch.full((1,), -math.inf, dtype=torch.float64, device=device)
    l_t = torch.zeros(1, dtype=torch.float64, device=device)
    for start in (0, 2):
        block = scores[:, start : start + 2]
        new = running_max(m_t, block)
        l_t = l_t + block_exponentials(block, new).sum(-1)  # no alpha
        m_t = new
    assert not torch.allclose(l_t, torch.exp(scores - 5.0).sum(-1))


class TestErrors:
    def test_block_size_must_be_positive_int(self):
        scores = torch.zeros(2, 3)
        with pytest.raises(ValueError, match=r"block_size must be > 0 \(a positive int\), got 0"):
            online_softmax(scores, block_size=0)
        with pytest.raises(TypeError, match=r"block_size must be an int, got float"):
            online_normalizer(scores, 2.0)
        with pytest.raises(TypeError, match=r"block_size must be an int, got bool"):
            online_softmax(scores, block_size=True)

    def test_integer_scores(self):
        with pytest.raises(TypeError, match=r"scores must have a floating-point dtype, got torch.int64"):
            online_softmax(torch.zeros(2, 3, dtype=torch.long))
