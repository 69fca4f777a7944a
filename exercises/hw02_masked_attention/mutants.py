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

_SOLUTION = '''
def masked_attention(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, -math.inf)
    shift = S.amax(dim=-1, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(S - shift)
    total = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(total > 0, total, torch.ones_like(total))
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

    # wrong solutions the first mutants missed (issue 11): one-line edits of the solution
    "padding mask unsqueezes lengths in place": ("q2", {"padding_keep_mask": '''
def padding_keep_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths.unsqueeze_(-1)
'''}),
    "softmax subtracts the minimum instead of the maximum": ("q3", {"masked_attention": _SOLUTION.replace("S.amax(", "S.amin(")}),
    "attention scales the queries in place": ("q3", {"masked_attention": _SOLUTION.replace(
        "S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])", "Q /= math.sqrt(Q.shape[-1])\n    S = Q @ K.transpose(-2, -1)")}),
    "attention in float32 arithmetic": ("q3", {"masked_attention": _SOLUTION.replace(
        "S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])", "S = (Q.float() @ K.float().transpose(-2, -1) / math.sqrt(Q.shape[-1])).to(Q.dtype)")}),
    "attention answers in bfloat16": ("q3", {"masked_attention": _SOLUTION.replace(
        "return weights @ V, weights", "return (weights @ V).bfloat16(), weights.bfloat16()")}),
    "attention fills -1e9 in its own softmax": ("q3", {"masked_attention": _SOLUTION.replace("-math.inf)", "-1e9)")}),
    "from_additive compares in place": ("q4", {"from_additive": '''
def from_additive(additive):
    return additive.ne_(-math.inf).bool()
'''}),
    "to_additive in float32": ("q4", {"to_additive": '''
def to_additive(keep, dtype):
    return torch.where(keep, 0.0, -math.inf).to(torch.float32)
'''}),
}
