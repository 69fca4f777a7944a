"""Wrong solutions of homework 6 (permutation properties), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, old, new): the solutions notebook with
``old`` (a piece of the solution code that occurs exactly once in its code cells) replaced by
``new`` (tests/submissions.py, edited_submission). Each is the one mistake its name says; none may
call the homework's forbidden references (grading.yml; attnbook.attention stays allowed here).
Where the mistake is in a softmax written by hand, the edit computes the scores with
attnbook.attention_scores and writes the softmax out in place of attnbook.attention.
"""

# softmax written by hand, the ways students get it wrong
_NAIVE = "torch.exp(S) / torch.exp(S).sum(dim=-1, keepdim=True)"
_MIN = "torch.exp(S - S.amin(dim=-1, keepdim=True)) / torch.exp(S - S.amin(dim=-1, keepdim=True)).sum(dim=-1, keepdim=True)"


MUTANTS = {
    # q1: the permutation matrix
    "permutation matrix transposed (the inverse)": ("q1",
        "torch.eye(n, dtype=torch.float64)[perm]", "torch.eye(n, dtype=torch.float64)[perm].T"),
    "permutation matrix in float32": ("q1", "torch.eye(n, dtype=torch.float64)", "torch.eye(n)"),
    "permutation matrix from a scatter that unsqueezes perm in place": ("q1",
        "return torch.eye(n, dtype=torch.float64)[perm]",
        "return torch.zeros(n, n, dtype=torch.float64).scatter_(1, perm.unsqueeze_(1), 1.0)"),
    # q2: the inverse permutation
    "inverse is the permutation itself": ("q2", "return inv", "return perm.clone()"),
    "inverse off by one": ("q2", "torch.arange(perm.shape[0])", "torch.arange(1, perm.shape[0] + 1) % perm.shape[0]"),
    "inverse as floats (read off P^T @ arange in float)": ("q2", "return inv", "return inv.double()"),
    "inverse as int32": ("q2", "dtype=torch.int64", "dtype=torch.int32"),
    "inverse written into perm (in place)": ("q2",
        "inv = torch.empty_like(perm, dtype=torch.int64)", "inv, perm = perm, perm.clone()"),
    # q3: reordered attention
    "keys reordered but not values": ("q3",
        "attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])",
        "attnbook.attention(Q[perm_q], K[perm_kv], V)"),
    "values reordered but not keys": ("q3",
        "attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])",
        "attnbook.attention(Q[perm_q], K, V[perm_kv])"),
    "queries reordered by the inverse": ("q3",
        "attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])",
        "attnbook.attention(Q[torch.argsort(perm_q)], K[perm_kv], V[perm_kv])"),
    "queries not reordered": ("q3",
        "attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])",
        "attnbook.attention(Q, K[perm_kv], V[perm_kv])"),
    "own softmax without subtracting the maximum (overflows)": ("q3",
        "out, _ = attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])",
        "S = attnbook.attention_scores(Q[perm_q], K[perm_kv])\n"
        f"    out = {_NAIVE} @ V[perm_kv]"),
    "own stable softmax subtracting the minimum": ("q3",
        "out, _ = attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])",
        "S = attnbook.attention_scores(Q[perm_q], K[perm_kv])\n"
        f"    out = {_MIN} @ V[perm_kv]"),
    "attention without 1/sqrt(d) (scale=1)": ("q3",
        "attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])",
        "attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv], scale=1.0)"),
    "float32 arithmetic on float64 inputs": ("q3",
        "out, _ = attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])",
        "out = attnbook.attention(Q[perm_q].float(), K[perm_kv].float(), V[perm_kv].float())[0].to(Q.dtype)"),
    "answer in bfloat16": ("q3", "return out", "return out.bfloat16()"),
    "bfloat16 arithmetic, cast back": ("q3",
        "out, _ = attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])",
        "out = attnbook.attention(Q[perm_q].bfloat16(), K[perm_kv].bfloat16(), V[perm_kv].bfloat16())[0].to(Q.dtype)"),
    "queries reordered in place": ("q3",
        "out, _ = attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])",
        "out, _ = attnbook.attention(Q.copy_(Q[perm_q]), K[perm_kv], V[perm_kv])"),
    # q4: the equivariance defect
    "defect without undoing the permutation": ("q4", "- f(X)[perm])", "- f(X))"),
    "defect with the mask reordered too": ("q4",  # for the permuted input only
        "return (f(X[perm]) - f(X)[perm]).abs().max()",
        "g = (lambda Y: attnbook.attention(Y @ W_q, Y @ W_k, Y @ W_v, mask=None if mask is None else mask[perm][:, perm])[0])\n"
        "    return (g(X[perm]) - f(X)[perm]).abs().max()"),
    "defect ignores the mask": ("q4", "mask=mask)", "mask=None)"),
    "defect permutes on the wrong side": ("q4", "- f(X)[perm])", "- f(X)[torch.argsort(perm)])"),
    "defect without the absolute value": ("q4", ".abs().max()", ".max()"),
    "defect with -1e9 instead of -inf (float mask)": ("q4", "mask=mask)",
        "mask=None if mask is None else torch.zeros(mask.shape, dtype=Y.dtype, device=Y.device).masked_fill(~mask, -1e9))"),
    "defect with fully masked rows left as nan": ("q4",
        "return attnbook.attention(Y @ W_q, Y @ W_k, Y @ W_v, mask=mask)[0]",
        "S = attnbook.apply_mask(attnbook.attention_scores(Y @ W_q, Y @ W_k), mask)\n"
        "        return torch.softmax(S, dim=-1) @ (Y @ W_v)"),
    "defect with own softmax without subtracting the maximum (overflows)": ("q4",
        "return attnbook.attention(Y @ W_q, Y @ W_k, Y @ W_v, mask=mask)[0]",
        "S = attnbook.apply_mask(attnbook.attention_scores(Y @ W_q, Y @ W_k), mask)\n"
        f"        A = {_NAIVE}\n"
        "        return A.masked_fill(torch.isneginf(S).all(dim=-1, keepdim=True), 0.0) @ (Y @ W_v)"),
    "defect with own stable softmax subtracting the minimum": ("q4",
        "return attnbook.attention(Y @ W_q, Y @ W_k, Y @ W_v, mask=mask)[0]",
        "S = attnbook.apply_mask(attnbook.attention_scores(Y @ W_q, Y @ W_k), mask)\n"
        f"        A = {_MIN}\n"
        "        return A.masked_fill(torch.isneginf(S).all(dim=-1, keepdim=True), 0.0) @ (Y @ W_v)"),
    "defect in float32 arithmetic on float64 inputs": ("q4",
        "return (f(X[perm]) - f(X)[perm]).abs().max()",
        "X, W_q, W_k, W_v = X.float(), W_q.float(), W_k.float(), W_v.float()\n"
        "    return (f(X[perm]) - f(X)[perm]).abs().max().to(torch.float64)"),
    "defect in bfloat16": ("q4", ".abs().max()", ".abs().max().bfloat16()"),
    "defect inverts the mask in place": ("q4",  # once, before f, which undoes it
        "def f(Y):\n"
        "        return attnbook.attention(Y @ W_q, Y @ W_k, Y @ W_v, mask=mask)[0]",
        "blocked = None if mask is None else mask.logical_not_()\n"
        "\n"
        "    def f(Y):\n"
        "        return attnbook.attention(Y @ W_q, Y @ W_k, Y @ W_v, mask=None if blocked is None else ~blocked)[0]"),
}
