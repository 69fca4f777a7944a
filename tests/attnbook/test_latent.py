"""Multi-head latent attention: the formulas, naive = absorbed within a derived bound, the cache of
latents, what the absorbed path never forms, the counterexample of rotary on the compressed keys,
and the errors (chapter 13)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

import attnbook
from attnbook import (
    LatentCache,
    MultiHeadLatentAttention,
    absorb_query,
    absorbed_output_weight,
    absorbed_query_weight,
    absorbed_rotary_scores,
    apply_rotary,
    attention,
    causal_mask,
    down_project,
    latent_attention_absorbed,
    latent_attention_naive,
    latent_decode_flops,
    rms_norm,
    rotary_key,
    rotary_on_latent_keys_scores,
    rotary_queries,
    up_project,
)

from .latent_bounds import absorption_bound, unit_roundoff

PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# sizes chosen all different, so a tensor's shape says what it is
H, D_H, D_V, D_C, D_R, D_CQ, D_MODEL = 3, 6, 5, 11, 4, 13, 32


def randn(*shape, seed, dtype, device, std=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype=dtype, device=device)


def pieces(batch, n, m, *, dtype, device, seed=0, h=H, d_h=D_H, d_v=D_V, d_c=D_C, d_r=D_R):
    """q_nope, q_rope, latent, k_rope, w_uk, w_uv of one random layer."""
    return (
        randn(*batch, h, n, d_h, seed=seed, dtype=dtype, device=device),
        randn(*batch, h, n, d_r, seed=seed + 1, dtype=dtype, device=device),
        randn(*batch, m, d_c, seed=seed + 2, dtype=dtype, device=device),
        randn(*batch, 1, m, d_r, seed=seed + 3, dtype=dtype, device=device),
        randn(h * d_h, d_c, seed=seed + 4, dtype=dtype, device=device, std=d_c**-0.5),
        randn(h * d_v, d_c, seed=seed + 5, dtype=dtype, device=device, std=d_c**-0.5),
    )


def module(dtype, device, *, d_query_latent=D_CQ, seed=0, **kwargs):
    torch.manual_seed(seed)
    mla = MultiHeadLatentAttention(D_MODEL, H, D_C, D_H, D_R, d_value=D_V, d_query_latent=d_query_latent, **kwargs)
    with torch.no_grad():
        for p in mla.parameters():
            p.normal_(0.0, 0.3)  # scores of a few units: attention far from uniform
    return mla.to(dtype=dtype, device=device)


# ---------------------------------------------------------------- the formulas, one by one


def test_module_is_the_equations_written_out(device):
    """Each head computed with the paper's equations in a loop over heads and tokens."""
    if device.type == "mps":
        pytest.skip("float64")
    f64 = torch.float64
    mla = module(f64, device)
    n = 7
    x = randn(2, n, D_MODEL, seed=3, dtype=f64, device=device)
    mask = causal_mask(n, device=device)
    ours, _ = mla(x, mask)
    pos = torch.arange(n, device=device)
    W = {name: p.detach() for name, p in mla.named_parameters()}

    def norm(v, g):
        return v / torch.sqrt((v * v).mean(-1, keepdim=True) + mla.norm_eps) * g

    c_kv = norm(x @ W["w_dkv.weight"].T, W["kv_norm"])  # (2, n, d_c)
    c_q = norm(x @ W["w_dq.weight"].T, W["q_norm"])  # (2, n, d_cq)
    k_r = apply_rotary(x @ W["w_kr.weight"].T, pos)  # (2, n, d_R)
    heads = []
    for h in range(H):
        w_uk = W["w_uk.weight"][h * D_H : (h + 1) * D_H]  # (d_h, d_c)
        w_uv = W["w_uv.weight"][h * D_V : (h + 1) * D_V]  # (d_v, d_c)
        w_uq = W["w_uq.weight"][h * D_H : (h + 1) * D_H]  # (d_h, d_cq)
        w_qr = W["w_qr.weight"][h * D_R : (h + 1) * D_R]  # (d_R, d_cq)
        k = torch.cat((c_kv @ w_uk.T, k_r), dim=-1)  # (2, n, d_h + d_R)
        q = torch.cat((c_q @ w_uq.T, apply_rotary(c_q @ w_qr.T, pos)), dim=-1)  # (2, n, d_h + d_R)
        v = c_kv @ w_uv.T  # (2, n, d_v)
        o, _ = attention(q, k, v, mask=mask, scale=1 / math.sqrt(D_H + D_R))
        heads.append(o)
    expected = torch.cat(heads, dim=-1) @ W["w_o.weight"].T  # (2, n, H d_v) @ (H d_v, d_model)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-12)


def test_pieces_have_their_shapes_and_meaning(device, dtype):
    x = randn(2, 5, D_MODEL, seed=0, dtype=dtype, device=device)
    w = randn(D_C, D_MODEL, seed=1, dtype=dtype, device=device)
    assert down_project(x, w).shape == (2, 5, D_C)
    c = down_project(x, w)
    w_up = randn(H * D_H, D_C, seed=2, dtype=dtype, device=device)
    k = up_project(c, w_up, H)
    assert k.shape == (2, H, 5, D_H)
    torch.testing.assert_close(k[:, 1], c @ w_up[D_H : 2 * D_H].T)  # head 1's block of rows
    pos = torch.arange(5, device=device)
    w_kr = randn(D_R, D_MODEL, seed=3, dtype=dtype, device=device)
    assert rotary_key(x, w_kr, pos).shape == (2, 1, 5, D_R)
    w_qr = randn(H * D_R, D_C, seed=4, dtype=dtype, device=device)
    qr = rotary_queries(c, w_qr, H, pos)
    torch.testing.assert_close(qr, apply_rotary(up_project(c, w_qr, H), pos))


def test_rms_norm_is_torchs(device, dtype):
    x = randn(3, 4, D_C, seed=0, dtype=dtype, device=device)
    g = randn(D_C, seed=1, dtype=dtype, device=device)
    expected = torch.nn.functional.rms_norm(x, (D_C,), g, eps=1e-6)
    torch.testing.assert_close(rms_norm(x, g, 1e-6), expected)
    torch.testing.assert_close(rms_norm(x, None, 0.0).pow(2).mean(-1), torch.ones(3, 4, dtype=dtype, device=device))


# ---------------------------------------------------------------- naive = absorbed


def assert_absorbed_equals_naive(q_nope, q_rope, latent, k_rope, w_uk, w_uv, mask):
    scale = 1 / math.sqrt(q_nope.shape[-1] + q_rope.shape[-1])
    naive, w_naive = latent_attention_naive(q_nope, q_rope, latent, k_rope, w_uk, w_uv, mask)
    absorbed, w_abs = latent_attention_absorbed(q_nope, q_rope, latent, k_rope, w_uk, w_uv, mask)
    bound = absorption_bound(q_nope, q_rope, latent, k_rope, w_uk, w_uv, w_naive, scale=scale)
    error = (naive - absorbed).abs()
    assert (error <= bound).all(), (
        f"max error {error.max().item():.3e}, bound there {bound.flatten()[error.argmax()]:.3e}"
    )
    return error.max().item(), bound.max().item()


@PROPERTY
@given(
    batch=st.lists(st.integers(1, 2), max_size=2),
    h=st.integers(1, 4),
    n=st.integers(1, 5),
    m=st.integers(1, 9),
    d_h=st.integers(1, 6),
    d_v=st.integers(1, 5),
    d_c=st.integers(1, 12),
    half_r=st.integers(1, 3),
    masked=st.booleans(),
    seed=st.integers(0, 10**6),
)
def test_absorbed_equals_naive_for_all_sizes(device, dtype, batch, h, n, m, d_h, d_v, d_c, half_r, masked, seed):
    args = pieces(batch, n, m, dtype=dtype, device=device, seed=seed, h=h, d_h=d_h, d_v=d_v, d_c=d_c, d_r=2 * half_r)
    mask = causal_mask(n, m, align="lower_right", device=device) if masked and n <= m else None
    assert_absorbed_equals_naive(*args, mask)


def test_absorbed_module_equals_naive_module(device, dtype):
    mla = module(dtype, device)
    n = 9
    x = randn(2, n, D_MODEL, seed=4, dtype=dtype, device=device)
    mask = causal_mask(n, device=device)
    naive, weights = mla(x, mask, need_weights=True)
    absorbed, _ = mla(x, mask, absorb=True)
    q_nope, q_rope, latent, k_rope = mla.project(x, torch.arange(n, device=device))
    bound = absorption_bound(
        q_nope, q_rope, latent, k_rope, mla.w_uk.weight, mla.w_uv.weight, weights, scale=mla.scale, w_o=mla.w_o.weight
    )
    error = (naive - absorbed).abs()
    assert (error <= bound).all(), f"max error {error.max().item():.3e} against a bound up to {bound.max().item():.3e}"
    if dtype == torch.float64:
        assert error.max().item() < 1e-13  # the bound's order: ~100 u times the magnitudes


def test_absorbed_weights_merge_the_up_projections(device):
    if device.type == "mps":
        pytest.skip("float64")
    f64 = torch.float64
    mla = module(f64, device)
    n = 6
    x = randn(2, n, D_MODEL, seed=5, dtype=f64, device=device)
    pos = torch.arange(n, device=device)
    q_nope, q_rope, latent, k_rope = mla.project(x, pos)
    # W_UK into the query: c^Q W_UQK^T = (c^Q W_UQ^T) W_UK per head
    c_q = rms_norm(down_project(x, mla.w_dq.weight), mla.q_norm, mla.norm_eps)
    merged_q = up_project(c_q, absorbed_query_weight(mla.w_uq.weight, mla.w_uk.weight, H), H)  # (2, H, n, d_c)
    torch.testing.assert_close(merged_q, absorb_query(q_nope, mla.w_uk.weight), rtol=0, atol=1e-12)
    # W_UV into the output: sum_h z_h (W_O^h W_UV^h)^T = the module's output
    mask = causal_mask(n, device=device)
    expected, weights = mla(x, mask, need_weights=True)
    z = weights @ latent.unsqueeze(-3)  # (2, H, n, n) @ (2, 1, n, d_c) -> (2, H, n, d_c)
    w_ouv = absorbed_output_weight(mla.w_uv.weight, mla.w_o.weight, H)  # (d_model, H d_c)
    assert w_ouv.shape == (D_MODEL, H * D_C)
    ours = z.transpose(-3, -2).flatten(-2) @ w_ouv.T  # (2, n, H d_c) @ (H d_c, d_model)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- the cache of latents


@pytest.mark.parametrize("absorb", [False, True], ids=["naive", "absorbed"])
def test_decoding_with_the_latent_cache_equals_the_full_computation(device, dtype, absorb):
    mla = module(dtype, device)
    n, prefill = 10, 4
    x = randn(2, n, D_MODEL, seed=6, dtype=dtype, device=device)
    expected, weights = mla(x, causal_mask(n, device=device), need_weights=True)
    cache = LatentCache(max_len=n)
    out = [mla(x[:, :prefill], cache=cache, absorb=absorb)[0]]  # a prompt, lower-right causal inside
    for t in range(prefill, n):
        out.append(mla(x[:, t : t + 1], cache=cache, absorb=absorb)[0])
    ours = torch.cat(out, dim=1)
    q_nope, q_rope, latent, k_rope = mla.project(x, torch.arange(n, device=device))
    bound = absorption_bound(
        q_nope, q_rope, latent, k_rope, mla.w_uk.weight, mla.w_uv.weight, weights, scale=mla.scale, w_o=mla.w_o.weight
    )
    assert ((ours - expected).abs() <= bound).all()
    # the cache holds the normalised latents and the rotated rotary keys, d_c + d_R numbers a token
    torch.testing.assert_close(cache.latents, latent, rtol=0, atol=0)
    torch.testing.assert_close(cache.rope_keys, k_rope, rtol=0, atol=0)
    assert cache.nbytes == 2 * n * (D_C + D_R) * torch.finfo(dtype).bits // 8


def test_latent_cache_errors():
    cache = LatentCache(3)
    with pytest.raises(ValueError, match="empty"):
        _ = cache.latents
    assert cache.nbytes == 0
    with pytest.raises(ValueError, match=r"rope_key \(\.\.\., 1, t, d_R\)"):
        cache.append(torch.zeros(2, 2, D_C), torch.zeros(2, 2, 2, D_R))  # rope keys per head: not one
    cache.append(torch.zeros(2, 2, D_C), torch.zeros(2, 1, 2, D_R))
    with pytest.raises(ValueError, match=r"needs latent \(2, 1, 11\)"):
        cache.append(torch.zeros(2, 1, D_C + 1), torch.zeros(2, 1, 1, D_R))
    with pytest.raises(ValueError, match="at most max_len = 3"):
        cache.append(torch.zeros(2, 2, D_C), torch.zeros(2, 1, 2, D_R))
    with pytest.raises(TypeError, match="dtype"):
        cache.append(torch.zeros(2, 1, D_C, dtype=torch.float64), torch.zeros(2, 1, 1, D_R, dtype=torch.float64))
    cache.reset()
    assert len(cache) == 0 and "max_len=3" in repr(cache)


# ---------------------------------------------------------------- what the absorbed path never forms


class Shapes(TorchDispatchMode):
    """Record the shape of every tensor each ATen operation returns."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.shapes.append((str(func), tuple(t.shape)))
        return out


def keys_or_values(shapes, m):
    """Tensors over the m cached tokens whose features are a key's or a value's: (..., m, w) with w in
    {d_h, d_h + d_R, d_v, H d_h, H d_v} (all distinct from d_c = 11 and d_R = 4), or with m last and
    such a w before it (a transposed key)."""
    widths = {D_H, D_H + D_R, D_V, H * D_H, H * D_V}
    return [
        (op, s)
        for op, s in shapes
        if len(s) >= 2 and ((s[-2] == m and s[-1] in widths) or (s[-1] == m and s[-2] in widths))
    ]


def test_the_absorbed_step_never_forms_a_key_or_value(device, dtype):
    mla = module(dtype, device)
    m = 37  # cached tokens, a size no width has
    x = randn(2, m, D_MODEL, seed=7, dtype=dtype, device=device)
    cache = LatentCache(max_len=m + 1)
    mla(x, cache=cache)
    new = randn(2, 1, D_MODEL, seed=8, dtype=dtype, device=device)
    with Shapes() as absorbed:
        mla(new, cache=cache, absorb=True)
    assert not keys_or_values(absorbed.shapes, m + 1), keys_or_values(absorbed.shapes, m + 1)
    # the largest tensors over the cache are the cached latents and the (H, 1, m) scores
    biggest = max(math.prod(s) for _, s in absorbed.shapes if m + 1 in s)
    assert biggest <= 2 * (m + 1) * max(D_C, H)
    # control: the detector sees the naive path form them
    cache.reset()
    mla(x, cache=cache)
    with Shapes() as naive:
        mla(new, cache=cache)
    found = keys_or_values(naive.shapes, m + 1)
    assert any(s[-2:] == (m + 1, H * D_H) for _, s in found) and any(s[-2:] == (m + 1, H * D_V) for _, s in found)


def test_decode_flops_are_those_counted(device):
    if device.type == "mps":
        pytest.skip("float64")
    m = 37
    args = pieces([1], 1, m, dtype=torch.float64, device=device)
    sizes = dict(num_heads=H, d_latent=D_C, d_head=D_H, d_rope=D_R, d_value=D_V)
    for path, absorbed in ((latent_attention_naive, False), (latent_attention_absorbed, True)):
        with FlopCounterMode(display=False) as counter:
            path(*args)
        assert counter.get_total_flops() == latent_decode_flops(m, absorbed=absorbed, **sizes)
    # DeepSeek-V3's sizes at m = 4096: the naive step does ~117 times the absorbed one's work, near the
    # large-m limit (d_c H (d_h + d_v) + H (d_h + d_R + d_v)) / (H (2 d_c + d_R)) = 120.8
    v3 = dict(num_heads=128, d_latent=512, d_head=128, d_rope=64, d_value=128)
    ratio = latent_decode_flops(4096, absorbed=False, **v3) / latent_decode_flops(4096, absorbed=True, **v3)
    assert 0.97 * (512 * 256 + 192 + 128) / (2 * 512 + 64) < ratio < (512 * 256 + 192 + 128) / (2 * 512 + 64)


# ---------------------------------------------------------------- the counterexample


def score_bound(q, w_uk, latent, scale):
    """Rounding bound of either score computation (rotation included: |cos| + |sin| <= sqrt 2 per
    entry, so the 1-norm of a rotated vector is at most sqrt 2 times the 1-norm), summed for two."""
    u = unit_roundoff(q.dtype)
    d_h, d_c = q.shape[-1], latent.shape[-1]
    w_max = w_uk.abs().amax()
    q1 = q.abs().sum(-1, keepdim=True)  # (..., H, n, 1)
    c1 = latent.abs().sum(-1).unsqueeze(-2).unsqueeze(-3)  # (..., 1, 1, m)
    return 2 * (d_h + d_c + 10) * u * scale * 2 * q1 * w_max * c1  # (..., H, n, m)


def test_absorption_fails_when_rotary_is_on_the_compressed_keys(device, dtype):
    n = m = 8
    q, _, latent, _, w_uk, _ = pieces([2], n, m, dtype=dtype, device=device, seed=11)
    pos = torch.arange(n, device=device)
    scale = 1 / math.sqrt(D_H)
    true = rotary_on_latent_keys_scores(q, latent, w_uk, pos, pos)  # (2, H, n, m)
    absorbed = absorbed_rotary_scores(q, latent, w_uk, pos)
    bound = score_bound(q, w_uk, latent, scale)
    error = (true - absorbed).abs()
    # key position 0 has no rotation (R_0 = I): there the two agree within rounding ...
    assert (error[..., 0] <= bound[..., 0]).all()
    # ... and at every other key position they disagree by far more than rounding can explain
    worst = (error / bound)[..., 1:].amax(dim=(0, 1, 2))  # (m - 1,): the largest excess per key position
    assert (worst > 1e3).all(), worst
    # the difference is exactly scale rot(q_i, i) . (rot(k_j, j) - k_j): the key's rotation that absorption loses
    k = up_project(latent, w_uk, H)  # (2, H, m, d_h)
    lost = apply_rotary(q, pos) @ (apply_rotary(k, pos) - k).transpose(-2, -1) * scale  # (2, H, n, m)
    assert ((true - absorbed - lost).abs() <= 2 * bound).all()
    # with the rotary part decoupled (its own key, never up-projected), absorption is exact: the module test above


def test_the_counterexample_is_not_a_rounding_artefact_in_any_layout(device):
    """Both pairings, and the rotation depends on the offset only: shifting both positions keeps the true scores."""
    if device.type == "mps":
        pytest.skip("float64")
    q, _, latent, _, w_uk, _ = pieces([1], 5, 5, dtype=torch.float64, device=device, seed=12)
    pos = torch.arange(5, device=device)
    for pairing in ("interleaved", "half"):
        true = rotary_on_latent_keys_scores(q, latent, w_uk, pos, pos, pairing=pairing)
        shifted = rotary_on_latent_keys_scores(q, latent, w_uk, pos + 100, pos + 100, pairing=pairing)
        torch.testing.assert_close(true, shifted, rtol=0, atol=1e-10)
        absorbed = absorbed_rotary_scores(q, latent, w_uk, pos + 100, pairing=pairing)
        assert (true - absorbed).abs().amax() > 0.1  # at offset 100 not even key 0 is spared


# ---------------------------------------------------------------- errors


def test_errors_name_the_sizes():
    with pytest.raises(ValueError, match=r"d_latent = 40 is wider than the model \(d_model = 32\)"):
        MultiHeadLatentAttention(32, 4, 40, 8, 4)
    with pytest.raises(ValueError, match=r"d_query_latent = 33 is wider than the model \(d_model = 32\)"):
        MultiHeadLatentAttention(32, 4, 16, 8, 4, d_query_latent=33)
    with pytest.raises(ValueError, match=r"d_rope = 3 is odd"):
        MultiHeadLatentAttention(32, 4, 16, 8, 3)
    with pytest.raises(ValueError, match=r"d_rope = 10 is wider than a head \(d_head = 8\)"):
        MultiHeadLatentAttention(32, 4, 16, 8, 10)
    with pytest.raises(ValueError, match="pairing"):
        MultiHeadLatentAttention(32, 4, 16, 8, 4, pairing="neighbours")
    with pytest.raises(ValueError, match=r"d_c of w_down \(d_c, d_model\) = 40 is wider"):
        down_project(torch.zeros(2, 32), torch.zeros(40, 32))
    mla = MultiHeadLatentAttention(32, 4, 16, 8, 4)
    with pytest.raises(ValueError, match=r"x \(\.\.\., n, d_model\) must have d_model = 32"):
        mla(torch.zeros(1, 3, 31))
    with pytest.raises(TypeError, match="cache must be a LatentCache"):
        mla(torch.zeros(1, 3, 32), cache=attnbook.KVCache(4))
    q, qr, c, kr, w_uk, w_uv = pieces([1], 2, 3, dtype=torch.float64, device="cpu")
    with pytest.raises(ValueError, match=r"k_rope \(\.\.\., 1, m, d_R\)"):
        latent_attention_absorbed(q, qr, c, kr.expand(1, H, 3, D_R), w_uk, w_uv)
    with pytest.raises(ValueError, match="w_uk"):
        latent_attention_naive(q, qr, c, kr, w_uk[:-1], w_uv)
    with pytest.raises(ValueError, match="mask"):
        latent_attention_naive(q, qr, c, kr, w_uk, w_uv, mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"head width d_h of q_nope .* = 5 is odd"):
        rotary_on_latent_keys_scores(
            q[..., :5], c, w_uk.unflatten(0, (H, D_H))[:, :5].flatten(0, 1), *[torch.arange(2)] * 2
        )
    with pytest.raises(ValueError, match="weight"):
        rms_norm(torch.zeros(2, 5), torch.ones(4))
    with pytest.raises(TypeError, match="absorbed"):
        latent_decode_flops(3, num_heads=1, d_latent=2, d_head=2, d_rope=2, absorbed=1)
