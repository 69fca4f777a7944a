"""Wrong solutions of homework 2 (masks), each of which the tests must catch (tests/test_mutations.py).

MUTANTS maps a name to (the question that must lose points, {function name: wrong definition}).
"""

_ATTN = '''
def masked_attention(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, -math.inf)
    weights = torch.softmax(S, dim=-1).nan_to_num(0.0)
    return weights @ V, weights
'''

MUTANTS = {
    "causal mask off by one (j < i)": ("q1", {"causal_keep_mask": '''
def causal_keep_mask(n, m):
    return torch.arange(m)[None, :] < torch.arange(n)[:, None]
'''}),
    "causal mask transposed (upper triangular)": ("q1", {"causal_keep_mask": '''
def causal_keep_mask(n, m):
    return torch.arange(m)[None, :] >= torch.arange(n)[:, None]
'''}),
    "causal mask with the wrong polarity (a block-mask)": ("q1", {"causal_keep_mask": '''
def causal_keep_mask(n, m):
    return torch.arange(m)[None, :] > torch.arange(n)[:, None]
'''}),
    "float causal mask where bool asked": ("q1", {"causal_keep_mask": '''
def causal_keep_mask(n, m):
    return (torch.arange(m)[None, :] <= torch.arange(n)[:, None]).float()
'''}),
    "causal mask aligned lower-right": ("q1", {"causal_keep_mask": '''
def causal_keep_mask(n, m):
    return torch.arange(m)[None, :] <= torch.arange(n)[:, None] + (m - n)
'''}),
    "padding mask off by one": ("q2", {"padding_keep_mask": '''
def padding_keep_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] <= lengths[:, None]
'''}),
    "padding mask polarity": ("q2", {"padding_keep_mask": '''
def padding_keep_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] >= lengths[:, None]
'''}),
    "attention missing 1/sqrt(d_k)": ("q3", {"masked_attention": _ATTN.replace(" / math.sqrt(Q.shape[-1])", "")}),
    "attention softmax over the queries": ("q3", {"masked_attention": _ATTN.replace("torch.softmax(S, dim=-1)", "torch.softmax(S, dim=-2)")}),
    "attention mask transposed": ("q3", {"masked_attention": _ATTN.replace("S.masked_fill(~mask, -math.inf)", "S.masked_fill(~mask.transpose(-2, -1), -math.inf) if mask.shape[-1] == mask.shape[-2] else S.masked_fill(~mask, -math.inf)")}),
    "attention mask polarity inverted": ("q3", {"masked_attention": _ATTN.replace("S.masked_fill(~mask, -math.inf)", "S.masked_fill(mask, -math.inf)")}),
    "attention fills -1e9 (fully masked rows become uniform)": ("q3", {"masked_attention": _ATTN.replace("S.masked_fill(~mask, -math.inf)", "S.masked_fill(~mask, -1e9)")}),
    "bool mask added as a float mask": ("q3", {"masked_attention": _ATTN.replace("S.masked_fill(~mask, -math.inf)", "S + mask.to(S.dtype)")}),
    "fully masked rows give nan": ("q3", {"masked_attention": _ATTN.replace(".nan_to_num(0.0)", "")}),
    "additive mask with -1e9": ("q4", {"to_additive": '''
def to_additive(keep, dtype):
    return torch.where(keep, torch.zeros((), dtype=dtype), torch.full((), -1e9, dtype=dtype))
'''}),
    "additive mask polarity": ("q4", {"to_additive": '''
def to_additive(keep, dtype):
    return torch.where(keep, torch.full((), -math.inf, dtype=dtype), torch.zeros((), dtype=dtype))
'''}),
    "additive mask ignores dtype": ("q4", {"to_additive": '''
def to_additive(keep, dtype):
    return torch.where(keep, 0.0, -math.inf).float()
'''}),
    "from_additive polarity": ("q4", {"from_additive": '''
def from_additive(additive):
    return additive == -math.inf
'''}),
}
