"""Wrong solutions of homework 14 (beyond softmax), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, old, new): the solutions notebook with
``old`` (which occurs exactly once in its code cells) replaced by ``new``
(attngrade.authoring.mutation, edited_submission). None may call the homework's forbidden
references (grading.yml). Two of them move lines (the state read before its update), so their
``old`` spans those lines.
"""

_Q1_LOOP = """\
        S = S + k_t[..., :, None] * v_t[..., None, :]  # S_t = S_{t-1} + k_t^T v_t: (..., d_k, 1) * (..., 1, d_v) -> (..., d_k, d_v)
        z = z + k_t  # z_t = z_{t-1} + k_t: (..., d_k)
        numerator = (q_t[..., None, :] @ S)[..., 0, :]  # q_t S_t: (..., 1, d_k) @ (..., d_k, d_v) -> (..., d_v)
        denominator = (q_t * z).sum(dim=-1, keepdim=True)  # q_t . z_t: (..., 1)
        outputs.append(numerator / denominator)  # (..., d_v)
"""
_Q1_LOOP_OUTPUT_FIRST = """\
        numerator = (q_t[..., None, :] @ S)[..., 0, :]
        denominator = (q_t * z).sum(dim=-1, keepdim=True)
        outputs.append(numerator / denominator)
        S = S + k_t[..., :, None] * v_t[..., None, :]
        z = z + k_t
"""
_Q2_CHUNK = """\
        numerator = Q @ S + A @ V  # (..., C, d_k) @ (..., d_k, d_v) + (..., C, C) @ (..., C, d_v) -> (..., C, d_v)
        denominator = (Q * z[..., None, :]).sum(dim=-1) + A.sum(dim=-1)  # Q_c z + rowsum(A): (..., C)
        outputs.append(numerator / denominator[..., None])  # (..., C, d_v) / (..., C, 1)
        S = S + K.transpose(-2, -1) @ V  # S + K_c^T V_c: (..., d_k, C) @ (..., C, d_v) -> (..., d_k, d_v)
        z = z + K.sum(dim=-2)  # (..., d_k)
"""
_Q2_CHUNK_STATE_FIRST = """\
        S = S + K.transpose(-2, -1) @ V
        z = z + K.sum(dim=-2)
        numerator = Q @ S + A @ V
        denominator = (Q * z[..., None, :]).sum(dim=-1) + A.sum(dim=-1)
        outputs.append(numerator / denominator[..., None])
"""

MUTANTS = {
    # q1: causal linear attention, token by token
    "normaliser missing (q_t S_t alone)": (
        "q1",
        "outputs.append(numerator / denominator)  # (..., d_v)",
        "outputs.append(numerator)",
    ),
    "output read before the update (strictly causal: the state without token t)": (
        "q1",
        _Q1_LOOP,
        _Q1_LOOP_OUTPUT_FIRST,
    ),
    "normaliser over every key (z not causal)": ("q1", "z = z + k_t  # z_t", "z = key.sum(dim=-2)  # z_t"),
    "state replaced, not accumulated (S_t = k_t^T v_t)": (
        "q1",
        "S = S + k_t[..., :, None] * v_t[..., None, :]  # S_t",
        "S = k_t[..., :, None] * v_t[..., None, :]  # S_t",
    ),
    "outer product transposed (v_t^T k_t, fits only when d_k = d_v)": (
        "q1",
        "S = S + k_t[..., :, None] * v_t[..., None, :]  # S_t",
        "S = S + v_t[..., :, None] * k_t[..., None, :]  # S_t",
    ),
    # q2: chunk by chunk
    "chunkwise: normaliser missing": (
        "q2",
        "outputs.append(numerator / denominator[..., None])  # (..., C, d_v) / (..., C, 1)",
        "outputs.append(numerator)",
    ),
    "chunkwise: no causal mask inside a chunk (the quadratic part unmasked)": (
        "q2",
        "A = (Q @ K.transpose(-2, -1)).masked_fill(~keep, 0.0)  # Q_c K_c^T",
        "A = (Q @ K.transpose(-2, -1))  # Q_c K_c^T",
    ),
    "chunkwise: the chunk's mask without its diagonal (strictly causal)": (
        "q2",
        "keep = torch.ones(C, C, dtype=torch.bool, device=query.device).tril()  # (C, C): key j <= query i in the chunk",
        "keep = torch.ones(C, C, dtype=torch.bool, device=query.device).tril(-1)",
    ),
    "chunkwise: the chunk's mask transposed (upper triangular)": (
        "q2",
        "keep = torch.ones(C, C, dtype=torch.bool, device=query.device).tril()  # (C, C): key j <= query i in the chunk",
        "keep = torch.ones(C, C, dtype=torch.bool, device=query.device).triu()",
    ),
    "chunkwise: the mask sized chunk_size on the shorter last chunk": (
        "q2",
        "keep = torch.ones(C, C, dtype=torch.bool, device=query.device).tril()  # (C, C): key j <= query i in the chunk",
        "keep = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=query.device).tril()",
    ),
    "chunkwise: denominator without the earlier chunks (no Q_c z)": (
        "q2",
        "denominator = (Q * z[..., None, :]).sum(dim=-1) + A.sum(dim=-1)  # Q_c z + rowsum(A): (..., C)",
        "denominator = A.sum(dim=-1)",
    ),
    "chunkwise: state updated before the chunk's output (its tokens counted twice)": (
        "q2",
        _Q2_CHUNK,
        _Q2_CHUNK_STATE_FIRST,
    ),
    "chunkwise: state replaced by the last chunk's K^T V": (
        "q2",
        "S = S + K.transpose(-2, -1) @ V  # S + K_c^T V_c",
        "S = K.transpose(-2, -1) @ V  # S + K_c^T V_c",
    ),
    "chunkwise: chunk boundary off by one (the state takes the next chunk's first token)": (
        "q2",
        "S = S + K.transpose(-2, -1) @ V  # S + K_c^T V_c",
        "S = S + key[..., start:end + 1, :].transpose(-2, -1) @ value[..., start:end + 1, :]  # S + K_c^T V_c",
    ),
    "chunkwise: chunk boundary off by one (chunks overlap by a token)": (
        "q2",
        "end = min(start + chunk_size, n)  # the last chunk may be shorter",
        "end = min(start + chunk_size + 1, n)",
    ),
    "chunkwise: the last, shorter chunk dropped": (
        "q2",
        "for start in range(0, n, chunk_size):",
        "for start in range(0, n - n % chunk_size, chunk_size):",
    ),
    # q3: one step of the delta rule
    "delta rule with the sign flipped (a step up the gradient)": (
        "q3",
        "new_state = state - beta[..., None, None] * gradient",
        "new_state = state + beta[..., None, None] * gradient",
    ),
    "delta rule without beta": (
        "q3",
        "new_state = state - beta[..., None, None] * gradient",
        "new_state = state - gradient",
    ),
    "delta rule with beta on the erasing term only": (
        "q3",
        "new_state = state - beta[..., None, None] * gradient",
        "new_state = state - beta[..., None, None] * key[..., :, None] * prediction[..., None, :] + key[..., :, None] * value[..., None, :]",
    ),
    "delta rule with beta on the writing term only": (
        "q3",
        "new_state = state - beta[..., None, None] * gradient",
        "new_state = state - key[..., :, None] * prediction[..., None, :] + beta[..., None, None] * key[..., :, None] * value[..., None, :]",
    ),
    "delta rule with k k^T (the number |k|^2) for k^T k": (
        "q3",
        "new_state = state - beta[..., None, None] * gradient",
        "new_state = state - beta[..., None, None] * ((key * key).sum(-1)[..., None, None] * state - key[..., :, None] * value[..., None, :])",
    ),
    "delta rule reads S k^T (column convention, fits only when d_k = d_v)": (
        "q3",
        "prediction = (key[..., None, :] @ state)[..., 0, :]",
        "prediction = (state @ key[..., :, None])[..., :, 0]",
    ),
    "delta rule with the outer product transposed (fits only when d_k = d_v)": (
        "q3",
        "gradient = key[..., :, None] * error[..., None, :]",
        "gradient = error[..., :, None] * key[..., None, :]",
    ),
    "delta rule output from the old state": (
        "q3",
        "output = (query[..., None, :] @ new_state)[..., 0, :]",
        "output = (query[..., None, :] @ state)[..., 0, :]",
    ),
    "delta rule updates the state in place": (
        "q3",
        "new_state = state - beta[..., None, None] * gradient",
        "new_state = state.sub_(beta[..., None, None] * gradient)",
    ),
    "delta rule in float64 whatever the inputs (dtype)": (
        "q3",
        "new_state = state - beta[..., None, None] * gradient",
        "new_state = state - beta.double()[..., None, None] * gradient",
    ),
    # q4: the decay mask in log space
    "decay mask from products of gates in linear space (cumprod ratios underflow)": (
        "q4",
        "sums = x.masked_fill(~later, 0.0).cumsum(dim=-2)",
        "sums = torch.log(log_gates.exp().cumprod(-1)[..., :, None] / log_gates.exp().cumprod(-1)[..., None, :])",
    ),
    "decay at the wrong index: a_j included (diagonal log a_i, not 0)": (
        "q4",
        "later = torch.ones(n, n, dtype=torch.bool, device=log_gates.device).tril(-1)",
        "later = torch.ones(n, n, dtype=torch.bool, device=log_gates.device).tril()",
    ),
    "decay at the wrong index: a_j in, a_i out (exclusive prefix sums)": (
        "q4",
        "sums = x.masked_fill(~later, 0.0).cumsum(dim=-2)",
        "sums = (log_gates.cumsum(-1) - log_gates)[..., :, None] - (log_gates.cumsum(-1) - log_gates)[..., None, :]",
    ),
    "decay applied twice (each log gate counted twice)": (
        "q4",
        "sums = x.masked_fill(~later, 0.0).cumsum(dim=-2)",
        "sums = 2 * x.masked_fill(~later, 0.0).cumsum(dim=-2)",
    ),
    "segment sums along the wrong axis (cumsum over the keys)": (
        "q4",
        "sums = x.masked_fill(~later, 0.0).cumsum(dim=-2)",
        "sums = x.masked_fill(~later, 0.0).cumsum(dim=-1)",
    ),
    "0 above the diagonal instead of -inf": (
        "q4",
        "return sums.masked_fill(~keep, -math.inf)",
        "return sums.masked_fill(~keep, 0.0)",
    ),
    "-1e9 above the diagonal instead of -inf": (
        "q4",
        "return sums.masked_fill(~keep, -math.inf)",
        "return sums.masked_fill(~keep, -1e9)",
    ),
    "-inf on the diagonal too (the mask without its diagonal)": (
        "q4",
        "keep = torch.ones(n, n, dtype=torch.bool, device=log_gates.device).tril()",
        "keep = torch.ones(n, n, dtype=torch.bool, device=log_gates.device).tril(-1)",
    ),
    "decay mask transposed": (
        "q4",
        "return sums.masked_fill(~keep, -math.inf)",
        "return sums.masked_fill(~keep, -math.inf).transpose(-2, -1)",
    ),
    "decay mask in float64 whatever the gates (dtype)": (
        "q4",
        "x = log_gates[..., :, None].expand(*log_gates.shape, n)",
        "x = log_gates.double()[..., :, None].expand(*log_gates.shape, n)",
    ),
}
