"""The theorem of chapter 7 on fixed rearrangements without positions: for a target y_i = x_{tau(i)}
with f fixed points, the best accuracy of a permutation-equivariant map over all orderings of a
set of n >= 2 distinct tokens is max(f/n, (n - f)/(n(n - 1))), and both terms are attained."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbook import best_equivariant_accuracy, equivariant_accuracy, equivariant_accuracy_bound

taus = st.integers(min_value=2, max_value=5).flatmap(lambda n: st.permutations(list(range(n))))


@settings(max_examples=60, deadline=None)
@given(tau=taus)
def test_brute_force_equals_the_closed_form(tau):
    assert best_equivariant_accuracy(tau) == equivariant_accuracy_bound(tau)


@settings(max_examples=30, deadline=None)
@given(tau=taus)
def test_both_terms_are_attained(tau):
    n = len(tau)
    f = sum(tau[i] == i for i in range(n))
    identity = list(range(n))  # right at every fixed point of tau, never elsewhere
    derangement = [(a + 1) % n for a in range(n)]  # never right at a fixed point
    assert equivariant_accuracy(tau, identity) == Fraction(f, n)
    assert equivariant_accuracy(tau, derangement) == Fraction(n - f, n * (n - 1))


@pytest.mark.parametrize(
    ("n", "expected"),
    [(2, Fraction(1)), (3, Fraction(1, 3)), (4, Fraction(1, 3)), (5, Fraction(1, 5)), (6, Fraction(1, 5))],
)
def test_reversal(n, expected):
    reverse = list(range(n - 1, -1, -1))
    assert best_equivariant_accuracy(reverse) == expected == equivariant_accuracy_bound(reverse)


def test_an_output_outside_the_set_is_never_right():
    reverse = [4, 3, 2, 1, 0]
    assert equivariant_accuracy(reverse, [5, 5, 5, 5, 5]) == 0
    # copy tokens 1..4, send token 0 outside: right only at the middle, when it holds one of 1..4
    assert equivariant_accuracy(reverse, [-1, 1, 2, 3, 4]) == Fraction(1, 5) * Fraction(4, 5)


def test_tensors_are_accepted():
    tau = torch.tensor([1, 2, 0])
    assert best_equivariant_accuracy(tau) == equivariant_accuracy_bound(tau) == Fraction(1, 2)
    assert equivariant_accuracy(tau, torch.tensor([1, 2, 0])) == Fraction(1, 2)


@pytest.mark.parametrize("tau", [[0], [], [0, 0], [1, 2]])
def test_bad_tau_is_refused(tau):
    with pytest.raises(ValueError):
        equivariant_accuracy_bound(tau)


def test_too_long_for_the_brute_force():
    with pytest.raises(ValueError, match="exceeds"):
        best_equivariant_accuracy(list(range(8)))
    assert equivariant_accuracy_bound(list(range(8))) == 1


def test_phi_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="phi"):
        equivariant_accuracy([1, 0], [0])
