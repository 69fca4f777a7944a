"""Wrong solutions of homework 0, each of which the tests must catch (tests/test_mutations.py).

MUTANTS maps a name to (the question that must lose points, {function name: wrong definition}).
They are the mistakes students make when moving between the row and the column convention.
"""

MUTANTS = {
    "weights not transposed": ("q1", {"column_weights": '''
def column_weights(W_row, b_row):
    return W_row, b_row
'''}),
    "bias as a column": ("q1", {"column_weights": '''
def column_weights(W_row, b_row):
    return W_row.T, b_row[:, None]
'''}),
    "row scores missing 1/sqrt(d)": ("q2", {"scores_row": '''
def scores_row(Q, K):
    return Q @ K.T
'''}),
    "row scores transposed (K Q^T)": ("q2", {"scores_row": '''
def scores_row(Q, K):
    return K @ Q.T / math.sqrt(Q.shape[-1])
'''}),
    "column scores as Q^T K": ("q2", {"scores_column": '''
def scores_column(Q, K):
    return Q.T @ K / math.sqrt(Q.shape[0])
'''}),
    "column scores divided by d, not sqrt(d)": ("q2", {"scores_column": '''
def scores_column(Q, K):
    return K.T @ Q / Q.shape[0]
'''}),
    "column scores scaled by sqrt(l_x)": ("q2", {"scores_column": '''
def scores_column(Q, K):
    return K.T @ Q / math.sqrt(Q.shape[1])
'''}),
    "row softmax over the wrong axis": ("q3", {"weights_row": '''
def weights_row(S):
    return torch.softmax(S, dim=0)
'''}),
    "column softmax over rows": ("q3", {"weights_column": '''
def weights_column(S):
    return torch.softmax(S, dim=-1)
'''}),
    "softmax without the max shift": ("q3", {"weights_row": '''
def weights_row(S):
    e = torch.exp(S)
    return e / e.sum(dim=-1, keepdim=True)
'''}),
    "fully masked rows give nan": ("q3", {"weights_row": '''
def weights_row(S):
    return torch.softmax(S, dim=-1)
'''}),
    "mask not transposed": ("q4", {"mask_row_to_column": '''
def mask_row_to_column(M):
    return M
'''}),
    "mask polarity inverted": ("q4", {"mask_row_to_column": '''
def mask_row_to_column(M):
    return ~M.T
'''}),
    "float mask where bool asked": ("q4", {"mask_row_to_column": '''
def mask_row_to_column(M):
    return M.T.float()
'''}),
    "torch mha mask taken as a keep-mask": ("q4", {"mask_from_torch_mha": '''
def mask_from_torch_mha(attn_mask):
    return attn_mask
'''}),
    "torch mha mask negated and transposed": ("q4", {"mask_from_torch_mha": '''
def mask_from_torch_mha(attn_mask):
    return ~attn_mask.T
'''}),
    "attention: softmax over rows": ("q5", {"column_attention": '''
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    Q = W_q @ X + b_q[:, None]
    K = W_k @ Z + b_k[:, None]
    V = W_v @ Z + b_v[:, None]
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask == 0, -math.inf)
    return V @ weights_row(S)
'''}),
    "attention: biases forgotten": ("q5", {"column_attention": '''
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    Q = W_q @ X
    K = W_k @ Z
    V = W_v @ Z
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask == 0, -math.inf)
    return V @ weights_column(S)
'''}),
    "attention: value bias forgotten": ("q5", {"column_attention": '''
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    Q = W_q @ X + b_q[:, None]
    K = W_k @ Z + b_k[:, None]
    V = W_v @ Z
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask == 0, -math.inf)
    return V @ weights_column(S)
'''}),
    "attention: mask transposed": ("q5", {"column_attention": '''
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    Q = W_q @ X + b_q[:, None]
    K = W_k @ Z + b_k[:, None]
    V = W_v @ Z + b_v[:, None]
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask.T == 0, -math.inf) if mask.shape[0] == mask.shape[1] else S.masked_fill(mask == 0, -math.inf)
    return V @ weights_column(S)
'''}),
    "attention: mask polarity inverted": ("q5", {"column_attention": '''
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    Q = W_q @ X + b_q[:, None]
    K = W_k @ Z + b_k[:, None]
    V = W_v @ Z + b_v[:, None]
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask == 1, -math.inf)
    return V @ weights_column(S)
'''}),
    "attention: -1e9 instead of -inf": ("q5", {"column_attention": '''
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    Q = W_q @ X + b_q[:, None]
    K = W_k @ Z + b_k[:, None]
    V = W_v @ Z + b_v[:, None]
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask == 0, -1e9)
    return V @ torch.softmax(S, dim=0)
'''}),
    "attention: output transposed": ("q5", {"column_attention": '''
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    Q = W_q @ X + b_q[:, None]
    K = W_k @ Z + b_k[:, None]
    V = W_v @ Z + b_v[:, None]
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask == 0, -math.inf)
    return (V @ weights_column(S)).T
'''}),

    # wrong solutions the first mutants missed (issue 11): one-line edits of the solution
    "column_weights transposes W_row in place": ("q1", {"column_weights": """
def column_weights(W_row, b_row):
    return W_row.t_(), b_row.clone()
"""}),
    "scores_row scales Q in place": ("q2", {"scores_row": """
def scores_row(Q, K):
    Q /= math.sqrt(Q.shape[-1])
    return Q @ K.transpose(0, 1)
"""}),
    "scores_row in float32 arithmetic": ("q2", {"scores_row": """
def scores_row(Q, K):
    return (Q.float() @ K.float().transpose(0, 1) / math.sqrt(Q.shape[-1])).to(Q.dtype)
"""}),
    "softmax subtracts the minimum instead of the maximum": ("q3", {"weights_row": """
def weights_row(S):
    shift = S.amin(dim=-1, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(S - shift)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))
"""}),
    "softmax modifies the scores in place": ("q3", {"weights_row": """
def weights_row(S):
    shift = S.amax(dim=-1, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    S -= shift
    e = torch.exp(S)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))
"""}),
    "softmax in float32 arithmetic": ("q3", {"weights_row": """
def weights_row(S):
    shift = S.amax(dim=-1, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp((S - shift).float())
    total = e.sum(dim=-1, keepdim=True)
    return (e / torch.where(total > 0, total, torch.ones_like(total))).to(S.dtype)
"""}),
    "softmax answers in bfloat16": ("q3", {"weights_row": """
def weights_row(S):
    shift = S.amax(dim=-1, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(S - shift)
    total = e.sum(dim=-1, keepdim=True)
    return (e / torch.where(total > 0, total, torch.ones_like(total))).to(torch.bfloat16)
"""}),
    "mask_from_torch_mha negates in place": ("q4", {"mask_from_torch_mha": """
def mask_from_torch_mha(attn_mask):
    return attn_mask.logical_not_()
"""}),
    "attention: query bias forgotten": ("q5", {"column_attention": """
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    Q = W_q @ X
    K = W_k @ Z + b_k[:, None]
    V = W_v @ Z + b_v[:, None]
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask == 0, -math.inf)
    return V @ weights_column(S)
"""}),
    "attention: softmax subtracts the minimum": ("q5", {"column_attention": """
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    Q = W_q @ X + b_q[:, None]
    K = W_k @ Z + b_k[:, None]
    V = W_v @ Z + b_v[:, None]
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask == 0, -math.inf)
    e = torch.exp(S - S.amin(dim=0, keepdim=True).nan_to_num(0.0, neginf=0.0))
    return V @ (e / e.sum(dim=0, keepdim=True)).nan_to_num(0.0)
"""}),
    "attention: bias unsqueezed in place": ("q5", {"column_attention": """
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    Q = W_q @ X + b_q.unsqueeze_(1)
    K = W_k @ Z + b_k[:, None]
    V = W_v @ Z + b_v[:, None]
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask == 0, -math.inf)
    return V @ weights_column(S)
"""}),
    "attention: float32 arithmetic": ("q5", {"column_attention": """
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    dtype = X.dtype
    X, Z, W_q, b_q, W_k, b_k, W_v, b_v = (t.float() for t in (X, Z, W_q, b_q, W_k, b_k, W_v, b_v))
    Q = W_q @ X + b_q[:, None]
    K = W_k @ Z + b_k[:, None]
    V = W_v @ Z + b_v[:, None]
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask == 0, -math.inf)
    return (V @ weights_column(S)).to(dtype)
"""}),
    "attention: answers in bfloat16": ("q5", {"column_attention": """
def column_attention(X, Z, W_q, b_q, W_k, b_k, W_v, b_v, mask=None):
    Q = W_q @ X + b_q[:, None]
    K = W_k @ Z + b_k[:, None]
    V = W_v @ Z + b_v[:, None]
    S = scores_column(Q, K)
    if mask is not None:
        S = S.masked_fill(mask == 0, -math.inf)
    return (V @ weights_column(S)).to(torch.bfloat16)
"""}),
}
