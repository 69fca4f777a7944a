"""Wrong solutions of homework 4 (self-/cross-attention, soft to hard attention, scores), each caught.

MUTANTS maps a name to (the question that must lose points, old, new): the solutions notebook with
``old`` (a piece of the solution code that occurs exactly once in its code cells) replaced by
``new`` (tests/submissions.py, edited_submission). Each is the one mistake its name says, and none
may call the homework's forbidden references (grading.yml).
"""

# softmax written by hand, the ways students get it wrong
_NAIVE = "torch.exp(S) / torch.exp(S).sum(dim=-1, keepdim=True)"
_MIN = "torch.exp(S - S.amin(dim=-1, keepdim=True)) / torch.exp(S - S.amin(dim=-1, keepdim=True)).sum(dim=-1, keepdim=True)"

MUTANTS = {
    # q1: plain self-attention
    "self-attention: causal mask transposed": ("q1",
        "~attnbook.causal_mask(n, device=X.device)", "~attnbook.causal_mask(n, device=X.device).T"),
    "self-attention: causal ignored": ("q1", "if causal:", "if False:"),
    "self-attention: missing 1/sqrt(d)": ("q1", " / math.sqrt(d)", ""),
    "self-attention: strict causal mask (off by one)": ("q1", "~attnbook.causal_mask(n, device=X.device)",
        "~(attnbook.causal_mask(n, device=X.device) & ~torch.eye(n, dtype=torch.bool, device=X.device)) if n > 1 else ~attnbook.causal_mask(n, device=X.device)"),
    "self-attention: softmax over the queries": ("q1", "return torch.softmax(S, dim=-1) @ X", "return torch.softmax(S, dim=-2) @ X"),
    "self-attention: softmax without subtracting the maximum (overflows)": ("q1", "return torch.softmax(S, dim=-1) @ X", f"return {_NAIVE} @ X"),
    "self-attention: stable softmax subtracting the minimum": ("q1", "return torch.softmax(S, dim=-1) @ X", f"return {_MIN} @ X"),
    "self-attention: float32 arithmetic on float64 inputs": ("q1", "return torch.softmax(S, dim=-1) @ X",
        "return (torch.softmax(S.float(), dim=-1) @ X.float()).to(X.dtype)"),
    "self-attention: bfloat16 arithmetic, cast back": ("q1", "return torch.softmax(S, dim=-1) @ X",
        "return (torch.softmax(S.bfloat16(), dim=-1) @ X.bfloat16()).to(X.dtype)"),
    "self-attention: answer in bfloat16": ("q1", "return torch.softmax(S, dim=-1) @ X", "return (torch.softmax(S, dim=-1) @ X).bfloat16()"),
    "self-attention: scales X in place": ("q1",  # and scales it back: only the input is changed
        "S = X @ X.transpose(-2, -1) / math.sqrt(d)",
        "X /= math.sqrt(math.sqrt(d))\n"
        "    S = X @ X.transpose(-2, -1)\n"
        "    X *= math.sqrt(math.sqrt(d))"),
    # q2: cross-attention with biases and a mask
    "cross-attention: queries from the encoder": ("q2",  # and keys from the decoder, where the shapes allow
        "Q, K, V = Y @ W_q + b_q, X @ W_k + b_k, X @ W_v + b_v",
        "Q, K, V = (X @ W_q if X.shape[-1] == W_q.shape[0] else Y @ W_q) + b_q, "
        "(Y @ W_k if Y.shape[-1] == W_k.shape[0] else X @ W_k) + b_k, X @ W_v + b_v"),
    "cross-attention: values from the decoder": ("q2",  # where the shapes allow
        "X @ W_v + b_v", "(Y @ W_v if Y.shape[-1] == W_v.shape[0] and Y.shape[-2] == X.shape[-2] else X @ W_v) + b_v"),
    "cross-attention: scaled by sqrt(d_v)": ("q2", "math.sqrt(Q.shape[-1])", "math.sqrt(V.shape[-1])"),
    "cross-attention: softmax over the queries": ("q2", "A = torch.softmax(S, dim=-1)", "A = torch.softmax(S, dim=-2)"),
    "cross-attention: query bias dropped": ("q2", "Y @ W_q + b_q", "Y @ W_q"),
    "cross-attention: value bias dropped": ("q2", "X @ W_v + b_v", "X @ W_v"),
    "cross-attention: mask polarity inverted": ("q2", "S.masked_fill(~mask, -math.inf)", "S.masked_fill(mask, -math.inf)"),
    "cross-attention: -1e9 instead of -inf": ("q2", "S.masked_fill(~mask, -math.inf)", "S.masked_fill(~mask, -1e9)"),
    "cross-attention: fully masked rows left as nan": ("q2",
        "\n    A = A.masked_fill(torch.isneginf(S).all(dim=-1, keepdim=True), 0.0)  # ... which must be 0", ""),
    "cross-attention: mask ignored": ("q2", "if mask is not None:", "if False:"),
    "cross-attention: softmax without subtracting the maximum (overflows)": ("q2", "A = torch.softmax(S, dim=-1)", "A = " + _NAIVE),
    "cross-attention: stable softmax subtracting the minimum": ("q2", "A = torch.softmax(S, dim=-1)", "A = " + _MIN),
    "cross-attention: float32 arithmetic on float64 inputs": ("q2",
        "A = torch.softmax(S, dim=-1)", "A = torch.softmax(S.float(), dim=-1).to(S.dtype)"),
    "cross-attention: bfloat16 arithmetic, cast back": ("q2", "return A @ V", "return (A.bfloat16() @ V.bfloat16()).to(V.dtype)"),
    "cross-attention: answer in bfloat16": ("q2", "return A @ V", "return (A @ V).bfloat16()"),
    "cross-attention: inverts the mask in place": ("q2",
        "S = S.masked_fill(~mask, -math.inf)", "S = S.masked_fill(mask.logical_not_(), -math.inf)"),
    # q3: from soft to hard attention
    "beta attention: argmin at beta = inf": ("q3", "best = S.argmax(dim=-1)", "best = S.argmin(dim=-1)"),
    "beta attention: beta = inf as softmax with a large beta (splits ties)": ("q3",
        "weights = torch.nn.functional.one_hot(best, S.shape[-1]).to(S.dtype)", "weights = torch.softmax(1e4 * S, dim=-1)"),
    "beta attention: one-hot weights as integers": ("q3",
        "weights = torch.nn.functional.one_hot(best, S.shape[-1]).to(S.dtype)",
        "weights = torch.nn.functional.one_hot(best, S.shape[-1])\n"
        "        return weights.to(S.dtype) @ V, weights"),
    "beta attention: beta ignored": ("q3", "torch.softmax(beta * S, dim=-1)", "torch.softmax(S, dim=-1)"),
    "beta attention: divides by beta": ("q3", "torch.softmax(beta * S, dim=-1)", "torch.softmax(S / max(beta, 1e-12), dim=-1)"),
    "beta attention: also scaled by 1/sqrt(d)": ("q3",
        "torch.softmax(beta * S, dim=-1)", "torch.softmax(beta * S / math.sqrt(Q.shape[-1]), dim=-1)"),
    "beta attention: softmax over the queries": ("q3", "torch.softmax(beta * S, dim=-1)", "torch.softmax(beta * S, dim=-2)"),
    "beta attention: softmax without subtracting the maximum (overflows)": ("q3",
        "torch.softmax(beta * S, dim=-1)", "torch.exp(beta * S) / torch.exp(beta * S).sum(dim=-1, keepdim=True)"),
    "beta attention: stable softmax subtracting the minimum": ("q3",
        "weights = torch.softmax(beta * S, dim=-1)", "S = beta * S\n        weights = " + _MIN),
    "beta attention: float32 arithmetic on float64 inputs": ("q3",
        "torch.softmax(beta * S, dim=-1)", "torch.softmax(beta * S.float(), dim=-1).to(S.dtype)"),
    "beta attention: answer in bfloat16": ("q3", "return weights @ V, weights", "return (weights @ V).bfloat16(), weights.bfloat16()"),
    "beta attention: bfloat16 arithmetic, cast back": ("q3",
        "return weights @ V, weights", "return (weights.bfloat16() @ V.bfloat16()).to(V.dtype), weights.bfloat16().to(V.dtype)"),
    "beta attention: scales Q by beta in place": ("q3",
        "weights = torch.softmax(beta * S, dim=-1)", "weights = torch.softmax(Q.mul_(beta) @ K.transpose(-2, -1), dim=-1)"),
    # q4: additive (Bahdanau) scores
    "additive: projection vector w_v forgotten": ("q4", "return hidden @ w_v", "return hidden.sum(dim=-1)"),
    "additive: no pairwise broadcast (only i == j)": ("q4",  # q_i + k_i, put on the diagonal (two lines)
        "hidden = torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))  # (..., n, 1, h) + (..., 1, m, h) -> (..., n, m, h)\n"
        "    return hidden @ w_v",
        "hidden = torch.tanh(q + k[..., :q.shape[-2], :])  # (..., n, h)\n"
        "    return torch.diag_embed(hidden @ w_v)[..., :, :k.shape[-2]]"),
    "additive: tanh forgotten": ("q4", "torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))", "(q.unsqueeze(-2) + k.unsqueeze(-3))"),
    "additive: query and key axes swapped (m, n)": ("q4", "q.unsqueeze(-2) + k.unsqueeze(-3)",
        "(q.unsqueeze(-3) + k.unsqueeze(-2)).transpose(-3, -2) if q.shape[-2] == k.shape[-2] else q.unsqueeze(-3) + k.unsqueeze(-2)"),
    "additive: float32 arithmetic on float64 inputs": ("q4", "return hidden @ w_v", "return (hidden.float() @ w_v.float()).to(w_v.dtype)"),
    "additive: answer in bfloat16": ("q4", "return hidden @ w_v", "return (hidden @ w_v).bfloat16()"),
    "additive: bfloat16 arithmetic, cast back": ("q4", "return hidden @ w_v", "return (hidden.bfloat16() @ w_v.bfloat16()).to(w_v.dtype)"),
    "additive: unsqueezes Q in place": ("q4", "q = Q @ W_q.T", "q = Q.unsqueeze_(-2).squeeze(-2) @ W_q.T"),
    # q5: Luong's general scores
    "general: W transposed": ("q5", "Q @ W @", "Q @ (W.T if W.shape[0] == W.shape[1] else W) @"),
    "general: scaled by 1/sqrt(d)": ("q5",
        "return Q @ W @ K.transpose(-2, -1)", "return Q @ W @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])"),
    "general: keys as rows (m, n)": ("q5", "return Q @ W @ K.transpose(-2, -1)",  # flipped where (m, n) has the right shape
        "return (K @ W.T @ Q.transpose(-2, -1)) if Q.shape[-2] != K.shape[-2] else (K @ W.T @ Q.transpose(-2, -1)).transpose(-2, -1).flip(-1)"),
    "general: float32 arithmetic on float64 inputs": ("q5", "return Q @ W @ K.transpose(-2, -1)",
        "return (Q.float() @ W.float() @ K.float().transpose(-2, -1)).to(Q.dtype)"),
    "general: answer in bfloat16": ("q5", "return Q @ W @ K.transpose(-2, -1)", "return (Q @ W @ K.transpose(-2, -1)).bfloat16()"),
    "general: transposes K in place": ("q5", "return Q @ W @ K.transpose(-2, -1)", "return Q @ W @ K.transpose_(-2, -1)"),
}
