"""MultiHeadAttention: against torch.nn.MultiheadAttention, the formal column convention and its own identities."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close
from torch.utils.flop_counter import FlopCounterMode

from attnbook import MultiHeadAttention, causal_mask, formal, keep_to_additive, keep_to_block, padding_mask
from attnbook.heads.multi_head import (
    concat_then_project,
    head_weights,
    merge_heads,
    mha_flops,
    mha_parameter_count,
    project_heads,
    project_per_head,
    split_heads,
    sum_over_heads,
)

from ..conftest import tolerances

# to 1e-6 in float64, as the course asks (the float64 tolerances of conftest are tighter still)
F64 = {"atol": 1e-6, "rtol": 1e-6}


def torch_mha(embed_dim, num_heads, *, kdim=None, vdim=None, bias=True, dtype=torch.float64, device="cpu", seed=0):
    """A torch.nn.MultiheadAttention in eval mode with every parameter random (biases too, so that none is zero)."""
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(
        embed_dim, num_heads, bias=bias, kdim=kdim, vdim=vdim, batch_first=True, dtype=dtype, device=device
    ).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=dtype) / p.shape[-1] ** 0.5)
    return mha


def inputs(batch, n, m, d_q, d_k, d_v, *, dtype=torch.float64, device="cpu", seed=1):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(batch, rows, width, generator=g, dtype=dtype).to(device)
        for rows, width in ((n, d_q), (m, d_k), (m, d_v))
    )


def skip_without_float64(device):
    if device.type == "mps":
        pytest.skip("MPS has no float64")


def compare_with_torch(mha, ours, query, key, value, *, ours_mask=None, tol, **torch_masks):
    """Outputs with and without weights, per-head and averaged weights, all equal to PyTorch's."""
    with torch.no_grad():
        expected, expected_weights = mha(
            query, key, value, need_weights=True, average_attn_weights=False, **torch_masks
        )
        expected_avg = mha(query, key, value, need_weights=True, **torch_masks)[1]
        expected_fast = mha(query, key, value, need_weights=False, **torch_masks)[0]
        out, weights = ours(query, key, value, mask=ours_mask, need_weights=True)
        fast, none = ours(query, key, value, mask=ours_mask)
    assert none is None
    assert out.shape == query.shape[:2] + (mha.embed_dim,)
    assert weights.shape == (query.shape[0], mha.num_heads, query.shape[1], key.shape[1])
    assert_close(out, expected, **tol)
    assert_close(fast, expected_fast, **tol)
    assert_close(fast, out, **tol)
    assert_close(weights, expected_weights, **tol)
    assert_close(weights.mean(dim=1), expected_avg, **tol)  # torch's default averages over the heads
    return out, weights


CONFIGS = {
    "self": dict(embed_dim=12, num_heads=3),
    "self-no-bias": dict(embed_dim=12, num_heads=4, bias=False),
    "kdim-vdim": dict(embed_dim=8, num_heads=2, kdim=5, vdim=3),
    "kdim-vdim-no-bias": dict(embed_dim=8, num_heads=4, kdim=6, vdim=7, bias=False),
    "one-head": dict(embed_dim=6, num_heads=1),
}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_equals_torch_without_mask(device, dtype, config):
    mha = torch_mha(**config, dtype=dtype, device=device)
    ours = MultiHeadAttention.from_torch(mha)
    assert ours.q_proj.weight.device.type == device.type and ours.q_proj.weight.dtype == dtype
    assert ours.bias == config.get("bias", True)
    E, kdim, vdim = (
        config["embed_dim"],
        config.get("kdim") or config["embed_dim"],
        config.get("vdim") or config["embed_dim"],
    )
    tol = F64 if dtype == torch.float64 else tolerances(dtype)
    x, z_k, z_v = inputs(2, 5, 7, E, kdim, vdim, dtype=dtype, device=device)
    compare_with_torch(mha, ours, x, z_k, z_v, tol=tol)  # cross-attention (keys and values from another sequence)
    if kdim == vdim == E:
        compare_with_torch(mha, ours, x, x, x, tol=tol)  # self-attention: PyTorch's fast path
        compare_with_torch(mha, ours, x, z_k, z_k, tol=tol)


def test_copies_are_independent_of_the_source():
    mha = torch_mha(8, 2)
    ours = MultiHeadAttention.from_torch(mha)
    x = inputs(1, 3, 3, 8, 8, 8)[0]
    before = ours(x, x, x)[0]
    with torch.no_grad():
        mha.in_proj_weight.mul_(2)
    assert_close(ours(x, x, x)[0], before)


@pytest.mark.parametrize("config", [CONFIGS["self"], CONFIGS["kdim-vdim-no-bias"]], ids=["self", "kdim-vdim-no-bias"])
def test_bool_masks_equal_torch_after_conversion(device, config):
    """Our keep-masks (True = attend) against PyTorch's attn_mask and key_padding_mask (True = blocked)."""
    skip_without_float64(device)
    mha = torch_mha(**config, device=device)
    ours = MultiHeadAttention.from_torch(mha)
    E, H = config["embed_dim"], config["num_heads"]
    kdim, vdim = config.get("kdim") or E, config.get("vdim") or E
    batch, n, m = 3, 5, 6
    x, z_k, z_v = inputs(batch, n, m, E, kdim, vdim, device=device)
    g = torch.Generator().manual_seed(2)

    # (n, m): one mask for every sequence and head
    keep = (torch.rand(n, m, generator=g) > 0.5).to(device)
    keep[:, 0] = True
    compare_with_torch(mha, ours, x, z_k, z_v, ours_mask=keep, attn_mask=keep_to_block(keep), tol=F64)

    # (batch, heads, n, m): PyTorch wants (batch * heads, n, m), batch-major, head-minor
    keep4 = (torch.rand(batch, H, n, m, generator=g) > 0.5).to(device)
    keep4[..., 0] = True
    compare_with_torch(
        mha, ours, x, z_k, z_v, ours_mask=keep4, attn_mask=keep_to_block(keep4).reshape(batch * H, n, m), tol=F64
    )

    # padding: key_padding_mask (batch, m) with True = padding
    keep_pad = padding_mask([6, 2, 4], m, device=device)
    out, weights = compare_with_torch(
        mha, ours, x, z_k, z_v, ours_mask=keep_pad[:, None, :], key_padding_mask=keep_to_block(keep_pad), tol=F64
    )
    assert (weights[1, :, :, 2:] == 0).all()  # sequence 1 has 2 real keys

    # padding and a causal mask together; the (batch, n, m) layout is shared by the heads
    keep_both = keep_pad[:, None, :] & causal_mask(n, m, device=device)  # (batch, n, m)
    compare_with_torch(
        mha,
        ours,
        x,
        z_k,
        z_v,
        ours_mask=keep_both,
        attn_mask=keep_to_block(causal_mask(n, m, device=device)),
        key_padding_mask=keep_to_block(keep_pad),
        tol=F64,
    )

    # float masks have one meaning everywhere (added to the scores)
    additive = keep_to_additive(keep, torch.float64)
    compare_with_torch(mha, ours, x, z_k, z_v, ours_mask=additive, attn_mask=additive, tol=F64)

    # and a keep-mask handed to PyTorch unconverted silently gives another answer
    with torch.no_grad():
        flipped = mha(x, z_k, z_v, attn_mask=keep_with_rows(keep), need_weights=False)[0]
        right = ours(x, z_k, z_v, mask=keep)[0]
    assert not torch.allclose(flipped, right, atol=1e-3)


def keep_with_rows(keep):
    """The keep-mask itself, with each row given one blocked entry so that its negation has no empty row."""
    keep = keep.clone()
    keep[:, -1] = False
    return keep


def test_fully_masked_rows(device):
    """A query with nothing to attend to: weights 0 and output b_o.

    PyTorch's SDPA path (need_weights=False, not its self-attention fast path) gives the same; its
    explicit path (need_weights=True) gives nan.
    """
    skip_without_float64(device)
    mha = torch_mha(8, 2, device=device)
    ours = MultiHeadAttention.from_torch(mha)
    x = inputs(2, 4, 4, 8, 8, 8, device=device)[0]
    keep = causal_mask(4, device=device).expand(2, 4, 4).clone()
    keep[0, 2] = False  # query 2 of sequence 0 sees nothing
    out, weights = ours(x, x, x, mask=keep, need_weights=True)
    assert (weights[0, :, 2] == 0).all()
    assert_close(out[0, 2], mha.out_proj.bias.detach(), **F64)
    with torch.no_grad():
        torch_attn_mask = keep_to_block(keep).repeat_interleave(2, dim=0)  # (batch * heads, n, m)
        z = x.clone()  # key is not query: PyTorch takes its scaled_dot_product_attention path
        fast = mha(x, z, z, attn_mask=torch_attn_mask, need_weights=False)[0]
        slow = mha(x, z, z, attn_mask=torch_attn_mask, need_weights=True)[0]
    assert_close(out, fast, **F64)
    assert_close(ours(x, x, x, mask=keep)[0], out, **F64)
    assert torch.isnan(slow[0, 2]).all() and not torch.isnan(slow[1]).any()


def test_gradients_equal_torch():
    mha = torch_mha(8, 2, kdim=5, vdim=3).train()  # dropout is 0, so train mode computes the same
    ours = MultiHeadAttention.from_torch(mha)
    x, z_k, z_v = inputs(2, 4, 6, 8, 5, 3)
    mha(x, z_k, z_v, need_weights=False)[0].square().sum().backward()
    ours(x, z_k, z_v)[0].square().sum().backward()
    assert_close(ours.q_proj.weight.grad, mha.q_proj_weight.grad)
    assert_close(ours.v_proj.weight.grad, mha.v_proj_weight.grad)
    assert_close(ours.k_proj.bias.grad, mha.in_proj_bias.grad[8:16])
    assert_close(ours.out_proj.weight.grad, mha.out_proj.weight.grad)


# ---------------------------------------------------------------- identities (hypothesis)

dims = st.integers(1, 4)


@settings(max_examples=60, deadline=None)
@given(st.lists(dims, max_size=2), dims, dims, dims, dims, st.booleans(), st.integers(0, 10**6))
def test_concat_then_project_equals_sum_over_heads(batch, heads, n, d_head, d_out, bias, seed):
    g = torch.Generator().manual_seed(seed)
    heads_out = torch.randn(*batch, heads, n, d_head, generator=g, dtype=torch.float64)
    W_o = torch.randn(d_out, heads * d_head, generator=g, dtype=torch.float64)
    b_o = torch.randn(d_out, generator=g, dtype=torch.float64) if bias else None
    concat = concat_then_project(heads_out, W_o, b_o)
    assert concat.shape == (*batch, n, d_out)
    assert_close(sum_over_heads(heads_out, W_o, b_o), concat, atol=1e-10, rtol=1e-10)
    # head h goes through columns h * d_head ... (h + 1) * d_head - 1 of W_o, and through nothing else
    h = int(torch.randint(heads, (1,), generator=g))
    only_h = torch.zeros_like(heads_out)
    only_h[..., h, :, :] = heads_out[..., h, :, :]
    block = W_o[:, h * d_head : (h + 1) * d_head]
    assert_close(concat_then_project(only_h, W_o), heads_out[..., h, :, :] @ block.T, atol=1e-10, rtol=1e-10)


@settings(max_examples=60, deadline=None)
@given(st.lists(dims, max_size=2), dims, dims, dims, dims, st.booleans(), st.integers(0, 10**6))
def test_fused_projection_equals_per_head(batch, heads, n, d_head, d_in, bias, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, n, d_in, generator=g, dtype=torch.float64)
    W = torch.randn(heads * d_head, d_in, generator=g, dtype=torch.float64)
    b = torch.randn(heads * d_head, generator=g, dtype=torch.float64) if bias else None
    fused = project_heads(x, W, b, heads)
    assert fused.shape == (*batch, heads, n, d_head)
    assert_close(project_per_head(x, W, b, heads), fused, atol=1e-10, rtol=1e-10)
    W_h, b_h = head_weights(W, b, heads)
    for h in range(heads):  # head h is rows h * d_head ... (h + 1) * d_head - 1 of the fused matrix
        expected = x @ W[h * d_head : (h + 1) * d_head].T + (0 if b is None else b[h * d_head : (h + 1) * d_head])
        assert_close(fused[..., h, :, :], expected, atol=1e-10, rtol=1e-10)
        assert torch.equal(W_h[h], W[h * d_head : (h + 1) * d_head])


@settings(max_examples=40, deadline=None)
@given(st.lists(dims, max_size=2), dims, dims, dims, st.integers(0, 10**6))
def test_split_and_merge_heads_are_inverse(batch, heads, n, d_head, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, n, heads * d_head, generator=g)
    split = split_heads(x, heads)
    assert split.shape == (*batch, heads, n, d_head)
    assert torch.equal(merge_heads(split), x)
    for h in range(heads):
        assert torch.equal(split[..., h, :, :], x[..., h * d_head : (h + 1) * d_head])


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 3),
    dims,
    dims,
    st.integers(1, 5),
    st.integers(1, 5),
    st.integers(1, 6),
    st.booleans(),
    st.sampled_from(["none", "causal", "random"]),
    st.integers(0, 10**6),
)
def test_formal_mh_attention_equals_module_after_transposes(batch, heads, d_head, l_x, l_z, d_z, bias, kind, seed):
    """formal.mh_attention (tokens as columns, sum over heads) is MultiHeadAttention with everything transposed."""
    d_model = heads * d_head
    torch.manual_seed(seed)
    ours = MultiHeadAttention(d_model, heads, kdim=d_z, vdim=d_z, bias=bias, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    X = torch.randn(batch, l_x, d_model, generator=g, dtype=torch.float64)  # rows are tokens
    Z = torch.randn(batch, l_z, d_z, generator=g, dtype=torch.float64)
    keep = None
    if kind == "causal":
        keep = causal_mask(l_x, l_z)
    elif kind == "random":
        keep = torch.rand(l_x, l_z, generator=g) > 0.4  # may leave a query with no key
    out, _ = ours(X, Z, Z, mask=keep)

    def blocks(proj):
        W, b = head_weights(proj.weight.detach(), None if proj.bias is None else proj.bias.detach(), heads)
        return W, (torch.zeros(heads, d_head, dtype=torch.float64) if b is None else b)

    (W_q, b_q), (W_k, b_k), (W_v, b_v) = blocks(ours.q_proj), blocks(ours.k_proj), blocks(ours.v_proj)
    head_params = [(W_q[h], b_q[h], W_k[h], b_k[h], W_v[h], b_v[h]) for h in range(heads)]
    W_o = ours.out_proj.weight.detach()  # (d_out, heads * d_mid) = [W_o^1 | ... | W_o^H]
    b_o = torch.zeros(d_model, dtype=torch.float64) if ours.out_proj.bias is None else ours.out_proj.bias.detach()
    formal_mask = None if keep is None else keep.T.long()  # (l_z, l_x): rows = context, columns = primary
    for i in range(batch):
        got = formal.mh_attention(X[i].T, Z[i].T, head_params, W_o, b_o, mask=formal_mask)  # (d_out, l_x)
        assert_close(got.T, out[i].detach(), atol=1e-9, rtol=1e-9)


# ---------------------------------------------------------------- cost formulas


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_parameter_count(config):
    formula = mha_parameter_count(
        config["embed_dim"], kdim=config.get("kdim"), vdim=config.get("vdim"), bias=config.get("bias", True)
    )
    mha = torch_mha(**config)
    assert sum(p.numel() for p in MultiHeadAttention.from_torch(mha).parameters()) == formula
    assert sum(p.numel() for p in mha.parameters()) == formula


@pytest.mark.parametrize("heads", [1, 2, 4, 8])
@pytest.mark.parametrize("n, m, kdim, vdim", [(5, 5, None, None), (3, 7, 5, 6)])
def test_flop_formula_against_flop_counter(heads, n, m, kdim, vdim):
    ours = MultiHeadAttention(16, heads, kdim=kdim, vdim=vdim)
    x, z_k, z_v = inputs(2, n, m, 16, kdim or 16, vdim or 16, dtype=torch.float32)
    with FlopCounterMode(display=False) as counter:
        ours(x, z_k, z_v, need_weights=True)  # the explicit path: every product is a counted matmul
    assert counter.get_total_flops() == mha_flops(n, m, 16, kdim=kdim, vdim=vdim, batch=2)


def test_cost_formulas_do_not_depend_on_heads():
    assert len({mha_parameter_count(64) for _ in (1, 2, 4)}) == 1
    assert sum(p.numel() for p in MultiHeadAttention(64, 1).parameters()) == sum(
        p.numel() for p in MultiHeadAttention(64, 16).parameters()
    )


# ---------------------------------------------------------------- errors


def test_constructor_errors():
    with pytest.raises(ValueError, match="embed_dim = 10 is not divisible by num_heads = 4"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="num_heads must be > 0"):
        MultiHeadAttention(8, 0)
    with pytest.raises(TypeError, match="num_heads must be an int"):
        MultiHeadAttention(8, 2.0)
    with pytest.raises(ValueError, match="kdim must be > 0"):
        MultiHeadAttention(8, 2, kdim=0)
    with pytest.raises(TypeError, match="MultiheadAttention"):
        MultiHeadAttention.from_torch(torch.nn.Linear(3, 3))
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True))
    with pytest.raises(ValueError, match="add_zero_attn"):
        MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, add_zero_attn=True, batch_first=True))


def test_input_errors():
    ours = MultiHeadAttention(8, 2, kdim=5, vdim=3, dtype=torch.float64)
    x, z_k, z_v = inputs(2, 4, 6, 8, 5, 3)
    with pytest.raises(
        ValueError, match=r"query \(batch, n, embed_dim\) must have embed_dim = 8, got shape \(2, 4, 5\)"
    ):
        ours(z_k[:, :4], z_k, z_v)
    with pytest.raises(ValueError, match=r"key \(batch, m, kdim\) must have kdim = 5"):
        ours(x, z_v, z_v)
    with pytest.raises(ValueError, match=r"value \(batch, m, vdim\) must have vdim = 3"):
        ours(x, z_k, z_k)
    with pytest.raises(ValueError, match="exactly 3 dimensions"):
        ours(x[0], z_k[0], z_v[0])
    with pytest.raises(ValueError, match="same batch size"):
        ours(x[:1], z_k, z_v)
    with pytest.raises(ValueError, match="same number m of tokens"):
        ours(x, z_k, z_v[:, :5])
    with pytest.raises(TypeError, match="one dtype"):
        ours(x.float(), z_k.float(), z_v.float())
    with pytest.raises(TypeError, match="floating-point"):
        ours(x.long(), z_k, z_v)


@pytest.mark.parametrize(
    "shape, match",
    [
        ((4, 7), r"read as \(n, m\) = \(4, 6\)"),
        ((6, 4), r"read as \(n, m\) = \(4, 6\)"),  # transposed
        ((2, 4, 4, 6), r"read as \(batch, heads, n, m\) = \(2, 2, 4, 6\)"),
        ((3, 4, 6), r"read as \(batch, n, m\) = \(2, 4, 6\)"),
        ((6,), "2, 3 or 4 dimensions"),
        ((1, 2, 1, 4, 6), "2, 3 or 4 dimensions"),
        ((2, 6), r"read as \(n, m\)"),  # a padding mask without its query axis
    ],
)
def test_mask_shape_errors(shape, match):
    ours = MultiHeadAttention(8, 2, dtype=torch.float64)
    x, z, _ = inputs(2, 4, 6, 8, 8, 8)
    with pytest.raises(ValueError, match=match):
        ours(x, z, z, mask=torch.ones(shape, dtype=torch.bool))


def test_three_d_mask_is_per_sequence_not_per_head():
    """With batch == heads a (heads, n, m) mask would broadcast silently; the module reads it as (batch, n, m)."""
    ours = MultiHeadAttention(8, 2, dtype=torch.float64)
    x, z, _ = inputs(2, 4, 6, 8, 8, 8)
    mask3 = padding_mask([6, 3], 6)[:, None, :].expand(2, 4, 6)  # (batch, n, m)
    out3 = ours(x, z, z, mask=mask3, need_weights=True)[1]
    out4 = ours(x, z, z, mask=mask3[:, None], need_weights=True)[1]
    assert torch.equal(out3, out4)
    assert (out3[1, :, :, 3:] == 0).all() and (out3[0] > 0).all()


def test_mask_dtype_and_device_errors():
    ours = MultiHeadAttention(8, 2, dtype=torch.float64)
    x = inputs(1, 3, 3, 8, 8, 8)[0]
    with pytest.raises(TypeError, match="boolean"):
        ours(x, x, x, mask=torch.ones(3, 3, dtype=torch.long))


def test_head_helper_errors():
    with pytest.raises(ValueError, match="not divisible by num_heads = 4"):
        split_heads(torch.zeros(2, 3, 6), 4)
    with pytest.raises(ValueError, match="at least 3 dimensions"):
        merge_heads(torch.zeros(3, 4))
    with pytest.raises(
        ValueError, match=r"W_o \(d_out, heads \* d_head\) must share heads \* d_head = 6, got .* W_o \(5, 7\)"
    ):
        concat_then_project(torch.zeros(2, 3, 3), torch.zeros(5, 7))
    with pytest.raises(
        ValueError, match=r"x \(\.\.\., n, d_in\) and weight .* must share d_in, got x \(3, 4\) and weight \(6, 5\)"
    ):
        project_heads(torch.zeros(3, 4), torch.zeros(6, 5), None, 2)
    with pytest.raises(ValueError, match=r"and bias \(num_heads \* d_head,\) must share num_heads \* d_head = 6"):
        head_weights(torch.zeros(6, 5), torch.zeros(5), 2)
