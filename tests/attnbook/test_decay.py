"""Decay and gates as a structured mask (chapter 14): the segment sum, the decay mask in log space and the
unsafe linear-space one, and gated linear attention in three forms that agree for every chunk size.

The tolerance is derived, not chosen: two computations differ by at most the sum of their rounding
bounds, :func:`attnbook.linear.decay.gated_linear_attention_rounding_bound` (its docstring has the
derivation: the bound of plain linear attention plus the error of each pair's decay factor),
checked in float32, where rounding shows, as in float64.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import (
    decay_mask,
    decay_mask_linear_space,
    elu_plus_one,
    gated_linear_attention_chunkwise,
    gated_linear_attention_quadratic,
    gated_linear_attention_recurrent,
    linear_attention_quadratic,
    segment_sum,
)
from attnbook.linear.decay import gated_linear_attention_rounding_bound

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def draw(shape, g, dtype, device):
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)


def inputs(batch, n, d_k, d_v, seed, dtype, device, strength=2.0):
    """Features phi(Q), phi(K), values V and log gates in [-strength, 0] (per batch entry and token)."""
    g = torch.Generator().manual_seed(seed)
    q, k = (
        elu_plus_one(draw((*batch, n, d_k), g, dtype, device)),
        elu_plus_one(draw((*batch, n, d_k), g, dtype, device)),
    )
    v = draw((*batch, n, d_v), g, dtype, device)
    log_gates = (-strength * torch.rand(*batch, n, generator=g, dtype=torch.float64)).to(dtype=dtype, device=device)
    return q, k, v, log_gates


def exact_segment_sums(log_gates):
    """sum_{t=j+1}^{i} log a_t by math.fsum (correctly rounded), -inf above the diagonal, one row of gates."""
    x = log_gates.detach().cpu().double().tolist()
    n = len(x)
    return torch.tensor(
        [[math.fsum(x[j + 1 : i + 1]) if j <= i else -math.inf for j in range(n)] for i in range(n)],
        dtype=torch.float64,
    )


def gated_bound(query, key, value, log_gates):
    """|form_1 - form_2| <= the sum of their two rounding bounds, entrywise (..., n, d_v)."""
    return 2 * gated_linear_attention_rounding_bound(query, key, value, log_gates)


def state_bound(key, value, log_gates):
    """|S_1 - S_2|: the final state sum_j L_{n-1, j} k_j^T v_j with the same relative errors."""
    n = key.shape[-2]
    eps = torch.finfo(key.dtype).eps
    s = segment_sum(log_gates.double())[..., -1, :]  # (..., n): from key j to the last token
    w = torch.exp(s) * (2 * n + 6 + n * s.abs())  # (..., n)
    return (2 * eps * (w.unsqueeze(-1) * key.abs().double()).transpose(-2, -1) @ value.abs().double()).to(key.dtype)


# ---------------------------------------------------------------- the segment sum and the decay mask


def test_segment_sum_exact_on_a_hand_made_row(device, dtype):
    log_gates = torch.tensor([-1.0, -2.0, -0.5, -4.0], dtype=dtype, device=device)
    inf = math.inf
    expected = torch.tensor(
        [
            [0.0, -inf, -inf, -inf],
            [-2.0, 0.0, -inf, -inf],
            [-2.5, -0.5, 0.0, -inf],
            [-6.5, -4.5, -4.0, 0.0],
        ],
        dtype=dtype,
        device=device,
    )
    assert torch.equal(segment_sum(log_gates), expected)
    # the first gate decays nothing inside the sequence; the diagonal is an empty product, exactly 1
    L = decay_mask(log_gates)
    assert torch.equal(L.diagonal(), torch.ones(4, dtype=dtype, device=device))
    assert torch.equal(L.triu(1), torch.zeros(4, 4, dtype=dtype, device=device))
    assert L[3, 1].item() == pytest.approx(math.exp(-4.5), rel=4 * torch.finfo(dtype).eps)


def test_segment_sum_is_not_a_difference_of_prefix_sums(device):
    """In float32 a large log gate early on swallows the small ones after it in the prefix sums:
    c_3 - c_2 = 0, but the segment from token 3 to token 3 is log a_3 = -1. Each entry is a sum of its
    own terms, so it is the correctly rounded sum."""
    log_gates = torch.tensor([-1.0, -1e8, -1.0, -1.0, -0.25], dtype=torch.float32, device=device)
    prefix = log_gates.cumsum(0)
    assert (prefix[3] - prefix[2]).item() == 0.0  # the cancellation the difference would suffer
    s = segment_sum(log_gates)
    assert s[3, 2].item() == -1.0 and s[4, 2].item() == -1.25 and s[4, 3].item() == -0.25
    assert torch.equal(s, exact_segment_sums(log_gates).float().to(device))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_segment_sum_against_correctly_rounded_sums(device, dtype, seed):
    """Random log gates: within a relative (i - j - 1) eps of math.fsum's sums (i - j terms, i - j - 1
    additions), row by row and batched; exact for one term and on the diagonal."""
    g = torch.Generator().manual_seed(seed)
    log_gates = (-3 * torch.rand(2, 3, 29, generator=g, dtype=torch.float64)).to(dtype=dtype, device=device)
    s = segment_sum(log_gates)
    assert s.shape == (2, 3, 29, 29) and s.dtype == dtype and s.device.type == device.type
    additions = (torch.arange(29)[:, None] - torch.arange(29)[None, :] - 1).clamp(min=0).to(device)
    for b in range(2):
        for h in range(3):
            exact = exact_segment_sums(log_gates[b, h]).to(device)
            below = exact > -math.inf
            assert torch.equal(s[b, h][~below], exact[~below])
            error = (s[b, h].double() - exact).abs()[below]
            assert (error <= additions[below] * torch.finfo(dtype).eps * exact.abs()[below]).all()


def test_decay_mask_equals_the_product_loop(device, dtype):
    """L_ij = a_{j+1} ... a_i multiplied out in Python (float64), entry by entry, per batch entry."""
    g = torch.Generator().manual_seed(3)
    log_gates = (-2 * torch.rand(2, 17, generator=g, dtype=torch.float64)).to(dtype=dtype, device=device)
    gates = torch.exp(log_gates.double()).cpu().tolist()
    L = decay_mask(log_gates)
    eps = torch.finfo(dtype).eps
    for b in range(2):
        for i in range(17):
            for j in range(17):
                expected = math.prod(gates[b][j + 1 : i + 1]) if j <= i else 0.0
                segment = -sum(math.log(a) for a in gates[b][j + 1 : i + 1]) if j <= i else 0.0
                assert abs(L[b, i, j].item() - expected) <= eps * (17 * (segment + 2) + 4) * expected, (b, i, j)


def test_decay_mask_is_one_semiseparable(device):
    """L_ij = L_ik L_kj for j <= k <= i (the gates between j and i split at k), so every block on or below
    the diagonal has rank at most 1."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    g = torch.Generator().manual_seed(4)
    log_gates = (-torch.rand(12, generator=g, dtype=torch.float64)).to(device)
    L = decay_mask(log_gates)
    for i in range(12):
        for j in range(i + 1):
            for k in range(j, i + 1):
                assert L[i, j].item() == pytest.approx(L[i, k].item() * L[k, j].item(), rel=1e-14)
    block = L[6:, :6]  # below the diagonal
    assert torch.linalg.matrix_rank(block).item() == 1


def test_a_constant_gate_is_retnets_decay(device, dtype):
    gamma = 0.9
    L = decay_mask(torch.full((3, 10), math.log(gamma), dtype=dtype, device=device))
    distance = torch.arange(10)[:, None] - torch.arange(10)[None, :]
    expected = torch.where(distance >= 0, gamma ** distance.clamp(min=0).double(), 0.0)
    assert_close(L, expected.to(dtype=dtype, device=device).expand(3, 10, 10))


# ---------------------------------------------------------------- the unsafe way fails


def test_the_linear_space_mask_fails_where_the_log_space_one_does_not(device):
    """Float32, every gate 0.5, n = 200: P_i = 2^-(i+1) underflows to 0 at i = 149 (below 2^-149, the smallest
    subnormal), so from there on every entry with j <= i, the diagonal included, is 0/0 = nan; the log-space
    mask stays finite, with L_ii = 1 and L_{160,155} = 2^-5 exactly."""
    gates = torch.full((200,), 0.5, dtype=torch.float32, device=device)
    unsafe = decay_mask_linear_space(gates)
    safe = decay_mask(torch.log(gates))
    assert torch.isfinite(safe).all()
    assert (safe.diagonal() == 1).all() and safe[160, 155].item() == 2.0**-5
    diagonal = unsafe.diagonal()
    assert torch.isnan(diagonal[149:]).all()  # where the true value is 1
    assert (diagonal[:126] == 1).all()  # while P_i is a normal number the ratio is right
    assert torch.isnan(unsafe[160, 155]).item()
    assert unsafe[149, 148].item() == 0.0 and safe[149, 148].item() == 0.5  # 0 / P_148 where the truth is 1/2
    assert not torch.isfinite(unsafe.tril()).all()
    # above the diagonal both are exactly 0
    assert (unsafe.triu(1) == 0).all() and (safe.triu(1) == 0).all()


def test_float64_fails_later_in_the_same_way(device):
    """Every gate 0.5 in float64: P_i = 2^-(i+1) is 0 from i = 1074 (below 2^-1074), and so is the diagonal nan."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    gates = torch.full((1100,), 0.5, dtype=torch.float64, device=device)
    diagonal = decay_mask_linear_space(gates).diagonal()
    assert torch.isnan(diagonal[1074:]).all() and (diagonal[:1022] == 1).all()
    assert (decay_mask(torch.log(gates)).diagonal() == 1).all()


def test_a_realistic_gate_fails_too_in_float32(device):
    """A gate of 0.9 (RetNet-like, decay length 10) at n = 2048: P_i = 0.9^(i+1) falls below 2^-149 from
    i = 980 in exact arithmetic (at i = 986 in float32's rounded cumulative product on this CPU; from
    i = 828 where subnormals are flushed to zero), and the unsafe mask is nan from there on; the
    log-space one is finite everywhere."""
    gates = torch.full((2048,), 0.9, dtype=torch.float32, device=device)
    unsafe = decay_mask_linear_space(gates)
    assert torch.isfinite(decay_mask(torch.log(gates))).all()
    first = int(torch.isnan(unsafe.diagonal()).nonzero()[0])
    assert 800 < first < 1000
    assert torch.isnan(unsafe.diagonal()[first:]).all() and (unsafe.diagonal()[:first] == 1).all()


def test_the_linear_space_mask_is_right_where_nothing_underflows(device):
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    g = torch.Generator().manual_seed(5)
    gates = (0.5 + 0.5 * torch.rand(2, 30, generator=g, dtype=torch.float64)).to(device)
    assert_close(decay_mask_linear_space(gates), decay_mask(torch.log(gates)), atol=1e-14, rtol=1e-13)


# ---------------------------------------------------------------- gated linear attention: three forms


@pytest.mark.parametrize("strength", [0.05, 2.0, 20.0])
def test_three_gated_forms_agree_in_float64_for_every_chunk_size(device, strength):
    """Length 37, every chunk size 1..38, weak to strong gates (per batch entry and head): outputs and
    states within the derived bound, the bound below 1e-12 of the outputs' size (not vacuous)."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    n = 37
    q, k, v, log_gates = inputs((2, 3), n, 6, 5, 0, torch.float64, device, strength)
    quadratic = gated_linear_attention_quadratic(q, k, v, log_gates)
    recurrent, S = gated_linear_attention_recurrent(q, k, v, log_gates)
    bound, S_bound = gated_bound(q, k, v, log_gates), state_bound(k, v, log_gates)
    assert (bound / quadratic.abs().amax()).max() < 1e-12
    assert ((recurrent - quadratic).abs() <= bound).all()
    worst = (recurrent - quadratic).abs().max().item()
    for chunk_size in range(1, n + 2):
        chunkwise, state = gated_linear_attention_chunkwise(q, k, v, log_gates, chunk_size)
        assert ((chunkwise - quadratic).abs() <= bound).all(), chunk_size
        assert ((chunkwise - recurrent).abs() <= bound).all(), chunk_size
        assert ((state - S).abs() <= S_bound).all(), chunk_size
        worst = max(worst, (chunkwise - quadratic).abs().max().item())
    assert worst < 1e-12


@PROPERTY
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    n=st.integers(1, 20),
    d_k=st.integers(1, 4),
    d_v=st.integers(1, 3),
    chunk_size=st.integers(1, 22),
    strength=st.sampled_from([0.0, 0.1, 1.0, 10.0]),
    seed=st.integers(0, 10**6),
)
def test_gated_forms_agree_within_the_derived_bound(device, dtype, batch, n, d_k, d_v, chunk_size, strength, seed):
    q, k, v, log_gates = inputs(batch, n, d_k, d_v, seed, dtype, device, strength)
    quadratic = gated_linear_attention_quadratic(q, k, v, log_gates)
    recurrent, _ = gated_linear_attention_recurrent(q, k, v, log_gates)
    chunkwise, _ = gated_linear_attention_chunkwise(q, k, v, log_gates, chunk_size)
    bound = gated_bound(q, k, v, log_gates)
    for out in (recurrent, chunkwise):
        assert out.shape == (*batch, n, d_v) and out.dtype == dtype and out.device.type == device.type
        assert ((out - quadratic).abs() <= bound).all()


def test_gated_forms_equal_the_pair_by_pair_sum(device):
    """o_i = sum_{j <= i} (a_{j+1} ... a_i)(q_i . k_j) v_j, pair by pair in Python (float64)."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    q, k, v, log_gates = inputs((), 9, 3, 2, 6, torch.float64, device)
    a = torch.exp(log_gates).tolist()
    expected = torch.zeros(9, 2, dtype=torch.float64)
    for i in range(9):
        for j in range(i + 1):
            expected[i] += math.prod(a[j + 1 : i + 1]) * (q[i] @ k[j]).item() * v[j].cpu()
    expected = expected.to(device)
    bound = gated_bound(q, k, v, log_gates)
    outputs = [
        gated_linear_attention_quadratic(q, k, v, log_gates),
        gated_linear_attention_recurrent(q, k, v, log_gates)[0],
        *(gated_linear_attention_chunkwise(q, k, v, log_gates, c)[0] for c in (1, 2, 4, 9, 10)),
    ]
    for out in outputs:
        assert ((out - expected).abs() <= bound).all()


def test_gates_of_one_give_plain_linear_attention(device, dtype):
    q, k, v, _ = inputs((2,), 11, 3, 4, 7, dtype, device)
    zeros = torch.zeros(2, 11, dtype=dtype, device=device)
    expected = linear_attention_quadratic(q, k, v, normalize=False)
    bound = gated_bound(q, k, v, zeros)
    assert torch.equal(decay_mask(zeros), torch.ones(11, 11, dtype=dtype, device=device).tril().expand(2, 11, 11))
    for out in (
        gated_linear_attention_quadratic(q, k, v, zeros),
        gated_linear_attention_recurrent(q, k, v, zeros)[0],
        gated_linear_attention_chunkwise(q, k, v, zeros, 4)[0],
    ):
        assert ((out - expected).abs() <= bound).all()


def test_the_bound_catches_a_decay_at_the_wrong_index(device):
    """Decaying key j by a_j ... a_i (its own gate too, a shift by one) differs by far more than the bound."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    q, k, v, log_gates = inputs((2,), 12, 4, 3, 8, torch.float64, device, 1.0)
    recurrent, _ = gated_linear_attention_recurrent(q, k, v, log_gates)
    shifted = decay_mask(log_gates) * torch.exp(log_gates).unsqueeze(-2)  # L_ij a_j, (2, 12, 12)
    wrong = ((q @ k.transpose(-2, -1)) * shifted) @ v
    assert ((wrong - recurrent).abs() > gated_bound(q, k, v, log_gates)).any()


def test_gradients_of_the_three_forms_agree_and_stay_finite(device):
    """A model trains through any form: gradients for queries, keys, values and log gates agree (float64)
    and carry no nan from the -inf above the diagonal; gradcheck confirms the chunkwise one."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    q, k, v, log_gates = inputs((2,), 11, 3, 2, 13, torch.float64, device, 1.0)
    grads = []
    for form in (
        lambda *x: gated_linear_attention_quadratic(*x),
        lambda *x: gated_linear_attention_recurrent(*x)[0],
        lambda *x: gated_linear_attention_chunkwise(*x, 4)[0],
    ):
        leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v, log_gates)]
        form(*leaves).square().sum().backward()
        grads.append([x.grad for x in leaves])
    for other in grads[1:]:
        for g_quadratic, g_other in zip(grads[0], other):
            assert torch.isfinite(g_other).all()
            assert_close(g_other, g_quadratic, atol=1e-11, rtol=1e-11)
    leaves = [x[:1, :5].detach().clone().requires_grad_(True) for x in (q, k, v)]
    gates = log_gates[:1, :5].detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda *x: gated_linear_attention_chunkwise(*x, 2)[0], (*leaves, gates))


# ---------------------------------------------------------------- the state continues a run


def test_two_halves_with_the_state_handed_over_equal_one_run(device):
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    n = 13
    q, k, v, log_gates = inputs((2, 2), n, 4, 3, 9, torch.float64, device)
    whole, S = gated_linear_attention_recurrent(q, k, v, log_gates)
    bound, S_bound = gated_bound(q, k, v, log_gates), state_bound(k, v, log_gates)
    for split in range(n + 1):
        for run in (
            lambda *x, **kw: gated_linear_attention_recurrent(*x, **kw),
            lambda *x, **kw: gated_linear_attention_chunkwise(*x, 5, **kw),
        ):
            parts = [x[..., :split, :] for x in (q, k, v)], [x[..., split:, :] for x in (q, k, v)]
            first, handed = run(*parts[0], log_gates[..., :split])
            second, final = run(*parts[1], log_gates[..., split:], initial_state=handed)
            assert ((torch.cat([first, second], dim=-2) - whole).abs() <= bound).all(), split
            assert ((final - S).abs() <= S_bound).all(), split


def test_the_initial_state_is_decayed_by_every_gate_from_the_first(device, dtype):
    """With zero keys: o_t = (a_0 ... a_t) q_t S_0, and the final state (a_0 ... a_{n-1}) S_0."""
    g = torch.Generator().manual_seed(10)
    q = draw((6, 3), g, dtype, device)
    k, v = torch.zeros(6, 3, dtype=dtype, device=device), torch.zeros(6, 2, dtype=dtype, device=device)
    log_gates = torch.tensor([-0.5, -0.25, -1.0, -0.125, -2.0, -0.5], dtype=dtype, device=device)
    S0 = draw((3, 2), g, dtype, device)
    decay = torch.exp(log_gates.cumsum(0))  # (6,): a_0 ... a_t
    for out, S in (
        gated_linear_attention_recurrent(q, k, v, log_gates, initial_state=S0),
        gated_linear_attention_chunkwise(q, k, v, log_gates, 4, initial_state=S0),
    ):
        assert_close(out, decay[:, None] * (q @ S0))
        assert_close(S, decay[-1] * S0)


def test_long_sequences_stay_finite_in_float32(device):
    """n = 1024 with strong gates: every form finite and within the bound, where linear-space products die."""
    q, k, v, log_gates = inputs((2,), 1024, 4, 3, 11, torch.float32, device, 1.0)
    assert torch.isnan(decay_mask_linear_space(torch.exp(log_gates))).any()
    quadratic = gated_linear_attention_quadratic(q, k, v, log_gates)
    chunkwise, S = gated_linear_attention_chunkwise(q, k, v, log_gates, 64)
    assert torch.isfinite(quadratic).all() and torch.isfinite(chunkwise).all() and torch.isfinite(S).all()
    assert ((chunkwise - quadratic).abs() <= gated_bound(q, k, v, log_gates)).all()


def test_no_tokens(device):
    q, k, v = torch.zeros(0, 3, device=device), torch.zeros(0, 3, device=device), torch.zeros(0, 2, device=device)
    log_gates, S0 = torch.zeros(0, device=device), torch.ones(3, 2, device=device)
    assert segment_sum(log_gates).shape == (0, 0) and decay_mask(log_gates).shape == (0, 0)
    assert gated_linear_attention_quadratic(q, k, v, log_gates).shape == (0, 2)
    for out, S in (
        gated_linear_attention_recurrent(q, k, v, log_gates, initial_state=S0),
        gated_linear_attention_chunkwise(q, k, v, log_gates, 3, initial_state=S0),
    ):
        assert out.shape == (0, 2) and torch.equal(S, S0)


def test_gates_per_head_broadcast_against_the_batch(device, dtype):
    """log gates (heads, n) against queries (batch, heads, n, d_k): one gate per head and token."""
    g = torch.Generator().manual_seed(12)
    q = elu_plus_one(draw((2, 3, 7, 4), g, dtype, device))
    k = elu_plus_one(draw((2, 3, 7, 4), g, dtype, device))
    v = draw((2, 3, 7, 2), g, dtype, device)
    log_gates = (-torch.rand(3, 7, generator=g, dtype=torch.float64)).to(dtype=dtype, device=device)
    expected = gated_linear_attention_quadratic(q, k, v, log_gates.expand(2, 3, 7))
    bound = gated_bound(q, k, v, log_gates.expand(2, 3, 7))
    for out, S in (
        gated_linear_attention_recurrent(q, k, v, log_gates),
        gated_linear_attention_chunkwise(q, k, v, log_gates, 3),
    ):
        assert out.shape == (2, 3, 7, 2) and S.shape == (2, 3, 4, 2)
        assert ((out - expected).abs() <= bound).all()


# ---------------------------------------------------------------- errors


class TestErrors:
    q, k, v = torch.rand(2, 5, 3), torch.rand(2, 5, 3), torch.rand(2, 5, 4)
    log_gates = -torch.rand(2, 5)

    @pytest.mark.parametrize(
        "value, what",
        [(0.5, "a positive entry"), (math.nan, "NaN"), (-math.inf, "-inf")],
    )
    def test_bad_log_gates(self, value, what):
        bad = self.log_gates.clone()
        bad[1, 3] = value
        message = rf"log_gates \(\.\.\., n\) must lie in \(-inf, 0\].*{what}.*at index \(1, 3\) in shape \(2, 5\)"
        for call in (
            lambda: segment_sum(bad),
            lambda: decay_mask(bad),
            lambda: gated_linear_attention_quadratic(self.q, self.k, self.v, bad),
            lambda: gated_linear_attention_recurrent(self.q, self.k, self.v, bad),
            lambda: gated_linear_attention_chunkwise(self.q, self.k, self.v, bad, 2),
        ):
            with pytest.raises(ValueError, match=message):
                call()

    @pytest.mark.parametrize("value", [0.0, -0.5, 1.5, math.nan])
    def test_bad_gates_in_linear_space(self, value):
        gates = torch.full((2, 5), 0.5)
        gates[0, 2] = value
        with pytest.raises(ValueError, match=r"gates \(\.\.\., n\) must lie in \(0, 1\].*at index \(0, 2\)"):
            decay_mask_linear_space(gates)

    def test_gate_shapes_and_dtypes(self):
        with pytest.raises(ValueError, match=r"query \(\.\.\., n, d_k\) and log_gates \(\.\.\., n\) must share n"):
            gated_linear_attention_quadratic(self.q, self.k, self.v, self.log_gates[:, :4])
        with pytest.raises(ValueError, match=r"batch dimensions do not broadcast"):
            gated_linear_attention_recurrent(self.q, self.k, self.v, -torch.rand(3, 5))
        with pytest.raises(TypeError, match=r"one dtype.*log_gates: torch.float64"):
            gated_linear_attention_chunkwise(self.q, self.k, self.v, self.log_gates.double(), 2)
        with pytest.raises(TypeError, match=r"log_gates must have a floating-point dtype"):
            segment_sum(torch.zeros(4, dtype=torch.long))
        with pytest.raises(ValueError, match=r"log_gates must have at least 1 dimensions"):
            decay_mask(torch.tensor(-1.0))
        with pytest.raises(ValueError, match=r"one device.*log_gates: meta"):
            gated_linear_attention_quadratic(self.q, self.k, self.v, self.log_gates.to("meta"))

    def test_chunk_size(self):
        with pytest.raises(ValueError, match=r"chunk_size must be > 0 \(a positive int\), got 0"):
            gated_linear_attention_chunkwise(self.q, self.k, self.v, self.log_gates, 0)
        with pytest.raises(TypeError, match=r"chunk_size must be an int"):
            gated_linear_attention_chunkwise(self.q, self.k, self.v, self.log_gates, None)

    def test_states(self):
        with pytest.raises(TypeError, match=r"initial_state must be the state S \(\.\.\., d_k, d_v\).*got tuple"):
            gated_linear_attention_recurrent(self.q, self.k, self.v, self.log_gates, initial_state=(1, 2))
        with pytest.raises(
            ValueError, match=r"query \(\.\.\., n, d_k\) and initial_state \(\.\.\., d_k, d_v\) must share d_k"
        ):
            gated_linear_attention_chunkwise(self.q, self.k, self.v, self.log_gates, 2, initial_state=torch.zeros(4, 4))
        with pytest.raises(ValueError, match=r"must share d_v"):
            gated_linear_attention_recurrent(self.q, self.k, self.v, self.log_gates, initial_state=torch.zeros(3, 3))
