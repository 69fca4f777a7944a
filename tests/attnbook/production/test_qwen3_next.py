r"""Qwen3-Next's gated DeltaNet layer in ``transformers`` against the course's gated delta rule (chapter 14).

A tiny random ``Qwen3NextModel`` (one layer, ``layer_types = ["linear_attention"]``; float64; 2 key
heads of width d_k = 8 shared by 4 value heads of width d_v = 6, so that the grouping and a transposed
state would show) runs its ``Qwen3NextGatedDeltaNet`` through the plain PyTorch path
(``torch_chunk_gated_delta_rule``: ``fla`` is not installed, and the test checks that the function the
layer called is the PyTorch fallback). Its weights are drawn again: the linear layers with
:data:`hf.STD`, the short convolution's kernel with standard deviation 0.5, the gated norm's weight
around 1, and ``A_log`` so that A = exp(A_log) lies in [0.05, 0.5] (with Hugging Face's A up to 16 the
gates reach e^-40 and each token forgets the whole state, which would hide the recurrence).

**What is compared.**

1. *The core* (``test_the_core_is_the_gated_delta_rule``): the layer's call of its chunked kernel is
   recorded: its inputs (q and k after the short convolution, before their l2 normalisation; v;
   beta = sigmoid(b); g = -exp(A_log) softplus(a + dt_bias)) and its output, the core attention
   output (batch, n, H_v, d_v) before the gated RMSNorm and the output projection. The course
   normalises q and k as the kernel does (x / sqrt(|x|^2 + 1e-6)), scales q by 1 / sqrt(d_k), repeats
   each key head for its value heads (``repeat_interleave``) and runs
   :func:`attnbook.gated_delta_rule_recurrent` and :func:`attnbook.gated_delta_rule_chunkwise` (chunk
   4, three chunks, the last one short) with log_gates = g. The same numbers, within
   :func:`chunk_bound`.
2. *The token loop* (``test_the_recurrent_kernel_is_the_gated_delta_rule``): Hugging Face's
   ``torch_recurrent_gated_delta_rule`` (the path of cached decoding) on the same inputs, outputs and
   final state, against :func:`attnbook.gated_delta_rule_recurrent`, within :func:`recurrent_bound`;
   and a sequence split in two, the second half continued from the first half's state.
3. *The whole layer* (``test_the_whole_layer``): from the hidden states the layer received, the course
   rebuilds everything from the weights (the projections and their per-key-head layout, the causal
   depthwise convolution of kernel 4 with SiLU, beta, g, the gated delta rule, the gated RMSNorm
   rms_norm(o) * silu(z) and the output projection); the rebuilt kernel inputs equal the recorded ones
   within float64 rounding, and the layer output is within the core's bound carried through the norm
   and the projection, plus the rounding of the norm's float32 island.

**Tolerance.** The kernels cast everything to float32 inside (so float64 is not possible there). The
bounds are first order, entry by entry, from the magnitudes of the float64 quantities: the inputs
rounded to float32 and the l2 normalisation, the cumulative sums of log gates, the exponentials, each
matrix product by its length, the triangular solve by its componentwise backward error (Higham,
Theorem 8.5: :math:`|X - \hat X| \le |A^{-1}| (\gamma_C |A| + |\Delta A|) |X| + |A^{-1}||\Delta B|`),
and for the token loop the state's errors carried forward without growth (each step's map
:math:`S \mapsto a(I - \beta k^\top k) S` has 2-norm at most 1 for a unit key, beta in (0, 1), a <= 1).
The same bound with u = 64 u_64 is added for the course's own float64 rounding, and everything is
doubled (:data:`hf.SAFETY`) for the second-order terms.

**Controls** (the other conventions, each must differ by at least 5 % of the output's largest entry):
the gate applied after the write, :math:`S_t = a_t[(I - \beta_t k_t^\top k_t) S_{t-1} + \beta_t k_t^\top v_t]`;
no gates (the plain delta rule); and the value heads paired with the key heads by ``repeat`` (head h
with key head h mod H_k) instead of ``repeat_interleave`` (h // 2).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnbook

from .hf import (
    F64,
    SAFETY,
    U32,
    U64,
    assert_differs,
    assert_within,
    hidden_states,
    linear,
    one_call,
    output,
    random_ids,
    skip_without_float64,
    tiny_config,
    tiny_model,
)

transformers = pytest.importorskip("transformers")
modeling = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")

H_K, H_V, D_K, D_V, D_MODEL, KERNEL = 2, 4, 8, 6, 32, 4
G = H_V // H_K  # value heads per key head
N, BATCH, CHUNK = 11, 2, 4
HF_CHUNK = 64  # torch_chunk_gated_delta_rule's default chunk: the forward runs one chunk (padded) for N <= 64
L2_EPS = 1e-6  # the kernels' l2norm: x * rsqrt(sum x^2 + 1e-6)


def model(device):
    config = tiny_config(
        transformers.Qwen3NextConfig, hidden_size=D_MODEL, num_hidden_layers=1, layer_types=["linear_attention"],
        linear_num_key_heads=H_K, linear_num_value_heads=H_V, linear_key_head_dim=D_K, linear_value_head_dim=D_V,
        linear_conv_kernel_dim=KERNEL, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
        intermediate_size=16, moe_intermediate_size=8, shared_expert_intermediate_size=8, num_experts=4,
        num_experts_per_tok=2, use_cache=False,
    )  # fmt: skip
    config._experts_implementation = "eager"  # the float64 forward needs the plain experts
    qwen = tiny_model(transformers.Qwen3NextModel, config, device)
    layer = qwen.layers[0].linear_attn
    assert type(layer).__name__ == "Qwen3NextGatedDeltaNet"
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        draw = lambda shape: torch.randn(shape, generator=generator, dtype=F64).to(device)  # noqa: E731
        layer.conv1d.weight.copy_(0.5 * draw(layer.conv1d.weight.shape))
        layer.norm.weight.copy_(1 + 0.3 * draw(layer.norm.weight.shape))
        layer.dt_bias.copy_(0.5 * draw(layer.dt_bias.shape))
        a = 0.05 + 0.45 * torch.rand(H_V, generator=generator, dtype=F64)
        layer.A_log.copy_(torch.log(a).to(device))
    return qwen, layer


def run(device, monkeypatch):
    """The model on random ids; the layer's one call and its kernel's one call (args, kwargs, output)."""
    qwen, layer = model(device)
    kernel = modeling.torch_chunk_gated_delta_rule
    calls = []

    def recorded(*args, **kwargs):
        out = kernel(*args, **kwargs)
        calls.append((args, kwargs, out))
        return out

    monkeypatch.setattr(modeling, "torch_chunk_gated_delta_rule", recorded)
    with torch.no_grad():
        call = one_call(qwen, layer, random_ids(BATCH, N, 3, device))
    assert len(calls) == 1, f"the layer called its chunked kernel {len(calls)} times"
    (q_raw, k_raw, v), kwargs, (core, _) = calls[0]
    assert kwargs["use_qk_l2norm_in_kernel"] is True and kwargs["initial_state"] is None
    # the kernel that ran is the plain PyTorch one (no fla, no hub kernel): calling it directly gives the same numbers
    torch_only = kernel.__wrapped__
    assert torch_only.__module__ == modeling.__name__ and torch_only.__name__ == "torch_chunk_gated_delta_rule"
    again, _ = torch_only(q_raw, k_raw, v, g=kwargs["g"], beta=kwargs["beta"], use_qk_l2norm_in_kernel=True)
    assert torch.equal(again, core)
    return layer, call, (q_raw, k_raw, v, kwargs["beta"], kwargs["g"]), core


def l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + L2_EPS)  # (..., d)


def heads_first(x: torch.Tensor) -> torch.Tensor:
    """(batch, n, H, ...) -> (batch, H, n, ...)."""
    return x.transpose(1, 2)


def course_inputs(q_raw, k_raw, v, beta, g, *, pairing="interleave"):
    """The kernel's inputs in the course's layout: q, k (batch, H_v, n, d_k) unit (then q / sqrt(d_k)),
    v (batch, H_v, n, d_v), beta and log gates (batch, H_v, n)."""
    spread = (lambda x: x.repeat_interleave(G, dim=2)) if pairing == "interleave" else (lambda x: x.repeat(1, 1, G, 1))
    q = heads_first(spread(l2norm(q_raw))) * D_K**-0.5  # (batch, n, H_k, d_k) -> (batch, H_v, n, d_k)
    k = heads_first(spread(l2norm(k_raw)))  # (batch, H_v, n, d_k)
    return q, k, heads_first(v), heads_first(beta), heads_first(g)


def gate_after_write(q, k, v, beta, log_gates):
    """The control: S_t = a_t [(I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t] (the gate decays the
    fresh write too)."""
    state = torch.zeros(*q.shape[:-2], D_K, D_V, dtype=q.dtype, device=q.device)
    outputs = []
    for t in range(q.shape[-2]):
        _, state = attnbook.delta_rule_step(state, q[..., t, :], k[..., t, :], v[..., t, :], beta[..., t])
        state = torch.exp(log_gates[..., t])[..., None, None] * state  # (..., d_k, d_v)
        outputs.append((q[..., t, None, :] @ state)[..., 0, :])  # (..., 1, d_k) @ (..., d_k, d_v) -> (..., d_v)
    return torch.stack(outputs, dim=-2)


# ---------------------------------------------------------------- rounding bounds


def chunk_bound(q, k, v, beta, g, u, *, chunk=HF_CHUNK):
    r"""First-order bound, entry by entry, on the error of ``torch_chunk_gated_delta_rule``'s output for
    one chunk (n <= chunk, zero initial state) computed with unit roundoff ``u``, from the exact float64
    quantities: q, k (batch, H, n, d_k) as the course feeds them (unit keys, q / sqrt(d_k)), v (batch,
    H, n, d_v), beta and g (batch, H, n). Returns (batch, H, n, d_v), times :data:`SAFETY`.

    For one chunk the kernel computes Γ = exp(c_i - c_j) with c = cumsum(g); A = I + tril((βK K^T) ∘ Γ, -1);
    X = A^{-1} (β V) by a triangular solve; O = ((Q K^T) ∘ Γ) X (the state term Q S_0 is 0). Each input is
    rounded to u (relative u), the l2 normalisation adds (d_k + 8) u relative (its sum of squares,
    rsqrt, product), the scale 1/sqrt(d_k) 2u; a cumulative sum of m terms errs by at most
    (m + 1) u times the sum of their magnitudes; an exp adds 2u relative; a product of length m,
    m u |A||B|."""
    n, d_k = q.shape[-2], q.shape[-1]
    eps_norm = (d_k + 8) * u
    e_q, e_k = (eps_norm + 2 * u) * q.abs(), eps_norm * k.abs()  # (..., n, d_k)
    vb = v * beta[..., None]  # βV: (..., n, d_v)
    e_vb = 3 * u * vb.abs()
    kb = k * beta[..., None]  # βK: (..., n, d_k)
    e_kb = (eps_norm + 2 * u) * kb.abs()
    c = torch.cumsum(g, dim=-1)  # (..., n)
    e_c = (chunk + 1) * u * torch.cumsum(g.abs(), dim=-1)  # (..., n)
    lower = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()  # (n, n), j <= i
    p = (c[..., :, None] - c[..., None, :]).masked_fill(~lower, 0)  # c_i - c_j: (..., n, n)
    gamma = torch.exp(p).masked_fill(~lower, 0)  # Γ: (..., n, n)
    e_gamma = gamma * (e_c[..., :, None] + e_c[..., None, :] + u * p.abs() + 2 * u)  # (..., n, n)

    def product_error(a, e_a, b, e_b):  # a (..., n, d) @ b^T (..., d, n) and its error bound
        m = a.shape[-1]
        ab = a @ b.transpose(-2, -1)  # (..., n, d) @ (..., d, n) -> (..., n, n)
        error = e_a @ b.abs().transpose(-2, -1) + a.abs() @ e_b.transpose(-2, -1)  # (..., n, n)
        return ab, error + m * u * (a.abs() @ b.abs().transpose(-2, -1))

    m1, e_m1 = product_error(kb, e_kb, k, e_k)  # βK K^T
    ut = m1 * gamma  # (..., n, n)
    e_ut = e_m1 * gamma + m1.abs() * e_gamma + u * ut.abs()
    m2, e_m2 = product_error(q, e_q, k, e_k)  # Q K^T
    intra = m2 * gamma  # (..., n, n)
    e_intra = e_m2 * gamma + m2.abs() * e_gamma + u * intra.abs()
    eye = torch.eye(n, dtype=q.dtype, device=q.device)
    system = eye + ut.tril(-1)  # A: (..., n, n)
    x = torch.linalg.solve_triangular(system, vb, upper=False, unitriangular=True)  # (..., n, d_v)
    inverse = torch.linalg.solve_triangular(system, eye.expand(system.shape), upper=False, unitriangular=True)
    residual = e_ut.tril(-1) @ x.abs() + (chunk + 1) * u * (system.abs() @ x.abs()) + e_vb  # (..., n, d_v)
    e_x = inverse.abs() @ residual  # (..., n, n) @ (..., n, d_v) -> (..., n, d_v)
    e_o = e_intra @ x.abs() + intra.abs() @ e_x + chunk * u * (intra.abs() @ x.abs())  # (..., n, d_v)
    return SAFETY * e_o


def recurrent_bound(q, k, v, beta, g, u):
    r"""First-order bound on the error of ``torch_recurrent_gated_delta_rule`` (the token loop) computed
    with unit roundoff ``u``: the outputs entry by entry (batch, H, n, d_v) and the final state, one
    number per head (batch, H) bounding every entry (its Frobenius norm).

    Per token, from the exact S_{t-1}: S' = a S (a = exp(g) with g rounded: a (|g| + 2) u), the read
    k S' (length d_k), δ = (v - k S') β, S = S' + k^T δ, o = q S. The error a token makes is L_t (its
    Frobenius norm); an earlier error E is carried by the exact map to a (I - β k^T k) E, whose
    Frobenius norm is at most |E| (|k| < 1 after the l2 normalisation, β in (0, 1), a <= 1), so the
    state's error after t tokens is at most e_t = L_1 + ... + L_t, and o_t's error at most
    |q_t| e_t plus the read-out's own rounding. Times :data:`SAFETY`."""
    d_k = q.shape[-1]
    eps_norm = (d_k + 8) * u
    e_q, e_k = (eps_norm + 2 * u) * q.abs(), eps_norm * k.abs()
    state = torch.zeros(*q.shape[:-2], d_k, v.shape[-1], dtype=q.dtype, device=q.device)  # (..., d_k, d_v)
    carried = torch.zeros(q.shape[:-2], dtype=q.dtype, device=q.device)  # e_t: (...,)
    bounds = []
    for t in range(q.shape[-2]):
        qt, kt, vt, bt, gt = q[..., t, :], k[..., t, :], v[..., t, :], beta[..., t, None], g[..., t, None, None]
        a = torch.exp(gt)  # (..., 1, 1)
        decayed = a * state  # S': (..., d_k, d_v)
        e_decayed = decayed.abs() * (u * gt.abs() + 3 * u)
        read = (kt[..., None, :] @ decayed)[..., 0, :]  # k S': (..., 1, d_k) @ (..., d_k, d_v) -> (..., d_v)
        e_read = (
            (e_k[..., t, None, :] + d_k * u * kt.abs()[..., None, :]) @ decayed.abs()
            + kt.abs()[..., None, :] @ e_decayed
        )[..., 0, :]
        delta = (vt - read) * bt  # (..., d_v)
        e_delta = (
            (u * vt.abs() + e_read + u * (vt.abs() + read.abs())) * bt + (vt - read).abs() * u * bt + u * delta.abs()
        )
        state = decayed + kt[..., :, None] * delta[..., None, :]  # (..., d_k, d_v)
        local = (
            e_decayed
            + (e_k[..., t, :, None] + u * kt.abs()[..., :, None]) * delta.abs()[..., None, :]
            + kt.abs()[..., :, None] * e_delta[..., None, :]
            + u * state.abs()
        )  # (..., d_k, d_v)
        carried = carried + local.flatten(-2).norm(dim=-1)  # (...,)
        e_out = qt.norm(dim=-1)[..., None] * carried[..., None]  # |q_t| e_t: (..., d_v)
        e_out = e_out + ((e_q[..., t, None, :] + d_k * u * qt.abs()[..., None, :]) @ state.abs())[..., 0, :]
        bounds.append(e_out)
    return SAFETY * torch.stack(bounds, dim=-2), SAFETY * carried


# ---------------------------------------------------------------- the tests


def test_the_core_is_the_gated_delta_rule(device, monkeypatch):
    skip_without_float64(device)
    _, _, recorded, core = run(device, monkeypatch)
    q, k, v, beta, log_gates = course_inputs(*recorded)
    assert (log_gates < 0).all() and (log_gates > -2).all() and ((beta > 0) & (beta < 1)).all()
    theirs = heads_first(core)  # (batch, n, H_v, d_v) -> (batch, H_v, n, d_v)
    bound = chunk_bound(q, k, v, beta, log_gates, U32) + chunk_bound(q, k, v, beta, log_gates, 64 * U64)
    ours, _ = attnbook.gated_delta_rule_recurrent(q, k, v, beta, log_gates)
    assert_within(ours, theirs, bound, "Qwen3-Next core (chunked kernel, float32 inside) vs gated_delta_rule_recurrent")
    chunked, _ = attnbook.gated_delta_rule_chunkwise(q, k, v, beta, log_gates, CHUNK)
    assert_within(chunked, theirs, bound, f"Qwen3-Next core vs gated_delta_rule_chunkwise (chunk {CHUNK})")
    # the controls: the other conventions
    assert_differs(gate_after_write(q, k, v, beta, log_gates), theirs, "Qwen3-Next core, the gate after the write")
    assert_differs(attnbook.delta_rule_recurrent(q, k, v, beta)[0], theirs, "Qwen3-Next core, no gates")
    tiled = course_inputs(*recorded, pairing="repeat")
    assert_differs(
        attnbook.gated_delta_rule_recurrent(*tiled)[0], theirs, "Qwen3-Next core, value heads paired by repeat"
    )


def test_the_recurrent_kernel_is_the_gated_delta_rule(device, monkeypatch):
    skip_without_float64(device)
    _, _, recorded, _ = run(device, monkeypatch)
    q_raw, k_raw, v_raw, beta_raw, g_raw = recorded
    kernel = modeling.torch_recurrent_gated_delta_rule.__wrapped__  # the plain PyTorch token loop
    theirs, their_state = kernel(
        q_raw, k_raw, v_raw, g=g_raw, beta=beta_raw, output_final_state=True, use_qk_l2norm_in_kernel=True
    )  # (batch, n, H_v, d_v), (batch, H_v, d_k, d_v)
    q, k, v, beta, log_gates = course_inputs(*recorded)
    ours, state = attnbook.gated_delta_rule_recurrent(q, k, v, beta, log_gates)
    bound, state_bound = recurrent_bound(q, k, v, beta, log_gates, U32)
    bound64, state_bound64 = recurrent_bound(q, k, v, beta, log_gates, 64 * U64)
    assert_within(ours, heads_first(theirs), bound + bound64, "Qwen3-Next token loop vs gated_delta_rule_recurrent")
    assert_within(
        state, their_state, (state_bound + state_bound64)[..., None, None], "Qwen3-Next final state (d_k, d_v)"
    )
    assert_differs(state.transpose(-2, -1)[..., :D_V, :D_V], their_state[..., :D_V, :D_V], "the state transposed")
    # a sequence continued from a state: Hugging Face's second half from its own first-half state
    cut = 6
    first = [x[:, :cut] for x in recorded]
    second = [x[:, cut:] for x in recorded]
    _, their_half = kernel(*first[:3], g=first[4], beta=first[3], output_final_state=True, use_qk_l2norm_in_kernel=True)
    their_rest, _ = kernel(
        *second[:3], g=second[4], beta=second[3], initial_state=their_half, use_qk_l2norm_in_kernel=True
    )
    _, our_half = attnbook.gated_delta_rule_chunkwise(*course_inputs(*first), CHUNK)
    our_rest, _ = attnbook.gated_delta_rule_chunkwise(*course_inputs(*second), CHUNK, initial_state=our_half)
    assert_within(
        our_rest, heads_first(their_rest), (bound + bound64)[..., cut:, :], "Qwen3-Next continued from a state"
    )


def test_the_whole_layer(device, monkeypatch):
    skip_without_float64(device)
    layer, call, recorded, _ = run(device, monkeypatch)
    x = hidden_states(call)  # (batch, n, d_model)
    # the projections: per key head h, [q_h (d_k), k_h (d_k), v of its G value heads (G d_v), z of them (G d_v)]
    qkvz = linear(x, layer.in_proj_qkvz).unflatten(-1, (H_K, 2 * D_K + 2 * G * D_V))  # (batch, n, H_k, ...)
    q, k, v, z = qkvz.split([D_K, D_K, G * D_V, G * D_V], dim=-1)
    ba = linear(x, layer.in_proj_ba).unflatten(-1, (H_K, 2 * G))  # (batch, n, H_k, 2G)
    b, a = (t.flatten(-2) for t in ba.split([G, G], dim=-1))  # (batch, n, H_v) each
    z = z.reshape(BATCH, N, H_V, D_V)  # (batch, n, H_k, G d_v) -> (batch, n, H_v, d_v)
    # the short causal convolution over time, channels [q of every head, k of every head, v of every head], then SiLU
    mixed = torch.cat([q.flatten(-2), k.flatten(-2), v.flatten(-2)], dim=-1)  # (batch, n, channels)
    weight = layer.conv1d.weight.detach()[:, 0, :]  # (channels, kernel)
    padded = F.pad(mixed, (0, 0, KERNEL - 1, 0))  # (batch, kernel - 1 + n, channels): zeros before the first token
    windows = padded.unfold(1, KERNEL, 1)  # (batch, n, channels, kernel): tokens t - 3 .. t
    conv = (windows * weight).sum(-1)  # (batch, n, channels)
    mixed = F.silu(conv)
    q, k, v = mixed.split([H_K * D_K, H_K * D_K, H_V * D_V], dim=-1)
    q, k = q.unflatten(-1, (H_K, D_K)), k.unflatten(-1, (H_K, D_K))  # (batch, n, H_k, d_k)
    v = v.unflatten(-1, (H_V, D_V))  # (batch, n, H_v, d_v)
    beta = torch.sigmoid(b)
    # g = -exp(A_log) softplus(a + dt_bias), with the layer's float32 islands copied (A_log and a rounded to float32)
    g = -layer.A_log.detach().float().exp() * F.softplus(a.float() + layer.dt_bias.detach())
    rebuilt = (q, k, v, beta, g)
    conv_bound = 2 * (KERNEL + 4) * U64 * (windows.abs() * weight.abs()).sum(-1).amax()
    for name, ours, theirs in zip(("q", "k", "v", "beta", "g"), rebuilt, recorded):
        assert_within(
            ours, theirs, conv_bound if name in "qkv" else 4 * U64 * theirs.abs(), f"rebuilt kernel input {name}"
        )
    q, k, v, beta, log_gates = course_inputs(*rebuilt)
    core, _ = attnbook.gated_delta_rule_chunkwise(q, k, v, beta, log_gates, CHUNK)  # (batch, H_v, n, d_v)
    core_bound = chunk_bound(q, k, v, beta, log_gates, U32) + chunk_bound(q, k, v, beta, log_gates, 64 * U64)
    core, core_bound = heads_first(core), heads_first(core_bound)  # (batch, n, H_v, d_v)
    gain, eps = layer.norm.weight.detach(), layer.norm.variance_epsilon
    normed = attnbook.rms_norm(core, gain) * F.silu(z)  # the gated RMSNorm, per value head: (batch, n, H_v, d_v)
    ours = linear(normed.flatten(-2), layer.out_proj)  # (batch, n, H_v d_v) -> (batch, n, d_model)
    # the core's error through the norm: d(x / r) <= |dx| / r + |x| sum_i |x_i| |dx_i| / (d r^3), r = rms(x);
    # the norm's float32 island (x rounded, mean of squares, rsqrt, silu of z rounded): (d_v + 10 + |z|) u32 relative
    r = torch.sqrt(core.pow(2).mean(-1, keepdim=True) + eps)  # (batch, n, H_v, 1)
    e_norm = core_bound / r + core.abs() * (core.abs() * core_bound).sum(-1, keepdim=True) / (D_V * r**3)
    e_normed = gain.abs() * F.silu(z).abs() * e_norm + (D_V + 10 + z.abs()) * U32 * normed.abs()
    w_abs = layer.out_proj.weight.detach().abs()  # (d_model, H_v d_v)
    bound = SAFETY * (e_normed.flatten(-2) @ w_abs.T + (H_V * D_V + 1) * U64 * (normed.abs().flatten(-2) @ w_abs.T))
    assert_within(ours, output(call), bound, "Qwen3-Next gated DeltaNet layer, rebuilt from its weights")
    control = attnbook.rms_norm(heads_first(gate_after_write(q, k, v, beta, log_gates)), gain) * F.silu(z)
    assert_differs(
        linear(control.flatten(-2), layer.out_proj), output(call), "Qwen3-Next layer, the gate after the write"
    )
