"""Wrong solutions of homework 5 (positional encoding), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, {function name: wrong definition}).
Most are one-line edits of the solution (``str.replace`` on its source); none may call the
homework's forbidden references (grading.yml). The inputs of this homework are Python numbers, so
there is no tensor to modify in place; softmax, masks and biases do not occur.
"""

_F = '''
def frequencies(d, base=10000.0):
    j = torch.arange(d // 2, dtype=torch.float64)
    return base ** (-2.0 * j / d)
'''
_P = '''
def sinusoidal(n, d, base=10000.0):
    angles = torch.arange(n, dtype=torch.float64)[:, None] * frequencies(d, base)[None, :]
    P = torch.empty(n, d, dtype=torch.float64)
    P[:, 0::2] = torch.sin(angles)
    P[:, 1::2] = torch.cos(angles)
    return P
'''
_R = '''
def pair_shift(delta, omega):
    c, s = math.cos(delta * omega), math.sin(delta * omega)
    return torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
'''
_M = '''
def shift_matrix(delta, d, base=10000.0):
    M = torch.zeros(d, d, dtype=torch.float64)
    for j, omega in enumerate(frequencies(d, base).tolist()):
        M[2 * j:2 * j + 2, 2 * j:2 * j + 2] = pair_shift(delta, omega)
    return M
'''


def _one(source: str, old: str, new: str) -> str:
    """``source`` with ``old`` replaced once (it must occur)."""
    assert source.count(old) >= 1, (old, source)
    return source.replace(old, new, 1)


MUTANTS = {
    # q1: frequencies
    "wrong frequency: j/d instead of 2j/d": ("q1", {"frequencies": _one(_F, "-2.0 * j / d", "-j / d")}),
    "frequency inverted (base^(2j/d))": ("q1", {"frequencies": _one(_F, "-2.0 * j / d", "2.0 * j / d")}),
    "frequencies over all d columns": ("q1", {"frequencies": '''
def frequencies(d, base=10000.0):
    return base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)[: max(d // 2 - 1, 1)]
'''}),
    "frequencies in float32 (arange(0, d, 2) / d), converted at the end": ("q1", {"frequencies": '''
def frequencies(d, base=10000.0):
    return (base ** (-torch.arange(0, d, 2) / d)).to(torch.float64)
'''}),
    "frequencies returned in float32": ("q1", {"frequencies": _one(_F, "dtype=torch.float64", "dtype=torch.float32")}),
    "frequencies with d / 2 terms counted from 1": ("q1", {"frequencies": _one(_F, "torch.arange(d // 2, dtype=torch.float64)", "torch.arange(1, d // 2 + 1, dtype=torch.float64)")}),
    # q2: the encoding matrix
    "sin and cos swapped": ("q2", {"sinusoidal": _one(_one(_P, "P[:, 0::2] = torch.sin(angles)", "P[:, 0::2] = torch.cos(angles)"),
                                                    "P[:, 1::2] = torch.cos(angles)", "P[:, 1::2] = torch.sin(angles)")}),
    "halves concatenated instead of interleaved": ("q2", {"sinusoidal": '''
def sinusoidal(n, d, base=10000.0):
    angles = torch.arange(n, dtype=torch.float64)[:, None] * frequencies(d, base)[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
'''}),
    "positions start at 1": ("q2", {"sinusoidal": _one(_P, "torch.arange(n, dtype=torch.float64)", "torch.arange(1, n + 1, dtype=torch.float64)")}),
    "encoding with the wrong frequency (base^(-j/d))": ("q2", {"sinusoidal": _one(_P,
        "frequencies(d, base)", "base ** (-torch.arange(d // 2, dtype=torch.float64) / d)")}),
    "encoding returned in float32": ("q2", {"sinusoidal": _one(_P, "return P", "return P.float()")}),
    "angles computed in float32 (float32 positions), stored in float64": ("q2", {"sinusoidal": _one(_P,
        "torch.arange(n, dtype=torch.float64)[:, None] * frequencies(d, base)[None, :]",
        "torch.arange(n, dtype=torch.float32)[:, None] * frequencies(d, base).float()[None, :]")}),
    "encoding transposed (d, n)": ("q2", {"sinusoidal": _one(_P, "return P", "return P.T.contiguous() if n != d else P.T.contiguous()")}),
    # q3: the pair rotation
    "counter-clockwise rotation (shifts backwards)": ("q3", {"pair_shift": _one(_R, "[[c, s], [-s, c]]", "[[c, -s], [s, c]]")}),
    "angle delta instead of delta * omega": ("q3", {"pair_shift": _one(_R, "math.cos(delta * omega), math.sin(delta * omega)", "math.cos(delta), math.sin(delta)")}),
    "sin and cos swapped in the rotation": ("q3", {"pair_shift": _one(_R, "c, s = math.cos(delta * omega), math.sin(delta * omega)", "s, c = math.cos(delta * omega), math.sin(delta * omega)")}),
    "rotation as float32 (torch.tensor without dtype)": ("q3", {"pair_shift": _one(_R, ", dtype=torch.float64)", ")")}),
    "rotation entries computed in float32": ("q3", {"pair_shift": _one(_R,
        "c, s = math.cos(delta * omega), math.sin(delta * omega)",
        "a = torch.tensor(delta * omega, dtype=torch.float32)\n    c, s = float(torch.cos(a)), float(torch.sin(a))")}),
    # q4: the shift matrix
    "shift matrix blocks transposed": ("q4", {"shift_matrix": _one(_M, "= pair_shift(delta, omega)", "= pair_shift(delta, omega).T")}),
    "shift matrix with one frequency for all blocks": ("q4", {"shift_matrix": _one(_M, "pair_shift(delta, omega)", "pair_shift(delta, 1.0)")}),
    "shift matrix for -delta": ("q4", {"shift_matrix": _one(_M, "pair_shift(delta, omega)", "pair_shift(-delta, omega)")}),
    "shift matrix in float32": ("q4", {"shift_matrix": _one(_M, "torch.zeros(d, d, dtype=torch.float64)", "torch.zeros(d, d)")}),
}
