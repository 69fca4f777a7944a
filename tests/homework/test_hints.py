"""Feedback that teaches: a mistake with a cause a student can read gets a named hint.

Every mutant (``exercises/hwNN_topic/mutants.py``) whose NAME marks such a cause (VOCABULARY: the
softmax axis, the scale, the heads' split or merge, the mask's polarity, fill, transposition,
an off-by-one, the rotary pairing, sin and cos, the dtype) is run through the public tests of its
question as ``grader.check`` runs them (tools/hint_table.py, in this process). The
student must be told its cause by name: a ``Likely mistake: ...`` line (a known mistake of the
test), or for a few kinds a diagnosis that states it exactly (a dtype, a transposed result). A
known mistake that explains the failure is never followed by a generic guess (``Hint: ...``).

A mutant that the public tests cannot name is listed in EXEMPT, with the reason.
``.venv/bin/python -m tools.hint_table`` prints the whole table.
"""

from __future__ import annotations

import functools
import re

import pytest

from attngrade.checks import HINT_PREFIX
from attngrade.homework import all_homework
from tools.hint_table import GUESSED, NAMED, Told, hint_table

from ..homework_support import homework
from ..submissions import load_mutants

HOMEWORK = [hw.name for hw in all_homework()]


def _mentions(*words: str):
    """A diagnosis that states the cause: what the student is told first mentions one of ``words``."""
    return lambda told: told.kind != "pass" and any(w in told.text for w in words)


def _transpose_guess(told: Told) -> bool:
    return told.kind == GUESSED and "transpose" in told.text


#: a readable cause, found by a pattern in the mutant's name -> what counts as naming it besides a
#: "Likely mistake" line (None: only that)
VOCABULARY = {
    "softmax axis": (r"softmax over|softmax .*wrong axis", None),
    "scale": (r"1/sqrt|sqrt\(|scaled by|divided by d\b|scale=", None),
    "head split or merge": (
        r"heads? (split|merged|interleaved|concatenated)|(split|merge) by reshape|head order",
        None,
    ),
    # a boolean result that is exactly the negation of the answer says so (checks.diagnosis._negation_diagnosis)
    "mask polarity": (r"polarity|taken as a keep-mask", lambda told: told.kind == GUESSED and "polarity" in told.text),
    "mask fill": (r"-1e9|finfo", None),
    # a result that is exactly the transpose of the answer says so (checks.diagnosis._transpose_diagnosis)
    "transposed": (r"transposed", _transpose_guess),
    "off by one": (r"off by one|window [+-] 1 keys|\(j < i\)|counted from 1|start at 1", None),
    "rotary pairing": (r"pairs|halves|interleaved", None),
    "sin and cos": (r"sin and cos|sign of sin", None),
    # a dtype mismatch is stated ("expected dtype float64 ..., got float32"), and values right only
    # to a lower precision are diagnosed as such (checks.diagnosis._precision_diagnosis)
    "dtype": (
        r"float32|float16|bfloat16|float64|int32|as floats|as integers|dtype",
        _mentions("dtype", "precision"),
    ),
}

#: (homework, mutant) -> why the public tests cannot name its cause (only hidden tests see it)
EXEMPT = {
    # public tests run float64 only (they print small exact matrices); a float32 answer for float32
    # inputs, or a float64 one, is caught by the hidden tests' dtype checks
    ("hw02", "additive mask ignores dtype"): "public tests pass a float64 dtype, the default of to_additive",
    ("hw02", "to_additive in float32"): "public tests ask for float32, where this answer is right",
    ("hw09", "rope returns float64 for float32 input"): "the public test runs float64 only",
    ("hw09", "alibi bias in float64 whatever the slopes' dtype"): "the public test runs float64 only",
    ("hw10", "induction score in float64 whatever the input"): "the public test runs float64 only",
    # the same values: the extra tile is all -inf, so it changes no sum; the hidden test that counts
    # the tiles computed (the work a causal mask saves) catches it
    ("hw08", "tiled: causal skip one tile late (off by one)"): "an extra, fully masked tile changes no value",
    # range(0, end - 1, BLOCK_K) drops a key block only when one starts at the block's last query
    # (end = i1 = j0 + 1); the public sizes (n = 20, blocks of 16) never do, a hidden case does
    ("hw11", "triton: causal skip one block early (off by one)"): "no public size puts a key block at the last query",
}


def categories(mutant: str) -> list[str]:
    """The readable causes whose pattern the mutant's name matches."""
    return [c for c, (pattern, _) in VOCABULARY.items() if re.search(pattern, mutant)]


def is_named(told: Told, category: str) -> bool:
    """Whether what the student is told names the cause ``category``."""
    accept = VOCABULARY[category][1]
    return told.kind == NAMED or (accept is not None and accept(told))


@functools.cache
def _table(name: str) -> dict[str, Told]:
    hw = homework(name)
    mutants = [m for m in load_mutants(hw) if categories(m) or (name, m) in EXEMPT]
    return {t.mutant: t for t in hint_table(name, mutants)} if mutants else {}


@pytest.mark.parametrize("name", HOMEWORK)
def test_readable_mistakes_get_a_named_hint(name):
    missing = []
    for mutant, told in _table(name).items():
        if (name, mutant) in EXEMPT:
            continue
        for category in categories(mutant):
            if not is_named(told, category):
                missing.append(f"{told.question} {mutant!r} ({category}): {told.text}")
    assert not missing, f"{name}: mistakes with a readable cause and no named hint:\n" + "\n".join(missing)


@pytest.mark.parametrize("name", HOMEWORK)
def test_a_named_hint_is_not_contradicted(name):
    """A known mistake that explains the failure is followed by no generic guess (the mutants with a
    readable cause; ``python -m tools.hint_table`` checks every mutant, more slowly: the
    public memory test of hw08 q2 takes seconds per mutant that reaches it)."""
    contradicted = [
        t.mutant
        for t in _table(name).values()
        if t.kind == NAMED and any(line.startswith(HINT_PREFIX) for line in t.message.splitlines())
    ]
    assert not contradicted, f"{name}: a named hint followed by a generic guess: {contradicted}"


@pytest.mark.parametrize("name", HOMEWORK)
def test_exemptions_still_hold(name):
    """An exempt mutant still gets no named hint (else its exemption goes), and exists."""
    mutants = load_mutants(homework(name))
    for homework_name, mutant in EXEMPT:
        if homework_name != name:
            continue
        assert mutant in mutants, f"EXEMPT names {mutant!r}, which {name}'s mutants.py does not list"
        assert categories(mutant), f"EXEMPT names {mutant!r}, whose name marks no readable cause"
        told = _table(name)[mutant]
        assert not any(is_named(told, c) for c in categories(mutant)), (
            f"{mutant!r} now gets a named hint ({told.text}): remove its exemption"
        )


def _failure(func, args, expected, **kwargs) -> str:
    from attngrade.checks import CheckFailure, check_call

    with pytest.raises(CheckFailure) as failure:
        check_call(func, "f", args, expected, **kwargs)
    return failure.value.message


def test_generic_diagnoses_name_polarity_precision_and_transposed_shapes():
    """The generic guesses behind VOCABULARY's lenient kinds: a negated mask, values right only to
    bfloat16 precision, a result of the transposed shape; a known mistake replaces them."""
    import torch

    keep = torch.ones(3, 4, dtype=torch.bool).tril()
    message = _failure(lambda m: ~m, (keep,), keep)
    assert f"{HINT_PREFIX}your mask is the negation of the expected one" in message
    named = _failure(
        lambda m: ~m, (keep,), keep, mistakes={"the keep-mask is True where a query MAY attend": lambda m: ~m}
    )
    assert named.startswith("Likely mistake: the keep-mask") and HINT_PREFIX not in named

    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    message = _failure(lambda t: t.bfloat16().double(), (x,), x)
    assert f"{HINT_PREFIX}the values are right only to about bfloat16 or float16 precision" in message

    message = _failure(lambda t: t.T.clone(), (x,), x)
    assert f"{HINT_PREFIX}your result is the transpose of the expected one" in message
    message = _failure(lambda t: torch.zeros(5, 4, dtype=t.dtype), (x,), x)
    assert f"{HINT_PREFIX}your result has the shape of the expected one transposed" in message
