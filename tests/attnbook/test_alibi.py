"""ALiBi, attention with linear biases (chapter 9): the slopes of the authors' reference code and
their order, the bias written with loops, translation invariance (hypothesis), the key-position-only form some libraries use, and the
errors."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import alibi_bias, alibi_bias_for_positions, alibi_slopes, attention, causal_mask

from ..conftest import tolerances

F64 = torch.float64
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def reference_slopes(n: int) -> list[float]:
    """The slopes as ``get_slopes`` in the ALiBi authors' code (ofirpress/attention_with_linear_biases)
    computes them: the paper's geometric sequence for a power of two, recursive otherwise."""

    def power_of_2(k: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start**i for i in range(k)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + reference_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("heads", [1, 2, 3, 5, 6, 8, 12, 16, 20, 32, 40, 96])
def test_slopes_match_the_reference_code(device, heads):
    slopes = alibi_slopes(heads, device=device, dtype=F64)
    assert slopes.shape == (heads,) and slopes.device.type == device.type
    assert_close(slopes.cpu(), torch.tensor(reference_slopes(heads), dtype=F64))
    assert ((slopes > 0) & (slopes < 1)).all()


@pytest.mark.parametrize("heads", [1, 2, 3, 5, 6, 7, 8, 12, 16, 20, 24, 40, 96])
def test_slope_order(heads):
    """Decreasing for a power of two; otherwise two decreasing parts whose slopes interleave: all of
    them are slopes of 2P heads, and sorted they are those numbered 1, ..., 2(H - P), then the even
    ones up to 2P (numbered from 1)."""
    slopes = alibi_slopes(heads, dtype=F64)
    power = 2 ** math.floor(math.log2(heads))
    first, late = slopes[:power], slopes[power:]
    assert (first[1:] < first[:-1]).all() and (late[1:] < late[:-1]).all()  # each part decreasing
    decreasing = bool((slopes[1:] < slopes[:-1]).all())
    assert decreasing == (heads == power)  # the whole only for a power of two
    numbers = sorted(set(range(1, 2 * (heads - power) + 1)) | set(range(2, 2 * power + 1, 2)))
    assert len(numbers) == heads
    double = alibi_slopes(2 * power, dtype=F64)  # slope number h at index h - 1
    assert_close(slopes.sort(descending=True).values, double[[h - 1 for h in numbers]])
    if heads == 12:
        assert_close(
            slopes, torch.tensor([2.0**-h for h in range(1, 9)] + [2.0**-h for h in (0.5, 1.5, 2.5, 3.5)], dtype=F64)
        )


def test_slopes_for_eight_heads_and_the_geometric_sequence():
    assert alibi_slopes(8, dtype=F64).tolist() == [2.0**-k for k in range(1, 9)]
    for heads in (2, 4, 16, 64):
        slopes = alibi_slopes(heads, dtype=F64)
        assert_close(slopes[1:] / slopes[:-1], torch.full((heads - 1,), 2 ** (-8 / heads), dtype=F64))
        assert_close(slopes[0], torch.tensor(2 ** (-8 / heads), dtype=F64))
    assert alibi_slopes(4).dtype == torch.get_default_dtype()


@PROPERTY
@given(
    n=st.integers(0, 9),
    m=st.integers(0, 9),
    heads=st.integers(1, 6),
    align=st.sampled_from(["upper_left", "lower_right"]),
)
def test_bias_matches_the_definition_written_with_loops(device, n, m, heads, align):
    slopes = alibi_slopes(heads, device=device, dtype=F64)
    bias = alibi_bias(n, m, slopes, align=align)
    offset = 0 if align == "upper_left" else m - n
    expected = [[[-float(slopes[h]) * abs(i + offset - j) for j in range(m)] for i in range(n)] for h in range(heads)]
    assert bias.shape == (heads, n, m) and bias.dtype == F64 and bias.device.type == device.type
    assert_close(bias.cpu(), torch.tensor(expected, dtype=F64).reshape(heads, n, m))


def test_bias_depends_on_the_offset_only(device):
    bias = alibi_bias(12, 12, alibi_slopes(4, device=device, dtype=F64))
    assert_close(bias[:, 1:, 1:], bias[:, :-1, :-1])  # constant along every diagonal
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all()
    full = alibi_bias(20, 20, alibi_slopes(4, device=device, dtype=F64))
    assert_close(alibi_bias(3, 20, alibi_slopes(4, device=device, dtype=F64), align="lower_right"), full[:, 17:])


@PROPERTY
@given(
    n=st.integers(1, 8),
    m=st.integers(1, 8),
    heads=st.integers(1, 5),
    shift=st.integers(-(10**6), 10**6),
    seed=st.integers(0, 10**6),
)
def test_translation_invariance(device, n, m, heads, shift, seed):
    """Moving every query and key by the same amount changes neither the bias nor the attention."""
    g = torch.Generator().manual_seed(seed)
    pos_q = torch.randint(-1000, 1000, (2, n), generator=g).to(device)  # arbitrary positions, per sequence
    pos_k = torch.randint(-1000, 1000, (2, m), generator=g).to(device)
    slopes = alibi_slopes(heads, device=device, dtype=F64)
    bias = alibi_bias_for_positions(pos_q, pos_k, slopes)  # (2, H, n, m)
    assert bias.shape == (2, heads, n, m)
    assert_close(alibi_bias_for_positions(pos_q + shift, pos_k + shift, slopes), bias)
    q = torch.randn(2, heads, n, 4, generator=g, dtype=F64).to(device)
    k, v = (torch.randn(2, heads, m, 4, generator=g, dtype=F64).to(device) for _ in range(2))
    shifted = alibi_bias_for_positions(pos_q + shift, pos_k + shift, slopes)
    assert_close(attention(q, k, v, mask=shifted)[0], attention(q, k, v, mask=bias)[0])


def test_key_position_only_bias_gives_the_same_causal_attention(device, dtype):
    """Some libraries (BLOOM's code) add mu_h * j instead of -mu_h (i - j): under a causal mask the
    two differ by mu_h * i in row i, a constant per row, which the softmax ignores."""
    n, heads = 10, 4
    slopes = alibi_slopes(heads, device=device, dtype=dtype)
    causal = causal_mask(n, device=device)
    ours = alibi_bias(n, n, slopes).masked_fill(~causal, -math.inf)
    keys_only = (slopes[:, None, None] * torch.arange(n, device=device, dtype=dtype)).expand(heads, n, n)
    keys_only = keys_only.masked_fill(~causal, -math.inf)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, heads, n, 8, generator=g, dtype=F64).to(device=device, dtype=dtype) for _ in range(3))
    out, weights = attention(q, k, v, mask=ours)
    assert_close(out, attention(q, k, v, mask=keys_only)[0], **tolerances(dtype))
    assert (weights.triu(1) == 0).all()


def test_flex_attention_score_mod(device):
    """PyTorch's flex_attention with the bias written as a score_mod gives the same output."""
    try:
        from torch.nn.attention.flex_attention import flex_attention
    except ImportError as error:  # torch < 2.5
        pytest.skip(f"flex_attention is not available: {error}")
    n, heads = 32, 4
    slopes = alibi_slopes(heads, device=device, dtype=F64)

    def alibi_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx).abs()

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, heads, n, 16, generator=g, dtype=F64).to(device) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        try:
            out = flex_attention(q, k, v, score_mod=alibi_mod)
        except Exception as error:  # a backend that cannot run it here
            pytest.skip(f"flex_attention does not run on {device}: {type(error).__name__}: {error}")
    assert_close(out, attention(q, k, v, mask=alibi_bias(n, n, slopes))[0], atol=1e-10, rtol=1e-10)


def test_errors():
    with pytest.raises(ValueError, match="num_heads"):
        alibi_slopes(0)
    with pytest.raises(TypeError, match="num_heads"):
        alibi_slopes(2.0)
    slopes = alibi_slopes(2, dtype=F64)
    with pytest.raises(ValueError, match="align"):
        alibi_bias(3, 3, slopes, align="middle")
    with pytest.raises(TypeError, match="floating"):
        alibi_bias(3, 3, torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="query_positions"):
        alibi_bias_for_positions(torch.ones(3, dtype=torch.bool), torch.arange(3), slopes)
    with pytest.raises(ValueError, match="do not broadcast"):
        alibi_bias_for_positions(torch.zeros(2, 3), torch.zeros(3, 3), slopes)
