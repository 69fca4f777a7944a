"""Masks as functions (chapter 12): every mask_mod against its definition written with loops and the
package's dense masks, against PyTorch's own ``create_mask`` (the control for
``mask_from_mask_mod``), and attention through PyTorch's ``flex_attention`` on a CPU without
``torch.compile`` equal to the dense computation in float64; and every error for a bad rule."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import flex_attention as flex

from attnbook import (
    and_masks,
    attention,
    attention_with_mods,
    causal_mask,
    causal_mask_mod,
    document_causal_mask,
    document_ids_from_lengths,
    document_mask_mod,
    mask_from_mask_mod,
    or_masks,
    prefix_lm_mask,
    prefix_lm_mask_mod,
    sliding_window_mask,
    sliding_window_mask_mod,
)

F64 = torch.float64
#: flex_attention without torch.compile warns that it materialises the scores; that is the point here
UNCOMPILED = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
LENGTHS = [3, 1, 5, 2, 1]  # ragged, with one-token documents
N = sum(LENGTHS)


def by_loop(rule, n, m=None):
    m = n if m is None else m
    return torch.tensor([[bool(rule(i, j)) for j in range(m)] for i in range(n)])


def qkv(batch, heads, n, m, d=4, d_v=3, *, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = ((batch, heads, n, d), (batch, heads, m, d), (batch, heads, m, d_v))
    return tuple(torch.randn(*s, generator=g, dtype=F64).to(device) for s in shapes)


def rules(device):
    ids = document_ids_from_lengths(LENGTHS, device=device)
    doc = ids.tolist()
    return {
        "causal": (causal_mask_mod, lambda i, j: j <= i),
        "document": (document_mask_mod(ids), lambda i, j: doc[i] == doc[j] and j <= i),
        "window 3": (sliding_window_mask_mod(3), lambda i, j: 0 <= i - j < 3),
        "window 1": (sliding_window_mask_mod(1), lambda i, j: i == j),
        "prefix 4": (prefix_lm_mask_mod(4), lambda i, j: j < 4 or j <= i),
        "prefix 0": (prefix_lm_mask_mod(0), lambda i, j: j <= i),
        "prefix n": (prefix_lm_mask_mod(N, n=N), lambda i, j: True),
        "window and document": (
            and_masks(sliding_window_mask_mod(2), document_mask_mod(ids)),
            lambda i, j: 0 <= i - j < 2 and doc[i] == doc[j],
        ),
        "document or first key": (
            or_masks(document_mask_mod(ids), lambda b, h, q, kv: kv == 0),
            lambda i, j: (doc[i] == doc[j] and j <= i) or j == 0,
        ),
    }


NAMES = list(rules("cpu"))


@pytest.mark.parametrize("name", NAMES)
def test_each_mask_mod_equals_its_definition_and_pytorchs_create_mask(name, device):
    mod, rule = rules(device)[name]
    mask = mask_from_mask_mod(mod, N, batch=2, heads=3, device=device)
    assert mask.dtype == torch.bool and mask.shape == (2, 3, N, N) and mask.device.type == device.type
    expected = by_loop(rule, N).to(device)
    assert torch.equal(mask, expected.expand(2, 3, N, N))
    control = flex.create_mask(mod, 2, 3, N, N, device=device)  # PyTorch's vmap evaluation
    assert torch.equal(mask, control)


def test_mask_mods_equal_the_dense_masks_of_the_package(device):
    ids = document_ids_from_lengths(LENGTHS, device=device)
    dense = {
        causal_mask_mod: causal_mask(N, device=device),
        document_mask_mod(ids): document_causal_mask(ids),
        sliding_window_mask_mod(4): sliding_window_mask(N, 4, device=device),
        prefix_lm_mask_mod(5): prefix_lm_mask(N, 5, device=device),
    }
    for mod, mask in dense.items():
        assert torch.equal(mask_from_mask_mod(mod, N, device=device)[0, 0], mask)
    assert torch.equal(prefix_lm_mask(N, 5), by_loop(lambda i, j: j < 5 or j <= i, N))


def test_rectangular_masks_align_upper_left(device):
    for n, m in ((3, 7), (7, 3)):
        got = mask_from_mask_mod(causal_mask_mod, n, m, device=device)[0, 0]
        assert torch.equal(got, causal_mask(n, m, device=device))
        assert torch.equal(got, flex.create_mask(causal_mask_mod, 1, 1, n, m, device=device)[0, 0])


def test_the_prefix_is_bidirectional_and_the_rest_causal():
    p = 4
    mask = prefix_lm_mask(N, p)
    assert mask[:p, :p].all()  # the prefix sees itself whole, later prefix tokens included
    assert not mask[:p, p:].any()  # and nothing after it
    assert torch.equal(mask[p:, p:], causal_mask(N - p))  # causal after the prefix
    assert mask[p:, :p].all()  # every later token sees the whole prefix
    # one token fewer or more of bidirectional region is a different mask
    assert not torch.equal(prefix_lm_mask(N, p - 1), mask) and not torch.equal(prefix_lm_mask(N, p + 1), mask)


def test_a_document_mask_per_sequence(device):
    ids = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 1, 1, 1, 1, 1]], device=device)
    mod = document_mask_mod(ids)
    mask = mask_from_mask_mod(mod, 6, batch=2, heads=2, device=device)
    for b in range(2):
        for h in range(2):
            assert torch.equal(mask[b, h], document_causal_mask(ids[b]))
    assert torch.equal(mask, flex.create_mask(mod, 2, 2, 6, 6, device=device))


def test_a_rule_that_uses_the_batch_and_head_indices(device):
    def head_parity(b, h, q_idx, kv_idx):  # heads of one parity see even keys, the others odd ones, per b
        return (kv_idx + h + b) % 2 == 0

    mask = mask_from_mask_mod(head_parity, 4, 5, batch=2, heads=3, device=device)
    for b in range(2):
        for h in range(3):
            assert torch.equal(mask[b, h].cpu(), by_loop(lambda i, j, h=h, b=b: (j + h + b) % 2 == 0, 4, 5))
    assert torch.equal(mask, flex.create_mask(head_parity, 2, 3, 4, 5, device=device))


@UNCOMPILED
@pytest.mark.parametrize("name", NAMES)
def test_flex_attention_equals_the_dense_computation(name):
    # flex_attention runs on the CPU only without torch.compile here (the GPU path compiles)
    mod, _ = rules("cpu")[name]
    q, k, v = qkv(2, 3, N, N)
    expected, weights = attention_with_mods(q, k, v, mask_mod=mod)
    dense = mask_from_mask_mod(mod, N, batch=2, heads=3)
    torch.testing.assert_close(expected, attention(q, k, v, mask=dense)[0], atol=0, rtol=0)
    block_mask = flex.create_block_mask(mod, 2, 3, N, N, device="cpu", BLOCK_SIZE=4)
    got = flex.flex_attention(q, k, v, block_mask=block_mask)
    assert got.dtype == F64
    torch.testing.assert_close(got, expected, atol=1e-14, rtol=1e-12)
    # control: without the mask flex_attention gives another answer (unless the mask keeps everything)
    if name != "prefix n":
        assert (flex.flex_attention(q, k, v) - expected).abs().amax() > 1e-3


@UNCOMPILED
def test_a_fully_masked_row_gives_zeros_in_both():
    def first_query_sees_nothing(b, h, q_idx, kv_idx):
        return (q_idx > 0) & (kv_idx <= q_idx)

    q, k, v = qkv(1, 2, 6, 6)
    out, weights = attention_with_mods(q, k, v, mask_mod=first_query_sees_nothing)
    assert (out[..., 0, :] == 0).all() and (weights[..., 0, :] == 0).all()
    block_mask = flex.create_block_mask(first_query_sees_nothing, 1, 2, 6, 6, device="cpu", BLOCK_SIZE=2)
    got = flex.flex_attention(q, k, v, block_mask=block_mask)
    torch.testing.assert_close(got, out, atol=1e-14, rtol=1e-12)


# ---------------------------------------------------------------- errors


def test_a_rule_that_returns_the_wrong_dtype_shape_or_kind():
    with pytest.raises(TypeError, match=r"mask_mod must return a tensor of dtype torch.bool, got torch.float32"):
        mask_from_mask_mod(lambda b, h, q, kv: (q >= kv).float(), 4)
    with pytest.raises(TypeError, match=r"must return a tensor .* got bool"):
        mask_from_mask_mod(lambda b, h, q, kv: True, 4)
    with pytest.raises(
        ValueError, match=r"returned shape \(1, 1, 1, 4, 4\), which does not broadcast .* \(1, 1, 4, 4\)"
    ):
        mask_from_mask_mod(lambda b, h, q, kv: (q >= kv)[None], 4)
    with pytest.raises(ValueError, match=r"returned shape \(1, 1, 4, 3\)"):
        mask_from_mask_mod(lambda b, h, q, kv: (q >= kv)[..., :3], 4)
    with pytest.raises(TypeError, match=r"Python.s and / or / if .* \(&, \|"):
        mask_from_mask_mod(lambda b, h, q, kv: (q >= kv) and (kv >= 0), 4)
    with pytest.raises(TypeError, match=r"mask_mod must be a function"):
        mask_from_mask_mod(torch.ones(4, 4, dtype=torch.bool), 4)


def test_a_document_rule_used_on_a_longer_row():
    mod = document_mask_mod(document_ids_from_lengths([2, 3]))
    with pytest.raises(ValueError, match=r"indexed out of range .* n = 7 queries and m = 7 keys"):
        mask_from_mask_mod(mod, 7)


@pytest.mark.parametrize(
    "build, error, words",
    [
        (lambda: prefix_lm_mask_mod(9, n=6), ValueError, ["prefix_length = 9", "n = 6"]),
        (lambda: prefix_lm_mask(6, 7), ValueError, ["prefix_length = 7", "n = 6"]),
        (lambda: prefix_lm_mask_mod(-1), ValueError, ["prefix_length must be >= 0, got -1"]),
        (lambda: prefix_lm_mask_mod(2.5), TypeError, ["prefix_length must be an int"]),
        (lambda: sliding_window_mask_mod(0), ValueError, ["window must be > 0", "got 0"]),
        (lambda: document_mask_mod(torch.tensor([0, 1, 0])), ValueError, ["document 0 appears again at position 2"]),
        (
            lambda: document_mask_mod(torch.zeros(2, 2, 3, dtype=torch.int64)),
            ValueError,
            ["(n,) or (batch, n)", "(2, 2, 3)"],
        ),
        (lambda: and_masks(), ValueError, ["at least one"]),
        (lambda: or_masks(causal_mask_mod, 3), TypeError, ["mask_mods[1]", "int"]),
        (lambda: mask_from_mask_mod(causal_mask_mod, 4, batch=0), ValueError, ["batch must be > 0"]),
        (lambda: mask_from_mask_mod(causal_mask_mod, -1), ValueError, ["n must be >= 0, got -1"]),
    ],
)
def test_bad_arguments(build, error, words):
    with pytest.raises(error) as raised:
        build()
    for word in words:
        assert word in str(raised.value), (word, str(raised.value))
