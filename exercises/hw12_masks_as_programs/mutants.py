"""Wrong solutions of homework 12 (masks as programs), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, old, new): the solutions notebook with
``old`` (which occurs exactly once in its code cells) replaced by ``new``
(tests/submissions.py, edited_submission). None may call the homework's forbidden references
(grading.yml).
"""

MUTANTS = {
    # q1: the document mask from cu_seqlens
    "document boundary off by one (a document's first token sees its neighbour's last)": ("q1",
        "(i[:, None] >= offsets[None, 1:])", "(i[:, None] > offsets[None, 1:])"),
    "document boundary off by one (a document's last token belongs to the next)": ("q1",
        "(i[:, None] >= offsets[None, 1:])", "(i[:, None] + 1 >= offsets[None, 1:])"),
    "document mask not causal inside a document": ("q1",
        "return same & (i[None, :] <= i[:, None])", "return same"),
    "document mask lets the padding attend (padding as one more document)": ("q1",
        "same = (doc[:, None] == doc[None, :]) & real[:, None] & real[None, :]", "same = doc[:, None] == doc[None, :]"),
    "document mask ignores the documents (plain causal)": ("q1",
        "return same & (i[None, :] <= i[:, None])", "return (i[None, :] <= i[:, None]) & real[:, None] & real[None, :]"),
    "document mask with the wrong polarity": ("q1",
        "return same & (i[None, :] <= i[:, None])", "return ~(same & (i[None, :] <= i[:, None]))"),
    "document mask transposed": ("q1", "(i[None, :] <= i[:, None])  # (n, n): and causal", "(i[None, :] >= i[:, None])"),
    "document mask as integers": ("q1",
        "return same & (i[None, :] <= i[:, None])", "return (same & (i[None, :] <= i[:, None])).int()"),
    "document mask sized by cu_seqlens[-1], ignoring the padding": ("q1",
        "i = torch.arange(n, device=cu_seqlens.device)  # (n,) token positions",
        "i = torch.arange(int(cu_seqlens[-1]), device=cu_seqlens.device)"),
    # q2: positions that restart
    "positions not restarted (0..n-1 across the row)": ("q2",
        "return torch.arange(int(offsets[-1]), device=cu_seqlens.device) - starts  # (n,)",
        "return torch.arange(int(offsets[-1]), device=cu_seqlens.device)"),
    "positions counted from 1 (off by one)": ("q2", "- starts  # (n,)", "- starts + 1  # (n,)"),
    "positions off by one at a boundary (searchsorted with right=False)": ("q2",
        "starts = offsets[:-1].repeat_interleave(lengths)  # (n,): c_d of each token's document",
        "starts = offsets[torch.searchsorted(offsets, torch.arange(int(offsets[-1]))) - 1]"),
    "positions in int32 like cu_seqlens (dtype)": ("q2",
        "return torch.arange(int(offsets[-1]), device=cu_seqlens.device) - starts  # (n,)",
        "return (torch.arange(int(offsets[-1]), device=cu_seqlens.device) - starts).to(cu_seqlens.dtype)"),
    "positions as floats": ("q2",
        "return torch.arange(int(offsets[-1]), device=cu_seqlens.device) - starts  # (n,)",
        "return (torch.arange(int(offsets[-1]), device=cu_seqlens.device) - starts).float()"),
    # q3: prefix-LM as a mask_mod
    "prefix one token too long (kv_idx <= prefix_length, off by one)": ("q3",
        "(kv_idx < prefix_length)", "(kv_idx <= prefix_length)"),
    "prefix one token too short (off by one)": ("q3", "(kv_idx < prefix_length)", "(kv_idx < prefix_length - 1)"),
    "prefix-LM hides the query itself (j < i, off by one)": ("q3", "(kv_idx <= q_idx)", "(kv_idx < q_idx)"),
    "prefix-LM not causal after the prefix": ("q3", "| (kv_idx <= q_idx)", "| (q_idx >= 0)"),
    "prefix-LM ignores the prefix (plain causal)": ("q3",
        "return (kv_idx < prefix_length) | (kv_idx <= q_idx)", "return (kv_idx >= 0) & (kv_idx <= q_idx)"),
    "prefix-LM with the wrong polarity": ("q3",
        "return (kv_idx < prefix_length) | (kv_idx <= q_idx)", "return ~((kv_idx < prefix_length) | (kv_idx <= q_idx))"),
    "prefix-LM with q_idx and kv_idx swapped (transposed)": ("q3",
        "return (kv_idx < prefix_length) | (kv_idx <= q_idx)", "return (q_idx < prefix_length) | (q_idx <= kv_idx)"),
    "prefix-LM with Python's or (works on scalars only)": ("q3",
        "return (kv_idx < prefix_length) | (kv_idx <= q_idx)", "return (kv_idx < prefix_length) or (kv_idx <= q_idx)"),
    "prefix-LM mask as integers": ("q3",
        "return (kv_idx < prefix_length) | (kv_idx <= q_idx)", "return ((kv_idx < prefix_length) | (kv_idx <= q_idx)).int()"),
    # q4: soft-capping as a score_mod
    "softcap without the tanh": ("q4", "return cap * torch.tanh(score / cap)", "return score"),
    "softcap with the cap outside only (cap tanh(s))": ("q4", "return cap * torch.tanh(score / cap)", "return cap * torch.tanh(score)"),
    "softcap with the cap inside only (tanh(s / cap))": ("q4", "return cap * torch.tanh(score / cap)", "return torch.tanh(score / cap)"),
    "softcap with the cap on the wrong side (tanh(s cap) / cap)": ("q4",
        "return cap * torch.tanh(score / cap)", "return torch.tanh(score * cap) / cap"),
    "softcap as a hard clamp": ("q4", "return cap * torch.tanh(score / cap)", "return score.clamp(-cap, cap)"),
    "softcap returns float64 for float32 scores": ("q4",
        "return cap * torch.tanh(score / cap)", "return cap * torch.tanh(score.double() / cap)"),
    "softcap with math.tanh (fails on tensors)": ("q4", "return cap * torch.tanh(score / cap)", "return cap * math.tanh(score / cap)"),
    "softcap squares the cap (cap * cap * tanh(s / cap))": ("q4",
        "return cap * torch.tanh(score / cap)", "return cap * cap * torch.tanh(score / cap)"),
}
