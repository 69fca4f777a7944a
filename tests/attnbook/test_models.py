"""attnbook.models: the blocks against PyTorch's own transformer layers, masks, KV-cache decoding, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import attnbook
from attnbook.models.blocks import (
    AttentionOnlyBlock,
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    ScoredAttention,
    cross_attention_module,
)
from attnbook.models.configs import EncoderDecoderConfig, SequenceModelConfig
from attnbook.models.encoder_decoder import EncoderDecoder
from attnbook.models.interpretability import ablate_head
from attnbook.models.sequence import SequenceModel
from attnbook.models.training import parameter_count

from ..conftest import tolerances

F64 = torch.float64


def _seeded(seed: int = 0) -> None:
    torch.manual_seed(seed)


def _randn(*shape, device, dtype=F64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype).to(device)


def _copy_mha(ours: attnbook.MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Copy our projections into a torch.nn.MultiheadAttention (fused in_proj)."""
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)


def _copy_block_to_torch(block, layer) -> None:
    """Copy an EncoderBlock / DecoderBlock into nn.TransformerEncoderLayer / nn.TransformerDecoderLayer."""
    _copy_mha(block.self_attn, layer.self_attn)
    if isinstance(block, DecoderBlock):
        _copy_mha(block.cross_attn, layer.multihead_attn)
    norms = [block.norm1, block.norm2] + ([block.norm3] if isinstance(block, DecoderBlock) else [])
    theirs = [layer.norm1, layer.norm2] + ([layer.norm3] if isinstance(block, DecoderBlock) else [])
    with torch.no_grad():
        for a, b in zip(norms, theirs):
            b.load_state_dict(a.state_dict())
        layer.linear1.load_state_dict(block.mlp.linear1.state_dict())
        layer.linear2.load_state_dict(block.mlp.linear2.state_dict())


def _randomize(module: nn.Module, seed: int = 1) -> None:
    """Random parameters everywhere (biases and layer norms too), so that no term is silently zero."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device))


# ---------------------------------------------------------------- blocks against PyTorch


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_encoder_block_matches_torch(norm, device):
    _seeded()
    ours = EncoderBlock(8, 2, 16, norm=norm, device=device, dtype=F64)
    _randomize(ours)
    theirs = nn.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm == "pre", device=device, dtype=F64
    ).eval()
    _copy_block_to_torch(ours, theirs)
    x = _randn(3, 5, 8, device=device)
    y, weights = ours(x, need_weights=True)
    assert_close(y, theirs(x), **tolerances(F64))
    assert weights.shape == (3, 2, 5, 5)
    assert_close(weights.sum(-1), torch.ones(3, 2, 5, dtype=F64, device=device))
    causal = EncoderBlock(8, 2, 16, norm=norm, causal=True, device=device, dtype=F64)
    causal.load_state_dict(ours.state_dict())
    blocked = ~attnbook.causal_mask(5, device=device)  # PyTorch's mask: True = blocked
    assert_close(causal(x)[0], theirs(x, src_mask=blocked), **tolerances(F64))


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_decoder_block_matches_torch(norm, device):
    _seeded()
    ours = DecoderBlock(8, 2, 16, norm=norm, device=device, dtype=F64)
    _randomize(ours)
    theirs = nn.TransformerDecoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm == "pre", device=device, dtype=F64
    ).eval()
    _copy_block_to_torch(ours, theirs)
    y, memory = _randn(3, 5, 8, device=device), _randn(3, 7, 8, device=device, seed=1)
    out, self_w, cross_w = ours(y, memory, need_weights=True)
    blocked = ~attnbook.causal_mask(5, device=device)
    assert_close(out, theirs(y, memory, tgt_mask=blocked), **tolerances(F64))
    assert self_w.shape == (3, 2, 5, 5) and cross_w.shape == (3, 2, 5, 7)
    assert (self_w.triu(diagonal=1) == 0).all()  # the causal mask: no weight on later tokens
    # a padding mask of the memory, (batch, 1, m): True = real token
    lengths = torch.tensor([7, 4, 2], device=device)
    keep = attnbook.padding_mask(lengths, 7)
    out_pad, _, cross_pad = ours(y, memory, keep[:, None, :], need_weights=True)
    assert_close(out_pad, theirs(y, memory, tgt_mask=blocked, memory_key_padding_mask=~keep), **tolerances(F64))
    assert (cross_pad.masked_select(~keep[:, None, None, :].expand_as(cross_pad)) == 0).all()


def test_decoder_block_sublayers(device):
    """The two attention sublayers alone are the formulas of chapters 2 and 4."""
    _seeded()
    block = DecoderBlock(8, 2, device=device, dtype=F64)
    _randomize(block)
    y, memory = _randn(2, 4, 8, device=device), _randn(2, 6, 8, device=device, seed=1)
    causal = attnbook.causal_mask(4, device=device)
    expected, _ = block.self_attn(y, y, y, mask=causal)
    assert_close(block.masked_self_attention(y)[0], expected)
    expected, _ = block.cross_attn(y, memory, memory)
    assert_close(block.cross_attention(y, memory)[0], expected)
    # pre-norm: y + SA(LN y), + CA(LN ., Z), + FFN(LN .)
    h = y + block.masked_self_attention(block.norm1(y))[0]
    h = h + block.cross_attention(block.norm2(h), memory)[0]
    h = h + block.mlp(block.norm3(h))
    assert_close(block(y, memory)[0], h)


def test_attention_only_block(device):
    _seeded()
    block = AttentionOnlyBlock(8, 2, norm=None, device=device, dtype=F64)
    assert block.mlp is None and isinstance(block, EncoderBlock)
    x = _randn(2, 5, 8, device=device)
    assert_close(block(x)[0], x + block.self_attn(x, x, x)[0])  # residual only, no norm, no MLP


def test_feed_forward(device):
    _seeded()
    ffn = FeedForward(4, 6, device=device, dtype=F64)
    x = _randn(2, 3, 4, device=device)
    assert_close(ffn(x), ffn.linear2(torch.relu(ffn.linear1(x))))


# ---------------------------------------------------------------- scoring functions


def test_general_score_with_low_rank_matrix_is_dot_product(device):
    """Dot-product attention of projections = the general score with W = W_q^T W_k / sqrt(d) (chapter 4)."""
    _seeded()
    d = 6
    dot = attnbook.MultiHeadAttention(d, 1, bias=False, device=device, dtype=F64)
    general = ScoredAttention(d, 1, score="general", bias=False, device=device, dtype=F64)
    with torch.no_grad():
        general.score_W[0].copy_(dot.q_proj.weight.T @ dot.k_proj.weight / math.sqrt(d))
        general.v_proj.weight.copy_(dot.v_proj.weight)
        general.out_proj.weight.copy_(dot.out_proj.weight)
    x, z = _randn(2, 3, d, device=device), _randn(2, 5, d, device=device, seed=1)
    out_dot, w_dot = dot(x, z, z, need_weights=True)
    out_general, w_general = general(x, z, z, need_weights=True)
    assert_close(out_general, out_dot)
    assert_close(w_general, w_dot)


@pytest.mark.parametrize("score", ["additive", "general"])
def test_scored_attention_formula(score, device):
    _seeded()
    att = ScoredAttention(8, 2, score=score, kdim=5, vdim=3, device=device, dtype=F64)
    _randomize(att)
    x, z, v = (
        _randn(2, 4, 8, device=device),
        _randn(2, 6, 5, device=device, seed=1),
        _randn(2, 6, 3, device=device, seed=2),
    )
    keep = _randn(4, 6, device=device, seed=3) > -0.5
    keep[:, 0] = True
    out, weights = att(x, z, v, mask=keep, need_weights=True)
    for h in range(2):
        if score == "additive":
            e = attnbook.additive_scores(x, z, att.score_U_q[h], att.score_U_k[h], att.score_w[h])
        else:
            e = attnbook.general_scores(x, z, att.score_W[h])
        assert_close(weights[:, h], attnbook.softmax(e.masked_fill(~keep, -math.inf)))
    assert (weights.masked_select(~keep.expand_as(weights)) == 0).all()
    values = attnbook.heads.multi_head.project_heads(v, att.v_proj.weight, att.v_proj.bias, 2)
    expected = attnbook.heads.multi_head.concat_then_project(weights @ values, att.out_proj.weight, att.out_proj.bias)
    assert_close(out, expected)
    assert att(x, z, v)[1] is None


def test_cross_attention_module():
    assert type(cross_attention_module(8, 2, "dot")) is attnbook.MultiHeadAttention
    assert cross_attention_module(8, 2, "additive").score == "additive"
    with pytest.raises(ValueError, match="score"):
        cross_attention_module(8, 2, "cosine")


# ---------------------------------------------------------------- models


def test_sequence_model_shapes_and_weights(device):
    _seeded()
    model = SequenceModel(SequenceModelConfig(7, 8, 2, 3, max_len=10, out_size=4), device=device)
    tokens = torch.randint(7, (3, 6), device=device)
    logits, weights = model(tokens, need_weights=True)
    assert logits.shape == (3, 6, 4) and logits.device.type == device.type
    assert len(weights) == 3 and all(w.shape == (3, 2, 6, 6) for w in weights)
    assert model(tokens)[1] is None


def test_sequence_model_without_positions_is_equivariant(device):
    """Without positions and masks the whole model is permutation equivariant (chapter 6)."""
    _seeded()
    model = SequenceModel(SequenceModelConfig(9, 8, 2, 2, max_len=6, positional=False), device=device, dtype=F64)
    tokens = torch.randint(9, (4, 6), generator=torch.Generator().manual_seed(0)).to(device)
    perm = torch.tensor([3, 0, 5, 1, 4, 2], device=device)
    assert_close(model(tokens[:, perm])[0], model(tokens)[0][:, perm])
    with_positions = SequenceModel(SequenceModelConfig(9, 8, 2, 2, max_len=6), device=device, dtype=F64)
    assert not torch.allclose(with_positions(tokens[:, perm])[0], with_positions(tokens)[0][:, perm])


def test_causal_model_does_not_look_ahead(device):
    _seeded()
    model = SequenceModel(SequenceModelConfig(9, 8, 2, 2, max_len=8, causal=True), device=device, dtype=F64)
    tokens = torch.randint(9, (2, 8), generator=torch.Generator().manual_seed(0)).to(device)
    logits = model(tokens)[0]
    for j in range(1, 8):
        changed = tokens.clone()
        changed[:, j] = (changed[:, j] + 1) % 9
        moved = model(changed)[0]
        assert_close(moved[:, :j], logits[:, :j])
        assert not torch.allclose(moved[:, j], logits[:, j])


def test_padding_mask_is_respected(device):
    _seeded()
    model = SequenceModel(SequenceModelConfig(9, 8, 2, 2, max_len=6), device=device, dtype=F64)
    lengths = torch.tensor([6, 3], device=device)
    keep = attnbook.padding_mask(lengths, 6)[:, None, :]  # (batch, 1, m)
    tokens = torch.randint(9, (2, 6), generator=torch.Generator().manual_seed(0)).to(device)
    changed = tokens.clone()
    changed[1, 3:] = (changed[1, 3:] + 1) % 9  # only padding changes
    a, b = model(tokens, keep)[0], model(changed, keep)[0]
    assert_close(a[0], b[0])
    assert_close(a[1, :3], b[1, :3])
    # an encoder-decoder's source mask hides padded source tokens from the encoder and the decoder
    ed = EncoderDecoder(EncoderDecoderConfig(9, 5, 8, 2, max_len=6), device=device, dtype=F64)
    target_in = torch.randint(5, (2, 4), device=device)
    source_keep = attnbook.padding_mask(lengths, 6)
    assert_close(ed(tokens, target_in, source_keep)[0], ed(changed, target_in, source_keep)[0])


@pytest.mark.parametrize("score", ["dot", "additive", "general"])
def test_encoder_decoder_shapes(score, device):
    _seeded()
    model = EncoderDecoder(
        EncoderDecoderConfig(9, 6, 8, 2, 2, num_decoder_layers=1, max_len=7, out_size=5, score=score), device=device
    )
    source, target_in = torch.randint(9, (3, 7), device=device), torch.randint(6, (3, 4), device=device)
    logits, weights = model(source, target_in, need_weights=True)
    assert logits.shape == (3, 4, 5)
    assert [w.shape for w in weights["encoder"]] == [(3, 2, 7, 7)] * 2
    assert [w.shape for w in weights["decoder"]] == [(3, 2, 4, 4)]
    assert [w.shape for w in weights["cross"]] == [(3, 2, 4, 7)]
    assert model(source, target_in)[1] is None


# ---------------------------------------------------------------- ALiBi instead of positional encodings (chapter 9)


def _alibi_reference_mask(batch: int, heads: int, n: int, keep: torch.Tensor, device) -> torch.Tensor:
    """PyTorch's float attn_mask (batch * heads, n, n): the ALiBi bias, -inf where ``keep`` is False."""
    i = torch.arange(n, device=device, dtype=F64)
    slopes = torch.tensor([2.0 ** (-8 * h / heads) for h in range(1, heads + 1)], device=device, dtype=F64)
    bias = -slopes[:, None, None] * (i[:, None] - i[None, :]).abs()  # (heads, n, n), written out
    bias = bias.expand(batch, heads, n, n).masked_fill(~keep, -math.inf)  # (batch, heads, n, n)
    return bias.reshape(batch * heads, n, n)  # (batch * heads, n, n), PyTorch's layout


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_alibi_block_matches_torch_with_the_bias_as_mask(norm, device):
    """An ALiBi block is PyTorch's encoder layer with -mu_h |i - j| (and the causal mask) as float mask."""
    _seeded()
    ours = EncoderBlock(8, 2, 16, norm=norm, causal=True, alibi=True, device=device, dtype=F64)
    _randomize(ours)
    assert_close(ours.alibi_slopes, attnbook.alibi_slopes(2, device=device, dtype=F64))
    theirs = nn.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm == "pre", device=device, dtype=F64
    ).eval()
    _copy_block_to_torch(ours, theirs)
    x = _randn(3, 6, 8, device=device)
    causal = attnbook.causal_mask(6, device=device)
    y, weights = ours(x, need_weights=True)
    assert_close(y, theirs(x, src_mask=_alibi_reference_mask(3, 2, 6, causal, device)), **tolerances(F64))
    assert (weights.triu(diagonal=1) == 0).all()
    # a caller's padding mask (batch, 1, n) is combined with the bias and the causal mask
    keep = attnbook.padding_mask(torch.tensor([6, 4, 2], device=device), 6)[:, None, :]  # (batch, 1, n)
    reference = theirs(x, src_mask=_alibi_reference_mask(3, 2, 6, causal & keep[:, None], device))
    assert_close(ours(x, keep)[0], reference, **tolerances(F64))
    # a float mask is added to the bias
    extra = _randn(3, 6, 6, device=device, seed=2)
    added = _alibi_reference_mask(3, 2, 6, causal, device) + extra.repeat_interleave(2, dim=0)
    assert_close(ours(x, extra)[0], theirs(x, src_mask=added), **tolerances(F64))


def test_alibi_model_uses_the_bias_and_no_encoding(device):
    _seeded()
    model = SequenceModel(
        SequenceModelConfig(9, 8, 4, 2, max_len=8, positional="alibi", mlp=False, norm=None), device=device, dtype=F64
    )
    assert model.positional == "alibi" and all(block.alibi for block in model.blocks)
    tokens = torch.randint(9, (2, 7), generator=torch.Generator().manual_seed(0)).to(device)
    x = model.embed.token(tokens)  # no positional encoding is added
    bias = attnbook.alibi_bias(7, 7, attnbook.alibi_slopes(4, device=device, dtype=F64))  # (heads, n, n)
    for block in model.blocks:
        x = x + block.self_attn(x, x, x, mask=bias[None])[0]  # (1, heads, n, n) float mask
    assert_close(model(tokens)[0], model.head(x))
    # the slopes are a buffer: not trained, not saved, moved and cast with the model
    assert "alibi_slopes" not in dict(model.named_parameters()) and not any("alibi" in k for k in model.state_dict())
    assert model.float().blocks[0].alibi_slopes.dtype == torch.float32


def test_a_model_without_the_sinusoidal_table_takes_an_odd_width(device):
    """The table needs an even d_model; a model that adds no table (no positions, ALiBi) does not
    build it, so an odd width works there and fails, naming d_model, only where the table is added."""
    tokens = torch.randint(9, (2, 6), generator=torch.Generator().manual_seed(0)).to(device)
    for positional in (None, "alibi"):
        _seeded()
        model = SequenceModel(SequenceModelConfig(9, 5, 1, max_len=6, positional=positional), device=device, dtype=F64)
        assert model.embed.encoding is None
        assert model(tokens)[0].shape == (2, 6, 9)
    _seeded()
    ed = EncoderDecoder(EncoderDecoderConfig(9, 5, 5, 1, max_len=6, positional=False), device=device, dtype=F64)
    assert ed.src_embed.encoding is None and ed.tgt_embed.encoding is None
    assert ed(tokens, tokens[:, :4] % 5)[0].shape == (2, 4, 5)
    with pytest.raises(ValueError, match="d_model"):
        SequenceModel(SequenceModelConfig(9, 5, 1, max_len=6))  # sinusoidal: the table needs an even width


def test_positional_spellings(device):
    """True / False are the older spellings of "sinusoidal" / None: the same models."""
    tokens = torch.randint(9, (2, 6), generator=torch.Generator().manual_seed(0)).to(device)
    for old, new in ((True, "sinusoidal"), (False, None)):
        _seeded()
        a = SequenceModel(SequenceModelConfig(9, 8, 2, max_len=6, positional=old), device=device, dtype=F64)
        _seeded()
        b = SequenceModel(SequenceModelConfig(9, 8, 2, max_len=6, positional=new), device=device, dtype=F64)
        assert a.positional == new and not a.blocks[0].alibi
        assert_close(a(tokens)[0], b(tokens)[0])
    with pytest.raises(ValueError, match="positional"):
        SequenceModel(SequenceModelConfig(9, 8, 2, positional="rotary"))
    with pytest.raises(TypeError, match="alibi"):
        EncoderBlock(8, 2, alibi="yes")


def test_alibi_encoder_is_equivariant_under_reversal(device):
    """Without the causal mask, |i - j| is unchanged when the sequence is read backwards, so
    reversing the input reverses the output; other permutations change it (chapters 6 and 9)."""
    _seeded()
    model = SequenceModel(SequenceModelConfig(9, 8, 2, 2, max_len=6, positional="alibi"), device=device, dtype=F64)
    tokens = torch.randint(9, (4, 6), generator=torch.Generator().manual_seed(0)).to(device)
    assert_close(model(tokens.flip(1))[0], model(tokens)[0].flip(1))
    perm = torch.tensor([3, 0, 5, 1, 4, 2], device=device)
    assert not torch.allclose(model(tokens[:, perm])[0], model(tokens)[0][:, perm])


def test_causal_alibi_model_does_not_look_ahead_and_takes_any_length(device):
    _seeded()
    model = SequenceModel(
        SequenceModelConfig(9, 8, 2, 2, max_len=4, causal=True, positional="alibi"), device=device, dtype=F64
    )
    tokens = torch.randint(9, (2, 10), generator=torch.Generator().manual_seed(0)).to(device)  # longer than max_len
    logits, weights = model(tokens, need_weights=True)
    assert logits.shape == (2, 10, 9) and all(w.shape == (2, 2, 10, 10) for w in weights)
    for j in range(1, 10):
        changed = tokens.clone()
        changed[:, j] = (changed[:, j] + 1) % 9
        moved = model(changed)[0]
        assert_close(moved[:, :j], logits[:, :j])
        assert not torch.allclose(moved[:, j], logits[:, j])
    assert_close(model(tokens[:, :5])[0], logits[:, :5])  # a prefix gives the same outputs
    for positional in ("sinusoidal", None):  # these are still bounded by max_len
        with pytest.raises(ValueError, match="max_len"):
            SequenceModel(SequenceModelConfig(9, 8, 2, max_len=4, positional=positional), device=device)(tokens)


@pytest.mark.parametrize("norm", ["pre", None])
def test_alibi_generation_with_cache(norm, device):
    """Cached decoding adds the bias of the new tokens, the last rows of the full bias (chapters 8 and 9)."""
    _seeded()
    model = SequenceModel(
        SequenceModelConfig(11, 16, 4, 2, max_len=4, causal=True, positional="alibi", norm=norm),
        device=device,
        dtype=F64,
    )
    prompt = torch.randint(11, (3, 3), generator=torch.Generator().manual_seed(0)).to(device)
    cached = model.generate(prompt, 9, use_cache=True)  # 11 tokens in all, beyond max_len
    assert torch.equal(cached, model.generate(prompt, 9, use_cache=False))
    sequence = torch.cat([prompt, cached], dim=1)
    assert torch.equal(model(sequence[:, :-1])[0][:, 2:].argmax(-1), cached)
    block, x = model.blocks[0], _randn(3, 7, 16, device=device)
    cache = attnbook.KVCache(7)
    steps = [block(x[:, :4], cache=cache)[0]] + [block(x[:, t : t + 1], cache=cache)[0] for t in range(4, 7)]
    assert_close(torch.cat(steps, dim=1), block(x)[0])


# ---------------------------------------------------------------- generation with and without the KV cache


@pytest.mark.parametrize("norm", ["pre", "post", None])
def test_sequence_model_generation_with_cache(norm, device):
    _seeded()
    model = SequenceModel(
        SequenceModelConfig(11, 16, 2, 2, max_len=12, causal=True, norm=norm), device=device, dtype=F64
    )
    prompt = torch.randint(11, (4, 3), generator=torch.Generator().manual_seed(0)).to(device)
    cached = model.generate(prompt, 8, use_cache=True)
    plain = model.generate(prompt, 8, use_cache=False)
    assert cached.shape == (4, 8)
    assert torch.equal(cached, plain)
    # the tokens are the greedy choices of the full model
    sequence = torch.cat([prompt, cached], dim=1)
    assert torch.equal(model(sequence[:, :-1])[0][:, 2:].argmax(-1), cached)


@pytest.mark.parametrize("score", ["dot", "additive", "general"])
def test_encoder_decoder_generation_with_cache(score, device):
    _seeded()
    model = EncoderDecoder(
        EncoderDecoderConfig(9, 7, 16, 2, 2, max_len=8, out_size=7, score=score), device=device, dtype=F64
    )
    source = torch.randint(9, (5, 8), generator=torch.Generator().manual_seed(0)).to(device)
    cached = model.generate(source, 6, bos=6, use_cache=True)
    plain = model.generate(source, 6, bos=6, use_cache=False)
    assert torch.equal(cached, plain)
    target_in = torch.cat([torch.full((5, 1), 6, device=device), cached[:, :-1]], dim=1)
    assert torch.equal(model(source, target_in)[0].argmax(-1), cached)


def test_cached_decoding_gives_the_same_logits(device):
    """Step-by-step decoding with a KV cache reproduces the logits of the full decoder (chapter 8)."""
    _seeded()
    model = EncoderDecoder(EncoderDecoderConfig(9, 7, 16, 2, 2, max_len=8), device=device, dtype=F64)
    source, target_in = torch.randint(9, (2, 8), device=device), torch.randint(7, (2, 6), device=device)
    memory, _ = model.encode(source)
    full, _ = model.decode(target_in, memory)
    caches = [attnbook.KVCache(6) for _ in model.decoder]
    steps = [model.decode(target_in[:, t : t + 1], memory, caches=caches, offset=t)[0] for t in range(6)]
    assert_close(torch.cat(steps, dim=1), full)


# ---------------------------------------------------------------- ablation and parameters


def test_ablate_head_removes_exactly_that_head(device):
    _seeded()
    model = SequenceModel(SequenceModelConfig(9, 8, 2, 1, max_len=5, mlp=False, norm=None), device=device, dtype=F64)
    ablated = ablate_head(model, 0, 1)
    tokens = torch.randint(9, (2, 5), device=device)
    mha = model.blocks[0].self_attn
    x = model.embed(tokens)
    q, k, v = (
        attnbook.heads.multi_head.project_heads(x, p.weight, p.bias, 2) for p in (mha.q_proj, mha.k_proj, mha.v_proj)
    )
    heads_out, _ = attnbook.attention(q, k, v)  # (batch, heads, n, d_head)
    heads_out[:, 1] = 0  # head 1 says nothing
    y = x + attnbook.heads.multi_head.concat_then_project(heads_out, mha.out_proj.weight, mha.out_proj.bias)
    assert_close(ablated(tokens)[0], model.head(y))
    assert not torch.allclose(ablated(tokens)[0], model(tokens)[0])
    assert model.blocks[0].self_attn.out_proj.weight.abs().min() > 0  # the original is untouched
    with pytest.raises(ValueError, match="head"):
        ablate_head(model, 0, 2)
    with pytest.raises(ValueError, match="layer"):
        ablate_head(model, 1, 0)


def test_parameter_count():
    model = SequenceModel(SequenceModelConfig(10, 8, 2, 1, max_len=4, mlp=False, norm=None))
    mha = 4 * (8 * 8 + 8)
    assert parameter_count(model) == 10 * 8 + mha + 8 * 10 + 10


# ---------------------------------------------------------------- bad input


def test_clear_errors():
    model = SequenceModel(SequenceModelConfig(5, 8, 2, max_len=4))
    with pytest.raises(TypeError, match="integer"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        model(torch.tensor([[1, 5]]))
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="batch"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="causal"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="mask"):
        model(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="norm"):
        EncoderBlock(8, 2, norm="middle")
    with pytest.raises(ValueError, match="score"):
        DecoderBlock(8, 2, score="cosine")
    with pytest.raises(ValueError, match="num_heads"):
        EncoderBlock(8, 3)
    block = EncoderBlock(8, 2)
    with pytest.raises(ValueError, match="d_model"):
        block(torch.zeros(1, 3, 6))
    with pytest.raises(ValueError, match="causal"):
        block(torch.zeros(1, 3, 8), cache=attnbook.KVCache(4))
    with pytest.raises(TypeError, match="dtype"):
        block(torch.zeros(1, 3, 8, dtype=F64))
    ed = EncoderDecoder(EncoderDecoderConfig(5, 4, 8, 2, max_len=4))
    with pytest.raises(ValueError, match="bos"):
        ed.generate(torch.zeros(1, 3, dtype=torch.long), 2, bos=4)
    with pytest.raises(ValueError, match="memory"):
        DecoderBlock(8, 2)(torch.zeros(1, 3, 8), torch.zeros(2, 3, 8))


def test_sequence_model_config_is_a_checked_frozen_record():
    """One SequenceModelConfig holds what a SequenceModel is; it checks itself when it is made."""
    import dataclasses

    config = SequenceModelConfig(vocab_size=9, d_model=8, num_heads=2, causal=True)
    assert (config.num_layers, config.max_len, config.positional, config.norm) == (1, 64, "sinusoidal", "pre")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 16
    two = dataclasses.replace(config, num_layers=2)
    assert two.num_layers == 2 and config.num_layers == 1
    model = SequenceModel(two)
    assert model.config is two and len(model.blocks) == 2 and model.causal
    assert SequenceModelConfig(9, 8, 2, positional=False).positional is None  # the older spelling
    with pytest.raises(ValueError, match="num_layers"):
        SequenceModelConfig(9, 8, 2, num_layers=0)
    with pytest.raises(ValueError, match="norm"):
        SequenceModelConfig(9, 8, 2, norm="middle")
    with pytest.raises(TypeError, match="SequenceModelConfig"):
        SequenceModel({"vocab_size": 9, "d_model": 8, "num_heads": 2})


def test_encoder_decoder_config_is_a_checked_frozen_record():
    """One EncoderDecoderConfig holds what an EncoderDecoder is; it checks itself when it is made,
    and the model built from it has the layers it names."""
    import dataclasses

    config = EncoderDecoderConfig(src_vocab=9, tgt_vocab=5, d_model=8, num_heads=2, num_layers=2)
    assert (config.num_decoder_layers, config.max_len, config.score, config.norm) == (None, 64, "dot", "pre")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.score = "additive"
    model = EncoderDecoder(dataclasses.replace(config, num_decoder_layers=1, score="general", out_size=3))
    assert len(model.encoder) == 2 and len(model.decoder) == 1 and model.out_size == 3
    assert isinstance(model.decoder[0].cross_attn, ScoredAttention)
    assert model.config.score == "general" and config.score == "dot"
    with pytest.raises(ValueError, match="num_decoder_layers"):
        EncoderDecoderConfig(9, 5, 8, 2, num_decoder_layers=0)
    with pytest.raises(ValueError, match="score"):
        EncoderDecoderConfig(9, 5, 8, 2, score="cosine")
    with pytest.raises(ValueError, match="norm"):
        EncoderDecoderConfig(9, 5, 8, 2, norm="middle")
    with pytest.raises(TypeError, match="EncoderDecoderConfig"):
        EncoderDecoder({"src_vocab": 9, "tgt_vocab": 5, "d_model": 8, "num_heads": 2})
