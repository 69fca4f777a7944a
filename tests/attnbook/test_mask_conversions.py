"""The three mask conventions (keep, block, additive) and the helpers that convert between them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import additive_to_keep, attention, block_to_keep, causal_mask, keep_to_additive, keep_to_block

from ..conftest import tolerances

shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4)


def random_keep(shape, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) > 0.5).to(device)


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(0, 10**6))
def test_keep_and_block_are_complements_and_inverses(shape, seed):
    keep = random_keep(shape, seed)
    block = keep_to_block(keep)
    assert block.dtype == torch.bool and block.shape == keep.shape
    assert not (block & keep).any() and (block | keep).all()  # exactly one of them is True
    assert torch.equal(block_to_keep(block), keep)


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(0, 10**6), st.sampled_from([torch.float16, torch.float32, torch.float64]))
def test_keep_to_additive_values_and_round_trip(shape, seed, dtype):
    keep = random_keep(shape, seed)
    additive = keep_to_additive(keep, dtype)
    assert additive.dtype == dtype and additive.shape == keep.shape
    assert (additive[keep] == 0).all()
    assert (additive[~keep] == -math.inf).all()  # -inf exactly, also in float16
    assert torch.equal(additive_to_keep(additive), keep)


def test_causal_keep_mask_as_block_and_additive():
    keep = causal_mask(3)
    assert torch.equal(keep_to_block(keep), torch.ones(3, 3, dtype=torch.bool).triu(1))
    inf = math.inf
    expected = torch.tensor([[0.0, -inf, -inf], [0.0, 0.0, -inf], [0.0, 0.0, 0.0]])
    assert torch.equal(keep_to_additive(keep), expected)


def test_additive_and_keep_give_the_same_attention(device, dtype):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 4, generator=g, dtype=dtype).to(device) for n in (5, 6, 6))
    keep = random_keep((2, 1, 5, 6), 1, device)
    keep[..., 0] = True
    additive = keep_to_additive(keep, dtype)
    assert additive.device.type == device.type
    out_keep, w_keep = attention(q, k, v, mask=keep)
    out_add, w_add = attention(q, k, v, mask=additive)
    assert_close(out_add, out_keep, **tolerances(dtype))
    assert_close(w_add, w_keep, **tolerances(dtype))
    assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=additive), out_keep, **tolerances(dtype))
    # the block mask has the opposite meaning: handing it to SDPA as if it were a keep-mask is wrong
    wrong = F.scaled_dot_product_attention(q, k, v, attn_mask=keep_to_block(keep))
    assert not torch.allclose(wrong, out_keep)


def test_conversions_reject_the_wrong_convention():
    keep = causal_mask(3)
    with pytest.raises(TypeError, match="boolean"):
        keep_to_block(keep.float())  # an additive or {0, 1} float mask is not a keep-mask
    with pytest.raises(TypeError, match="boolean"):
        block_to_keep(keep.long())
    with pytest.raises(TypeError, match="boolean"):
        keep_to_additive(keep_to_additive(keep))
    with pytest.raises(TypeError, match="floating-point torch.dtype"):
        keep_to_additive(keep, torch.int64)
    with pytest.raises(TypeError, match="floating-point"):
        additive_to_keep(keep)
    with pytest.raises(TypeError, match="torch.Tensor"):
        keep_to_block([[True]])
    with pytest.raises(TypeError, match="torch.Tensor"):
        additive_to_keep([[0.0]])


@pytest.mark.parametrize("bad", [-1e9, 1.0, -0.5, math.inf, math.nan])
def test_additive_to_keep_refuses_finite_biases(bad):
    additive = keep_to_additive(causal_mask(4))
    additive[0, 1] = bad  # e.g. the -1e9 convention, or a bias that a boolean cannot express
    with pytest.raises(ValueError, match="only 0 and -inf"):
        additive_to_keep(additive)
