"""Wrong solutions of homework 9 (attention in modern models), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, old, new): the solutions notebook with
``old`` (which occurs exactly once in its code cells) replaced by ``new``
(tests/submissions.py, edited_submission). None may call the homework's forbidden references
(grading.yml).
"""

MUTANTS = {
    # q1: rotary embeddings
    "rope ignores the positions (uses 0..n-1)": ("q1",
        "angle = positions.to(torch.float64)[..., None] * omega",
        "angle = torch.arange(x.shape[-2], dtype=torch.float64, device=x.device)[:, None] * omega"),
    "rope frequency j/d instead of 2j/d": ("q1", "omega = base ** (-2.0 * j / d)", "omega = base ** (-j / d)"),
    "rope pairs split halves (x[j], x[j + d/2]) instead of neighbours": ("q1",
        "even, odd = x[..., 0::2], x[..., 1::2]  # (..., n, d/2) each\n"
        "    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., n, d/2, 2)\n"
        "    return rotated.flatten(-2)  # (..., n, d)",
        "even, odd = x[..., : d // 2], x[..., d // 2 :]\n"
        "    return torch.cat([even * cos - odd * sin, even * sin + odd * cos], dim=-1)"),
    "rope rotates the wrong way (sign of sin)": ("q1",
        "[even * cos - odd * sin, even * sin + odd * cos]", "[even * cos + odd * sin, odd * cos - even * sin]"),
    "rope ignores base (10000 hard-coded)": ("q1", "omega = base ** (", "omega = 10000.0 ** ("),
    "rope frequencies in float32 (torch.arange(0, d, 2) / d)": ("q1",
        "omega = base ** (-2.0 * j / d)", "omega = (base ** (-torch.arange(0, d, 2) / d)).to(x.device)"),
    "rope returns float64 for float32 input": ("q1",
        "cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)", "cos, sin = torch.cos(angle), torch.sin(angle)"),
    "rope positions counted from 1": ("q1", "positions.to(torch.float64)[..., None]", "(positions + 1).to(torch.float64)[..., None]"),
    # q2: grouped-query attention
    "gqa shares key/value heads cyclically (repeat instead of repeat_interleave)": ("q2",
        "key = key.repeat_interleave(group, dim=-3)  # (..., H_kv, m, d_k) -> (..., H_q, m, d_k)\n"
        "    value = value.repeat_interleave(group, dim=-3)",
        "key = torch.cat([key] * group, dim=-3)\n    value = torch.cat([value] * group, dim=-3)"),
    "gqa repeats only the keys the right way, the values cyclically": ("q2",
        "value = value.repeat_interleave(group, dim=-3)", "value = value.repeat(*([1] * (value.ndim - 3)), group, 1, 1)"),
    "gqa missing 1/sqrt(d_k)": ("q2", " / math.sqrt(query.shape[-1])", ""),
    "gqa softmax over the queries": ("q2", "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)"),
    "gqa multi-query special case drops the head axis": ("q2",
        "group = query.shape[-3] // key.shape[-3]  # query heads per key/value head",
        "if key.shape[-3] == 1:  # multi-query: one key/value head, let broadcasting share it\n"
        "        key, value, group = key[..., 0, :, :], value[..., 0, :, :], 1\n"
        "    else:\n"
        "        group = query.shape[-3] // key.shape[-3]"),
    "gqa repeats by H_kv instead of H_q / H_kv": ("q2",
        "group = query.shape[-3] // key.shape[-3]  # query heads per key/value head", "group = key.shape[-3]"),
    "gqa mask polarity inverted": ("q2", "scores.masked_fill(~mask, -math.inf)", "scores.masked_fill(mask, -math.inf)"),
    "gqa ignores the mask": ("q2", "scores = scores.masked_fill(~mask, -math.inf)", "pass"),
    "gqa fills masked scores with -1e9 (a query that sees no key gets the mean of the values)": ("q2",
        "scores.masked_fill(~mask, -math.inf)", "scores.masked_fill(~mask, -1e9)"),
    "gqa leaves nan where a query sees no key": ("q2", "torch.softmax(scores, dim=-1).nan_to_num(0.0)", "torch.softmax(scores, dim=-1)"),
    # q3: sliding-window mask
    "window off by one (window + 1 keys)": ("q3", "(j > i - window)", "(j >= i - window)"),
    "window off by one (window - 1 keys)": ("q3", "(j > i - window)", "(j > i - window + 1)"),
    "window not causal (symmetric band)": ("q3", "return (j <= i) & (j > i - window)", "return (i - j).abs() < window"),
    "window excludes the query itself": ("q3", "(j <= i) & (j > i - window)", "(j < i) & (j > i - window - 1)"),
    "window mask with the wrong polarity": ("q3", "return (j <= i) & (j > i - window)", "return ~((j <= i) & (j > i - window))"),
    "window mask transposed": ("q3", "return (j <= i) & (j > i - window)", "return (i <= j) & (i > j - window)"),
    "window mask as floats": ("q3", "return (j <= i) & (j > i - window)", "return ((j <= i) & (j > i - window)).float()"),
    # q4: ALiBi
    "alibi slopes start at 1 (h instead of h + 1)": ("q4", "-8.0 * (h + 1) / n_heads", "-8.0 * h / n_heads"),
    "alibi slopes without the 8": ("q4", "-8.0 * (h + 1) / n_heads", "-(h + 1) / n_heads"),
    "alibi slopes in float32": ("q4", "h = torch.arange(n_heads, dtype=torch.float64)", "h = torch.arange(n_heads)"),
    "alibi bias with the wrong sign": ("q4", "bias = -slopes[:, None, None] * distance", "bias = slopes[:, None, None] * distance"),
    "alibi bias without the causal -inf": ("q4", "return bias.masked_fill(key_pos > query_pos, -math.inf)", "return bias"),
    "alibi bias fills -1e9": ("q4", "masked_fill(key_pos > query_pos, -math.inf)", "masked_fill(key_pos > query_pos, -1e9)"),
    "alibi bias transposed": ("q4", "return bias.masked_fill(key_pos > query_pos, -math.inf)",
        "return bias.masked_fill(key_pos > query_pos, -math.inf).transpose(-2, -1)"),
    "alibi bias in float64 whatever the slopes' dtype": ("q4",
        "distance = (query_pos - key_pos).to(slopes.dtype)", "distance = (query_pos - key_pos).to(torch.float64)"),
}
