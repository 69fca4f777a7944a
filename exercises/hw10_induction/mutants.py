"""Wrong solutions of homework 10 (induction heads), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, old, new): the solutions notebook with
``old`` (a piece of the solution code that occurs exactly once in its code cells) replaced by
``new`` (tests/submissions.py, edited_submission). Each is the one mistake its name says; none may
call the homework's forbidden references (grading.yml).
"""

MUTANTS = {
    # q1: the induction score
    "induction score reads key t - offset (the duplicate token)": ("q1",
        "keys = (t - offset[:, None] + 1)", "keys = (t - offset[:, None])"),
    "induction score reads key t - offset + 2": ("q1",
        "keys = (t - offset[:, None] + 1)", "keys = (t - offset[:, None] + 2)"),
    "induction score averages over every query": ("q1",
        "on_key.transpose(0, 1)[:, queries].mean(dim=-1)", "on_key.mean(dim=(0, 2))"),
    "induction score sums instead of averaging": ("q1",
        "on_key.transpose(0, 1)[:, queries].mean(dim=-1)", "on_key.transpose(0, 1)[:, queries].sum(dim=-1)"),
    "induction score is a mean of per-sequence means": ("q1",
        "return on_key.transpose(0, 1)[:, queries].mean(dim=-1)",
        "per = (on_key * queries[:, None]).sum(-1) / queries.sum(-1, keepdim=True).clamp(min=1)\n"
        "    return per[queries.any(-1)].mean(0)"),
    "induction score averaged over the heads too": ("q1",
        "on_key.transpose(0, 1)[:, queries].mean(dim=-1)",
        "on_key.transpose(0, 1)[:, queries].mean().expand(weights.shape[1])"),
    "induction score in float64 whatever the input": ("q1",
        "on_key = weights.gather(-1, index)[..., 0]", "on_key = weights.double().gather(-1, index)[..., 0]"),
    "induction score indexes query and key the other way round": ("q1",
        "on_key = weights.gather(-1, index)[..., 0]", "on_key = weights.transpose(-2, -1).gather(-1, index)[..., 0]"),
    # q2: the full OV circuit
    "OV circuit transposed": ("q2", "return written @ W_U.T", "return (written @ W_U.T).T"),
    # W_O used as TransformerLens stores it, (d_head, d_model): right shapes only when d_head = d_model
    "OV circuit with W_O not transposed": ("q2", "written = E @ W_V.T @ W_O.T", "written = E @ W_V.T @ W_O"),
    "OV circuit with W_O W_V in the wrong order": ("q2", "written = E @ W_V.T @ W_O.T", "written = E @ W_O @ W_V"),
    "OV circuit in float32": ("q2", "return written @ W_U.T", "return (written @ W_U.T).float()"),
    # q3: the composition score
    "composition score without dividing by ||B||": ("q3",
        "(torch.linalg.matrix_norm(A) * torch.linalg.matrix_norm(B))", "torch.linalg.matrix_norm(A)"),
    "composition score with the spectral norm": ("q3",
        "return torch.linalg.matrix_norm(product) / (torch.linalg.matrix_norm(A) * torch.linalg.matrix_norm(B))",
        "return torch.linalg.matrix_norm(product, ord=2) / (torch.linalg.matrix_norm(A, ord=2) * torch.linalg.matrix_norm(B, ord=2))"),
    "composition score with squared norms": ("q3",
        "return torch.linalg.matrix_norm(product) / (torch.linalg.matrix_norm(A) * torch.linalg.matrix_norm(B))",
        "return torch.linalg.matrix_norm(product) ** 2 / (torch.linalg.matrix_norm(A) * torch.linalg.matrix_norm(B)) ** 2"),
    "composition score multiplies B A": ("q3", "product = A @ B", "product = B @ A"),
    "composition score in float32": ("q3",
        "return torch.linalg.matrix_norm(product) / (torch.linalg.matrix_norm(A) * torch.linalg.matrix_norm(B))",
        "return (torch.linalg.matrix_norm(product) / (torch.linalg.matrix_norm(A) * torch.linalg.matrix_norm(B))).float()"),
    # q4: Q- versus K-composition (the one function each mutant names loses its points)
    "K-composition with W_QK transposed (the query side's matrix)": ("q4",
        "W_QK = W_Q.T @ W_K", "W_QK = W_K.T @ W_Q"),
    "Q-composition with W_QK not transposed (the key side's matrix)": ("q4",
        "W_KQ = W_K.T @ W_Q", "W_KQ = W_Q.T @ W_K"),
    "K-composition with W_OV transposed (W_V^T W_O^T)": ("q4",
        "W_OV = W_O @ W_V  # (d_model, d_head)", "W_OV = W_V.T @ W_O.T  # (d_model, d_head)"),
    "Q-composition with W_OV transposed (W_V^T W_O^T)": ("q4",
        "W_OV = W_O @ W_V  # what", "W_OV = W_V.T @ W_O.T  # what"),
}
