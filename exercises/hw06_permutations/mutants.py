"""Wrong solutions of homework 6 (permutation properties), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, {function name: wrong definition}).
"""

_DEFECT = '''
def equivariance_defect(X, W_q, W_k, W_v, perm, causal):
    mask = attnbook.causal_mask(X.shape[0]) if causal else None

    def f(Y):
        return attnbook.attention(Y @ W_q, Y @ W_k, Y @ W_v, mask=mask)[0]

    return (f(X[perm]) - f(X)[perm]).abs().max()
'''

MUTANTS = {
    "permutation matrix transposed (the inverse)": ("q1", {"perm_matrix": '''
def perm_matrix(perm):
    return torch.eye(perm.shape[0], dtype=torch.float64)[perm].T
'''}),
    "permutation matrix in float32": ("q1", {"perm_matrix": '''
def perm_matrix(perm):
    return torch.eye(perm.shape[0])[perm]
'''}),
    "inverse is the permutation itself": ("q2", {"inverse_permutation": '''
def inverse_permutation(perm):
    return perm.clone()
'''}),
    "inverse off by one": ("q2", {"inverse_permutation": '''
def inverse_permutation(perm):
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(1, perm.shape[0] + 1) % perm.shape[0]
    return inv
'''}),
    "keys reordered but not values": ("q3", {"reordered_attention": '''
def reordered_attention(Q, K, V, perm_q, perm_kv):
    return attnbook.attention(Q[perm_q], K[perm_kv], V)[0]
'''}),
    "queries reordered by the inverse": ("q3", {"reordered_attention": '''
def reordered_attention(Q, K, V, perm_q, perm_kv):
    inv = torch.argsort(perm_q)
    return attnbook.attention(Q[inv], K[perm_kv], V[perm_kv])[0]
'''}),
    "defect without undoing the permutation": ("q4", {"equivariance_defect": _DEFECT.replace("f(X)[perm]", "f(X)")}),
    "defect with the mask reordered too": ("q4", {"equivariance_defect": _DEFECT.replace(
        "return (f(X[perm]) - f(X)[perm]).abs().max()",
        "g = (lambda Y: attnbook.attention(Y @ W_q, Y @ W_k, Y @ W_v, mask=None if mask is None else mask[perm][:, perm])[0])\n"
        "    return (g(X[perm]) - f(X)[perm]).abs().max()")}),
    "defect ignores the mask": ("q4", {"equivariance_defect": _DEFECT.replace("if causal else None", "if False else None")}),
    "defect permutes on the wrong side": ("q4", {"equivariance_defect": _DEFECT.replace("f(X)[perm]", "f(X)[torch.argsort(perm)]")}),
}
