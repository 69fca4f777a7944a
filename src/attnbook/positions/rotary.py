r"""Rotary position embeddings (RoPE), derived from chapter 5's rotation (chapter 9).

Chapter 5 showed that one block-diagonal matrix :math:`M(\delta)` (:func:`attnbook.shift_matrix`)
moves every sinusoidal position by :math:`\delta`, and that :math:`M(a) M(b)^\top = M(a - b)`.
Rotary embeddings apply that matrix to the projected queries and keys instead of adding an
encoding to the input: in the row convention a query or key row :math:`x` at position :math:`p`
becomes

.. math:: \operatorname{rot}(x, p) = x\, M(p), \qquad \text{pair } j:\quad
          (x_a, x_b) \mapsto (x_a \cos p\omega_j - x_b \sin p\omega_j,\;
                              x_a \sin p\omega_j + x_b \cos p\omega_j),

a counter-clockwise rotation of each pair of features by the angle :math:`p\,\omega_j`,
:math:`\omega_j = \text{base}^{-2j/d}`. The score of a rotated query and key is then
:math:`\operatorname{rot}(q, i) \cdot \operatorname{rot}(k, l) = q\, M(i - l)\, k^\top`: it depends on
the two positions only through the offset.

Two ways of forming the pairs are in use:

* ``pairing="interleaved"``: pair j is features (2j, 2j + 1), as in RoFormer (Su et al.), GPT-J
  and Meta's original Llama code (``torch.view_as_complex`` on pairs of neighbours);
* ``pairing="half"``: pair j is features (j, j + d/2), as in GPT-NeoX and Hugging Face's Llama
  (``rotate_half``).

Both rotate pair j by the same angle; a fixed permutation of the feature axis carries one layout
into the other (:func:`rotary_permutation`, :func:`half_to_interleaved`, :func:`interleaved_to_half`).
"""

from __future__ import annotations

import torch

from ..validators import (
    check_divisible,
    check_dtype,
    check_number,
    check_one_of,
    check_reals,
    check_shapes,
    check_sizes,
    check_tensor,
)
from .sinusoidal import sinusoid_frequencies

PAIRINGS = ("interleaved", "half")


def _check_width(d: object) -> int:
    check_sizes(d=d)
    check_divisible("d", d, 2, why="the features are rotated in pairs")
    return d


def _check_positions(positions: object) -> torch.Tensor:
    check_tensor("positions", positions)
    check_reals(positions=positions)  # integer or real, not boolean or complex
    return positions


def _work_dtype(device: torch.device) -> torch.dtype:
    # angles p * w_j are formed in float64 (float32 loses about 1e-4 rad at p = 1000); MPS has none
    return torch.float32 if device.type == "mps" else torch.float64


# theta[..., j] = p * w_j,   w_j = base^(-2j/d)
def rotary_angles(
    positions: torch.Tensor, d: int, base: float = 10000.0, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    r"""The rotation angles :math:`\theta_{p, j} = p\,\omega_j`, :math:`\omega_j = \text{base}^{-2j/d}` (chapter 9).

    The frequencies are those of the sinusoidal encoding (:func:`attnbook.sinusoid_frequencies`):
    pair j of a query or key at position p is rotated by :math:`\theta_{p,j}`.

    Args:
        positions: any integer (or real) tensor of positions, shape (...); they need not start at 0
            nor be consecutive.
        d: the width of the vectors to rotate (even); there are d / 2 angles per position.
        base: the constant 10000 of the sinusoidal encoding (Llama 3 uses 500000).
        dtype: floating dtype of the result (default ``torch.get_default_dtype()``); the angles are
            computed in float64 and rounded.

    Returns:
        Angles of shape (..., d / 2) on the device of ``positions``.
    """
    positions = _check_positions(positions)
    d = _check_width(d)
    check_number("base", base, positive=True)
    check_dtype(dtype)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    work = _work_dtype(positions.device)
    omega = sinusoid_frequencies(d, base, device=positions.device, dtype=work)  # (d/2,)
    angles = positions.to(work).unsqueeze(-1) * omega  # (..., 1) * (d/2,) -> (..., d/2)
    return angles.to(dtype)


# perm[2j] = j, perm[2j + 1] = j + d/2:   x_interleaved = x_half[..., perm]
def rotary_permutation(d: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    r"""The permutation of the feature axis that turns the split-halves layout into the interleaved one (chapter 9).

    .. math:: \pi(2j) = j, \qquad \pi(2j + 1) = j + d/2, \qquad x^\text{interleaved} = x^\text{half}_{\pi}

    It carries the pair (j, j + d/2) of ``pairing="half"`` onto the pair (2j, 2j + 1) of
    ``pairing="interleaved"``, in the same order and with the same frequency :math:`\omega_j`.

    Returns:
        A long tensor of shape (d,): ``x_half[..., perm]`` is in the interleaved layout, and
        ``x_interleaved[..., torch.argsort(perm)]`` back in the half layout.
    """
    d = _check_width(d)
    j = torch.arange(d // 2, device=device)  # (d/2,)
    return torch.stack((j, j + d // 2), dim=-1).reshape(d)  # (d/2, 2) -> (d,): 0, d/2, 1, d/2 + 1, ...


def half_to_interleaved(x: torch.Tensor) -> torch.Tensor:
    r"""Reorder the last axis of ``x`` (..., d) from pairs (j, j + d/2) to pairs (2j, 2j + 1) (chapter 9)."""
    check_shapes(x=(x, "(..., d)", "any"))
    perm = rotary_permutation(_check_width(x.shape[-1]), device=x.device)  # (d,)
    return x[..., perm]  # (..., d)


def interleaved_to_half(x: torch.Tensor) -> torch.Tensor:
    r"""Reorder the last axis of ``x`` (..., d) from pairs (2j, 2j + 1) to pairs (j, j + d/2) (chapter 9).

    The inverse of :func:`half_to_interleaved`: even features first, then odd ones.
    """
    check_shapes(x=(x, "(..., d)", "any"))
    perm = rotary_permutation(_check_width(x.shape[-1]), device=x.device)  # (d,)
    return x[..., torch.argsort(perm)]  # (..., d): 0, 2, 4, ..., 1, 3, 5, ...


# rot(x, p) = x M(p):  (x_a, x_b) -> (x_a cos(p w_j) - x_b sin(p w_j), x_a sin(p w_j) + x_b cos(p w_j))
def apply_rotary(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    pairing: str = "interleaved",
    base: float = 10000.0,
) -> torch.Tensor:
    r"""Rotary position embedding: rotate each pair of features of ``x`` by its position's angle (chapter 9).

    .. math:: \operatorname{rot}(x, p)_a = x_a \cos\theta_{p,j} - x_b \sin\theta_{p,j}, \qquad
              \operatorname{rot}(x, p)_b = x_a \sin\theta_{p,j} + x_b \cos\theta_{p,j}, \qquad
              \theta_{p,j} = p\,\omega_j

    for every pair j = (a, b): (2j, 2j + 1) with ``pairing="interleaved"``, (j, j + d/2) with
    ``pairing="half"``. In the row convention this is ``x @ attnbook.shift_matrix(p, d, base)`` for
    the interleaved pairing, and for rotated queries and keys
    :math:`\operatorname{rot}(q, i) \cdot \operatorname{rot}(k, l) = q\, M(i - l)\, k^\top`, a function of
    the offset i - l. Apply it to the queries and keys after their projections (and after splitting
    heads), never to the values.

    Args:
        x: queries or keys, (..., n, d) with d even; any batch and head axes in front.
        positions: the position of each row of ``x``, an integer (or real) tensor whose shape
            broadcasts to ``x.shape[:-1]`` without enlarging it: (n,) for one sequence, (batch, 1, n)
            for per-sequence positions with x of shape (batch, heads, n, d). Positions are arbitrary
            (they need not start at 0, be sorted or be distinct).
        pairing: ``"interleaved"`` or ``"half"`` (see above).
        base: the constant of the frequencies :math:`\omega_j = \text{base}^{-2j/d}`.

    Returns:
        The rotated tensor, same shape, dtype and device as ``x``. The angles, their cosines and
        sines are computed in float64 and rounded to the dtype of ``x``.
    """
    check_shapes(x=(x, "(..., d)"))
    positions = _check_positions(positions)
    d = x.shape[-1]
    check_divisible("the width d of x (..., n, d)", d, 2, why="the features are rotated in pairs")
    check_one_of("pairing", pairing, PAIRINGS)
    check_number("base", base, positive=True)
    if positions.device != x.device:
        raise ValueError(f"positions are on {positions.device} but x is on {x.device}")
    rows = tuple(x.shape[:-1])
    try:
        fits = tuple(torch.broadcast_shapes(tuple(positions.shape), rows)) == rows
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"positions of shape {tuple(positions.shape)} must broadcast to x.shape[:-1] = {rows} (one position "
            f"per row of x (..., n, d)); for x (batch, heads, n, d) and positions (batch, n) use positions[:, None, :]"
        )
    angles = rotary_angles(positions, d, base, dtype=_work_dtype(x.device))  # (..., d/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)  # (..., d/2) each
    if pairing == "interleaved":
        x_a, x_b = x[..., 0::2], x[..., 1::2]  # (..., n, d/2): features 2j and 2j + 1
        rotated = torch.stack((x_a * cos - x_b * sin, x_a * sin + x_b * cos), dim=-1)  # (..., n, d/2, 2)
        return rotated.flatten(-2)  # (..., n, d): 2j, 2j + 1 side by side again
    x_a, x_b = x[..., : d // 2], x[..., d // 2 :]  # (..., n, d/2): features j and j + d/2
    return torch.cat((x_a * cos - x_b * sin, x_a * sin + x_b * cos), dim=-1)  # (..., n, d)
