"""Wrong solutions of homework 5 (positional encoding), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, old, new): the solutions notebook with
``old`` (a piece of the solution code that occurs exactly once in its code cells) replaced by
``new`` (tests/submissions.py, edited_submission). Each is the one mistake its name says; none may
call the homework's forbidden references (grading.yml). The inputs of this homework are Python
numbers, so there is no tensor to modify in place; softmax, masks and biases do not occur.
"""

MUTANTS = {
    # q1: frequencies
    "wrong frequency: j/d instead of 2j/d": ("q1", "-2.0 * j / d", "-j / d"),
    "frequency inverted (base^(2j/d))": ("q1", "-2.0 * j / d", "2.0 * j / d"),
    "frequencies over all d columns": ("q1", "j = torch.arange(d // 2, dtype=torch.float64)", "j = torch.arange(d, dtype=torch.float64)"),
    "frequencies in float32, converted at the end": ("q1",
        "return base ** (-2.0 * j / d)", "return (base ** (-2.0 * j.float() / d)).to(torch.float64)"),
    "frequencies returned in float32": ("q1",
        "j = torch.arange(d // 2, dtype=torch.float64)", "j = torch.arange(d // 2, dtype=torch.float32)"),
    "frequencies with d / 2 terms counted from 1": ("q1",
        "j = torch.arange(d // 2, dtype=torch.float64)", "j = torch.arange(1, d // 2 + 1, dtype=torch.float64)"),
    # q2: the encoding matrix
    "sin and cos swapped": ("q2",  # two lines
        "P[:, 0::2] = torch.sin(angles)\n"
        "    P[:, 1::2] = torch.cos(angles)",
        "P[:, 0::2] = torch.cos(angles)\n"
        "    P[:, 1::2] = torch.sin(angles)"),
    "halves concatenated instead of interleaved": ("q2", "return P", "return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)"),
    "positions start at 1": ("q2", "torch.arange(n, dtype=torch.float64)", "torch.arange(1, n + 1, dtype=torch.float64)"),
    "encoding with the wrong frequency (base^(-j/d))": ("q2",
        "frequencies(d, base)[None, :]", "(base ** (-torch.arange(d // 2, dtype=torch.float64) / d))[None, :]"),
    "encoding returned in float32": ("q2", "return P", "return P.float()"),
    "angles computed in float32 (float32 positions), stored in float64": ("q2",
        "torch.arange(n, dtype=torch.float64)[:, None] * frequencies(d, base)[None, :]",
        "torch.arange(n, dtype=torch.float32)[:, None] * frequencies(d, base).float()[None, :]"),
    "encoding transposed (d, n)": ("q2", "return P", "return P.T.contiguous()"),
    # q3: the pair rotation
    "counter-clockwise rotation (shifts backwards)": ("q3", "[[c, s], [-s, c]]", "[[c, -s], [s, c]]"),
    "angle delta instead of delta * omega": ("q3",
        "math.cos(delta * omega), math.sin(delta * omega)", "math.cos(delta), math.sin(delta)"),
    "sin and cos swapped in the rotation": ("q3", "c, s = math.cos(", "s, c = math.cos("),
    "rotation as float32 (torch.tensor without dtype)": ("q3", "[[c, s], [-s, c]], dtype=torch.float64)", "[[c, s], [-s, c]])"),
    "rotation entries computed in float32": ("q3",
        "c, s = math.cos(delta * omega), math.sin(delta * omega)",
        "a = torch.tensor(delta * omega, dtype=torch.float32)\n"
        "    c, s = float(torch.cos(a)), float(torch.sin(a))"),
    # q4: the shift matrix
    "shift matrix blocks transposed": ("q4", "= pair_shift(delta, omega)", "= pair_shift(delta, omega).T"),
    "shift matrix with one frequency for all blocks": ("q4", "= pair_shift(delta, omega)", "= pair_shift(delta, 1.0)"),
    "shift matrix for -delta": ("q4", "= pair_shift(delta, omega)", "= pair_shift(-delta, omega)"),
    "shift matrix in float32": ("q4", "M = torch.zeros(d, d, dtype=torch.float64)", "M = torch.zeros(d, d)"),
}
