"""Wrong solutions of homework 2 (masks), each of which the tests must catch (tests/homework/test_mutations.py).

MUTANTS maps a name to (the question that must lose points, old, new): the solutions notebook with
``old`` (a piece of the solution code that occurs exactly once in its code cells) replaced by
``new`` (tests/submissions.py, edited_submission). Each is the one mistake its name says.
"""

MUTANTS = {
    # q1: the causal mask
    "causal mask off by one (j < i)": ("q1", "return j <= i", "return j < i"),
    "causal mask transposed (upper triangular)": ("q1", "return j <= i", "return j >= i"),
    "causal mask with the wrong polarity (a block-mask)": ("q1", "return j <= i", "return j > i"),
    "float causal mask where bool asked": ("q1", "return j <= i", "return (j <= i).float()"),
    "causal mask aligned lower-right": ("q1", "return j <= i", "return j <= i + (m - n)"),
    # q2: the padding mask
    "padding mask off by one": ("q2",
        "positions.unsqueeze(0) < lengths.unsqueeze(-1)", "positions.unsqueeze(0) <= lengths.unsqueeze(-1)"),
    "padding mask polarity": ("q2",
        "positions.unsqueeze(0) < lengths.unsqueeze(-1)", "positions.unsqueeze(0) >= lengths.unsqueeze(-1)"),
    "padding mask unsqueezes lengths in place": ("q2", "lengths.unsqueeze(-1)", "lengths.unsqueeze_(-1)"),
    # q3: masked attention
    "attention missing 1/sqrt(d_k)": ("q3", " / math.sqrt(Q.shape[-1])", ""),
    "attention softmax over the queries": ("q3",  # both reductions over dim -2 (lines 1 and 4 of the softmax)
        "shift = S.amax(dim=-1, keepdim=True)\n"
        "    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))\n"
        "    e = torch.exp(S - shift)  # (..., n, m)\n"
        "    total = e.sum(dim=-1, keepdim=True)",
        "shift = S.amax(dim=-2, keepdim=True)\n"
        "    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))\n"
        "    e = torch.exp(S - shift)  # (..., n, m)\n"
        "    total = e.sum(dim=-2, keepdim=True)"),
    "attention mask transposed": ("q3",  # only a square mask can be transposed without a shape error
        "S = S.masked_fill(~mask, -math.inf)",
        "S = S.masked_fill(~mask.transpose(-2, -1) if mask.shape[-1] == mask.shape[-2] else ~mask, -math.inf)"),
    "attention mask polarity inverted": ("q3", "S = S.masked_fill(~mask, -math.inf)", "S = S.masked_fill(mask, -math.inf)"),
    "attention fills -1e9 (fully masked rows become uniform)": ("q3",
        "S = S.masked_fill(~mask, -math.inf)", "S = S.masked_fill(~mask, -1e9)"),
    "attention fills torch.finfo(dtype).min (fully masked rows become uniform)": ("q3",
        "S = S.masked_fill(~mask, -math.inf)", "S = S.masked_fill(~mask, torch.finfo(S.dtype).min)"),
    "bool mask added as a float mask": ("q3", "S = S.masked_fill(~mask, -math.inf)", "S = S + mask.to(S.dtype)"),
    "fully masked rows give nan": ("q3",
        "weights = e / torch.where(total > 0, total, torch.ones_like(total))", "weights = e / total"),
    "softmax subtracts the minimum instead of the maximum": ("q3", "shift = S.amax(", "shift = S.amin("),
    # the shift of a fully masked row read from uninitialised memory: wrong where that memory holds nan
    # or -inf, right where it holds a finite number; every grader fills torch.empty* with nan
    # (attngrade.sandboxed.worker.preload, integrity.watch_call), so it loses points on every run
    "fully masked rows shifted by uninitialised memory (empty_like)": ("q3",
        "shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))",
        "shift = torch.where(torch.isfinite(shift), shift, torch.empty_like(shift))"),
    "attention scales the queries in place": ("q3",
        "S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])", "S = Q.div_(math.sqrt(Q.shape[-1])) @ K.transpose(-2, -1)"),
    "attention in float32 arithmetic": ("q3",
        "S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])",
        "S = (Q.float() @ K.float().transpose(-2, -1) / math.sqrt(Q.shape[-1])).to(Q.dtype)"),
    "attention answers in bfloat16": ("q3", "return weights @ V, weights", "return (weights @ V).bfloat16(), weights.bfloat16()"),
    # q4: boolean and additive masks
    "additive mask with -1e9": ("q4", "torch.full((), -math.inf,", "torch.full((), -1e9,"),
    "additive mask polarity": ("q4", "return torch.where(keep, zero, minus_inf)", "return torch.where(keep, minus_inf, zero)"),
    "additive mask ignores dtype": ("q4", "return torch.where(keep, zero, minus_inf)", "return torch.where(keep, 0.0, -math.inf)"),
    "to_additive in float32": ("q4", "return torch.where(keep, zero, minus_inf)", "return torch.where(keep, zero, minus_inf).to(torch.float32)"),
    "from_additive polarity": ("q4", "return additive != -math.inf", "return additive == -math.inf"),
    "from_additive compares in place": ("q4", "return additive != -math.inf", "return additive.ne_(-math.inf).bool()"),
    # q5: the student writes the test (test_causal_keep_mask); each of these must lose points
    "student test that always fails": ("q5",
        "    for n, m in [(1, 1), (3, 3), (2, 5), (5, 2)]:\n",
        "    assert False, 'not written yet'\n    for n, m in [(1, 1), (3, 3), (2, 5), (5, 2)]:\n"),
    "student test that never calls the function": ("q5",
        "got = candidate(n, m)",
        "got = torch.ones(n, m, dtype=torch.bool).tril()"),
    "student test that checks only the shape": ("q5",
        "        assert isinstance(got, torch.Tensor) and got.dtype == torch.bool, f\"expected a boolean tensor, got {got!r}\"\n        assert tuple(got.shape) == (n, m), f\"expected shape {(n, m)}, got {tuple(got.shape)}\"\n        for i in range(n):\n            for j in range(m):\n                assert bool(got[i, j]) == (j <= i), f\"({n}, {m}): entry [{i}, {j}] should be {j <= i}\"\n",
        "        assert tuple(got.shape) == (n, m), f\"expected shape {(n, m)}, got {tuple(got.shape)}\"\n"),
    "student test that asserts True": ("q5",
        "    for n, m in [(1, 1), (3, 3), (2, 5), (5, 2)]:\n        got = candidate(n, m)\n",
        "    assert True\n    for n, m in []:\n        got = candidate(n, m)\n"),
}
