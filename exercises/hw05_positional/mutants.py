"""Wrong solutions of homework 5 (positional encoding), each of which the tests must catch.

MUTANTS maps a name to (the question that must lose points, {function name: wrong definition}).
"""

_P = '''
def sinusoidal(n, d, base=10000.0):
    angles = torch.arange(n, dtype=torch.float64)[:, None] * frequencies(d, base)[None, :]
    P = torch.empty(n, d, dtype=torch.float64)
    P[:, 0::2] = torch.sin(angles)
    P[:, 1::2] = torch.cos(angles)
    return P
'''

MUTANTS = {
    "wrong frequency: j/d instead of 2j/d": ("q1", {"frequencies": '''
def frequencies(d, base=10000.0):
    return base ** (-torch.arange(d // 2, dtype=torch.float64) / d)
'''}),
    "frequency inverted (base^(2j/d))": ("q1", {"frequencies": '''
def frequencies(d, base=10000.0):
    return base ** (2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
'''}),
    "frequencies over all d columns": ("q1", {"frequencies": '''
def frequencies(d, base=10000.0):
    return base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)[: max(d // 2 - 1, 1)]
'''}),
    "sin and cos swapped": ("q2", {"sinusoidal": _P.replace("P[:, 0::2] = torch.sin(angles)", "P[:, 0::2] = torch.cos(angles)").replace(
        "P[:, 1::2] = torch.cos(angles)", "P[:, 1::2] = torch.sin(angles)")}),
    "halves concatenated instead of interleaved": ("q2", {"sinusoidal": '''
def sinusoidal(n, d, base=10000.0):
    angles = torch.arange(n, dtype=torch.float64)[:, None] * frequencies(d, base)[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
'''}),
    "positions start at 1": ("q2", {"sinusoidal": _P.replace("torch.arange(n, dtype=torch.float64)", "torch.arange(1, n + 1, dtype=torch.float64)")}),
    "encoding with the wrong frequency (base^(-j/d))": ("q2", {"sinusoidal": _P.replace(
        "frequencies(d, base)", "base ** (-torch.arange(d // 2, dtype=torch.float64) / d)")}),
    "encoding in float32": ("q2", {"sinusoidal": _P.replace("return P", "return P.float()")}),
    "counter-clockwise rotation (shifts backwards)": ("q3", {"pair_shift": '''
def pair_shift(delta, omega):
    c, s = math.cos(delta * omega), math.sin(delta * omega)
    return torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
'''}),
    "angle delta instead of delta * omega": ("q3", {"pair_shift": '''
def pair_shift(delta, omega):
    c, s = math.cos(delta), math.sin(delta)
    return torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
'''}),
    "shift matrix blocks transposed": ("q4", {"shift_matrix": '''
def shift_matrix(delta, d, base=10000.0):
    M = torch.zeros(d, d, dtype=torch.float64)
    for j, omega in enumerate(frequencies(d, base).tolist()):
        M[2 * j:2 * j + 2, 2 * j:2 * j + 2] = pair_shift(delta, omega).T
    return M
'''}),
    "shift matrix with one frequency for all blocks": ("q4", {"shift_matrix": '''
def shift_matrix(delta, d, base=10000.0):
    return torch.block_diag(*[pair_shift(delta, 1.0)] * (d // 2))
'''}),
    "shift matrix for -delta": ("q4", {"shift_matrix": '''
def shift_matrix(delta, d, base=10000.0):
    return torch.block_diag(*[pair_shift(-delta, w) for w in frequencies(d, base).tolist()])
'''}),
}
