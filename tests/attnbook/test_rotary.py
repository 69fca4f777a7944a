"""Rotary position embeddings (chapter 9): the closed form as complex multiplication, chapter 5's
shift matrix, scores that depend on the offset only (hypothesis), the two pairings and the
permutation between them, arbitrary positions, and the errors.

The references below are written independently of the package: Meta's original Llama formulation
(pairs of neighbours as complex numbers times ``torch.polar``) and GPT-NeoX's ``rotate_half``;
``transformers`` (pinned in ``[test]``) is compared here through its ``apply_rotary_pos_emb`` and,
whole attention layers with their weights copied, in ``tests/attnbook/production/``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import (
    apply_rotary,
    half_to_interleaved,
    interleaved_to_half,
    rotary_angles,
    rotary_permutation,
    shift_matrix,
)

from ..conftest import tolerances

F64 = torch.float64
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
even_widths = st.integers(1, 16).map(lambda h: 2 * h)
bases = st.sampled_from([10000.0, 500000.0, 100.0])


def draw(*shape, seed=0, dtype=F64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64).to(device=device, dtype=dtype)


def complex_reference(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Interleaved pairs as complex numbers z_j = x_2j + i x_2j+1, times e^{i p theta_j} (Meta's Llama code)."""
    d = x.shape[-1]
    theta = 1.0 / base ** (torch.arange(0, d, 2, dtype=F64) / d)  # (d/2,)
    freqs = torch.outer(positions.to("cpu", F64).flatten(), theta).reshape(*positions.shape, d // 2)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # e^{i p theta_j}
    z = torch.view_as_complex(x.to("cpu", F64).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * freqs_cis).flatten(-2).to(device=x.device, dtype=x.dtype)


def rotate_half_reference(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """GPT-NeoX / Hugging Face Llama: x cos + rotate_half(x) sin with the angles repeated over both halves."""
    d = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=F64) / d)  # (d/2,)
    freqs = positions.to("cpu", F64)[..., None] * inv_freq  # (..., d/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (..., d)
    x64 = x.to("cpu", F64)
    x1, x2 = x64[..., : d // 2], x64[..., d // 2 :]
    rotated = torch.cat((-x2, x1), dim=-1)
    return (x64 * emb.cos() + rotated * emb.sin()).to(device=x.device, dtype=x.dtype)


@PROPERTY
@given(d=even_widths, n=st.integers(1, 12), base=bases, start=st.integers(-1000, 10**5), seed=st.integers(0, 10**6))
def test_interleaved_is_complex_multiplication(device, d, n, base, start, seed):
    x = draw(2, n, d, seed=seed, device=device)
    g = torch.Generator().manual_seed(seed)
    positions = (start + torch.randint(0, 5000, (n,), generator=g)).to(device)  # arbitrary, unsorted
    assert_close(apply_rotary(x, positions, base=base), complex_reference(x, positions, base), atol=1e-9, rtol=1e-9)


@PROPERTY
@given(d=even_widths, n=st.integers(1, 12), base=bases, start=st.integers(-1000, 10**5), seed=st.integers(0, 10**6))
def test_half_is_rotate_half(device, d, n, base, start, seed):
    x = draw(3, n, d, seed=seed, device=device)
    g = torch.Generator().manual_seed(seed)
    positions = (start + torch.randint(0, 5000, (3, n), generator=g)).to(device)  # one row of positions per sequence
    expected = rotate_half_reference(x, positions, base)
    assert_close(apply_rotary(x, positions, pairing="half", base=base), expected, atol=1e-9, rtol=1e-9)


def test_is_chapter_5_shift_matrix_row_by_row(device):
    d = 12
    x = draw(7, d, seed=1, device=device)
    positions = torch.tensor([0, 3, -2, 50, 7, 7, 1000], device=device)
    rotated = apply_rotary(x, positions)
    for row, p in enumerate(positions.tolist()):
        assert_close(rotated[row], x[row] @ shift_matrix(p, d, device=device, dtype=F64))  # (d,) @ (d, d)


def test_position_zero_is_the_identity_and_lengths_are_kept(device, dtype):
    x = draw(4, 5, 16, seed=2, dtype=dtype, device=device)
    assert_close(apply_rotary(x, torch.zeros(5, dtype=torch.long, device=device)), x)
    rotated = apply_rotary(x, torch.arange(100, 105, device=device), pairing="half")
    assert rotated.dtype == dtype and rotated.device.type == device.type and rotated.shape == x.shape
    assert_close(rotated.norm(dim=-1), x.norm(dim=-1), **tolerances(dtype))


def test_float32_agrees_with_float64(device):
    x = draw(2, 3, 40, 32, seed=3, device=device)
    positions = torch.arange(40, device=device) + 4000
    for pairing in ("interleaved", "half"):
        exact = apply_rotary(x, positions, pairing=pairing)
        single = apply_rotary(x.float(), positions, pairing=pairing)
        assert_close(single, exact.float(), **tolerances(torch.float32))


def rotary_score(q, k, i, l, pairing="interleaved"):
    """rot(q, i) . rot(k, l) for vectors q, k (d,) and integer positions."""
    device = q.device
    rq = apply_rotary(q[None], torch.tensor([i], device=device), pairing=pairing)[0]
    rk = apply_rotary(k[None], torch.tensor([l], device=device), pairing=pairing)[0]
    return rq @ rk


@PROPERTY
@given(
    d=even_widths,
    i=st.integers(-(10**4), 10**4),
    l=st.integers(-(10**4), 10**4),
    shift=st.integers(-(10**4), 10**4),
    pairing=st.sampled_from(["interleaved", "half"]),
    seed=st.integers(0, 10**6),
)
def test_scores_depend_on_the_offset_only(device, d, i, l, shift, pairing, seed):
    q, k = draw(2, d, seed=seed, device=device)
    score = rotary_score(q, k, i, l, pairing)
    assert_close(rotary_score(q, k, i + shift, l + shift, pairing), score, atol=1e-9, rtol=1e-9)
    # the whole rotation moves onto the query (or the key): rot(q, i) . rot(k, l) = rot(q, i - l) . k
    assert_close(rotary_score(q, k, i - l, 0, pairing), score, atol=1e-9, rtol=1e-9)
    assert_close(rotary_score(q, k, 0, l - i, pairing), score, atol=1e-9, rtol=1e-9)


@PROPERTY
@given(n=st.integers(1, 10), m=st.integers(1, 10), shift=st.integers(-(10**5), 10**5), seed=st.integers(0, 10**6))
def test_score_matrix_is_unchanged_when_all_positions_shift(device, n, m, shift, seed):
    """For whole sequences at arbitrary positions: Q K^T after rotation is invariant under a common shift."""
    g = torch.Generator().manual_seed(seed)
    q, k = draw(2, n, 8, seed=seed, device=device), draw(2, m, 8, seed=seed + 1, device=device)
    pos_q = torch.randint(-500, 500, (2, n), generator=g).to(device)
    pos_k = torch.randint(-500, 500, (2, m), generator=g).to(device)
    scores = apply_rotary(q, pos_q) @ apply_rotary(k, pos_k).mT  # (2, n, 8) @ (2, 8, m)
    shifted = apply_rotary(q, pos_q + shift) @ apply_rotary(k, pos_k + shift).mT
    assert_close(shifted, scores, atol=1e-9, rtol=1e-9)


def test_positions_matter():
    """A rotation that ignored the positions would give the same scores for every offset."""
    q, k = draw(2, 8, seed=4)
    scores = {rotary_score(q, k, 0, offset).item() for offset in range(6)}
    assert len(scores) == 6
    assert not torch.allclose(rotary_score(q, k, 0, 3), rotary_score(q, k, 3, 0))  # +3 and -3 differ


def test_the_permutation_between_the_pairings(device):
    d = 10
    perm = rotary_permutation(d, device=device)
    assert perm.tolist() == [0, 5, 1, 6, 2, 7, 3, 8, 4, 9]
    assert sorted(perm.tolist()) == list(range(d))
    x = draw(3, d, seed=5, device=device)
    assert_close(half_to_interleaved(x), x[..., perm])
    assert_close(interleaved_to_half(half_to_interleaved(x)), x)
    assert_close(half_to_interleaved(interleaved_to_half(x)), x)
    assert interleaved_to_half(torch.arange(d, dtype=F64)).tolist() == [0, 2, 4, 6, 8, 1, 3, 5, 7, 9]


@PROPERTY
@given(d=even_widths, n=st.integers(1, 8), seed=st.integers(0, 10**6))
def test_the_pairings_are_conjugate_by_the_permutation(device, d, n, seed):
    """rot_half(x) = P^-1 rot_interleaved(P x): the same rotation, with the features reordered."""
    x = draw(n, d, seed=seed, device=device)
    positions = torch.randint(-100, 10**4, (n,), generator=torch.Generator().manual_seed(seed)).to(device)
    half = apply_rotary(x, positions, pairing="half")
    assert_close(half, interleaved_to_half(apply_rotary(half_to_interleaved(x), positions)))
    interleaved = apply_rotary(x, positions)
    assert_close(interleaved, half_to_interleaved(apply_rotary(interleaved_to_half(x), positions, pairing="half")))
    if d > 2:
        assert not torch.allclose(half, interleaved)  # the pairings differ on the same features


def test_converted_projections_give_the_same_scores(device):
    """Permuting the columns of W_q and W_k turns a half-pairing model into an interleaved one."""
    d_model, d = 16, 8
    X = draw(9, d_model, seed=6, device=device)
    W_q, W_k = draw(d_model, d, seed=7, device=device), draw(d_model, d, seed=8, device=device)
    positions = torch.arange(9, device=device) + 30
    perm = rotary_permutation(d, device=device)
    half = apply_rotary(X @ W_q, positions, pairing="half") @ apply_rotary(X @ W_k, positions, pairing="half").T
    inter = apply_rotary(X @ W_q[:, perm], positions) @ apply_rotary(X @ W_k[:, perm], positions).T
    assert_close(inter, half)


def test_positions_broadcast_over_heads(device):
    x = draw(2, 3, 5, 8, seed=9, device=device)  # (batch, heads, n, d)
    positions = torch.tensor([[4, 9, 2, 0, 11], [100, 101, 102, 103, 104]], device=device)  # (batch, n)
    rotated = apply_rotary(x, positions[:, None, :])
    for b in range(2):
        for h in range(3):
            assert_close(rotated[b, h], complex_reference(x[b, h], positions[b]))


def test_rotary_angles(device):
    positions = torch.tensor([[0, 1], [7, -3]], device=device)
    angles = rotary_angles(positions, 6, base=100.0, dtype=F64)
    assert angles.shape == (2, 2, 3) and angles.dtype == F64 and angles.device.type == device.type
    omega = torch.tensor([1.0, 100 ** (-2 / 6), 100 ** (-4 / 6)], dtype=F64, device=device)
    assert_close(angles, positions[..., None].to(F64) * omega)
    assert rotary_angles(torch.arange(3), 4).dtype == torch.get_default_dtype()
    assert_close(rotary_angles(torch.tensor([2.5]), 2, dtype=F64), torch.tensor([[2.5]], dtype=F64))


def test_gradients_flow():
    x = draw(3, 4, seed=10).requires_grad_()
    apply_rotary(x, torch.arange(3)).pow(2).sum().backward()
    assert_close(x.grad, 2 * x.detach())  # a rotation keeps |x|^2, so its gradient is 2x


def test_errors():
    x = draw(4, 6)
    with pytest.raises(ValueError, match="even"):
        apply_rotary(draw(4, 5), torch.arange(4))
    with pytest.raises(TypeError, match="positions"):
        apply_rotary(x, torch.ones(4, dtype=torch.bool))
    with pytest.raises(TypeError, match="positions"):
        apply_rotary(x, [0, 1, 2, 3])
    with pytest.raises(ValueError, match="broadcast"):
        apply_rotary(x, torch.arange(5))
    with pytest.raises(ValueError, match="broadcast"):
        apply_rotary(x, torch.zeros(2, 4, dtype=torch.long))  # would enlarge x
    with pytest.raises(ValueError, match="pairing"):
        apply_rotary(x, torch.arange(4), pairing="neox")
    with pytest.raises(TypeError, match="floating"):
        apply_rotary(torch.ones(4, 6, dtype=torch.long), torch.arange(4))
    with pytest.raises(ValueError, match="base"):
        apply_rotary(x, torch.arange(4), base=0.0)
    with pytest.raises(ValueError, match="even"):
        rotary_permutation(7)
    with pytest.raises(ValueError, match="positions are on"):
        apply_rotary(x, torch.arange(4, device="meta"))


def test_matches_transformers_if_installed():
    transformers_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    q, k = draw(2, 4, 7, 16, seed=11), draw(2, 2, 7, 16, seed=12)  # (batch, heads, n, d)
    positions = torch.tensor([[3, 4, 5, 6, 7, 8, 9], [0, 10, 20, 30, 40, 50, 60]])
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, 16, 2, dtype=F64) / 16)
    emb = torch.cat((positions[..., None] * inv_freq, positions[..., None] * inv_freq), dim=-1)  # (batch, n, d)
    q_ref, k_ref = transformers_llama.apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
    assert_close(apply_rotary(q, positions[:, None, :], pairing="half"), q_ref)
    assert_close(apply_rotary(k, positions[:, None, :], pairing="half"), k_ref)


def test_matches_torchtune_if_installed():
    modules = pytest.importorskip("torchtune.modules")
    rope = modules.RotaryPositionalEmbeddings(dim=16, max_seq_len=64, base=10000)
    x = draw(2, 7, 3, 16, seed=13, dtype=torch.float32)  # torchtune's layout: (batch, n, heads, d)
    positions = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [40, 2, 33, 0, 1, 63, 8]])
    expected = rope(x, input_pos=positions)
    got = apply_rotary(x.transpose(1, 2), positions[:, None, :]).transpose(1, 2)
    assert_close(got, expected, atol=1e-4, rtol=1e-4)  # torchtune forms its angles in float32


def test_large_positions_stay_accurate_in_float32():
    """The angles are formed in float64: at position 10^6 + 1 a float32 angle is off by up to 0.03 rad."""
    x = draw(1, 4, dtype=torch.float32)
    positions = torch.tensor([10**6 + 1])
    expected = complex_reference(x.double(), positions).float()
    assert_close(apply_rotary(x, positions), expected, atol=1e-5, rtol=1e-5)
