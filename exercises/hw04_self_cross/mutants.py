"""Wrong solutions of homework 4 (self-/cross-attention, hard attention, scores), each caught.

MUTANTS maps a name to (the question that must lose points, {function name: wrong definition}).
"""

_SELF = '''
def plain_self_attention(X, causal=False):
    n, d = X.shape[-2], X.shape[-1]
    S = X @ X.transpose(-2, -1) / math.sqrt(d)
    if causal:
        S = S.masked_fill(~attnbook.causal_mask(n), -math.inf)
    return torch.softmax(S, dim=-1) @ X
'''
_CROSS = '''
def cross_attention(Y, X, W_q, W_k, W_v):
    Q, K, V = Y @ W_q, X @ W_k, X @ W_v
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    return torch.softmax(S, dim=-1) @ V
'''

MUTANTS = {
    "self-attention: causal mask transposed": ("q1", {"plain_self_attention": _SELF.replace("~attnbook.causal_mask(n)", "~attnbook.causal_mask(n).T")}),
    "self-attention: causal ignored": ("q1", {"plain_self_attention": _SELF.replace("if causal:", "if False:")}),
    "self-attention: missing 1/sqrt(d)": ("q1", {"plain_self_attention": _SELF.replace(" / math.sqrt(d)", "")}),
    "self-attention: strict causal mask (off by one)": ("q1", {"plain_self_attention": _SELF.replace(
        "~attnbook.causal_mask(n)", "~(attnbook.causal_mask(n) & ~torch.eye(n, dtype=torch.bool)) if n > 1 else ~attnbook.causal_mask(n)")}),
    "cross-attention: queries from the encoder": ("q2", {"cross_attention": _CROSS.replace(
        "Q, K, V = Y @ W_q, X @ W_k, X @ W_v", "Q, K, V = (X @ W_q if X.shape[-1] == W_q.shape[0] else Y @ W_q), Y @ W_k if Y.shape[-1] == W_k.shape[0] else X @ W_k, X @ W_v")}),
    "cross-attention: values from the decoder": ("q2", {"cross_attention": _CROSS.replace(
        "X @ W_v", "(Y @ W_v if Y.shape[-1] == W_v.shape[0] and Y.shape[-2] == X.shape[-2] else X @ W_v)")}),
    "cross-attention: scaled by sqrt(d_v)": ("q2", {"cross_attention": _CROSS.replace("math.sqrt(Q.shape[-1])", "math.sqrt(V.shape[-1])")}),
    "cross-attention: softmax over the queries": ("q2", {"cross_attention": _CROSS.replace("dim=-1", "dim=-2")}),
    "hard attention: argmin": ("q3", {"hard_attention": '''
def hard_attention(Q, K, V):
    S = Q @ K.transpose(-2, -1)
    w = torch.nn.functional.one_hot(S.argmin(dim=-1), S.shape[-1]).to(Q.dtype)
    return w @ V, w
'''}),
    "hard attention: softmax with a large beta splits ties": ("q3", {"hard_attention": '''
def hard_attention(Q, K, V):
    w = torch.softmax(1e4 * (Q @ K.transpose(-2, -1)), dim=-1)
    return w @ V, w
'''}),
    "hard attention: weights as integers": ("q3", {"hard_attention": '''
def hard_attention(Q, K, V):
    S = Q @ K.transpose(-2, -1)
    w = torch.nn.functional.one_hot(S.argmax(dim=-1), S.shape[-1])
    return w.to(Q.dtype) @ V, w
'''}),
    "additive: projection vector w_v forgotten": ("q4", {"additive_scores": '''
def additive_scores(Q, K, W_q, W_k, w_v):
    hidden = torch.tanh((Q @ W_q.T).unsqueeze(-2) + (K @ W_k.T).unsqueeze(-3))
    return hidden.sum(dim=-1)
'''}),
    "additive: no pairwise broadcast (only i == j)": ("q4", {"additive_scores": '''
def additive_scores(Q, K, W_q, W_k, w_v):
    e = torch.tanh(Q @ W_q.T + K @ W_k.T) @ w_v
    return torch.diag_embed(e)
'''}),
    "additive: tanh forgotten": ("q4", {"additive_scores": '''
def additive_scores(Q, K, W_q, W_k, w_v):
    return ((Q @ W_q.T).unsqueeze(-2) + (K @ W_k.T).unsqueeze(-3)) @ w_v
'''}),
    "general: W transposed": ("q5", {"general_scores": '''
def general_scores(Q, K, W):
    return Q @ (W.T if W.shape[0] == W.shape[1] else W) @ K.transpose(-2, -1)
'''}),
    "general: scaled by 1/sqrt(d)": ("q5", {"general_scores": '''
def general_scores(Q, K, W):
    return Q @ W @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
'''}),
}
