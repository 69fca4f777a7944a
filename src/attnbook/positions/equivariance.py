r"""What a permutation-equivariant map can learn of a fixed rearrangement (chapter 7).

A target permutation tau of the positions 0..n-1 asks for the output y_i = x_{tau(i)} at position
i: reversal is tau(i) = n - 1 - i, a cyclic copy of the previous token tau(i) = i - 1 (mod n), the
identity tau(i) = i. By the lemma of chapter 7 ("an equivariant map sees a token and a set"), a
permutation-equivariant map F of sequences of n distinct tokens outputs F(x)_i = phi(x_i, S), one
function of the token and of the set S of the sequence, shared by every position. The theorem of
chapter 7 ("a fixed rearrangement without positions") says that over all n! orderings of S its
accuracy is at most

.. math:: \max\Bigl(\frac{f}{n}, \frac{n - f}{n (n - 1)}\Bigr), \qquad f = \#\{i : \tau(i) = i\},

and that this maximum is attained. :func:`equivariant_accuracy_bound` is that closed form,
:func:`best_equivariant_accuracy` finds the maximum by brute force over every phi, and
:func:`equivariant_accuracy` is the accuracy of one phi. All three count exactly and return a
:class:`fractions.Fraction`.

The set is taken to be S = {0, ..., n-1} (the names of the tokens do not matter), and phi is a
sequence of n values, ``phi[a]`` the output for token a; a value outside 0..n-1 stands for an
output outside S, which is never right.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from itertools import permutations

import torch

from ..validators import check_permutation

__all__ = ["best_equivariant_accuracy", "equivariant_accuracy", "equivariant_accuracy_bound"]

#: brute force only up to this length: (n + 1)^n maps phi, 823,543 for n = 7
MAX_BRUTE_FORCE_LENGTH = 7


def _check_tau(tau: object, *, brute_force: bool = False) -> list[int]:
    check_permutation(tau)
    tau = tau.tolist() if isinstance(tau, torch.Tensor) else list(tau)
    if len(tau) < 2:
        raise ValueError(f"tau must permute n >= 2 positions, got n = {len(tau)}")
    if brute_force and len(tau) > MAX_BRUTE_FORCE_LENGTH:
        raise ValueError(
            f"the brute force enumerates (n + 1)^n maps and n! orderings; n = {len(tau)} exceeds "
            f"{MAX_BRUTE_FORCE_LENGTH}"
        )
    return tau


# max(f / n, (n - f) / (n (n - 1))),  f = the number of fixed points of tau
def equivariant_accuracy_bound(tau: Sequence[int] | torch.Tensor) -> Fraction:
    r"""The best accuracy of a permutation-equivariant map on the target y_i = x_{tau(i)} (chapter 7).

    The theorem of chapter 7 ("a fixed rearrangement without positions"): over all orderings of a
    set of n >= 2 distinct tokens, a permutation-equivariant map outputs x_{tau(i)} at a fraction
    of at most :math:`\max(f/n, (n - f)/(n(n - 1)))` of the positions, f the number of fixed
    points of tau, and some such map reaches it (the identity on the tokens reaches f/n, a
    derangement of the set (n - f)/(n(n - 1))). Reversal: 1/(n - 1) for even n, 1/n for odd n.

    Args:
        tau: a permutation of 0..n-1 (list of ints or 1-D integer tensor), n >= 2.
    """
    tau = _check_tau(tau)
    n = len(tau)
    f = sum(tau[i] == i for i in range(n))
    return max(Fraction(f, n), Fraction(n - f, n * (n - 1)))


def _pair_counts(tau: list[int]) -> torch.Tensor:
    """M[a, b] = sum over i of #{orderings x of {0..n-1} : x_i = a and x_{tau(i)} = b}, (n, n) int64."""
    n = len(tau)
    orders = torch.tensor(list(permutations(range(n))))  # (n!, n): every ordering, explicitly
    wanted = orders[:, tau]  # (n!, n): the token that position i should output, x_{tau(i)}
    counts = torch.zeros(n * n, dtype=torch.long)
    counts.index_add_(0, (orders * n + wanted).reshape(-1), torch.ones(orders.numel(), dtype=torch.long))
    return counts.reshape(n, n)  # (n, n): row a = the token at a position, column b = the wanted token


def equivariant_accuracy(tau: Sequence[int] | torch.Tensor, phi: Sequence[int] | torch.Tensor) -> Fraction:
    r"""The exact accuracy, over all n! orderings of S = {0..n-1} and all n positions, of the map
    F(x)_i = phi[x_i] on the target y_i = x_{tau(i)} (chapter 7).

    Counted from an explicit enumeration of the orderings. ``phi`` holds n integers; a value
    outside 0..n-1 is an output outside the set, never right.
    """
    tau = _check_tau(tau, brute_force=True)
    n = len(tau)
    phi = phi.tolist() if isinstance(phi, torch.Tensor) else list(phi)
    if len(phi) != n or not all(isinstance(v, int) for v in phi):
        raise ValueError(f"phi must hold n = {n} integers (phi[a] is the output for token a), got {phi}")
    counts = _pair_counts(tau)  # (n, n)
    right = sum(int(counts[a, b]) for a, b in enumerate(phi) if 0 <= b < n)
    return Fraction(right, math.factorial(n) * n)


def best_equivariant_accuracy(tau: Sequence[int] | torch.Tensor) -> Fraction:
    r"""The best accuracy of a permutation-equivariant map on the target y_i = x_{tau(i)}, by brute
    force (chapter 7, the theorem "a fixed rearrangement without positions").

    For one set S = {0..n-1} such a map is F(x)_i = phi(x_i) for some phi from S to the outputs.
    Every phi is enumerated, (n + 1)^n of them: n values in S and one value standing for every
    output outside S (all alike: never right). With the counts C[i, a, b] = #{orderings with x_i = a
    and x_{tau(i)} = b}, taken from an explicit list of the n! orderings, the number of right
    outputs of phi is the sum over i and a of C[i, a, phi(a)]; its maximum over phi, divided by
    n! n, is returned exactly. Independent of the closed form :func:`equivariant_accuracy_bound`,
    which it checks. n <= 7.
    """
    tau = _check_tau(tau, brute_force=True)
    n = len(tau)
    counts = _pair_counts(tau)  # (n, n): M[a, b] = sum over i of C[i, a, b]
    counts = torch.cat([counts, torch.zeros(n, 1, dtype=torch.long)], dim=1)  # (n, n + 1): column n = outside S
    every = torch.arange((n + 1) ** n)  # (maps,): phi numbered in base n + 1
    powers = (n + 1) ** torch.arange(n)  # (n,)
    phis = every[:, None] // powers % (n + 1)  # (maps, n): phis[k, a] = phi_k(a), digit a of k
    right = counts[torch.arange(n), phis].sum(dim=1)  # (maps, n) gathered -> (maps,): right outputs of each phi
    return Fraction(int(right.max()), math.factorial(n) * n)
