"""Wrong solutions of homework 4 (self-/cross-attention, soft to hard attention, scores), each caught.

MUTANTS maps a name to (the question that must lose points, {function name: wrong definition}).
Most are one-line edits of the solution (``str.replace`` on its source); each must still define
the function, and none may call the homework's forbidden references (grading.yml).
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
def cross_attention(Y, X, W_q, W_k, W_v, b_q, b_k, b_v, mask=None):
    Q, K, V = Y @ W_q + b_q, X @ W_k + b_k, X @ W_v + b_v
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, -math.inf)
    A = torch.softmax(S, dim=-1)
    A = A.masked_fill(torch.isneginf(S).all(dim=-1, keepdim=True), 0.0)
    return A @ V
'''
_BETA = '''
def beta_attention(Q, K, V, beta=math.inf):
    S = Q @ K.transpose(-2, -1)
    if beta == math.inf:
        weights = torch.nn.functional.one_hot(S.argmax(dim=-1), S.shape[-1]).to(S.dtype)
    else:
        weights = torch.softmax(beta * S, dim=-1)
    return weights @ V, weights
'''
_ADD = '''
def additive_scores(Q, K, W_q, W_k, w_v):
    q = Q @ W_q.T
    k = K @ W_k.T
    hidden = torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))
    return hidden @ w_v
'''
_GEN = '''
def general_scores(Q, K, W):
    return Q @ W @ K.transpose(-2, -1)
'''

# softmax written by hand, the ways students get it wrong
_NAIVE = "torch.exp(S) / torch.exp(S).sum(dim=-1, keepdim=True)"
_MIN = "torch.exp(S - S.amin(dim=-1, keepdim=True)) / torch.exp(S - S.amin(dim=-1, keepdim=True)).sum(dim=-1, keepdim=True)"


def _one(source: str, old: str, new: str) -> str:
    """``source`` with ``old`` replaced once (it must occur)."""
    assert source.count(old) >= 1, (old, source)
    return source.replace(old, new, 1)


MUTANTS = {
    # q1: plain self-attention
    "self-attention: causal mask transposed": ("q1", {"plain_self_attention": _one(_SELF, "~attnbook.causal_mask(n)", "~attnbook.causal_mask(n).T")}),
    "self-attention: causal ignored": ("q1", {"plain_self_attention": _one(_SELF, "if causal:", "if False:")}),
    "self-attention: missing 1/sqrt(d)": ("q1", {"plain_self_attention": _one(_SELF, " / math.sqrt(d)", "")}),
    "self-attention: strict causal mask (off by one)": ("q1", {"plain_self_attention": _one(_SELF,
        "~attnbook.causal_mask(n)", "~(attnbook.causal_mask(n) & ~torch.eye(n, dtype=torch.bool)) if n > 1 else ~attnbook.causal_mask(n)")}),
    "self-attention: softmax over the queries": ("q1", {"plain_self_attention": _one(_SELF, "dim=-1", "dim=-2")}),
    "self-attention: softmax without subtracting the maximum (overflows)": ("q1", {"plain_self_attention": _one(_SELF,
        "torch.softmax(S, dim=-1)", _NAIVE.replace("S", "S"))}),
    "self-attention: stable softmax subtracting the minimum": ("q1", {"plain_self_attention": _one(_SELF, "torch.softmax(S, dim=-1)", _MIN)}),
    "self-attention: float32 arithmetic on float64 inputs": ("q1", {"plain_self_attention": _one(_SELF,
        "return torch.softmax(S, dim=-1) @ X", "return (torch.softmax(S.float(), dim=-1) @ X.float()).to(X.dtype)")}),
    "self-attention: bfloat16 arithmetic, cast back": ("q1", {"plain_self_attention": _one(_SELF,
        "return torch.softmax(S, dim=-1) @ X", "return (torch.softmax(S.bfloat16(), dim=-1) @ X.bfloat16()).to(X.dtype)")}),
    "self-attention: answer in bfloat16": ("q1", {"plain_self_attention": _one(_SELF,
        "return torch.softmax(S, dim=-1) @ X", "return (torch.softmax(S, dim=-1) @ X).bfloat16()")}),
    "self-attention: scales X in place": ("q1", {"plain_self_attention": _one(_SELF,
        "S = X @ X.transpose(-2, -1) / math.sqrt(d)", "X /= math.sqrt(math.sqrt(d))\n    S = X @ X.transpose(-2, -1)\n    X *= math.sqrt(math.sqrt(d))")}),
    # q2: cross-attention with biases and a mask
    "cross-attention: queries from the encoder": ("q2", {"cross_attention": _one(_CROSS,
        "Q, K, V = Y @ W_q + b_q, X @ W_k + b_k, X @ W_v + b_v",
        "Q, K, V = (X @ W_q if X.shape[-1] == W_q.shape[0] else Y @ W_q) + b_q, (Y @ W_k if Y.shape[-1] == W_k.shape[0] else X @ W_k) + b_k, X @ W_v + b_v")}),
    "cross-attention: values from the decoder": ("q2", {"cross_attention": _one(_CROSS,
        "X @ W_v + b_v", "(Y @ W_v if Y.shape[-1] == W_v.shape[0] and Y.shape[-2] == X.shape[-2] else X @ W_v) + b_v")}),
    "cross-attention: scaled by sqrt(d_v)": ("q2", {"cross_attention": _one(_CROSS, "math.sqrt(Q.shape[-1])", "math.sqrt(V.shape[-1])")}),
    "cross-attention: softmax over the queries": ("q2", {"cross_attention": _one(_CROSS, "torch.softmax(S, dim=-1)", "torch.softmax(S, dim=-2)")}),
    "cross-attention: query bias dropped": ("q2", {"cross_attention": _one(_CROSS, "Y @ W_q + b_q", "Y @ W_q")}),
    "cross-attention: value bias dropped": ("q2", {"cross_attention": _one(_CROSS, "X @ W_v + b_v", "X @ W_v")}),
    "cross-attention: mask polarity inverted": ("q2", {"cross_attention": _one(_CROSS, "S.masked_fill(~mask, -math.inf)", "S.masked_fill(mask, -math.inf)")}),
    "cross-attention: -1e9 instead of -inf": ("q2", {"cross_attention": _one(_CROSS, "S.masked_fill(~mask, -math.inf)", "S.masked_fill(~mask, -1e9)")}),
    "cross-attention: fully masked rows left as nan": ("q2", {"cross_attention": _one(_CROSS,
        "    A = A.masked_fill(torch.isneginf(S).all(dim=-1, keepdim=True), 0.0)\n", "")}),
    "cross-attention: mask ignored": ("q2", {"cross_attention": _one(_CROSS, "if mask is not None:", "if False:")}),
    "cross-attention: softmax without subtracting the maximum (overflows)": ("q2", {"cross_attention": _one(_CROSS,
        "A = torch.softmax(S, dim=-1)", "A = " + _NAIVE)}),
    "cross-attention: stable softmax subtracting the minimum": ("q2", {"cross_attention": _one(_CROSS,
        "A = torch.softmax(S, dim=-1)", "A = " + _MIN)}),
    "cross-attention: float32 arithmetic on float64 inputs": ("q2", {"cross_attention": _one(_CROSS,
        "A = torch.softmax(S, dim=-1)", "A = torch.softmax(S.float(), dim=-1).to(S.dtype)")}),
    "cross-attention: bfloat16 arithmetic, cast back": ("q2", {"cross_attention": _one(_CROSS,
        "return A @ V", "return (A.bfloat16() @ V.bfloat16()).to(V.dtype)")}),
    "cross-attention: answer in bfloat16": ("q2", {"cross_attention": _one(_CROSS, "return A @ V", "return (A @ V).bfloat16()")}),
    "cross-attention: inverts the mask in place": ("q2", {"cross_attention": _one(_CROSS,
        "S = S.masked_fill(~mask, -math.inf)", "S = S.masked_fill(mask.logical_not_(), -math.inf)")}),
    # q3: from soft to hard attention
    "beta attention: argmin at beta = inf": ("q3", {"beta_attention": _one(_BETA, "S.argmax(dim=-1)", "S.argmin(dim=-1)")}),
    "beta attention: beta = inf as softmax with a large beta (splits ties)": ("q3", {"beta_attention": _one(_BETA, "if beta == math.inf:", "if False:").replace(
        "torch.softmax(beta * S, dim=-1)", "torch.softmax(min(beta, 1e4) * S, dim=-1)")}),
    "beta attention: one-hot weights as integers": ("q3", {"beta_attention": _one(_BETA,
        "weights = torch.nn.functional.one_hot(S.argmax(dim=-1), S.shape[-1]).to(S.dtype)",
        "weights = torch.nn.functional.one_hot(S.argmax(dim=-1), S.shape[-1])\n        return weights.to(S.dtype) @ V, weights")}),
    "beta attention: beta ignored": ("q3", {"beta_attention": _one(_BETA, "torch.softmax(beta * S, dim=-1)", "torch.softmax(S, dim=-1)")}),
    "beta attention: divides by beta": ("q3", {"beta_attention": _one(_BETA, "torch.softmax(beta * S, dim=-1)", "torch.softmax(S / max(beta, 1e-12), dim=-1)")}),
    "beta attention: also scaled by 1/sqrt(d)": ("q3", {"beta_attention": _one(_BETA,
        "torch.softmax(beta * S, dim=-1)", "torch.softmax(beta * S / math.sqrt(Q.shape[-1]), dim=-1)")}),
    "beta attention: softmax over the queries": ("q3", {"beta_attention": _one(_BETA, "torch.softmax(beta * S, dim=-1)", "torch.softmax(beta * S, dim=-2)")}),
    "beta attention: softmax without subtracting the maximum (overflows)": ("q3", {"beta_attention": _one(_BETA,
        "weights = torch.softmax(beta * S, dim=-1)", "S = beta * S\n        weights = " + _NAIVE)}),
    "beta attention: stable softmax subtracting the minimum": ("q3", {"beta_attention": _one(_BETA,
        "weights = torch.softmax(beta * S, dim=-1)", "S = beta * S\n        weights = " + _MIN)}),
    "beta attention: float32 arithmetic on float64 inputs": ("q3", {"beta_attention": _one(_BETA,
        "torch.softmax(beta * S, dim=-1)", "torch.softmax(beta * S.float(), dim=-1).to(S.dtype)")}),
    "beta attention: answer in bfloat16": ("q3", {"beta_attention": _one(_BETA,
        "return weights @ V, weights", "return (weights @ V).bfloat16(), weights.bfloat16()")}),
    "beta attention: bfloat16 arithmetic, cast back": ("q3", {"beta_attention": _one(_BETA,
        "return weights @ V, weights", "return (weights.bfloat16() @ V.bfloat16()).to(V.dtype), weights.bfloat16().to(V.dtype)")}),
    "beta attention: scales Q by beta in place": ("q3", {"beta_attention": _one(_BETA,
        "weights = torch.softmax(beta * S, dim=-1)", "weights = torch.softmax(Q.mul_(beta) @ K.transpose(-2, -1), dim=-1)")}),
    # q4: additive (Bahdanau) scores
    "additive: projection vector w_v forgotten": ("q4", {"additive_scores": _one(_ADD, "return hidden @ w_v", "return hidden.sum(dim=-1)")}),
    "additive: no pairwise broadcast (only i == j)": ("q4", {"additive_scores": '''
def additive_scores(Q, K, W_q, W_k, w_v):
    e = torch.tanh(Q @ W_q.T + K[..., :Q.shape[-2], :] @ W_k.T) @ w_v if K.shape[-2] >= Q.shape[-2] else torch.tanh(Q @ W_q.T + K @ W_k.T) @ w_v
    return torch.diag_embed(e)[..., :, :K.shape[-2]] if K.shape[-2] >= Q.shape[-2] else torch.diag_embed(e)
'''}),
    "additive: tanh forgotten": ("q4", {"additive_scores": _one(_ADD, "torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))", "q.unsqueeze(-2) + k.unsqueeze(-3)")}),
    "additive: query and key axes swapped (m, n)": ("q4", {"additive_scores": _one(_ADD,
        "q.unsqueeze(-2) + k.unsqueeze(-3)", "(q.unsqueeze(-3) + k.unsqueeze(-2)).transpose(-3, -2) if q.shape[-2] == k.shape[-2] else q.unsqueeze(-3) + k.unsqueeze(-2)")}),
    "additive: float32 arithmetic on float64 inputs": ("q4", {"additive_scores": _one(_ADD, "return hidden @ w_v", "return (hidden.float() @ w_v.float()).to(w_v.dtype)")}),
    "additive: answer in bfloat16": ("q4", {"additive_scores": _one(_ADD, "return hidden @ w_v", "return (hidden @ w_v).bfloat16()")}),
    "additive: bfloat16 arithmetic, cast back": ("q4", {"additive_scores": _one(_ADD, "return hidden @ w_v", "return (hidden.bfloat16() @ w_v.bfloat16()).to(w_v.dtype)")}),
    "additive: unsqueezes Q in place": ("q4", {"additive_scores": _one(_ADD, "q = Q @ W_q.T\n", "q = Q.unsqueeze_(-2).squeeze(-2) @ W_q.T\n")}),
    # q5: Luong's general scores
    "general: W transposed": ("q5", {"general_scores": _one(_GEN, "Q @ W @", "Q @ (W.T if W.shape[0] == W.shape[1] else W) @")}),
    "general: scaled by 1/sqrt(d)": ("q5", {"general_scores": _one(_GEN, "K.transpose(-2, -1)", "K.transpose(-2, -1) / math.sqrt(Q.shape[-1])")}),
    "general: keys as rows (m, n)": ("q5", {"general_scores": _one(_GEN, "return Q @ W @ K.transpose(-2, -1)",
        "return (K @ W.T @ Q.transpose(-2, -1)) if Q.shape[-2] != K.shape[-2] else (K @ W.T @ Q.transpose(-2, -1)).transpose(-2, -1).flip(-1)")}),
    "general: float32 arithmetic on float64 inputs": ("q5", {"general_scores": _one(_GEN, "return Q @ W @ K.transpose(-2, -1)",
        "return (Q.float() @ W.float() @ K.float().transpose(-2, -1)).to(Q.dtype)")}),
    "general: answer in bfloat16": ("q5", {"general_scores": _one(_GEN, "return Q @ W @ K.transpose(-2, -1)", "return (Q @ W @ K.transpose(-2, -1)).bfloat16()")}),
    "general: transposes K in place": ("q5", {"general_scores": _one(_GEN, "return Q @ W @ K.transpose(-2, -1)", "return Q @ W @ K.transpose_(-2, -1)")}),
}
