"""Wrong solutions of homework 1, each of which the tests must catch (tests/homework/test_mutations.py).

MUTANTS maps a name to (the question that must lose points, old, new): the solutions notebook with
``old`` (a piece of the solution code that occurs exactly once in its code cells) replaced by
``new`` (tests/submissions.py, edited_submission). Each is the one mistake its name says.
"""

MUTANTS = {
    # q1: softmax with an inverse temperature
    "softmax without the max shift (overflows)": ("q1", "e = torch.exp(s - shift)", "e = torch.exp(s)"),
    "beta divides instead of multiplying": ("q1",
        "s = torch.where(s == -math.inf, s, s * beta)", "s = torch.where(s == -math.inf, s, s / beta)"),
    "beta ignored": ("q1", "if beta != 1:", "if False:"),
    "softmax over the first axis": ("q1",  # both reductions over dim 0 (lines 1 and 4 of the softmax)
        "shift = s.amax(dim=-1, keepdim=True)  # (..., 1)\n"
        "    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))\n"
        "    e = torch.exp(s - shift)  # (..., T)\n"
        "    total = e.sum(dim=-1, keepdim=True)",
        "shift = s.amax(dim=0, keepdim=True)  # (..., 1)\n"
        "    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))\n"
        "    e = torch.exp(s - shift)  # (..., T)\n"
        "    total = e.sum(dim=0, keepdim=True)"),
    "fully masked slice gives nan (0 / 0)": ("q1",
        "return e / torch.where(total > 0, total, torch.ones_like(total))", "return e / total"),
    "softmax subtracts the minimum instead of the maximum": ("q1", "shift = s.amax(", "shift = s.amin("),
    "softmax shifts the scores in place": ("q1", "e = torch.exp(s - shift)", "e = torch.exp(s.sub_(shift))"),
    "softmax in float32 arithmetic": ("q1", "e = torch.exp(s - shift)", "e = torch.exp((s - shift).float()).to(s.dtype)"),
    "softmax answers in bfloat16": ("q1",
        "return e / torch.where(total > 0, total, torch.ones_like(total))",
        "return (e / torch.where(total > 0, total, torch.ones_like(total))).bfloat16()"),
    # q2: the projections
    "key bias forgotten": ("q2", "K = W_k @ z + b_k[:, None]", "K = W_k @ z"),
    "keys as rows": ("q2", "K = W_k @ z + b_k[:, None]", "K = (W_k @ z + b_k[:, None]).T"),
    "bias added along the wrong axis": ("q2",  # b_k[None, :] broadcasts only when K is square
        "K = W_k @ z + b_k[:, None]", "K = W_k @ z + (b_k[None, :] if W_k.shape[0] == z.shape[1] else b_k[:, None])"),
    "query bias forgotten in project": ("q2", "q = W_q @ x + b_q", "q = W_q @ x"),
    "key bias unsqueezed in place": ("q2", "K = W_k @ z + b_k[:, None]", "K = W_k @ z + b_k.unsqueeze_(1)"),
    # q3: single-query attention
    "missing 1/sqrt(d_attn)": ("q3", "a = softmax_beta(K.T @ q / math.sqrt(q.shape[0]))", "a = softmax_beta(K.T @ q)"),
    "scaled by sqrt(d_x) instead of sqrt(d_attn)": ("q3", "/ math.sqrt(q.shape[0])", "/ math.sqrt(x.shape[0])"),
    "query bias forgotten": ("q3",
        "q, K, V = project(x, z, W_q, b_q, W_k, b_k, W_v, b_v)", "q, K, V = project(x, z, W_q, torch.zeros_like(b_q), W_k, b_k, W_v, b_v)"),
    "value bias forgotten": ("q3",
        "q, K, V = project(x, z, W_q, b_q, W_k, b_k, W_v, b_v)", "q, K, V = project(x, z, W_q, b_q, W_k, b_k, W_v, torch.zeros_like(b_v))"),
    "keys used as values": ("q3",  # K's first d_out rows, so that the shapes agree
        "return V @ a  # (d_out, T) @ (T,) -> (d_out,)",
        "return (K @ a)[: V.shape[0]] if K.shape[0] >= V.shape[0] else V @ a * 0"),
    "single-query attention in float32 arithmetic": ("q3",
        "a = softmax_beta(K.T @ q / math.sqrt(q.shape[0]))",
        "a = softmax_beta(K.float().T @ q.float() / math.sqrt(q.shape[0])).to(q.dtype)"),
    "single-query attention: softmax subtracts the minimum": ("q3",  # its own softmax instead of softmax_beta
        "a = softmax_beta(K.T @ q / math.sqrt(q.shape[0]))",
        "s = K.T @ q / math.sqrt(q.shape[0])\n"
        "    e = torch.exp(s - s.min())\n"
        "    a = e / e.sum()"),
    "single-query attention answers in bfloat16": ("q3",
        "return V @ a  # (d_out, T) @ (T,) -> (d_out,)", "return (V @ a).bfloat16()"),
    # q4: the mean and variance of the values under the attention weights
    "unweighted variance": ("q4", "var = a @ (V - mean) ** 2", "var = ((V - mean) ** 2).mean(dim=0)"),
    "second moment instead of variance": ("q4", "var = a @ (V - mean) ** 2", "var = a @ V ** 2"),
    "moments without 1/sqrt(d_k)": ("q4", "a = softmax_beta(K @ q / math.sqrt(q.shape[-1]))", "a = softmax_beta(K @ q)"),
    "moments centre the values in place": ("q4", "var = a @ (V - mean) ** 2", "var = a @ V.sub_(mean) ** 2"),
    "moments in float32 arithmetic": ("q4",
        "a = softmax_beta(K @ q / math.sqrt(q.shape[-1]))",
        "a = softmax_beta(K.float() @ q.float() / math.sqrt(q.shape[-1])).to(V.dtype)"),
    # q5: retrieval from an associative memory
    "retrieve scaled by 1/sqrt(d)": ("q5",
        "a = softmax_beta(K.T @ q, beta=beta)", "a = softmax_beta(K.T @ q / math.sqrt(q.shape[0]), beta=beta)"),
    "retrieve ignores beta": ("q5", "a = softmax_beta(K.T @ q, beta=beta)", "a = softmax_beta(K.T @ q)"),
    "retrieve with an argmax (hard lookup)": ("q5", "return V @ a  # (d'', t)", "return V[:, torch.argmax(a)]  # (d'', t)"),
    "retrieve scales the query in place": ("q5", "a = softmax_beta(K.T @ q, beta=beta)", "a = softmax_beta(K.T @ q.mul_(beta))"),
    "retrieve: softmax subtracts the minimum": ("q5",  # its own softmax instead of softmax_beta
        "a = softmax_beta(K.T @ q, beta=beta)",
        "s = beta * (K.T @ q)\n"
        "    e = torch.exp(s - s.min())\n"
        "    a = e / e.sum()"),
}
