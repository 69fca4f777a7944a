r"""Sinusoidal positional encoding and the rotations that shift it (chapter 5).

Row convention: the encoding of a sequence is a matrix P of shape (n_positions, d_model) whose
row i is the vector p_i added to the embedding of the token at position i. Each pair of columns
(2j, 2j + 1) holds a sine and a cosine of the same angle i * w_j:

.. math:: P_{i, 2j} = \sin(i\,\omega_j), \qquad P_{i, 2j+1} = \cos(i\,\omega_j), \qquad
          \omega_j = \text{base}^{-2j/d_\text{model}}.

Because the sine comes first in each pair, the 2 x 2 matrix that moves a pair from position i to
position i + delta is :math:`\begin{bmatrix}\cos\delta\omega & \sin\delta\omega\\
-\sin\delta\omega & \cos\delta\omega\end{bmatrix}` (see :func:`pair_rotation`).
"""

from __future__ import annotations

import torch

from ..validators import check_divisible, check_dtype, check_number, check_reals, check_sizes

_EVEN = "columns 2j and 2j+1 hold the sine and cosine of one frequency"


def _work_dtype(device: torch.device | str | None) -> torch.dtype:
    # Angles i * w_j are formed in float64 (float32 loses about 1e-4 rad by position 1000) and
    # rounded to the requested dtype at the end; MPS has no float64.
    return torch.float32 if torch.device(device or "cpu").type == "mps" else torch.float64


# w_j = 1 / base^(2j / d_model),   j = 0, ..., d_model/2 - 1
def sinusoid_frequencies(
    d_model: int,
    base: float = 10000.0,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    r"""The angular frequencies :math:`\omega_j = \text{base}^{-2j/d_\text{model}}` (chapter 5).

    Returns a tensor of shape (d_model / 2,), decreasing from :math:`\omega_0 = 1` (wavelength
    :math:`2\pi`) to :math:`\omega_{d/2-1} = \text{base}^{-(d_\text{model}-2)/d_\text{model}}`.
    """
    check_sizes(d_model=d_model)
    check_divisible("d_model", d_model, 2, why=_EVEN)
    check_number("base", base, positive=True)
    check_dtype(dtype)
    j = torch.arange(d_model // 2, device=device, dtype=_work_dtype(device))  # (d_model/2,)
    return (base ** (-2.0 * j / d_model)).to(dtype or torch.get_default_dtype())


# P[i, 2j] = sin(i w_j),   P[i, 2j+1] = cos(i w_j)
def sinusoidal_encoding(
    n_positions: int,
    d_model: int,
    base: float = 10000.0,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    r"""Sinusoidal positional encoding of *Attention Is All You Need* (chapter 5, eq. *sinusoid*).

    .. math:: P_{i, 2j} = \sin(i\,\omega_j), \qquad P_{i, 2j+1} = \cos(i\,\omega_j), \qquad
              \omega_j = \frac{1}{\text{base}^{2j/d_\text{model}}}

    Args:
        n_positions: number of positions i = 0, ..., n_positions - 1 (rows).
        d_model: the embedding width (columns); must be even. (Some notes call this width v,
            the letter they also use for the vocabulary size; it is the width, not the vocabulary.)
        base: the constant 10000 of the original paper.
        device, dtype: where and in which floating dtype to create the result (default: CPU and
            ``torch.get_default_dtype()``). The angles are computed in float64 and then rounded.

    Returns:
        P of shape (n_positions, d_model); row i is the encoding p_i of position i.
    """
    check_sizes(n_positions=n_positions, d_model=d_model)
    check_divisible("d_model", d_model, 2, why=_EVEN)
    check_number("base", base, positive=True)
    check_dtype(dtype)
    work = _work_dtype(device)
    w = sinusoid_frequencies(d_model, base, device=device, dtype=work)  # (d_model/2,)
    i = torch.arange(n_positions, device=device, dtype=work)  # (n_positions,)
    angles = i[:, None] * w[None, :]  # (n_positions, 1) * (1, d_model/2) -> (n_positions, d_model/2)
    P = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1)  # (n_positions, d_model/2, 2)
    P = P.reshape(n_positions, d_model)  # (n_positions, d_model): sin, cos, sin, cos, ...
    return P.to(dtype or torch.get_default_dtype())


# R(delta w) = [[cos(delta w),  sin(delta w)],
#               [-sin(delta w), cos(delta w)]]
# R(delta w) [sin(i w), cos(i w)]^T = [sin((i + delta) w), cos((i + delta) w)]^T
def pair_rotation(delta: float | torch.Tensor, frequency: float | torch.Tensor) -> torch.Tensor:
    r"""The 2 x 2 matrix that shifts one (sin, cos) pair of the encoding by ``delta`` positions (chapter 5).

    .. math:: R(\delta\omega) = \begin{bmatrix} \cos\delta\omega & \sin\delta\omega \\
              -\sin\delta\omega & \cos\delta\omega \end{bmatrix}, \qquad
              R(\delta\omega) \begin{bmatrix} \sin i\omega \\ \cos i\omega \end{bmatrix}
              = \begin{bmatrix} \sin (i+\delta)\omega \\ \cos (i+\delta)\omega \end{bmatrix}

    It follows from the addition formulas and does not depend on i. The sign of the sines is fixed
    by the order sin-then-cos of the pair: for a (cos, sin) pair the shift is the transpose, the
    familiar counter-clockwise rotation, and applying that matrix to a (sin, cos) pair moves it to
    position i - delta instead.

    Args:
        delta: the shift in positions (a number or a tensor).
        frequency: the angular frequency :math:`\omega_j` (a number or a tensor), e.g. from
            :func:`sinusoid_frequencies`.

    Returns:
        A tensor of shape (..., 2, 2), where ... is the broadcast shape of delta and frequency.
    """
    check_reals(delta=delta, frequency=frequency)
    tensors = [x for x in (frequency, delta) if isinstance(x, torch.Tensor)]
    floats = [x.dtype for x in tensors if x.is_floating_point()]
    dtype = floats[0] if floats else torch.float64
    device = tensors[0].device if tensors else None
    delta = torch.as_tensor(delta, dtype=dtype, device=device)  # (...,)
    frequency = torch.as_tensor(frequency, dtype=dtype, device=device)  # (...,)
    angle = delta * frequency  # (...,)
    c, s = torch.cos(angle), torch.sin(angle)
    row0 = torch.stack((c, s), dim=-1)  # (..., 2)
    row1 = torch.stack((-s, c), dim=-1)  # (..., 2)
    return torch.stack((row0, row1), dim=-2)  # (..., 2, 2)


# M(delta) = blockdiag(R(delta w_0), ..., R(delta w_{d/2-1})),   p_{i+delta} = M(delta) p_i
def shift_matrix(
    delta: float,
    d_model: int,
    base: float = 10000.0,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    r"""The block-diagonal (d_model, d_model) matrix M(delta) with p_{i+delta} = M(delta) p_i for every i (chapter 5).

    Its diagonal blocks are :func:`pair_rotation` (delta, w_j). In the row convention, where p_i is
    row i of P = :func:`sinusoidal_encoding`, the identity reads ``P[i + delta] = P[i] @ M.T``.
    """
    check_sizes(d_model=d_model)
    check_divisible("d_model", d_model, 2, why=_EVEN)
    check_reals(delta=delta, finite=True, tensors=False)
    check_number("base", base, positive=True)
    check_dtype(dtype)
    work = _work_dtype(device)
    w = sinusoid_frequencies(d_model, base, device=device, dtype=work)  # (d_model/2,)
    blocks = pair_rotation(torch.tensor(float(delta), dtype=work, device=device), w)  # (d_model/2, 2, 2)
    return torch.block_diag(*blocks).to(dtype or torch.get_default_dtype())  # (d_model, d_model)
