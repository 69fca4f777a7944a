"""Wrong solutions of homework 0, each of which the tests must catch (tests/homework/test_mutations.py).

MUTANTS maps a name to (the question that must lose points, old, new): the solutions notebook with
``old`` (a piece of the solution code that occurs exactly once in its code cells) replaced by
``new`` (tests/submissions.py, edited_submission). Each is the one mistake its name says, most of
them those students make when moving between the row and the column convention.
"""

MUTANTS = {
    # q1: the weights in the column convention
    "weights not transposed": ("q1", "W_col = W_row.transpose(0, 1)", "W_col = W_row"),
    "bias as a column": ("q1", "b_col = b_row.clone()", "b_col = b_row[:, None]"),
    "column_weights transposes W_row in place": ("q1", "W_col = W_row.transpose(0, 1)", "W_col = W_row.t_()"),
    # q2: the scores in both conventions
    "row scores missing 1/sqrt(d)": ("q2", "return Q @ K.transpose(0, 1) / math.sqrt(d_k)", "return Q @ K.transpose(0, 1)"),
    "row scores transposed (K Q^T)": ("q2", "return Q @ K.transpose(0, 1) /", "return K @ Q.transpose(0, 1) /"),
    "column scores as Q^T K": ("q2", "return K.transpose(0, 1) @ Q /", "return Q.transpose(0, 1) @ K /"),
    "column scores divided by d, not sqrt(d)": ("q2", "/ math.sqrt(d_attn)", "/ d_attn"),
    "column scores scaled by sqrt(l_x)": ("q2", "d_attn = Q.shape[0]", "d_attn = Q.shape[1]"),
    "scores_row scales Q in place": ("q2",
        "return Q @ K.transpose(0, 1) / math.sqrt(d_k)", "return Q.div_(math.sqrt(d_k)) @ K.transpose(0, 1)"),
    "scores_row in float32 arithmetic": ("q2",
        "return Q @ K.transpose(0, 1) / math.sqrt(d_k)", "return (Q.float() @ K.float().transpose(0, 1) / math.sqrt(d_k)).to(Q.dtype)"),
    # q3: the softmax in both conventions
    "row softmax over the wrong axis": ("q3",  # both reductions over dim 0 (lines 1 and 4 of weights_row)
        "shift = S.amax(dim=-1, keepdim=True)  # (n, 1)\n"
        "    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))\n"
        "    e = torch.exp(S - shift)  # (n, m)\n"
        "    total = e.sum(dim=-1, keepdim=True)",
        "shift = S.amax(dim=0, keepdim=True)  # (n, 1)\n"
        "    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))\n"
        "    e = torch.exp(S - shift)  # (n, m)\n"
        "    total = e.sum(dim=0, keepdim=True)"),
    "column softmax over rows": ("q3", "return weights_row(S.transpose(0, 1)).transpose(0, 1)", "return weights_row(S)"),
    "softmax without the max shift": ("q3", "e = torch.exp(S - shift)", "e = torch.exp(S)"),
    "fully masked rows give nan": ("q3",
        "return e / torch.where(total > 0, total, torch.ones_like(total))", "return e / total"),
    "softmax subtracts the minimum instead of the maximum": ("q3",
        "shift = S.amax(dim=-1, keepdim=True)", "shift = S.amin(dim=-1, keepdim=True)"),
    "softmax modifies the scores in place": ("q3", "e = torch.exp(S - shift)", "e = torch.exp(S.sub_(shift))"),
    "softmax in float32 arithmetic": ("q3", "e = torch.exp(S - shift)", "e = torch.exp((S - shift).float()).to(S.dtype)"),
    "softmax answers in bfloat16": ("q3",
        "return e / torch.where(total > 0, total, torch.ones_like(total))",
        "return (e / torch.where(total > 0, total, torch.ones_like(total))).to(torch.bfloat16)"),
    # q4: converting masks
    "mask not transposed": ("q4", "return M.transpose(0, 1)", "return M"),
    "mask polarity inverted": ("q4", "return M.transpose(0, 1)", "return ~M.transpose(0, 1)"),
    "float mask where bool asked": ("q4", "return M.transpose(0, 1)", "return M.transpose(0, 1).float()"),
    "torch mha mask taken as a keep-mask": ("q4", "return ~attn_mask", "return attn_mask"),
    "torch mha mask negated and transposed": ("q4", "return ~attn_mask", "return ~attn_mask.T"),
    "mask_from_torch_mha negates in place": ("q4", "return ~attn_mask", "return attn_mask.logical_not_()"),
    # q5: attention in the column convention
    "attention: softmax over rows": ("q5", "return V @ weights_column(S)", "return V @ weights_row(S)"),
    "attention: biases forgotten": ("q5",  # all three projections (three lines)
        "Q = W_q @ X + b_q[:, None]  # (d_attn, d_x) @ (d_x, l_x) -> (d_attn, l_x)\n"
        "    K = W_k @ Z + b_k[:, None]  # (d_attn, d_z) @ (d_z, l_z) -> (d_attn, l_z)\n"
        "    V = W_v @ Z + b_v[:, None]",
        "Q = W_q @ X  # (d_attn, d_x) @ (d_x, l_x) -> (d_attn, l_x)\n"
        "    K = W_k @ Z  # (d_attn, d_z) @ (d_z, l_z) -> (d_attn, l_z)\n"
        "    V = W_v @ Z"),
    "attention: value bias forgotten": ("q5", "V = W_v @ Z + b_v[:, None]", "V = W_v @ Z"),
    "attention: query bias forgotten": ("q5", "Q = W_q @ X + b_q[:, None]", "Q = W_q @ X"),
    "attention: mask transposed": ("q5",
        "S = S.masked_fill(mask == 0, -math.inf)",
        "S = S.masked_fill((mask.T if mask.shape[0] == mask.shape[1] else mask) == 0, -math.inf)"),
    "attention: mask polarity inverted": ("q5", "S = S.masked_fill(mask == 0, -math.inf)", "S = S.masked_fill(mask == 1, -math.inf)"),
    "attention: -1e9 instead of -inf": ("q5", "S = S.masked_fill(mask == 0, -math.inf)", "S = S.masked_fill(mask == 0, -1e9)"),
    "attention: output transposed": ("q5", "return V @ weights_column(S)", "return (V @ weights_column(S)).T"),
    "attention: softmax subtracts the minimum": ("q5",  # its own softmax instead of weights_column
        "return V @ weights_column(S)",
        "e = torch.exp(S - S.amin(dim=0, keepdim=True).nan_to_num(0.0, neginf=0.0))\n"
        "    return V @ (e / e.sum(dim=0, keepdim=True)).nan_to_num(0.0)"),
    "attention: bias unsqueezed in place": ("q5", "Q = W_q @ X + b_q[:, None]", "Q = W_q @ X + b_q.unsqueeze_(1)"),
    "attention: float32 arithmetic": ("q5",
        "return V @ weights_column(S)", "return (V.float() @ weights_column(S.float())).to(V.dtype)"),
    "attention: answers in bfloat16": ("q5", "return V @ weights_column(S)", "return (V @ weights_column(S)).to(torch.bfloat16)"),
}
