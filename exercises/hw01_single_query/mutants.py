"""Wrong solutions of homework 1, each of which the tests must catch (tests/test_mutations.py).

MUTANTS maps a name to (the question that must lose points, {function name: wrong definition}).
"""

_SOFTMAX = '''
def softmax_beta(s, beta=1.0):
    if beta != 1:
        s = torch.where(s == -math.inf, s, s * beta)
    shift = s.amax(dim=-1, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(s - shift)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))
'''

MUTANTS = {
    "softmax without the max shift (overflows)": ("q1", {"softmax_beta": '''
def softmax_beta(s, beta=1.0):
    e = torch.exp(beta * s)
    return e / e.sum(dim=-1, keepdim=True)
'''}),
    "beta divides instead of multiplying": ("q1", {"softmax_beta": '''
def softmax_beta(s, beta=1.0):
    return torch.softmax(s / beta, dim=-1) if beta else torch.softmax(s, dim=-1)
'''}),
    "beta ignored": ("q1", {"softmax_beta": '''
def softmax_beta(s, beta=1.0):
    return torch.softmax(s, dim=-1)
'''}),
    "softmax over the first axis": ("q1", {"softmax_beta": '''
def softmax_beta(s, beta=1.0):
    return torch.softmax(beta * s, dim=0)
'''}),
    "fully masked slice gives nan (plain torch.softmax)": ("q1", {"softmax_beta": '''
def softmax_beta(s, beta=1.0):
    return torch.softmax(beta * s, dim=-1)
'''}),
    "key bias forgotten": ("q2", {"project": '''
def project(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    return W_q @ x + b_q, W_k @ z, W_v @ z + b_v[:, None]
'''}),
    "keys as rows": ("q2", {"project": '''
def project(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    return W_q @ x + b_q, (W_k @ z + b_k[:, None]).T, W_v @ z + b_v[:, None]
'''}),
    "bias added along the wrong axis": ("q2", {"project": '''
def project(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    K = W_k @ z
    K = K + (b_k[None, :] if K.shape[0] == K.shape[1] else b_k[:, None])
    return W_q @ x + b_q, K, W_v @ z + b_v[:, None]
'''}),
    "missing 1/sqrt(d_attn)": ("q3", {"single_query_attention": '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    q, K, V = project(x, z, W_q, b_q, W_k, b_k, W_v, b_v)
    return V @ softmax_beta(K.T @ q)
'''}),
    "scaled by sqrt(d_x) instead of sqrt(d_attn)": ("q3", {"single_query_attention": '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    q, K, V = project(x, z, W_q, b_q, W_k, b_k, W_v, b_v)
    return V @ softmax_beta(K.T @ q / math.sqrt(x.shape[0]))
'''}),
    "query bias forgotten": ("q3", {"single_query_attention": '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    q, K, V = project(x, z, W_q, torch.zeros_like(b_q), W_k, b_k, W_v, b_v)
    return V @ softmax_beta(K.T @ q / math.sqrt(q.shape[0]))
'''}),
    "value bias forgotten": ("q3", {"single_query_attention": '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    q, K, V = project(x, z, W_q, b_q, W_k, b_k, W_v, b_v)
    V = V - b_v[:, None]
    return V @ softmax_beta(K.T @ q / math.sqrt(q.shape[0]))
'''}),
    "keys used as values": ("q3", {"single_query_attention": '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    q, K, V = project(x, z, W_q, b_q, W_k, b_k, W_v, b_v)
    a = softmax_beta(K.T @ q / math.sqrt(q.shape[0]))
    return (K @ a)[: V.shape[0]] if K.shape[0] >= V.shape[0] else V @ a * 0
'''}),
    "unweighted variance": ("q4", {"attention_moments": '''
def attention_moments(q, K, V):
    a = softmax_beta(K @ q / math.sqrt(q.shape[-1]))
    mean = a @ V
    return mean, ((V - mean) ** 2).mean(dim=0)
'''}),
    "second moment instead of variance": ("q4", {"attention_moments": '''
def attention_moments(q, K, V):
    a = softmax_beta(K @ q / math.sqrt(q.shape[-1]))
    return a @ V, a @ V ** 2
'''}),
    "moments without 1/sqrt(d_k)": ("q4", {"attention_moments": '''
def attention_moments(q, K, V):
    a = softmax_beta(K @ q)
    mean = a @ V
    return mean, a @ (V - mean) ** 2
'''}),
    "retrieve scaled by 1/sqrt(d)": ("q5", {"retrieve": '''
def retrieve(q, K, V, beta):
    return V @ softmax_beta(K.T @ q / math.sqrt(q.shape[0]), beta=beta)
'''}),
    "retrieve ignores beta": ("q5", {"retrieve": '''
def retrieve(q, K, V, beta):
    return V @ softmax_beta(K.T @ q)
'''}),
    "retrieve with an argmax (hard lookup)": ("q5", {"retrieve": '''
def retrieve(q, K, V, beta):
    return V[:, torch.argmax(K.T @ q)]
'''}),

    # wrong solutions the first mutants missed (issue 11): one-line edits of the solution
    "softmax subtracts the minimum instead of the maximum": ("q1", {"softmax_beta": _SOFTMAX.replace("s.amax(", "s.amin(")}),
    "softmax shifts the scores in place": ("q1", {"softmax_beta": _SOFTMAX.replace("e = torch.exp(s - shift)", "s -= shift\n    e = torch.exp(s)")}),
    "softmax in float32 arithmetic": ("q1", {"softmax_beta": _SOFTMAX.replace("e = torch.exp(s - shift)", "e = torch.exp((s - shift).float())").replace(
        "return e / torch.where(total > 0, total, torch.ones_like(total))", "return (e / torch.where(total > 0, total, torch.ones_like(total))).to(s.dtype)")}),
    "softmax answers in bfloat16": ("q1", {"softmax_beta": _SOFTMAX.replace(
        "return e / torch.where(total > 0, total, torch.ones_like(total))", "return (e / torch.where(total > 0, total, torch.ones_like(total))).bfloat16()")}),
    "query bias forgotten in project": ("q2", {"project": '''
def project(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    return W_q @ x, W_k @ z + b_k[:, None], W_v @ z + b_v[:, None]
'''}),
    "key bias unsqueezed in place": ("q2", {"project": '''
def project(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    return W_q @ x + b_q, W_k @ z + b_k.unsqueeze_(1), W_v @ z + b_v[:, None]
'''}),
    "single-query attention in float32 arithmetic": ("q3", {"single_query_attention": '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    q, K, V = project(*(t.float() for t in (x, z, W_q, b_q, W_k, b_k, W_v, b_v)))
    return (V @ softmax_beta(K.T @ q / math.sqrt(q.shape[0]))).to(x.dtype)
'''}),
    "single-query attention: softmax subtracts the minimum": ("q3", {"single_query_attention": '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    q, K, V = project(x, z, W_q, b_q, W_k, b_k, W_v, b_v)
    s = K.T @ q / math.sqrt(q.shape[0])
    e = torch.exp(s - s.min())
    return V @ (e / e.sum())
'''}),
    "single-query attention answers in bfloat16": ("q3", {"single_query_attention": '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    q, K, V = project(x, z, W_q, b_q, W_k, b_k, W_v, b_v)
    return (V @ softmax_beta(K.T @ q / math.sqrt(q.shape[0]))).bfloat16()
'''}),
    "moments centre the values in place": ("q4", {"attention_moments": '''
def attention_moments(q, K, V):
    a = softmax_beta(K @ q / math.sqrt(q.shape[-1]))
    mean = a @ V
    V -= mean
    return mean, a @ V ** 2
'''}),
    "moments in float32 arithmetic": ("q4", {"attention_moments": '''
def attention_moments(q, K, V):
    a = softmax_beta(K.float() @ q.float() / math.sqrt(q.shape[-1]))
    mean = a @ V.float()
    return mean.to(V.dtype), (a @ (V.float() - mean) ** 2).to(V.dtype)
'''}),
    "retrieve scales the query in place": ("q5", {"retrieve": '''
def retrieve(q, K, V, beta):
    q *= beta
    return V @ softmax_beta(K.T @ q)
'''}),
    "retrieve: softmax subtracts the minimum": ("q5", {"retrieve": '''
def retrieve(q, K, V, beta):
    s = beta * (K.T @ q)
    e = torch.exp(s - s.min())
    return V @ (e / e.sum())
'''}),
}
