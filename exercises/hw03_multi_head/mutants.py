"""Wrong solutions of homework 3 (multi-head attention), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, {function name: wrong definition}).
"""

_MHA = '''
def multi_head_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, num_heads, mask=None):
    Q = split_heads(X @ W_q.T + b_q, num_heads)
    K = split_heads(Z @ W_k.T + b_k, num_heads)
    V = split_heads(Z @ W_v.T + b_v, num_heads)
    O, _ = attnbook.attention(Q, K, V, mask=mask)
    return merge_heads(O) @ W_o.T + b_o
'''

_OWN = '''
def _min_softmax(S):
    shift = S.amin(dim=-1, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(S - shift)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


def multi_head_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, num_heads, mask=None):
    Q = split_heads(X @ W_q.T + b_q, num_heads)
    K = split_heads(Z @ W_k.T + b_k, num_heads)
    V = split_heads(Z @ W_v.T + b_v, num_heads)
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, -1e9)
    O = torch.softmax(S, dim=-1).nan_to_num(0.0) @ V
    return merge_heads(O) @ W_o.T + b_o
'''

MUTANTS = {
    "split by reshape without transpose": ("q1", {"split_heads": '''
def split_heads(X, num_heads):
    batch, n, d_model = X.shape
    return X.reshape(batch, num_heads, n, d_model // num_heads)
'''}),
    "heads interleaved (feature h::heads)": ("q1", {"split_heads": '''
def split_heads(X, num_heads):
    batch, n, d_model = X.shape
    return X.reshape(batch, n, d_model // num_heads, num_heads).permute(0, 3, 1, 2)
'''}),
    "merge by reshape without transpose": ("q1", {"merge_heads": '''
def merge_heads(O):
    batch, heads, n, d_head = O.shape
    return O.reshape(batch, n, heads * d_head)
'''}),
    "heads concatenated in the wrong order": ("q2", {"multi_head_attention": _MHA.replace("merge_heads(O)", "merge_heads(O.flip(1))")}),
    "scaled by sqrt(d_model) instead of sqrt(d_head)": ("q2", {"multi_head_attention": _MHA.replace(
        "attnbook.attention(Q, K, V, mask=mask)", "attnbook.attention(Q, K, V, mask=mask, scale=1 / math.sqrt(X.shape[-1]))")}),
    "output weight not transposed": ("q2", {"multi_head_attention": _MHA.replace("@ W_o.T + b_o", "@ W_o + b_o")}),
    "output bias forgotten": ("q2", {"multi_head_attention": _MHA.replace("@ W_o.T + b_o", "@ W_o.T")}),
    "key and value biases forgotten": ("q2", {"multi_head_attention": _MHA.replace("@ W_k.T + b_k", "@ W_k.T").replace("@ W_v.T + b_v", "@ W_v.T")}),
    "mask polarity of nn.MultiheadAttention (True = blocked)": ("q2", {"multi_head_attention": _MHA.replace(
        "mask=mask)", "mask=None if mask is None else ~mask)")}),
    "keys from the queries (self- instead of cross-attention)": ("q2", {"multi_head_attention": _MHA.replace(
        "K = split_heads(Z @ W_k.T", "K = split_heads((X if X.shape == Z.shape else Z) @ W_k.T")}),
    "sum over heads with row blocks of W_o": ("q3", {"sum_over_heads": '''
def sum_over_heads(O, W_o, b_o):
    heads, d_head = O.shape[1], O.shape[3]
    out = b_o
    for h in range(heads):
        out = out + O[:, h] @ W_o[h * d_head:(h + 1) * d_head, :]
    return out
'''}),
    "sum over heads in the wrong head order": ("q3", {"sum_over_heads": '''
def sum_over_heads(O, W_o, b_o):
    heads, d_head = O.shape[1], O.shape[3]
    out = b_o
    for h in range(heads):
        out = out + O[:, heads - 1 - h] @ W_o[:, h * d_head:(h + 1) * d_head].T
    return out
'''}),
    "sum over heads averages instead of summing": ("q3", {"sum_over_heads": '''
def sum_over_heads(O, W_o, b_o):
    heads, d_head = O.shape[1], O.shape[3]
    out = 0
    for h in range(heads):
        out = out + O[:, h] @ W_o[:, h * d_head:(h + 1) * d_head].T
    return out / heads + b_o
'''}),

    # wrong solutions the first mutants missed (issue 11): one-line edits of the solution
    "merge transposes its input in place": ("q1", {"merge_heads": '''
def merge_heads(O):
    batch, heads, n, d_head = O.shape
    return O.transpose_(1, 2).reshape(batch, n, heads * d_head)
'''}),
    "query bias unsqueezed in place": ("q2", {"multi_head_attention": _MHA.replace("@ W_q.T + b_q", "@ W_q.T + b_q.unsqueeze_(0)")}),
    "query bias forgotten": ("q2", {"multi_head_attention": _MHA.replace("@ W_q.T + b_q", "@ W_q.T")}),
    "multi-head attention in float32 arithmetic": ("q2", {"multi_head_attention": _MHA.replace(
        "return merge_heads(O) @ W_o.T + b_o", "return (merge_heads(O).float() @ W_o.T.float() + b_o.float()).to(X.dtype)")}),
    "multi-head attention answers in bfloat16": ("q2", {"multi_head_attention": _MHA.replace(
        "return merge_heads(O) @ W_o.T + b_o", "return (merge_heads(O) @ W_o.T + b_o).bfloat16()")}),
    "own attention fills -1e9 instead of -inf": ("q2", {"multi_head_attention": _OWN}),
    "own attention: softmax subtracts the minimum": ("q2", {"multi_head_attention": _OWN.replace("-1e9", "-math.inf").replace(
        "torch.softmax(S, dim=-1)", "_min_softmax(S)")}),
    "sum over heads forgets the output bias": ("q3", {"sum_over_heads": '''
def sum_over_heads(O, W_o, b_o):
    heads, d_head = O.shape[1], O.shape[3]
    out = 0
    for h in range(heads):
        out = out + O[:, h] @ W_o[:, h * d_head:(h + 1) * d_head].T
    return out
'''}),
    "sum over heads answers in bfloat16": ("q3", {"sum_over_heads": '''
def sum_over_heads(O, W_o, b_o):
    heads, d_head = O.shape[1], O.shape[3]
    out = b_o.bfloat16()
    for h in range(heads):
        out = out + O[:, h].bfloat16() @ W_o[:, h * d_head:(h + 1) * d_head].T.bfloat16()
    return out
'''}),
}
