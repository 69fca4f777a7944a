"""Wrong solutions of homework 3 (multi-head attention), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, old, new): the solutions notebook with
``old`` (a piece of the solution code that occurs exactly once in its code cells) replaced by
``new`` (tests/submissions.py, edited_submission). Each is the one mistake its name says
(tests/homework/test_mutations.py grades them).
"""

MUTANTS = {
    # q1: splitting and merging the heads
    "split by reshape without transpose": ("q1",
        "return X.transpose(1, 2)", "return X.reshape(batch, num_heads, n, d_model // num_heads)"),
    "heads interleaved (feature h::heads)": ("q1",
        "X = X.reshape(batch, n, num_heads, d_model // num_heads)",
        "X = X.reshape(batch, n, d_model // num_heads, num_heads).transpose(2, 3)"),
    "merge by reshape without transpose": ("q1",
        "return O.transpose(1, 2).reshape(batch, n, heads * d_head)", "return O.reshape(batch, n, heads * d_head)"),
    "merge transposes its input in place": ("q1", "return O.transpose(1, 2).reshape(", "return O.transpose_(1, 2).reshape("),
    # q2: multi-head attention
    "heads concatenated in the wrong order": ("q2", "return merge_heads(O) @ W_o.T + b_o", "return merge_heads(O.flip(1)) @ W_o.T + b_o"),
    "scaled by sqrt(d_model) instead of sqrt(d_head)": ("q2",
        "attnbook.attention(Q, K, V, mask=mask)", "attnbook.attention(Q, K, V, mask=mask, scale=1 / math.sqrt(X.shape[-1]))"),
    "output weight not transposed": ("q2", "return merge_heads(O) @ W_o.T + b_o", "return merge_heads(O) @ W_o + b_o"),
    "output bias forgotten": ("q2", "return merge_heads(O) @ W_o.T + b_o", "return merge_heads(O) @ W_o.T"),
    "key and value biases forgotten": ("q2",  # two lines
        "K = split_heads(Z @ W_k.T + b_k, num_heads)  # (batch, heads, m, d_head)\n"
        "    V = split_heads(Z @ W_v.T + b_v, num_heads)",
        "K = split_heads(Z @ W_k.T, num_heads)  # (batch, heads, m, d_head)\n"
        "    V = split_heads(Z @ W_v.T, num_heads)"),
    "mask polarity of nn.MultiheadAttention (True = blocked)": ("q2",
        "attnbook.attention(Q, K, V, mask=mask)", "attnbook.attention(Q, K, V, mask=None if mask is None else ~mask)"),
    "keys from the queries (self- instead of cross-attention)": ("q2",  # Z where X would not fit
        "K = split_heads(Z @ W_k.T", "K = split_heads((X if X.shape == Z.shape else Z) @ W_k.T"),
    "query bias unsqueezed in place": ("q2", "X @ W_q.T + b_q", "X @ W_q.T + b_q.unsqueeze_(0)"),
    "query bias forgotten": ("q2", "X @ W_q.T + b_q", "X @ W_q.T"),
    "multi-head attention in float32 arithmetic": ("q2",
        "return merge_heads(O) @ W_o.T + b_o", "return (merge_heads(O).float() @ W_o.T.float() + b_o.float()).to(X.dtype)"),
    "multi-head attention answers in bfloat16": ("q2",
        "return merge_heads(O) @ W_o.T + b_o", "return (merge_heads(O) @ W_o.T + b_o).bfloat16()"),
    "mask made additive with -1e9 instead of -inf": ("q2",
        "attnbook.attention(Q, K, V, mask=mask)",
        "attnbook.attention(Q, K, V, mask=None if mask is None else torch.zeros_like(mask, dtype=Q.dtype).masked_fill(~mask, -1e9))"),
    "own attention: softmax subtracts the minimum": ("q2",  # its own attention instead of attnbook.attention
        "O, _ = attnbook.attention(Q, K, V, mask=mask)",
        "S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])\n"
        "    if mask is not None:\n"
        "        S = S.masked_fill(~mask, -math.inf)\n"
        "    e = torch.exp(S - S.amin(dim=-1, keepdim=True).nan_to_num(0.0, neginf=0.0))\n"
        "    O = (e / e.sum(dim=-1, keepdim=True)).nan_to_num(0.0) @ V"),
    # q3: the output projection as a sum over the heads
    "sum over heads with row blocks of W_o": ("q3",  # O^h @ W_o[rows of head h, :]
        "W_h = W_o[:, h * d_head:(h + 1) * d_head]", "W_h = W_o[h * d_head:(h + 1) * d_head, :].T"),
    "sum over heads in the wrong head order": ("q3", "out = out + O[:, h] @ W_h.T", "out = out + O[:, heads - 1 - h] @ W_h.T"),
    "sum over heads averages instead of summing": ("q3", "out = out + O[:, h] @ W_h.T", "out = out + O[:, h] @ W_h.T / heads"),
    "sum over heads forgets the output bias": ("q3", "out = b_o", "out = 0"),
    "sum over heads answers in bfloat16": ("q3", "return out", "return out.bfloat16()"),
    # q4: the student writes the test (test_split_heads); each of these must lose points
    "student test that always fails": ("q4",
        "    got = candidate(X, heads)\n",
        "    assert False, 'not written yet'\n    got = candidate(X, heads)\n"),
    "student test that never calls the function": ("q4",
        "got = candidate(X, heads)",
        "got = X.reshape(batch, n, heads, d_head).transpose(1, 2)"),
    "student test that checks only the shape": ("q4",
        "    for h in range(heads):\n        features = X[:, :, h * d_head : (h + 1) * d_head]  # (batch, n, d_head): the features of head h\n        assert torch.equal(got[:, h], features), f\"head {h} must hold features {h * d_head} to {(h + 1) * d_head - 1}\"\n",
        ""),
    "student test that asserts True": ("q4",
        "    got = candidate(X, heads)\n",
        "    assert True\n    return\n"),
}
