"""Sinusoidal positional encoding (chapter 5): the closed form, the wavelengths, the shift rotation,
dot products that depend only on the offset, and the errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import pair_rotation, shift_matrix, sinusoid_frequencies, sinusoidal_encoding

from ..conftest import tolerances

F64 = torch.float64
# the `device` fixture is a plain parameter (a torch.device), safe to share across hypothesis examples
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

even_widths = st.integers(1, 24).map(lambda h: 2 * h)
bases = st.sampled_from([10000.0, 100.0, 2.5, 1e6])


def closed_form(n_positions: int, d_model: int, base: float) -> list[list[float]]:
    """P[i][2j] = sin(i w_j), P[i][2j+1] = cos(i w_j), w_j = base^(-2j/d), written with loops."""
    P = [[0.0] * d_model for _ in range(n_positions)]
    for i in range(n_positions):
        for j in range(d_model // 2):
            w = 1.0 / base ** (2 * j / d_model)
            P[i][2 * j] = math.sin(i * w)
            P[i][2 * j + 1] = math.cos(i * w)
    return P


@PROPERTY
@given(n=st.integers(1, 40), d_model=even_widths, base=bases)
def test_matches_the_closed_form_written_with_loops(device, n, d_model, base):
    P = sinusoidal_encoding(n, d_model, base, device=device, dtype=F64)
    assert P.shape == (n, d_model) and P.dtype == F64 and P.device.type == device.type
    expected = torch.tensor(closed_form(n, d_model, base), dtype=F64, device=device)
    assert_close(P, expected, atol=1e-12, rtol=0)


def test_known_values(device):
    P = sinusoidal_encoding(3, 4, device=device, dtype=F64)
    # position 0: sin 0 = 0, cos 0 = 1 in every pair
    assert_close(P[0], torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=F64, device=device))
    # position 2, d_model = 4: w_0 = 1, w_1 = 10000^(-1/2) = 0.01
    expected = [math.sin(2.0), math.cos(2.0), math.sin(0.02), math.cos(0.02)]
    assert_close(P[2], torch.tensor(expected, dtype=F64, device=device))


def test_dtype_and_device(device, dtype):
    P = sinusoidal_encoding(200, 16, device=device, dtype=dtype)
    assert P.dtype == dtype and P.device.type == device.type
    reference = sinusoidal_encoding(200, 16, dtype=F64).to(device=device, dtype=dtype)
    assert_close(P, reference, **tolerances(dtype))


def test_default_dtype_is_torch_default():
    assert sinusoidal_encoding(2, 2).dtype == torch.get_default_dtype()


@PROPERTY
@given(d_model=even_widths, base=bases)
def test_frequencies_and_wavelengths(device, d_model, base):
    w = sinusoid_frequencies(d_model, base, device=device, dtype=F64)
    assert w.shape == (d_model // 2,)
    wavelength = 2 * math.pi / w
    # the first pair has wavelength 2 pi, the last 2 pi base^((d-2)/d) < 2 pi base
    assert_close(wavelength[0], torch.tensor(2 * math.pi, dtype=F64, device=device))
    assert_close(
        wavelength[-1], torch.tensor(2 * math.pi * base ** ((d_model - 2) / d_model), dtype=F64, device=device)
    )
    assert bool((wavelength < 2 * math.pi * base).all())
    # a geometric progression with ratio base^(2/d): the frequencies decrease when base > 1
    ratios = wavelength[1:] / wavelength[:-1]
    assert_close(ratios, torch.full_like(ratios, base ** (2 / d_model)))
    if base > 1 and d_model > 2:
        assert bool((w[1:] < w[:-1]).all())


@PROPERTY
@given(i=st.integers(0, 2000), delta=st.integers(-500, 500), frequency=st.floats(1e-5, 3.0))
def test_pair_rotation_shifts_one_pair_by_delta(device, i, delta, frequency):
    R = pair_rotation(delta, torch.tensor(frequency, dtype=F64, device=device))  # (2, 2)
    pair = torch.tensor([math.sin(i * frequency), math.cos(i * frequency)], dtype=F64, device=device)
    shifted = torch.tensor(
        [math.sin((i + delta) * frequency), math.cos((i + delta) * frequency)], dtype=F64, device=device
    )
    assert_close(R @ pair, shifted, atol=1e-9, rtol=0)
    # the transpose (the counter-clockwise rotation, right for a (cos, sin) pair) goes to i - delta
    back = torch.tensor(
        [math.sin((i - delta) * frequency), math.cos((i - delta) * frequency)], dtype=F64, device=device
    )
    assert_close(R.T @ pair, back, atol=1e-9, rtol=0)


@PROPERTY
@given(n=st.integers(2, 60), d_model=even_widths, delta=st.integers(-59, 59), base=bases)
def test_shift_matrix_maps_every_position_i_to_i_plus_delta(device, n, d_model, delta, base):
    P = sinusoidal_encoding(n, d_model, base, device=device, dtype=F64)  # (n, d_model)
    M = shift_matrix(delta, d_model, base, device=device, dtype=F64)  # (d_model, d_model)
    lo, hi = max(0, -delta), min(n, n - delta)  # the positions i with i and i + delta both in range
    if lo < hi:
        assert_close(P[lo + delta : hi + delta], P[lo:hi] @ M.T, atol=1e-9, rtol=0)
    # beyond the table as well: the encoding of position i + delta computed directly
    far = sinusoidal_encoding(2 * abs(delta) + 1, d_model, base, device=device, dtype=F64)
    start = abs(delta)
    assert_close(far[start + delta], M @ far[start], atol=1e-9, rtol=0)


@PROPERTY
@given(a=st.floats(-50, 50), b=st.floats(-50, 50), frequency=st.floats(1e-4, 2.0))
def test_pair_rotations_are_orthogonal_and_compose(device, a, b, frequency):
    w = torch.tensor(frequency, dtype=F64, device=device)
    Ra, Rb = pair_rotation(a, w), pair_rotation(b, w)
    eye = torch.eye(2, dtype=F64, device=device)
    assert_close(Ra.T @ Ra, eye)
    assert_close(torch.linalg.det(Ra), torch.tensor(1.0, dtype=F64, device=device))
    assert_close(Ra @ Rb, pair_rotation(a + b, w), atol=1e-12, rtol=1e-12)
    assert_close(Ra.T, pair_rotation(-a, w))


def test_pair_rotation_broadcasts_over_frequencies(device):
    w = sinusoid_frequencies(8, device=device, dtype=F64)  # (4,)
    R = pair_rotation(3, w)
    assert R.shape == (4, 2, 2) and R.dtype == F64
    for j in range(4):
        assert_close(R[j], pair_rotation(3.0, float(w[j])).to(device))
    assert_close(torch.block_diag(*R), shift_matrix(3, 8, device=device, dtype=F64))


@PROPERTY
@given(n=st.integers(2, 80), d_model=even_widths, base=bases)
def test_dot_products_depend_only_on_the_offset(device, n, d_model, base):
    P = sinusoidal_encoding(n, d_model, base, device=device, dtype=F64)
    w = sinusoid_frequencies(d_model, base, device=device, dtype=F64)
    G = P @ P.T  # (n, d_model) @ (d_model, n) -> (n, n)
    offsets = torch.arange(n, device=device, dtype=F64)
    offset = offsets[None, :] - offsets[:, None]  # (n, n), entry (i, k) is k - i
    # p_i . p_k = sum_j [sin(i w) sin(k w) + cos(i w) cos(k w)] = sum_j cos((k - i) w_j)
    expected = torch.cos(offset[..., None] * w).sum(-1)  # (n, n, d_model/2) -> (n, n)
    assert_close(G, expected, atol=1e-9, rtol=0)
    # so G is a symmetric Toeplitz matrix, and every encoding has squared norm d_model / 2
    assert_close(G, G.T)
    assert_close(G[1:, 1:], G[:-1, :-1])
    assert_close(G.diagonal(), torch.full((n,), d_model / 2, dtype=F64, device=device))


def test_a_swapped_or_sign_flipped_encoding_fails_the_checks(device):
    # the properties above are not satisfied by the usual mistakes, so the tests can fail
    P = sinusoidal_encoding(30, 8, device=device, dtype=F64)
    swapped = P.reshape(30, 4, 2).flip(-1).reshape(30, 8)  # cos first, then sin
    expected = torch.tensor(closed_form(30, 8, 10000.0), dtype=F64, device=device)
    assert not torch.allclose(swapped, expected)
    M = shift_matrix(5, 8, device=device, dtype=F64)
    assert not torch.allclose(P[5:], P[:-5] @ M)  # M instead of M^T: the opposite shift
    assert not torch.allclose(swapped[5:], swapped[:-5] @ M.T)  # the sign belongs to the sin-cos order


@pytest.mark.parametrize("d_model", [1, 3, 7])
def test_odd_width_is_rejected(d_model):
    with pytest.raises(ValueError, match="d_model must be even"):
        sinusoidal_encoding(4, d_model)
    with pytest.raises(ValueError, match="d_model must be even"):
        sinusoid_frequencies(d_model)
    with pytest.raises(ValueError, match="d_model must be even"):
        shift_matrix(1, d_model)


@pytest.mark.parametrize("n_positions, d_model", [(0, 4), (-1, 4), (3, 0), (3, -2)])
def test_non_positive_sizes_are_rejected(n_positions, d_model):
    with pytest.raises(ValueError, match="positive"):
        sinusoidal_encoding(n_positions, d_model)


@pytest.mark.parametrize("n_positions, d_model", [(2.0, 4), (3, 4.0), (True, 4), ("3", 4)])
def test_non_integer_sizes_are_rejected(n_positions, d_model):
    with pytest.raises(TypeError, match="must be an int"):
        sinusoidal_encoding(n_positions, d_model)


@pytest.mark.parametrize("base", [0.0, -10.0, math.inf, math.nan, "10000"])
def test_bad_base_is_rejected(base):
    with pytest.raises(ValueError, match="base"):
        sinusoidal_encoding(4, 4, base)


def test_integer_dtype_is_rejected():
    with pytest.raises(TypeError, match="floating-point"):
        sinusoidal_encoding(4, 4, dtype=torch.int64)


def test_pair_rotation_rejects_bad_arguments():
    with pytest.raises(TypeError, match="delta"):
        pair_rotation("1", 0.5)
    with pytest.raises(TypeError, match="frequency"):
        pair_rotation(1, torch.tensor([True]))
    with pytest.raises(ValueError, match="do not broadcast"):
        pair_rotation(torch.ones(3), torch.ones(2))
    with pytest.raises(TypeError, match="delta"):
        shift_matrix(math.nan, 4)
