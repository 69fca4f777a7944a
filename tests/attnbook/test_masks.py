"""causal_mask and padding_mask."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnbook import causal_mask, padding_mask


def test_causal_mask_is_lower_triangular(device):
    mask = causal_mask(5, device=device)
    assert mask.dtype == torch.bool and mask.device.type == device.type
    assert torch.equal(mask, torch.ones(5, 5, dtype=torch.bool, device=device).tril())


@given(st.integers(0, 7), st.integers(0, 7))
def test_causal_mask_alignments(n, m):
    upper_left = causal_mask(n, m)
    lower_right = causal_mask(n, m, align="lower_right")
    assert upper_left.shape == lower_right.shape == (n, m)
    for i in range(n):
        for j in range(m):
            assert bool(upper_left[i, j]) == (j <= i)
            assert bool(lower_right[i, j]) == (j <= i + m - n)
    if n and m:
        assert lower_right[-1].all()  # the last query sees every key
    if n == m:
        assert torch.equal(upper_left, lower_right)


@pytest.mark.parametrize(
    "args, kwargs, error",
    [
        ((-1,), {}, ValueError),
        ((2.0,), {}, TypeError),
        ((3, True), {}, TypeError),
        ((3,), {"align": "left"}, ValueError),
    ],
)
def test_causal_mask_errors(args, kwargs, error):
    with pytest.raises(error):
        causal_mask(*args, **kwargs)


def test_padding_mask(device):
    mask = padding_mask(torch.tensor([2, 0, 4], device=device), 4)
    expected = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool, device=device)
    assert torch.equal(mask, expected)
    assert torch.equal(padding_mask([2, 0, 4], device=device), expected)  # max_len defaults to the longest
    assert padding_mask([1, 2], 5).shape == (2, 5)


@pytest.mark.parametrize(
    "lengths, max_len, error, match",
    [
        ([3, 6], 5, ValueError, r"\[0, max_len=5\]"),
        ([-1], 5, ValueError, "lengths\\[0\\] must be >= 0"),
        ([1.5], 5, TypeError, "lengths\\[0\\] must be an int"),
        (torch.tensor([1.0, 2.0]), 5, TypeError, "1-D integer tensor"),
        (torch.tensor([[1, 2]]), 5, TypeError, "1-D integer tensor"),
    ],
)
def test_padding_mask_errors(lengths, max_len, error, match):
    with pytest.raises(error, match=match):
        padding_mask(lengths, max_len)
