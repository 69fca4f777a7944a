r"""The delta rule and the gated delta rule (chapter 14): one step is gradient descent on the
regression loss, the recurrent and chunkwise (WY/UT) forms agree in float64 for every chunk size,
gates of 1 give the ungated rule, a state carries a sequence on, and bad input gets clear errors.

Conventions (row convention, k_t a row): S_t = a_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t,
o_t = q_t S_t, state (..., d_k, d_v).
"""

from __future__ import annotations

import math

import pytest
import torch

import attnbook
from attnbook import (
    delta_rule_chunkwise,
    delta_rule_recurrent,
    delta_rule_step,
    gated_delta_rule_chunkwise,
    gated_delta_rule_recurrent,
    gated_delta_rule_step,
    ut_transform,
)

from ..conftest import tolerances

U64 = 2.0**-53  # unit roundoff of float64
BATCH, N, D_K, D_V = (2, 3), 19, 5, 4


def skip_without_float64(device):
    if device.type == "mps":
        pytest.skip("MPS has no float64")


def inputs(*, n=N, batch=BATCH, d_k=D_K, d_v=D_V, device="cpu", dtype=torch.float64, seed=0, unit_keys=True):
    """q, k, v, beta, log_gates as DeltaNet and Qwen3-Next make them: unit keys (l2-normalised), beta in
    (0, 1) (a sigmoid), log gates in (-1, 0) (gates in (e^-1, 1])."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, n, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(*batch, n, d_k, generator=g, dtype=torch.float64)
    if unit_keys:
        k = k / k.norm(dim=-1, keepdim=True)
    v = 2 * torch.randn(*batch, n, d_v, generator=g, dtype=torch.float64)
    beta = torch.rand(*batch, n, generator=g, dtype=torch.float64)
    log_gates = -torch.rand(*batch, n, generator=g, dtype=torch.float64)
    return [x.to(device=device, dtype=dtype) for x in (q, k, v, beta, log_gates)]


def states_by_loop(q, k, v, beta, log_gates=None, state=None):
    """Every S_t by the one-token functions, (..., n, d_k, d_v), and the outputs (..., n, d_v)."""
    if state is None:
        state = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype, device=q.device)
    states, outputs = [], []
    for t in range(q.shape[-2]):
        args = (state, q[..., t, :], k[..., t, :], v[..., t, :], beta[..., t])
        o, state = delta_rule_step(*args) if log_gates is None else gated_delta_rule_step(*args, log_gates[..., t])
        states.append(state)
        outputs.append(o)
    return torch.stack(states, dim=-3), torch.stack(outputs, dim=-2)


def rounding_tolerance(q, v, states, outputs, chunk_size):
    r"""A first-order bound on |recurrent - chunkwise| in float64, from the magnitudes.

    With unit keys, beta in [0, 1] and gates in (0, 1], each token's map :math:`S \mapsto a(I - \beta
    k^\top k) S` has 2-norm at most 1, so a rounding error made at one token is not amplified by the
    later ones: the errors of a form add up. Each entry of either form is reached through at most
    n (C + d_k + d_v + 4) rounded multiplications and additions (n tokens; per token or chunk a dot
    product of length d_k, a product of length C or d_v, the exp of a gate, the correction, the sum),
    each of relative size u on quantities bounded by M = the largest |S_t| (Frobenius), |v_t| and
    |o_t| (times |q_t| for the read-out), so each form is within n (C + d_k + d_v + 4) u M (1 + |q|max)
    of the exact value, and the two within twice that."""
    n, d_k, d_v = q.shape[-2], q.shape[-1], v.shape[-1]
    magnitude = max(states.flatten(-2).norm(dim=-1).amax().item(), v.abs().amax().item(), outputs.abs().amax().item())
    steps = n * (chunk_size + d_k + d_v + 4)
    return 2 * steps * U64 * magnitude * (1 + q.norm(dim=-1).amax().item())


# ---------------------------------------------------------------- one step = gradient descent


def test_a_step_is_one_gradient_step_on_the_regression_loss(device):
    r"""S_t = S - beta k^T (k S - v): the hand-derived gradient of 1/2 |k S - v|^2, and the same gradient
    by autograd."""
    skip_without_float64(device)
    q, k, v, beta, _ = inputs(n=1, device=device)
    q, k, v, beta = q[..., 0, :], k[..., 0, :], v[..., 0, :], beta[..., 0]
    state = torch.randn(*BATCH, D_K, D_V, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(device)
    output, new_state = delta_rule_step(state, q, k, v, beta)
    # by hand: d/dS 1/2 |k S - v|^2 = k^T (k S - v), an outer product (d_k, d_v)
    residual = torch.einsum("...i,...ij->...j", k, state) - v  # (..., d_v)
    by_hand = torch.einsum("...i,...j->...ij", k, residual)  # (..., d_k, d_v)
    # by autograd (in the test only): the gradient of the loss summed over the batch is each batch's gradient
    leaf = state.clone().requires_grad_(True)
    loss = 0.5 * ((torch.einsum("...i,...ij->...j", k, leaf) - v) ** 2).sum()
    (by_autograd,) = torch.autograd.grad(loss, leaf)
    torch.testing.assert_close(by_autograd, by_hand, rtol=0, atol=1e-13)
    expected = state - beta[..., None, None] * by_hand
    torch.testing.assert_close(new_state, expected, rtol=0, atol=1e-13)
    torch.testing.assert_close(new_state, state - beta[..., None, None] * by_autograd, rtol=0, atol=1e-13)
    torch.testing.assert_close(output, torch.einsum("...i,...ij->...j", q, expected), rtol=0, atol=1e-13)
    # the same as the projection form (I - beta k^T k) S + beta k^T v
    eye = torch.eye(D_K, dtype=torch.float64, device=device)
    projection = eye - beta[..., None, None] * k[..., :, None] * k[..., None, :]  # (..., d_k, d_k)
    write = beta[..., None, None] * k[..., :, None] * v[..., None, :]  # (..., d_k, d_v)
    torch.testing.assert_close(new_state, projection @ state + write, rtol=0, atol=1e-13)
    # and the loss went down (a step in [0, 2] / |k|^2 never raises it)
    after = 0.5 * ((torch.einsum("...i,...ij->...j", k, new_state) - v) ** 2).sum(-1)
    before = 0.5 * ((torch.einsum("...i,...ij->...j", k, state) - v) ** 2).sum(-1)
    assert (after <= before).all()


def test_with_beta_one_and_a_unit_key_the_state_maps_the_key_to_its_value(device):
    """k S_t = v_t after a step with beta = 1 and |k| = 1: the step solves the regression for this pair.
    Float64: |k S_t - v_t| <= (d_k + 4) u (|k| |S| + |v|) entry by entry, first order, times 2."""
    skip_without_float64(device)
    q, k, v, _, _ = inputs(n=1, device=device)
    q, k, v = q[..., 0, :], k[..., 0, :], v[..., 0, :]
    state = 3 * torch.randn(*BATCH, D_K, D_V, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(
        device
    )
    one = torch.ones(BATCH, dtype=torch.float64, device=device)
    _, new_state = delta_rule_step(state, q, k, v, one)
    stored = torch.einsum("...i,...ij->...j", k, new_state)  # k S_t: (..., d_v)
    bound = 2 * (D_K + 4) * U64 * (torch.einsum("...i,...ij->...j", k.abs(), state.abs() + new_state.abs()) + v.abs())
    assert ((stored - v).abs() <= bound).all(), (stored - v).abs().amax()
    # before the step the state did not store v (the check above is not vacuous)
    assert (torch.einsum("...i,...ij->...j", k, state) - v).abs().amax() > 0.1
    # beta = 0 leaves the state as it was
    _, same = delta_rule_step(state, q, k, v, torch.zeros_like(one))
    assert torch.equal(same, state)


def test_the_correction_has_the_right_sign():
    """The mutant S + beta k^T k S + beta k^T v (the sign of the correction flipped) differs, and so does
    plain linear attention's S + beta k^T v (no correction): the step is the one that lowers the loss."""
    q, k, v, beta, _ = inputs(n=1)
    q, k, v, beta = q[..., 0, :], k[..., 0, :], v[..., 0, :], beta[..., 0]
    state = torch.randn(*BATCH, D_K, D_V, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    _, ours = delta_rule_step(state, q, k, v, beta)
    kkS = k[..., :, None] * torch.einsum("...i,...ij->...j", k, state)[..., None, :]  # k^T k S: (..., d_k, d_v)
    kv = k[..., :, None] * v[..., None, :]  # k^T v: (..., d_k, d_v)
    b = beta[..., None, None]
    mutant = state + b * kkS + b * kv
    no_correction = state + b * kv
    # the two differ from ours by 2 beta k^T k S and beta k^T k S: a clear amount for these draws
    assert (ours - mutant).abs().amax() > 0.1
    assert (ours - no_correction).abs().amax() > 0.05
    torch.testing.assert_close(mutant - ours, 2 * b * kkS, rtol=0, atol=1e-13)


# ---------------------------------------------------------------- the recurrent form


def test_the_recurrent_form_is_the_step_repeated(device):
    skip_without_float64(device)
    q, k, v, beta, log_gates = inputs(device=device)
    states, outputs = states_by_loop(q, k, v, beta)
    out, state = delta_rule_recurrent(q, k, v, beta)
    assert torch.equal(out, outputs) and torch.equal(state, states[..., -1, :, :])
    states_g, outputs_g = states_by_loop(q, k, v, beta, log_gates)
    out_g, state_g = gated_delta_rule_recurrent(q, k, v, beta, log_gates)
    assert torch.equal(out_g, outputs_g) and torch.equal(state_g, states_g[..., -1, :, :])
    # the gates matter for these draws
    assert (out_g - out).abs().amax() > 0.1


def test_the_gated_step_decays_then_corrects():
    """S_t = a (I - beta k^T k) S + beta k^T v, against the matrices written out; and not
    a [(I - beta k^T k) S + beta k^T v] (the gate after the write)."""
    q, k, v, beta, log_gates = inputs(n=1)
    q, k, v, beta, log_a = q[..., 0, :], k[..., 0, :], v[..., 0, :], beta[..., 0], log_gates[..., 0]
    state = torch.randn(*BATCH, D_K, D_V, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    _, ours = gated_delta_rule_step(state, q, k, v, beta, log_a)
    a, b = torch.exp(log_a)[..., None, None], beta[..., None, None]
    projection = torch.eye(D_K, dtype=torch.float64) - b * k[..., :, None] * k[..., None, :]
    write = b * k[..., :, None] * v[..., None, :]
    torch.testing.assert_close(ours, a * (projection @ state) + write, rtol=0, atol=1e-13)
    gate_after_write = a * (projection @ state + write)
    assert (ours - gate_after_write).abs().amax() > 0.1


def test_gates_of_one_give_the_ungated_rule(device):
    skip_without_float64(device)
    q, k, v, beta, log_gates = inputs(device=device)
    zeros = torch.zeros_like(log_gates)  # log 1
    for ours, plain in (
        (gated_delta_rule_recurrent(q, k, v, beta, zeros), delta_rule_recurrent(q, k, v, beta)),
        (gated_delta_rule_chunkwise(q, k, v, beta, zeros, 4), delta_rule_chunkwise(q, k, v, beta, 4)),
    ):
        # a gate of exactly 1 multiplies exactly: the same numbers, or within the rounding of a reordered product
        torch.testing.assert_close(ours[0], plain[0], rtol=0, atol=64 * U64 * plain[0].abs().amax().item())
        torch.testing.assert_close(ours[1], plain[1], rtol=0, atol=64 * U64 * plain[1].abs().amax().item())
    s0 = torch.zeros(*BATCH, D_K, D_V, dtype=torch.float64, device=device)
    assert torch.equal(
        gated_delta_rule_step(s0, q[..., 0, :], k[..., 0, :], v[..., 0, :], beta[..., 0], zeros[..., 0])[1],
        delta_rule_step(s0, q[..., 0, :], k[..., 0, :], v[..., 0, :], beta[..., 0])[1],
    )


# ---------------------------------------------------------------- the chunkwise form


@pytest.mark.parametrize("gated", [False, True], ids=["delta rule", "gated delta rule"])
def test_chunkwise_equals_recurrent_for_every_chunk_size(gated, device):
    """Outputs and final state, float64, chunk sizes 1 .. n + 1 (divisors of n = 19 and not: every one
    but 1 and 19 leaves a short last chunk), within :func:`rounding_tolerance`."""
    skip_without_float64(device)
    q, k, v, beta, log_gates = inputs(device=device)
    states, outputs = states_by_loop(q, k, v, beta, log_gates if gated else None)
    out_r, state_r = (
        gated_delta_rule_recurrent(q, k, v, beta, log_gates) if gated else delta_rule_recurrent(q, k, v, beta)
    )
    worst = ratio = 0.0
    for chunk_size in range(1, N + 2):
        if gated:
            out_c, state_c = gated_delta_rule_chunkwise(q, k, v, beta, log_gates, chunk_size)
        else:
            out_c, state_c = delta_rule_chunkwise(q, k, v, beta, chunk_size)
        tol = rounding_tolerance(q, v, states, outputs, chunk_size)
        error = max((out_c - out_r).abs().amax().item(), (state_c - state_r).abs().amax().item())
        assert error <= tol, f"chunk_size {chunk_size}: {error:.2e} > {tol:.2e}"
        assert out_c.shape == out_r.shape and state_c.shape == state_r.shape
        worst, ratio = max(worst, error), max(ratio, error / tol)
    print(
        f"{'gated ' if gated else ''}delta rule, chunkwise vs recurrent, float64, n = {N}, chunks 1..{N + 1}: "
        f"max error {worst:.2e}, largest error / tolerance {ratio:.1e}"
    )


def test_chunkwise_without_unit_keys_and_with_beta_up_to_two(device):
    """The forms agree for any keys and beta in [0, 2] (the algebra does not need unit keys; only the
    tolerance's argument does, so here it is measured against the values' magnitude at a looser bound)."""
    skip_without_float64(device)
    q, k, v, beta, log_gates = inputs(device=device, unit_keys=False, seed=5)
    k = 0.5 * k
    beta = 2 * beta
    for gated in (False, True):
        args = (q, k, v, beta, log_gates) if gated else (q, k, v, beta)
        out_r, state_r = (gated_delta_rule_recurrent if gated else delta_rule_recurrent)(*args)
        for chunk_size in (1, 3, 7, 19, 20):
            out_c, state_c = (gated_delta_rule_chunkwise if gated else delta_rule_chunkwise)(*args, chunk_size)
            scale = max(out_r.abs().amax().item(), state_r.abs().amax().item(), 1.0)
            torch.testing.assert_close(out_c, out_r, rtol=0, atol=1e-11 * scale)
            torch.testing.assert_close(state_c, state_r, rtol=0, atol=1e-11 * scale)


def test_the_ut_transform_is_the_wy_representation_of_the_chunks_product():
    """I - K^T W = (I - beta_C k_C^T k_C) ... (I - beta_1 k_1^T k_1) with W = T K: the chunk's product
    of rank-one corrections in one matrix (Yang et al. 2024), float64."""
    _, k, _, beta, _ = inputs(n=6, batch=(3,))
    T = ut_transform(k, beta)  # (3, 6, 6)
    assert torch.equal(T, T.tril())
    W = T @ k  # (3, 6, d_k)
    product = torch.eye(D_K, dtype=torch.float64).expand(3, D_K, D_K)
    for t in range(6):
        kt = k[:, t, :]
        product = (
            torch.eye(D_K, dtype=torch.float64) - beta[:, t, None, None] * kt[:, :, None] * kt[:, None, :]
        ) @ product
    torch.testing.assert_close(
        torch.eye(D_K, dtype=torch.float64) - k.transpose(-2, -1) @ W, product, rtol=0, atol=1e-14
    )
    # T solves (I + tril(diag(beta) K K^T, -1)) T = diag(beta)
    system = torch.eye(6, dtype=torch.float64) + torch.tril(beta[..., :, None] * (k @ k.transpose(-2, -1)), -1)
    torch.testing.assert_close(system @ T, torch.diag_embed(beta), rtol=0, atol=1e-14)


@pytest.mark.parametrize("form", ["recurrent", "chunkwise"])
def test_an_initial_state_continues_a_sequence(form, device):
    """Running tokens 0..11 and then 12..18 from the returned state gives the outputs and final state of one
    run over 0..18 (the chunkwise form with chunks that straddle differently: within its tolerance)."""
    skip_without_float64(device)
    q, k, v, beta, log_gates = inputs(device=device)
    cut = 12

    def run(sl, state, gated):
        args = (q[..., sl, :], k[..., sl, :], v[..., sl, :], beta[..., sl])
        if gated:
            args = (*args, log_gates[..., sl])
        if form == "recurrent":
            f = gated_delta_rule_recurrent if gated else delta_rule_recurrent
            return f(*args, initial_state=state)
        f = gated_delta_rule_chunkwise if gated else delta_rule_chunkwise
        return f(*args, 5, initial_state=state)

    for gated in (False, True):
        whole_out, whole_state = run(slice(None), None, gated)
        first_out, first_state = run(slice(0, cut), None, gated)
        second_out, second_state = run(slice(cut, None), first_state, gated)
        joined = torch.cat([first_out, second_out], dim=-2)
        if form == "recurrent":  # the same operations in the same order
            assert torch.equal(joined, whole_out) and torch.equal(second_state, whole_state)
        else:
            torch.testing.assert_close(joined, whole_out, rtol=0, atol=1e-12)
            torch.testing.assert_close(second_state, whole_state, rtol=0, atol=1e-12)
        # an initial state matters: starting the second half from zeros gives other outputs
        fresh, _ = run(slice(cut, None), None, gated)
        assert (fresh - second_out).abs().amax() > 0.1


def test_the_forms_run_in_the_inputs_dtype_and_device(device, dtype):
    q, k, v, beta, log_gates = inputs(device=device, dtype=dtype, n=7)
    for out, state in (
        delta_rule_recurrent(q, k, v, beta),
        delta_rule_chunkwise(q, k, v, beta, 3),
        gated_delta_rule_recurrent(q, k, v, beta, log_gates),
        gated_delta_rule_chunkwise(q, k, v, beta, log_gates, 3),
    ):
        assert out.dtype == dtype and out.device.type == device.type and out.shape == (*BATCH, 7, D_V)
        assert state.dtype == dtype and state.device.type == device.type and state.shape == (*BATCH, D_K, D_V)
    ref = delta_rule_recurrent(q, k, v, beta)
    torch.testing.assert_close(delta_rule_chunkwise(q, k, v, beta, 3)[0], ref[0], **tolerances(dtype))


def test_batch_dimensions_broadcast_and_an_empty_sequence():
    q, k, v, beta, _ = inputs(n=5, batch=(2, 3))
    # one key/query head shared by three value heads: key and query (2, 1, n, d_k) broadcast against (2, 3, n, d_v)
    out, state = delta_rule_chunkwise(q[:, :1], k[:, :1], v, beta, 2)
    ref, ref_state = delta_rule_recurrent(q[:, :1].expand(2, 3, 5, D_K), k[:, :1].expand(2, 3, 5, D_K), v, beta)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-13)
    torch.testing.assert_close(state, ref_state, rtol=0, atol=1e-13)
    s0 = torch.randn(2, 3, D_K, D_V, dtype=torch.float64)
    for f in (delta_rule_recurrent, lambda *a, **kw: delta_rule_chunkwise(*a, 4, **kw)):
        empty, kept = f(q[..., :0, :], k[..., :0, :], v[..., :0, :], beta[..., :0], initial_state=s0)
        assert empty.shape == (2, 3, 0, D_V) and torch.equal(kept, s0)


# ---------------------------------------------------------------- errors


def test_bad_chunk_sizes_are_refused():
    q, k, v, beta, log_gates = inputs(n=4)
    for bad, error, words in ((0, ValueError, "chunk_size must be > 0"), (-2, ValueError, "chunk_size must be > 0"),
                              (1.5, TypeError, "chunk_size must be an int"), (None, TypeError, "chunk_size"),
                              (True, TypeError, "chunk_size must be an int")):  # fmt: skip
        with pytest.raises(error, match=words):
            delta_rule_chunkwise(q, k, v, beta, bad)
        with pytest.raises(error, match=words):
            gated_delta_rule_chunkwise(q, k, v, beta, log_gates, bad)


@pytest.mark.parametrize("value", [-0.1, 2.5, math.nan])
def test_beta_outside_zero_two_is_refused(value):
    q, k, v, beta, log_gates = inputs(n=4)
    beta = beta.clone()
    beta[1, 2, 3] = value
    state = torch.zeros(*BATCH, D_K, D_V, dtype=torch.float64)
    calls = [
        lambda: delta_rule_recurrent(q, k, v, beta),
        lambda: delta_rule_chunkwise(q, k, v, beta, 2),
        lambda: gated_delta_rule_recurrent(q, k, v, beta, log_gates),
        lambda: gated_delta_rule_chunkwise(q, k, v, beta, log_gates, 2),
        lambda: delta_rule_step(state, q[..., 3, :], k[..., 3, :], v[..., 3, :], beta[..., 3]),
        lambda: ut_transform(k, beta),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"beta must lie in \[0, 2\].*index \(1, 2"):
            call()
    beta[1, 2, 3] = 2.0  # the edges are allowed
    delta_rule_recurrent(q, k, v, beta)
    beta[1, 2, 3] = 0.0
    delta_rule_recurrent(q, k, v, beta)


@pytest.mark.parametrize("value, words", [(0.3, "positive"), (-math.inf, "-inf"), (math.nan, "NaN")])
def test_gates_outside_zero_one_are_refused(value, words):
    q, k, v, beta, log_gates = inputs(n=4)
    log_gates = log_gates.clone()
    log_gates[0, 1, 2] = value
    state = torch.zeros(*BATCH, D_K, D_V, dtype=torch.float64)
    for call in (
        lambda: gated_delta_rule_recurrent(q, k, v, beta, log_gates),
        lambda: gated_delta_rule_chunkwise(q, k, v, beta, log_gates, 3),
    ):
        with pytest.raises(ValueError, match=f"log_gates.*{words}"):
            call()
    with pytest.raises(ValueError, match=f"log_gate .*{words}"):
        gated_delta_rule_step(state, q[..., 2, :], k[..., 2, :], v[..., 2, :], beta[..., 2], log_gates[..., 2])


def test_mismatched_shapes_are_refused_with_their_names():
    q, k, v, beta, log_gates = inputs(n=4)
    cases = [
        ((q, k[..., :3], v, beta), "query .* and key .* must share d_k"),
        ((q, k, v[..., :3, :], beta), "must share the same number n|must share n"),
        ((q, k, v, beta[..., :3]), "beta .*n"),
        ((q[0, 0, 0], k, v, beta), "query must have at least 2 dimensions"),
    ]
    for args, words in cases:
        with pytest.raises(ValueError, match=words):
            delta_rule_recurrent(*args)
        with pytest.raises(ValueError, match=words):
            delta_rule_chunkwise(*args, 2)
    with pytest.raises(ValueError, match="log_gates .*n"):
        gated_delta_rule_recurrent(q, k, v, beta, log_gates[..., :2])
    with pytest.raises(ValueError, match="batch dimensions do not broadcast"):
        delta_rule_recurrent(q, k, v[:1, :2], beta)


def test_a_state_of_the_wrong_shape_is_refused():
    q, k, v, beta, log_gates = inputs(n=4)
    transposed = torch.zeros(*BATCH, D_V, D_K, dtype=torch.float64)  # (d_v, d_k): the papers' S^T
    for call in (
        lambda s: delta_rule_recurrent(q, k, v, beta, initial_state=s),
        lambda s: delta_rule_chunkwise(q, k, v, beta, 2, initial_state=s),
        lambda s: gated_delta_rule_recurrent(q, k, v, beta, log_gates, initial_state=s),
        lambda s: gated_delta_rule_chunkwise(q, k, v, beta, log_gates, 2, initial_state=s),
        lambda s: delta_rule_step(s, q[..., 0, :], k[..., 0, :], v[..., 0, :], beta[..., 0]),
    ):
        with pytest.raises(ValueError, match=r"\(\.\.\., d_k, d_v\)"):
            call(transposed)
        with pytest.raises(ValueError, match="at least 2 dimensions"):
            call(torch.zeros(D_K, dtype=torch.float64))
        with pytest.raises(ValueError, match="batch dimensions do not broadcast"):
            call(torch.zeros(5, D_K, D_V, dtype=torch.float64))


def test_mixed_dtypes_devices_and_non_tensors_are_refused(device):
    q, k, v, beta, log_gates = inputs(n=4)
    with pytest.raises(TypeError, match="one dtype"):
        delta_rule_recurrent(q, k.float(), v, beta)
    with pytest.raises(TypeError, match="one dtype"):
        gated_delta_rule_chunkwise(q, k, v, beta, log_gates.float(), 2)
    with pytest.raises(TypeError, match="one dtype"):
        delta_rule_recurrent(q, k, v, beta, initial_state=torch.zeros(*BATCH, D_K, D_V))
    with pytest.raises(TypeError, match="floating-point"):
        delta_rule_recurrent(q, k, v, (beta > 0.5).long())
    with pytest.raises(TypeError, match="torch.Tensor"):
        delta_rule_chunkwise(q.tolist(), k, v, beta, 2)
    with pytest.raises(TypeError, match="torch.Tensor"):
        delta_rule_step(None, q[..., 0, :], k[..., 0, :], v[..., 0, :], beta[..., 0])
    if device.type != "cpu":
        with pytest.raises(ValueError, match="one device"):
            delta_rule_chunkwise(q, k.to(device), v, beta, 2)
        with pytest.raises(ValueError, match="one device"):
            delta_rule_recurrent(
                q, k, v, beta, initial_state=torch.zeros(*BATCH, D_K, D_V, dtype=q.dtype, device=device)
            )


def test_the_face_exports_the_delta_rule():
    for name in ("delta_rule_step", "gated_delta_rule_step", "delta_rule_recurrent", "delta_rule_chunkwise",
                 "gated_delta_rule_recurrent", "gated_delta_rule_chunkwise", "ut_transform"):  # fmt: skip
        assert getattr(attnbook, name) is getattr(attnbook.linear.delta_rule, name)


def test_the_gated_forms_require_their_gates():
    q, k, v, beta, _ = inputs(n=4)
    state = torch.zeros(*BATCH, D_K, D_V, dtype=torch.float64)
    with pytest.raises(TypeError, match="log_gates must be a torch.Tensor"):
        gated_delta_rule_recurrent(q, k, v, beta, None)
    with pytest.raises(TypeError, match="log_gates must be a torch.Tensor"):
        gated_delta_rule_chunkwise(q, k, v, beta, None, 2)
    with pytest.raises(TypeError, match="log_gate must be a torch.Tensor"):
        gated_delta_rule_step(state, q[..., 0, :], k[..., 0, :], v[..., 0, :], beta[..., 0], None)


def test_one_step_without_batch_dimensions():
    """A single token with no batch at all: state (d_k, d_v), q and k (d_k,), v (d_v,), beta and the log gate ()."""
    g = torch.Generator().manual_seed(9)
    state = torch.randn(D_K, D_V, generator=g, dtype=torch.float64)
    q, k, v = (torch.randn(d, generator=g, dtype=torch.float64) for d in (D_K, D_K, D_V))
    beta, log_gate = torch.tensor(0.7, dtype=torch.float64), torch.tensor(-0.2, dtype=torch.float64)
    out, new_state = gated_delta_rule_step(state, q, k, v, beta, log_gate)
    decayed = math.exp(-0.2) * state
    expected = decayed - 0.7 * torch.outer(k, k @ decayed - v)
    torch.testing.assert_close(new_state, expected, rtol=0, atol=1e-13)
    torch.testing.assert_close(out, q @ expected, rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="log_gate .*positive"):
        gated_delta_rule_step(state, q, k, v, beta, -log_gate)
