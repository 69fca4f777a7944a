"""attnbook.core.masks as the one home of a mask: its dtype against the scores, its application, the
multi-head layouts read by number of dimensions; attnbook.core.masks.check_mask only checks."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

import attnbook
from attnbook import MultiHeadAttention, apply_mask, causal_mask
from attnbook.core.masks import check_mask, heads_mask, mask_like_scores, restrict_mask

from ..conftest import tolerances


def test_check_mask_only_checks():
    """It returns nothing and leaves the mask as it was (the cast is mask_like_scores')."""
    mask = torch.zeros(3, 4, dtype=torch.float16)
    assert check_mask(mask, (2, 3, 4), torch.device("cpu")) is None
    assert mask.dtype == torch.float16
    with pytest.raises(ValueError, match="does not broadcast"):
        check_mask(mask, (2, 4, 4), torch.device("cpu"))
    with pytest.raises(TypeError, match="boolean"):
        check_mask(mask.long(), (3, 4), torch.device("cpu"))


def test_mask_like_scores_casts_float_masks_and_keeps_boolean_ones(device):
    keep = causal_mask(3, device=device)
    assert mask_like_scores(keep, torch.float64) is keep
    assert mask_like_scores(None, torch.float64) is None
    additive = attnbook.keep_to_additive(keep, torch.float16)  # (3, 3) in float16
    cast = mask_like_scores(additive, torch.float64)
    assert cast.dtype == torch.float64 and cast.device == additive.device
    assert torch.equal(cast == -math.inf, ~keep)


def test_a_mask_in_another_float_dtype_meets_the_scores_in_theirs(device):
    """A float32 mask on float64 inputs: the output stays float64 and equals that of the float64 mask."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, generator=g, dtype=torch.float64).to(device) for _ in range(3))
    bias = torch.randn(3, 3, generator=g).to(device)  # float32
    expected, _ = attnbook.attention(q, k, v, mask=bias.double())
    outputs = {
        "attention": attnbook.attention(q, k, v, mask=bias)[0],
        "fused attention": attnbook.attention(q, k, v, mask=bias, need_weights=False)[0],
        "tiled attention": attnbook.tiled_attention(q, k, v, mask=bias, block_size=2),
        "hard attention": attnbook.hard_attention(q, k, v, mask=bias)[0],
    }
    for name, out in outputs.items():
        assert out.dtype == torch.float64, name
    assert_close(outputs["attention"], expected)
    assert_close(outputs["tiled attention"], expected)
    assert_close(outputs["hard attention"], attnbook.hard_attention(q, k, v, mask=bias.double())[0])


def test_apply_mask_keep_and_additive_agree(device, dtype):
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(2, 4, 4, generator=g, dtype=dtype).to(device)
    keep = causal_mask(4, device=device)
    masked = apply_mask(scores, keep)
    assert torch.equal(masked == -math.inf, ~keep.expand(2, 4, 4))
    assert_close(masked, apply_mask(scores, attnbook.keep_to_additive(keep, dtype)), **tolerances(dtype))
    assert apply_mask(scores, None) is scores


def test_restrict_mask_allows_what_both_allow(device):
    keep = causal_mask(3, device=device)  # (3, 3)
    padding = attnbook.padding_mask([3, 2], device=device)[:, None, :]  # (2, 1, 3)
    both = restrict_mask(padding, keep)  # (2, 3, 3)
    assert torch.equal(both, padding & keep)
    additive = attnbook.keep_to_additive(padding, torch.float32)
    assert torch.equal(restrict_mask(additive, keep) == -math.inf, ~both)
    assert restrict_mask(None, keep) is keep


@pytest.mark.parametrize("shape", [(4, 5), (2, 4, 5), (2, 3, 4, 5), (1, 4, 5), (2, 1, 4, 5), (1, 5)])
def test_heads_mask_reads_the_layout_by_its_number_of_dimensions(shape, device):
    """(n, m) for all; (batch, n, m) per sequence, shared by the heads; (batch, heads, n, m)."""
    g = torch.Generator().manual_seed(2)
    mask = (torch.rand(*shape, generator=g) > 0.3).to(device)
    like = torch.zeros((), dtype=torch.float64, device=device)
    out = heads_mask(mask, 2, 3, 4, 5, like=like)
    assert out.ndim == 4
    expected = {2: mask[None, None], 3: mask[:, None]}.get(mask.ndim, mask)
    assert torch.equal(out, expected)
    assert heads_mask(None, 2, 3, 4, 5, like=like) is None
    additive = heads_mask(attnbook.keep_to_additive(mask, torch.float16), 2, 3, 4, 5, like=like)
    assert additive.dtype == torch.float64


def test_heads_mask_errors_name_the_layouts(device):
    like = torch.zeros((), device=device)
    with pytest.raises(ValueError, match=r"2, 3 or 4 dimensions.*\(batch, heads, n, m\)"):
        heads_mask(torch.ones(4, 5, 6, 7, 8, dtype=torch.bool, device=device), 2, 3, 4, 5, like=like)
    with pytest.raises(ValueError, match=r"read as \(batch, n, m\)"):
        heads_mask(torch.ones(3, 4, 5, dtype=torch.bool, device=device), 2, 3, 4, 5, like=like)  # not (heads, n, m)


def test_multi_head_attention_and_the_models_read_a_mask_alike(device):
    """MultiHeadAttention and EncoderBlock read the mask through heads_mask: the same layouts."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, device=device, dtype=torch.float64)
    block = attnbook.models.blocks.EncoderBlock(8, 2, mlp=False, norm=None, device=device, dtype=torch.float64)
    block.self_attn.load_state_dict(mha.state_dict())
    x = torch.randn(2, 4, 8, dtype=torch.float64, device=device)
    padding = attnbook.padding_mask([4, 2], device=device)[:, None, :]  # (batch, 1, m)
    for mask in (padding, padding.expand(2, 4, 4), padding[:, None].expand(2, 2, 4, 4), causal_mask(4, device=device)):
        out, weights = mha(x, x, x, mask=mask, need_weights=True)
        assert_close(block(x, mask, need_weights=True)[0], x + out)
        assert_close(mha(x, x, x, mask=mask)[0], out)  # the fused path reads it the same way
