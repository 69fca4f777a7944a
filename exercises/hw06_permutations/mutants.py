"""Wrong solutions of homework 6 (permutation properties), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, {function name: wrong definition}).
Most are one-line edits of the solution (``str.replace`` on its source); none may call the
homework's forbidden references (grading.yml; attnbook.attention stays allowed here).
"""

_P = '''
def perm_matrix(perm):
    n = perm.shape[0]
    return torch.eye(n, dtype=torch.float64)[perm]
'''
_INV = '''
def inverse_permutation(perm):
    inv = torch.empty_like(perm, dtype=torch.int64)
    inv[perm] = torch.arange(perm.shape[0])
    return inv
'''
_RE = '''
def reordered_attention(Q, K, V, perm_q, perm_kv):
    out, _ = attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])
    return out
'''
# the same, with attention written out (softmax by hand), as many students do
_RE_OWN = '''
def reordered_attention(Q, K, V, perm_q, perm_kv):
    Q, K, V = Q[perm_q], K[perm_kv], V[perm_kv]
    S = Q @ K.T / math.sqrt(Q.shape[-1])
    A = torch.softmax(S, dim=-1)
    return A @ V
'''
_DEFECT = '''
def equivariance_defect(X, W_q, W_k, W_v, perm, mask=None):
    def f(Y):
        return attnbook.attention(Y @ W_q, Y @ W_k, Y @ W_v, mask=mask)[0]

    return (f(X[perm]) - f(X)[perm]).abs().max()
'''
# the same, with attention written out (softmax by hand, -inf fill, fully masked rows set to 0)
_DEFECT_OWN = '''
def equivariance_defect(X, W_q, W_k, W_v, perm, mask=None):
    def f(Y):
        Q, K, V = Y @ W_q, Y @ W_k, Y @ W_v
        S = Q @ K.T / math.sqrt(Q.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask, -math.inf)
        A = torch.softmax(S, dim=-1)
        A = A.masked_fill(torch.isneginf(S).all(dim=-1, keepdim=True), 0.0)
        return A @ V

    return (f(X[perm]) - f(X)[perm]).abs().max()
'''

_NAIVE = "(lambda e: e / e.sum(dim=-1, keepdim=True))(torch.exp(S))"
_MIN = "(lambda e: e / e.sum(dim=-1, keepdim=True))(torch.exp(S - S.amin(dim=-1, keepdim=True)))"


def _one(source: str, old: str, new: str) -> str:
    """``source`` with ``old`` replaced once (it must occur)."""
    assert source.count(old) >= 1, (old, source)
    return source.replace(old, new, 1)


MUTANTS = {
    # q1: the permutation matrix
    "permutation matrix transposed (the inverse)": ("q1", {"perm_matrix": _one(_P, "[perm]", "[perm].T")}),
    "permutation matrix in float32": ("q1", {"perm_matrix": _one(_P, "torch.eye(n, dtype=torch.float64)", "torch.eye(n)")}),
    "permutation matrix from a scatter that unsqueezes perm in place": ("q1", {"perm_matrix": '''
def perm_matrix(perm):
    n = perm.shape[0]
    return torch.zeros(n, n, dtype=torch.float64).scatter_(1, perm.unsqueeze_(1), 1.0)
'''}),
    # q2: the inverse permutation
    "inverse is the permutation itself": ("q2", {"inverse_permutation": '''
def inverse_permutation(perm):
    return perm.clone()
'''}),
    "inverse off by one": ("q2", {"inverse_permutation": _one(_INV, "torch.arange(perm.shape[0])", "torch.arange(1, perm.shape[0] + 1) % perm.shape[0]")}),
    "inverse as floats (read off P^T @ arange in float)": ("q2", {"inverse_permutation": _one(_INV, "return inv", "return inv.double()")}),
    "inverse as int32": ("q2", {"inverse_permutation": _one(_INV, "dtype=torch.int64", "dtype=torch.int32")}),
    "inverse written into perm (in place)": ("q2", {"inverse_permutation": '''
def inverse_permutation(perm):
    perm[perm.clone()] = torch.arange(perm.shape[0])
    return perm
'''}),
    # q3: reordered attention
    "keys reordered but not values": ("q3", {"reordered_attention": _one(_RE, "V[perm_kv]", "V")}),
    "values reordered but not keys": ("q3", {"reordered_attention": _one(_RE, "K[perm_kv]", "K")}),
    "queries reordered by the inverse": ("q3", {"reordered_attention": _one(_RE, "Q[perm_q]", "Q[torch.argsort(perm_q)]")}),
    "queries not reordered": ("q3", {"reordered_attention": _one(_RE, "Q[perm_q]", "Q")}),
    "own softmax without subtracting the maximum (overflows)": ("q3", {"reordered_attention": _one(_RE_OWN, "torch.softmax(S, dim=-1)", _NAIVE)}),
    "own stable softmax subtracting the minimum": ("q3", {"reordered_attention": _one(_RE_OWN, "torch.softmax(S, dim=-1)", _MIN)}),
    "own attention without 1/sqrt(d)": ("q3", {"reordered_attention": _one(_RE_OWN, " / math.sqrt(Q.shape[-1])", "")}),
    "float32 arithmetic on float64 inputs": ("q3", {"reordered_attention": _one(_RE, "return out", "return out.float().to(Q.dtype) if False else attnbook.attention(Q[perm_q].float(), K[perm_kv].float(), V[perm_kv].float())[0].to(Q.dtype)")}),
    "answer in bfloat16": ("q3", {"reordered_attention": _one(_RE, "return out", "return out.bfloat16()")}),
    "bfloat16 arithmetic, cast back": ("q3", {"reordered_attention": _one(_RE, "return out", "return attnbook.attention(Q[perm_q].bfloat16(), K[perm_kv].bfloat16(), V[perm_kv].bfloat16())[0].to(Q.dtype)")}),
    "queries reordered in place": ("q3", {"reordered_attention": _one(_RE, "out, _ = attnbook.attention(Q[perm_q], K[perm_kv], V[perm_kv])",
        "Q[:] = Q[perm_q].clone()\n    out, _ = attnbook.attention(Q, K[perm_kv], V[perm_kv])")}),
    # q4: the equivariance defect
    "defect without undoing the permutation": ("q4", {"equivariance_defect": _one(_DEFECT, "f(X)[perm]", "f(X)")}),
    "defect with the mask reordered too": ("q4", {"equivariance_defect": _one(_DEFECT,
        "return (f(X[perm]) - f(X)[perm]).abs().max()",
        "g = (lambda Y: attnbook.attention(Y @ W_q, Y @ W_k, Y @ W_v, mask=None if mask is None else mask[perm][:, perm])[0])\n"
        "    return (g(X[perm]) - f(X)[perm]).abs().max()")}),
    "defect ignores the mask": ("q4", {"equivariance_defect": _one(_DEFECT, "mask=mask", "mask=None")}),
    "defect permutes on the wrong side": ("q4", {"equivariance_defect": _one(_DEFECT, "f(X)[perm]", "f(X)[torch.argsort(perm)]")}),
    "defect without the absolute value": ("q4", {"equivariance_defect": _one(_DEFECT, ".abs().max()", ".max()")}),
    "defect with -1e9 instead of -inf (float mask)": ("q4", {"equivariance_defect": _one(_DEFECT,
        "mask=mask)", "mask=None if mask is None else torch.zeros(mask.shape, dtype=Y.dtype).masked_fill(~mask, -1e9))")}),
    "defect with fully masked rows left as nan": ("q4", {"equivariance_defect": _one(_DEFECT_OWN,
        "        A = A.masked_fill(torch.isneginf(S).all(dim=-1, keepdim=True), 0.0)\n", "")}),
    "defect with own softmax without subtracting the maximum (overflows)": ("q4", {"equivariance_defect": _one(_DEFECT_OWN,
        "torch.softmax(S, dim=-1)", _NAIVE)}),
    "defect with own stable softmax subtracting the minimum": ("q4", {"equivariance_defect": _one(_DEFECT_OWN,
        "torch.softmax(S, dim=-1)", _MIN)}),
    "defect in float32 arithmetic on float64 inputs": ("q4", {"equivariance_defect": _one(_DEFECT,
        "return (f(X[perm]) - f(X)[perm]).abs().max()",
        "X, W_q, W_k, W_v = X.float(), W_q.float(), W_k.float(), W_v.float()\n    return (f(X[perm]) - f(X)[perm]).abs().max().to(torch.float64)")}),
    "defect in bfloat16": ("q4", {"equivariance_defect": _one(_DEFECT, ".abs().max()", ".abs().max().bfloat16()")}),
    "defect inverts the mask in place": ("q4", {"equivariance_defect": _one(_DEFECT,
        "    def f(Y):", "    blocked = None if mask is None else mask.logical_not_()\n\n    def f(Y):").replace("mask=mask)", "mask=None if blocked is None else ~blocked)")}),
}
