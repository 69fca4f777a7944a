"""Threshold assertions that report their margin: the trained-model claims of the chapters.

A chapter that trains a model asserts what it measured against a threshold ("accuracy at least
0.99", "loss at most 0.5"). A threshold tuned on one seed proves little, so each such claim is
written as

    assert_at_least(accuracy, 0.99, "reversal with positions: token accuracy")

which asserts it and records its **margin**, the distance from the value to the threshold (positive
when the claim holds). ``make check-seeds`` (the script ``check_seeds.py``) runs the training
chapters with other seeds and prints, per claim, the worst margin across them.

Two environment variables, set by that runner, change the behaviour:

``ATTNBOOK_MARGINS``
    a file to which every checked claim appends one JSON line (claim, value, bound, margin);
``ATTNBOOK_MARGINS_SOFT``
    when ``1``, a failed claim is recorded but does not raise, so one run reports every margin.
"""

from __future__ import annotations

import json
import math
import os

__all__ = ["assert_at_least", "assert_at_most", "recorded"]

_RECORDED: list[dict] = []


def recorded() -> list[dict]:
    """The claims checked so far in this process, oldest first (a copy)."""
    return [dict(entry) for entry in _RECORDED]


def _as_float(value, name: str) -> float:
    if hasattr(value, "item"):  # a one-element tensor or numpy array
        if getattr(value, "numel", lambda: 1)() != 1:
            raise ValueError(f"{name} must be one number, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    return float(value)


def _check(value, bound, claim: str, sign: int) -> float:
    if not isinstance(claim, str) or not claim:
        raise TypeError("claim must be a non-empty string naming what is asserted")
    value, bound = _as_float(value, "value"), _as_float(bound, "bound")
    margin = sign * (value - bound)  # positive: the claim holds with room to spare
    if math.isnan(margin):
        margin = -math.inf  # a NaN never satisfies a claim
    entry = {"claim": claim, "value": value, "bound": bound, "relation": ">=" if sign > 0 else "<=", "margin": margin}
    _RECORDED.append(entry)
    path = os.environ.get("ATTNBOOK_MARGINS")
    if path:
        with open(path, "a", encoding="utf-8") as sink:
            sink.write(json.dumps(entry) + "\n")
    if margin < 0 and os.environ.get("ATTNBOOK_MARGINS_SOFT") != "1":
        raise AssertionError(
            f"{claim}: {value:.6g} {entry['relation']} {bound:.6g} does not hold (margin {margin:.3g})"
        )
    return margin


def assert_at_least(value, bound, claim: str) -> float:
    """Assert ``value >= bound`` and record the margin ``value - bound``; return the margin.

    ``value`` and ``bound`` are numbers (or one-element tensors); ``claim`` names what is asserted,
    the same words on every seed, so that the runs can be compared claim by claim.
    """
    return _check(value, bound, claim, +1)


def assert_at_most(value, bound, claim: str) -> float:
    """Assert ``value <= bound`` and record the margin ``bound - value``; return the margin."""
    return _check(value, bound, claim, -1)
