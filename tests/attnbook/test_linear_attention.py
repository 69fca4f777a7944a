"""Linear attention (chapter 14): the quadratic, recurrent and chunkwise forms agree, with each other and
with independent computations, for every chunk size; the state continues a run; bad input is refused.

The tolerance is derived, not chosen: two computations differ by at most the sum of their rounding
bounds, :func:`attnbook.linear.linear_attention.linear_attention_rounding_bound` (its docstring has
the derivation), checked in float32, where rounding shows, as in float64.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from attnbook import (
    LinearAttentionState,
    attention,
    elu_plus_one,
    linear_attention_chunkwise,
    linear_attention_quadratic,
    linear_attention_recurrent,
)
from attnbook.linear.linear_attention import linear_attention_rounding_bound

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def draw(shape, g, dtype, device):
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)


def features(batch, n, d_k, d_v, seed, dtype, device):
    """phi(Q), phi(K) with elu + 1 (positive), and V."""
    g = torch.Generator().manual_seed(seed)
    q, k = draw((*batch, n, d_k), g, dtype, device), draw((*batch, n, d_k), g, dtype, device)
    v = draw((*batch, n, d_v), g, dtype, device)
    return elu_plus_one(q), elu_plus_one(k), v


def forms_bound(query, key, value, normalize):
    """|form_1 - form_2| <= the sum of their two rounding bounds, entrywise (..., n, d_v)."""
    return 2 * linear_attention_rounding_bound(query, key, value, normalize=normalize)


def state_bound(key, value):
    """|S_1 - S_2| for two orders of summing k_j^T v_j over n tokens, and |z_1 - z_2|."""
    n = key.shape[-2]
    eps = torch.finfo(key.dtype).eps
    return 2 * (n + 2) * eps * (key.abs().transpose(-2, -1) @ value.abs()), 2 * (n + 2) * eps * key.abs().sum(-2)


def dense_loop(query, key, value, normalize):
    """o_i = sum_{j <= i} (q_i . k_j) v_j / sum_{j <= i} q_i . k_j, pair by pair in Python (float64)."""
    q, k, v = (x.detach().cpu().double() for x in (query, key, value))
    n = q.shape[-2]
    out = torch.zeros(*torch.broadcast_shapes(q.shape[:-2], v.shape[:-2]), n, v.shape[-1], dtype=torch.float64)
    for i in range(n):
        numerator, denominator = 0.0, 0.0
        for j in range(i + 1):
            score = (q[..., i, :] * k[..., j, :]).sum(-1, keepdim=True)  # (..., 1)
            numerator = numerator + score * v[..., j, :]
            denominator = denominator + score
        out[..., i, :] = numerator / denominator if normalize else numerator
    return out


# ---------------------------------------------------------------- the three forms agree


@pytest.mark.parametrize("normalize", [True, False])
def test_three_forms_agree_in_float64_for_every_chunk_size(device, normalize):
    """Length 37, every chunk size 1..38 (divisors and not, one chunk, more than n): outputs and states
    within the derived bound, and the bound itself below 1e-13 of the outputs' size (not vacuous)."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    n = 37
    q, k, v = features((2, 3), n, 6, 5, 0, torch.float64, device)
    quadratic = linear_attention_quadratic(q, k, v, normalize=normalize)
    recurrent, (S, z) = linear_attention_recurrent(q, k, v, normalize=normalize)
    bound = forms_bound(q, k, v, normalize)
    S_bound, z_bound = state_bound(k, v)
    assert (bound / quadratic.abs().amax()).max() < 1e-13
    assert ((recurrent - quadratic).abs() <= bound).all()
    worst = (recurrent - quadratic).abs().max().item()
    for chunk_size in range(1, n + 2):
        chunkwise, state = linear_attention_chunkwise(q, k, v, chunk_size, normalize=normalize)
        assert ((chunkwise - quadratic).abs() <= bound).all(), chunk_size
        assert ((chunkwise - recurrent).abs() <= bound).all(), chunk_size
        assert ((state.S - S).abs() <= S_bound).all() and ((state.z - z).abs() <= z_bound).all(), chunk_size
        worst = max(worst, (chunkwise - quadratic).abs().max().item())
    # measured here: 4.4e-16 normalised, 1.1e-13 unnormalised (outputs of size ~1e2)
    assert worst < 1e-12


@PROPERTY
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    n=st.integers(1, 20),
    d_k=st.integers(1, 5),
    d_v=st.integers(1, 4),
    chunk_size=st.integers(1, 22),
    normalize=st.booleans(),
    seed=st.integers(0, 10**6),
)
def test_three_forms_agree_within_the_derived_bound(device, dtype, batch, n, d_k, d_v, chunk_size, normalize, seed):
    """In float32 (where rounding shows) as in float64, any shapes and chunk sizes."""
    q, k, v = features(batch, n, d_k, d_v, seed, dtype, device)
    quadratic = linear_attention_quadratic(q, k, v, normalize=normalize)
    recurrent, _ = linear_attention_recurrent(q, k, v, normalize=normalize)
    chunkwise, _ = linear_attention_chunkwise(q, k, v, chunk_size, normalize=normalize)
    bound = forms_bound(q, k, v, normalize)
    for out in (recurrent, chunkwise):
        assert out.shape == (*batch, n, d_v) and out.dtype == dtype and out.device.type == device.type
        assert ((out - quadratic).abs() <= bound).all()


def test_the_bound_catches_a_chunk_boundary_off_by_one(device):
    """A quadratic form without the diagonal (the state before token i instead of after) differs from the
    recurrence by far more than the bound: the comparison above can fail."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    q, k, v = features((2,), 12, 4, 3, 1, torch.float64, device)
    recurrent, _ = linear_attention_recurrent(q, k, v, normalize=False)
    strict = torch.ones(12, 12, dtype=torch.bool, device=device).tril(-1)
    wrong = (q @ k.transpose(-2, -1) * strict) @ v
    assert ((wrong - recurrent).abs() > forms_bound(q, k, v, False)).any()


# ---------------------------------------------------------------- against independent computations


@pytest.mark.parametrize("normalize", [True, False])
def test_every_form_equals_the_pair_by_pair_sum(device, normalize):
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    q, k, v = features((2,), 9, 3, 4, 2, torch.float64, device)
    expected = dense_loop(q, k, v, normalize).to(device)
    bound = forms_bound(q, k, v, normalize)
    outputs = [
        linear_attention_quadratic(q, k, v, normalize=normalize),
        linear_attention_recurrent(q, k, v, normalize=normalize)[0],
        *(linear_attention_chunkwise(q, k, v, c, normalize=normalize)[0] for c in (1, 2, 4, 9, 10)),
    ]
    for out in outputs:
        assert ((out - expected).abs() <= bound).all()


@pytest.mark.parametrize("causal", [True, False])
def test_normalized_linear_attention_is_the_kernel_smoother_with_kernel_phi_q_dot_phi_k(device, causal):
    """Chapter 1's Nadaraya–Watson smoother with weights kappa_ij / sum_j kappa_ij is softmax(log kappa):
    attnbook.attention with zero scores and the additive mask log kappa (-inf where masked) gives them."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    g = torch.Generator().manual_seed(3)
    n, m = 7, (7 if causal else 11)
    q = elu_plus_one(draw((2, n, 4), g, torch.float64, device))
    k = elu_plus_one(draw((2, m, 4), g, torch.float64, device))
    v = draw((2, m, 3), g, torch.float64, device)
    kernel = q @ k.transpose(-2, -1)  # (2, n, m), positive
    if causal:
        kernel = kernel.masked_fill(~torch.ones(n, m, dtype=torch.bool, device=device).tril(), 0.0)
    smoother, _ = attention(torch.zeros_like(q), k, v, mask=torch.log(kernel))
    assert_close(linear_attention_quadratic(q, k, v, causal=causal), smoother, atol=1e-13, rtol=1e-13)


def test_non_causal_form_is_the_associative_product(device, dtype):
    """Without the mask: O = phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1), the n x n matrix never formed."""
    g = torch.Generator().manual_seed(4)
    q = elu_plus_one(draw((3, 5, 4), g, dtype, device))
    k = elu_plus_one(draw((3, 8, 4), g, dtype, device))
    v = draw((3, 8, 2), g, dtype, device)
    numerator = q @ (k.transpose(-2, -1) @ v)  # (3, 5, 4) @ ((3, 4, 8) @ (3, 8, 2))
    denominator = q @ k.sum(-2).unsqueeze(-1)  # (3, 5, 4) @ (3, 4, 1)
    tol = {"atol": 1e-12, "rtol": 1e-12} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-5}
    assert_close(linear_attention_quadratic(q, k, v, causal=False), numerator / denominator, **tol)
    assert_close(linear_attention_quadratic(q, k, v, causal=False, normalize=False), numerator, **tol)


def test_the_state_is_the_sum_of_outer_products_and_of_keys(device, dtype):
    q, k, v = features((2,), 10, 3, 4, 5, dtype, device)
    S_bound, z_bound = state_bound(k, v)
    for _, state in (linear_attention_recurrent(q, k, v), linear_attention_chunkwise(q, k, v, 3, normalize=False)):
        assert isinstance(state, LinearAttentionState)
        assert state.S.shape == (2, 3, 4) and state.z.shape == (2, 3)
        assert ((state.S - k.transpose(-2, -1) @ v).abs() <= S_bound).all()  # sum_j k_j^T v_j
        assert ((state.z - k.sum(-2)).abs() <= z_bound).all()  # sum_j k_j


def test_one_token_by_hand(device):
    """n = 1: S = k^T v, z = k, o = (q . k) v / (q . k) = v exactly (normalised)."""
    q = torch.tensor([[1.0, 2.0]], dtype=torch.float64, device=device)
    k = torch.tensor([[3.0, 0.5]], dtype=torch.float64, device=device)
    v = torch.tensor([[2.0, -1.0, 4.0]], dtype=torch.float64, device=device)
    out, (S, z) = linear_attention_recurrent(q, k, v, normalize=False)
    assert out.tolist() == [[8.0, -4.0, 16.0]]  # q . k = 4
    assert S.tolist() == [[6.0, -3.0, 12.0], [1.0, -0.5, 2.0]] and z.tolist() == [3.0, 0.5]
    assert linear_attention_recurrent(q, k, v)[0].tolist() == v.tolist()


@pytest.mark.parametrize("normalize", [True, False])
def test_gradients_of_the_three_forms_agree(device, normalize):
    """A model trains through any form: the gradients for phi(Q), phi(K) and V agree in float64."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    q, k, v = features((2,), 11, 3, 2, 9, torch.float64, device)
    grads = []
    for form in (
        lambda *x: linear_attention_quadratic(*x, normalize=normalize),
        lambda *x: linear_attention_recurrent(*x, normalize=normalize)[0],
        lambda *x: linear_attention_chunkwise(*x, 4, normalize=normalize)[0],
    ):
        leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
        form(*leaves).square().sum().backward()
        grads.append([x.grad for x in leaves])
    for other in grads[1:]:
        for g_quadratic, g_other in zip(grads[0], other):
            assert_close(g_other, g_quadratic, atol=1e-11, rtol=1e-11)


# ---------------------------------------------------------------- the state continues a run


@pytest.mark.parametrize("normalize", [True, False])
def test_two_halves_with_the_state_handed_over_equal_one_run(device, normalize):
    """At every split point 0..n, for the recurrent and the chunkwise forms (chunk 3, not dividing 13)."""
    if device.type == "mps":
        pytest.skip("MPS has no float64")
    n = 13
    q, k, v = features((2,), n, 4, 3, 6, torch.float64, device)
    whole, state = linear_attention_recurrent(q, k, v, normalize=normalize)
    bound = forms_bound(q, k, v, normalize)
    S_bound, z_bound = state_bound(k, v)
    for split in range(n + 1):
        for run in (
            lambda q, k, v, **kw: linear_attention_recurrent(q, k, v, normalize=normalize, **kw),
            lambda q, k, v, **kw: linear_attention_chunkwise(q, k, v, 3, normalize=normalize, **kw),
        ):
            first, handed = run(q[..., :split, :], k[..., :split, :], v[..., :split, :])
            second, final = run(q[..., split:, :], k[..., split:, :], v[..., split:, :], initial_state=handed)
            assert first.shape == (2, split, 3) and second.shape == (2, n - split, 3)
            assert ((torch.cat([first, second], dim=-2) - whole).abs() <= bound).all(), split
            assert ((final.S - state.S).abs() <= S_bound).all() and ((final.z - state.z).abs() <= z_bound).all()


def test_a_state_from_an_unnormalised_run_continues_a_normalised_one(device, dtype):
    q, k, v = features((), 10, 3, 2, 7, dtype, device)
    whole, _ = linear_attention_recurrent(q, k, v)
    _, handed = linear_attention_chunkwise(q[:4], k[:4], v[:4], 2, normalize=False)
    rest, _ = linear_attention_recurrent(q[4:], k[4:], v[4:], initial_state=tuple(handed))  # a plain tuple too
    assert ((rest - whole[4:]).abs() <= forms_bound(q, k, v, True)[4:]).all()


def test_no_tokens(device):
    q, k, v = (
        torch.zeros(2, 0, 3, device=device),
        torch.zeros(2, 0, 3, device=device),
        torch.zeros(2, 0, 5, device=device),
    )
    assert linear_attention_quadratic(q, k, v).shape == (2, 0, 5)
    S0, z0 = torch.ones(2, 3, 5, device=device), torch.ones(2, 3, device=device)
    for out, (S, z) in (
        linear_attention_recurrent(q, k, v, initial_state=(S0, z0)),
        linear_attention_chunkwise(q, k, v, 4, initial_state=(S0, z0)),
    ):
        assert out.shape == (2, 0, 5) and torch.equal(S, S0) and torch.equal(z, z0)
    _, (S, z) = linear_attention_chunkwise(q, k, v, 4)
    assert S.shape == (2, 3, 5) and (S == 0).all() and (z == 0).all()


def test_batch_dimensions_broadcast(device, dtype):
    g = torch.Generator().manual_seed(8)
    q = elu_plus_one(draw((2, 1, 6, 3), g, dtype, device))
    k = elu_plus_one(draw((1, 4, 6, 3), g, dtype, device))
    v = draw((6, 2), g, dtype, device)
    expected = linear_attention_quadratic(q, k.expand(2, 4, 6, 3), v.expand(2, 4, 6, 2))
    bound = forms_bound(q.expand(2, 4, 6, 3), k.expand(2, 4, 6, 3), v.expand(2, 4, 6, 2), True)
    for out, state in (linear_attention_recurrent(q, k, v), linear_attention_chunkwise(q, k, v, 4)):
        assert out.shape == (2, 4, 6, 2) and state.S.shape == (2, 4, 3, 2) and state.z.shape == (2, 4, 3)
        assert ((out - expected).abs() <= bound).all()


def test_elu_plus_one_is_x_plus_one_above_zero_and_exp_below(device, dtype):
    x = torch.tensor([-3.0, -0.5, 0.0, 0.25, 2.0], dtype=dtype, device=device)
    expected = torch.tensor([math.exp(-3), math.exp(-0.5), 1.0, 1.25, 3.0], dtype=dtype, device=device)
    assert_close(elu_plus_one(x), expected)
    # positive down to the underflow of exp, where elu(x) + 1 cancels to 0 long before (x = -20)
    far = torch.linspace(-80.0, 10.0, 901, dtype=dtype, device=device)
    assert (elu_plus_one(far) > 0).all()
    assert (F.elu(far) + 1 == 0).any()
    # equal to elu(x) + 1 within the rounding of 1, and to e^x relatively for x <= 0
    assert ((elu_plus_one(far) - (F.elu(far) + 1)).abs() <= torch.finfo(dtype).eps).all()
    negative = far[far <= 0]
    assert_close(elu_plus_one(negative), torch.exp(negative), atol=0.0, rtol=2 * torch.finfo(dtype).eps)


def test_elu_plus_one_has_elus_gradient_and_no_nan(device, dtype):
    x = torch.tensor([-1000.0, -2.0, 0.0, 3.0, 1000.0], dtype=dtype, device=device, requires_grad=True)
    elu_plus_one(x).sum().backward()
    y = x.detach().clone().requires_grad_(True)
    F.elu(y).sum().backward()
    assert not torch.isnan(x.grad).any()
    assert_close(x.grad, y.grad)


# ---------------------------------------------------------------- errors


class TestErrors:
    q, k, v = torch.rand(2, 5, 3), torch.rand(2, 5, 3), torch.rand(2, 5, 4)

    @pytest.mark.parametrize("chunk_size, error, message", [
        (0, ValueError, r"chunk_size must be > 0 \(a positive int\), got 0"),
        (-2, ValueError, r"chunk_size must be > 0 \(a positive int\), got -2"),
        (None, TypeError, r"chunk_size must be an int \(tokens per chunk, >= 1\), got NoneType"),
        (2.0, TypeError, r"chunk_size must be an int, got float"),
        (True, TypeError, r"chunk_size must be an int, got bool"),
    ])  # fmt: skip
    def test_chunk_size(self, chunk_size, error, message):
        with pytest.raises(error, match=message):
            linear_attention_chunkwise(self.q, self.k, self.v, chunk_size)

    def test_mismatched_lengths_and_widths(self):
        with pytest.raises(ValueError, match=r"query \(\.\.\., n, d_k\) and key \(\.\.\., n, d_k\) must share n"):
            linear_attention_recurrent(self.q, self.k[:, :4], self.v)
        with pytest.raises(ValueError, match=r"must share d_k.*\(2, 5, 3\).*\(2, 5, 2\)"):
            linear_attention_chunkwise(self.q, self.k[..., :2], self.v, 2)
        with pytest.raises(ValueError, match=r"query \(\.\.\., n, d_k\) and value \(\.\.\., n, d_v\) must share n"):
            linear_attention_quadratic(self.q, self.k, self.v[:, :3])
        with pytest.raises(ValueError, match=r"batch dimensions do not broadcast"):
            linear_attention_quadratic(self.q, torch.rand(3, 5, 3), self.v)
        with pytest.raises(ValueError, match=r"value must have at least 2 dimensions"):
            linear_attention_recurrent(self.q, self.k, torch.rand(5))

    def test_non_causal_quadratic_allows_other_key_counts_and_causal_does_not(self):
        assert linear_attention_quadratic(self.q, torch.rand(2, 7, 3), torch.rand(2, 7, 4), causal=False).shape == (
            2,
            5,
            4,
        )
        with pytest.raises(ValueError, match=r"must share n"):
            linear_attention_quadratic(self.q, torch.rand(2, 7, 3), torch.rand(2, 7, 4))

    def test_dtypes_and_devices(self):
        with pytest.raises(TypeError, match=r"one dtype.*query: torch.float32, key: torch.float64"):
            linear_attention_recurrent(self.q, self.k.double(), self.v)
        with pytest.raises(TypeError, match=r"value must have a floating-point dtype, got torch.int64"):
            linear_attention_quadratic(self.q, self.k, torch.ones(2, 5, 4, dtype=torch.long))
        with pytest.raises(TypeError, match=r"query must be a torch.Tensor, got list"):
            linear_attention_chunkwise([[1.0]], self.k, self.v, 2)
        with pytest.raises(ValueError, match=r"one device.*query: cpu, key: meta"):
            linear_attention_quadratic(self.q, self.k.to("meta"), self.v)

    def test_flags(self):
        with pytest.raises(TypeError, match=r"normalize must be a bool, got int"):
            linear_attention_recurrent(self.q, self.k, self.v, normalize=1)
        with pytest.raises(TypeError, match=r"causal must be a bool, got str"):
            linear_attention_quadratic(self.q, self.k, self.v, causal="yes")
        with pytest.raises(TypeError, match=r"takes 3 positional arguments"):
            linear_attention_recurrent(self.q, self.k, self.v, True)

    def test_states_of_the_wrong_kind_or_shape(self):
        S, z = torch.zeros(2, 3, 4), torch.zeros(2, 3)
        with pytest.raises(
            TypeError, match=r"initial_state must be the pair \(S, z\).*got a tensor of shape \(2, 3, 4\)"
        ):
            linear_attention_recurrent(self.q, self.k, self.v, initial_state=S)
        with pytest.raises(TypeError, match=r"initial_state must be the pair \(S, z\).*got tuple"):
            linear_attention_chunkwise(self.q, self.k, self.v, 2, initial_state=(S,))
        with pytest.raises(
            ValueError, match=r"query \(\.\.\., n, d_k\) and initial_state.S \(\.\.\., d_k, d_v\) must share d_k"
        ):
            linear_attention_recurrent(self.q, self.k, self.v, initial_state=(torch.zeros(2, 4, 4), z))
        with pytest.raises(
            ValueError, match=r"value \(\.\.\., n, d_v\) and initial_state.S \(\.\.\., d_k, d_v\) must share d_v"
        ):
            linear_attention_chunkwise(self.q, self.k, self.v, 2, initial_state=(torch.zeros(2, 3, 5), z))
        with pytest.raises(ValueError, match=r"initial_state.z \(\.\.\., d_k\) must share d_k"):
            linear_attention_recurrent(self.q, self.k, self.v, initial_state=(S, torch.zeros(2, 4)))
        with pytest.raises(ValueError, match=r"batch dimensions do not broadcast"):
            linear_attention_recurrent(self.q, self.k, self.v, initial_state=(torch.zeros(3, 3, 4), z))
        with pytest.raises(TypeError, match=r"one dtype"):
            linear_attention_chunkwise(self.q, self.k, self.v, 2, initial_state=(S.double(), z))

    def test_elu_plus_one_refuses_integers(self):
        with pytest.raises(TypeError, match=r"x must have a floating-point dtype, got torch.int64"):
            elu_plus_one(torch.arange(3))
