"""Wrong solutions of homework 7 (a transformer decoder block), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, an exact piece of the solutions' code
that occurs once, its replacement): one-line edits of the master's solutions, the mistakes
students make (tests/homework/test_mutations.py grades each).
"""

MUTANTS = {
    # q1: masked (causal) multi-head self-attention
    "self: causal mask missing": ("q1", "S = S.masked_fill(~attnbook.causal_mask(n, device=Y.device), -math.inf)", "S = S"),
    "self: causal mask transposed": ("q1", "~attnbook.causal_mask(n, device=Y.device)", "~attnbook.causal_mask(n, device=Y.device).T"),
    "self: causal mask off by one (a token does not see itself)": ("q1",
        "~attnbook.causal_mask(n, device=Y.device)", "~attnbook.causal_mask(n, device=Y.device).tril(-1)"),
    "self: causal mask with the wrong polarity": ("q1", "~attnbook.causal_mask(n, device=Y.device)", "attnbook.causal_mask(n, device=Y.device)"),
    "self: softmax over the queries": ("q1", "A = torch.softmax(S, dim=-1)  # (batch, heads, n, n)", "A = torch.softmax(S, dim=-2)  # (batch, heads, n, n)"),
    "self: missing 1/sqrt(d_head)": ("q1", "S = Q @ K.transpose(-2, -1) / math.sqrt(d_head)  # (batch, heads, n, d_head) @",
                                      "S = Q @ K.transpose(-2, -1)  # (batch, heads, n, d_head) @"),
    "self: scaled by 1/sqrt(d_model)": ("q1", "S = Q @ K.transpose(-2, -1) / math.sqrt(d_head)  # (batch, heads, n, d_head) @",
                                         "S = Q @ K.transpose(-2, -1) / math.sqrt(d_model)  # (batch, heads, n, d_head) @"),
    "self: weights not transposed (x @ W)": ("q1", "return (X @ W.T + b)", "return (X @ W + b)"),
    "self: heads split without the transpose": ("q1",
        ".reshape(batch, n, num_heads, d_head).transpose(1, 2)\n", ".reshape(batch, num_heads, n, d_head)\n"),
    "self: heads merged without the transpose": ("q1",
        "O = (A @ V).transpose(1, 2).reshape(batch, n, d_model)  # (batch, n, heads * d_head): head 0 first",
        "O = (A @ V).reshape(batch, n, d_model)  # (batch, n, heads * d_head): head 0 first"),
    "self: output bias forgotten": ("q1", 'return O @ p["W_o"].T + p["b_o"]\n', 'return O @ p["W_o"].T\n'),
    "self: value bias forgotten": ("q1", 'heads(Y, p["W_v"], p["b_v"])', 'heads(Y, p["W_v"], 0)'),
    "self: keys and values from the queries' projection": ("q1", 'heads(Y, p["W_k"], p["b_k"]), heads(Y, p["W_v"], p["b_v"])',
                                                             'heads(Y, p["W_q"], p["b_q"]), heads(Y, p["W_q"], p["b_q"])'),
    "self: float32 arithmetic": ("q1", "A = torch.softmax(S, dim=-1)  # (batch, heads, n, n)", "A = torch.softmax(S.float(), dim=-1).to(S.dtype)  # (batch, heads, n, n)"),
    # q2: cross-attention
    "cross: queries from the encoder": ("q2", 'Q = (Y @ p["W_q"].T + p["b_q"]).reshape(batch, n,', 'Q = (Z @ p["W_q"].T + p["b_q"]).reshape(batch, m,'),
    "cross: keys from the decoder": ("q2", 'K = (Z @ p["W_k"].T + p["b_k"]).reshape(batch, m,', 'K = (Y @ p["W_k"].T + p["b_k"]).reshape(batch, n,'),
    "cross: values from the decoder": ("q2", 'V = (Z @ p["W_v"].T + p["b_v"]).reshape(batch, m,', 'V = (Y @ p["W_v"].T + p["b_v"]).reshape(batch, n,'),
    "cross: a causal mask as in self-attention": ("q2", "A = torch.softmax(S, dim=-1).nan_to_num(0.0)",
        "A = torch.softmax(S.masked_fill(~attnbook.causal_mask(n, m, device=S.device), -math.inf), dim=-1).nan_to_num(0.0)"),
    "cross: memory mask ignored": ("q2", "if memory_mask is not None:", "if False:"),
    "cross: memory mask with the wrong polarity": ("q2", "S.masked_fill(~memory_mask.unsqueeze(1), -math.inf)", "S.masked_fill(memory_mask.unsqueeze(1), -math.inf)"),
    "cross: memory mask without the head axis": ("q2", "S.masked_fill(~memory_mask.unsqueeze(1), -math.inf)", "S.masked_fill(~memory_mask, -math.inf)"),
    "cross: -1e9 instead of -inf (empty encoder inputs uniform)": ("q2", "S.masked_fill(~memory_mask.unsqueeze(1), -math.inf)", "S.masked_fill(~memory_mask.unsqueeze(1), -1e9)"),
    "cross: fully masked rows left as nan": ("q2", "A = torch.softmax(S, dim=-1).nan_to_num(0.0)", "A = torch.softmax(S, dim=-1)"),
    "cross: softmax over the queries": ("q2", "A = torch.softmax(S, dim=-1).nan_to_num(0.0)", "A = torch.softmax(S, dim=-2).nan_to_num(0.0)"),
    "cross: missing 1/sqrt(d_head)": ("q2", "S = Q @ K.transpose(-2, -1) / math.sqrt(d_head)  # (batch, heads, n, m)", "S = Q @ K.transpose(-2, -1)  # (batch, heads, n, m)"),
    "cross: query bias forgotten": ("q2", 'Q = (Y @ p["W_q"].T + p["b_q"])', 'Q = (Y @ p["W_q"].T)'),
    "cross: value bias forgotten": ("q2", 'V = (Z @ p["W_v"].T + p["b_v"])', 'V = (Z @ p["W_v"].T)'),
    "cross: heads merged without the transpose": ("q2", "O = (A @ V).transpose(1, 2).reshape(batch, n, d_model)  # (batch, n, heads * d_head)\n",
                                                   "O = (A @ V).reshape(batch, n, d_model)  # (batch, n, heads * d_head)\n"),
    # q3: the pre-norm decoder block
    "block: self-attention residual forgotten": ("q3", "H1 = Y + masked_self_attention(", "H1 = masked_self_attention("),
    "block: cross-attention residual forgotten": ("q3", "H2 = H1 + cross_attention(", "H2 = cross_attention("),
    # a block that fills masked scores with -1e9 in its own cross-attention: a token with no encoder
    # input then attends to every encoder token uniformly, as if its row of the mask were all True
    "block: -1e9 instead of -inf in the cross-attention (empty encoder inputs uniform)": ("q3",
        'params["cross_attn"], num_heads, memory_mask)',
        'params["cross_attn"], num_heads, None if memory_mask is None else memory_mask | ~memory_mask.any(-1, keepdim=True))'),
    "block: feed-forward residual forgotten": ("q3", 'return H2 + hidden @ mlp["W_2"].T', 'return hidden @ mlp["W_2"].T'),
    "block: residual taken from the normalised input": ("q3", "H1 = Y + masked_self_attention(norm(Y, params[\"norm1\"])",
        "Y = norm(Y, params[\"norm1\"])\n    H1 = Y + masked_self_attention(Y"),
    "block: post-norm after the self-attention": ("q3",
        'H1 = Y + masked_self_attention(norm(Y, params["norm1"]), params["self_attn"], num_heads)',
        'H1 = norm(Y + masked_self_attention(Y, params["self_attn"], num_heads), params["norm1"])'),
    "block: encoder output normalised too": ("q3", ", Z, params[\"cross_attn\"]", ", norm(Z, params[\"norm2\"]), params[\"cross_attn\"]"),
    "block: cross-attention queries not normalised": ("q3", "cross_attention(norm(H1, params[\"norm2\"]), Z", "cross_attention(H1, Z"),
    "block: memory mask not passed on": ("q3", "num_heads, memory_mask)", "num_heads)"),
    "block: the same layer norm everywhere": ("q3", 'norm(H2, params["norm3"])', 'norm(H2, params["norm1"])'),
    "block: layer norm without its weight and bias": ("q3", 'X.shape[-1:], q["weight"], q["bias"], eps=1e-5', "X.shape[-1:], eps=1e-5"),
    "block: layer norm with the unbiased variance": ("q3",
        'return torch.nn.functional.layer_norm(X, X.shape[-1:], q["weight"], q["bias"], eps=1e-5)',
        'return (X - X.mean(-1, keepdim=True)) / torch.sqrt(X.var(-1, keepdim=True) + 1e-5) * q["weight"] + q["bias"]'),
    "block: GELU instead of ReLU": ("q3", "hidden = torch.relu(", "hidden = torch.nn.functional.gelu("),
    "block: feed-forward output bias forgotten": ("q3", ' + mlp["b_2"]', ''),
}
