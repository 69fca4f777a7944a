r"""Permutation matrices, for the symmetry theorems of chapter 6.

Convention: for a permutation sigma of {0, ..., n-1} (a 1-D tensor ``perm`` with
``perm[i] = sigma(i)``), the permutation matrix is the identity with its rows reordered,

.. math:: (P_\sigma)_{ik} = [\, k = \sigma(i) \,], \qquad (P_\sigma X)_{i} = X_{\sigma(i)},

so ``P @ X == X[perm]``: multiplying from the left reorders the rows, and ``D @ P.T == D[:, perm]``
reorders the columns in the same way. Permutation matrices are orthogonal: P^T P = I.
"""

from __future__ import annotations

import torch

from ..validators import check_permutation, check_sizes


def random_permutation(
    n: int, *, generator: torch.Generator | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """A uniformly random permutation of 0..n-1 as a 1-D int64 tensor (drawn on the CPU generator)."""
    check_sizes(minimum=0, n=n)
    return torch.randperm(n, generator=generator).to(device)  # (n,)


# (P_sigma)_{ik} = [k == sigma(i)]
def permutation_matrix(
    perm: torch.Tensor, *, dtype: torch.dtype | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    r"""The (n, n) permutation matrix :math:`P_\sigma` with ``P @ X == X[perm]`` (chapter 6).

    Args:
        perm: a 1-D integer tensor holding each of 0..n-1 exactly once (or a list of ints).
        dtype: floating dtype of the result (default ``torch.get_default_dtype()``).
        device: defaults to the device of ``perm``.
    """
    check_permutation(perm)
    perm = torch.as_tensor(perm, dtype=torch.long)  # (n,), on the device of a tensor
    n = perm.shape[0]
    dtype = torch.get_default_dtype() if dtype is None else dtype
    device = perm.device if device is None else device
    eye = torch.eye(n, dtype=dtype, device=device)  # (n, n)
    return eye[perm.to(device)]  # (n, n), row i is e_{perm[i]}


def random_permutation_matrix(
    n: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """A uniformly random (n, n) permutation matrix (chapter 6); see :func:`permutation_matrix`."""
    return permutation_matrix(random_permutation(n, generator=generator), dtype=dtype, device=device)


def is_permutation_matrix(P: torch.Tensor) -> bool:
    """True if ``P`` is square with entries in {0, 1} and exactly one 1 in every row and column."""
    if not isinstance(P, torch.Tensor) or P.ndim != 2 or P.shape[0] != P.shape[1]:
        return False
    binary = bool(((P == 0) | (P == 1)).all())
    return binary and bool((P.sum(0) == 1).all()) and bool((P.sum(1) == 1).all())
