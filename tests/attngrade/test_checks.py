"""Unit tests of attngrade.checks: the messages a student reads when a homework check fails."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from attngrade import checks
from attngrade.checks import HIDDEN_TESTS_NOTE, CheckFailure, call, check_call, expect, expect_close, format_tensor


def _attention(Q, K, V, mask=None, fill=-math.inf):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, fill)
    shift = S.amax(dim=-1, keepdim=True)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(S - shift)
    total = e.sum(dim=-1, keepdim=True)
    w = e / torch.where(total > 0, total, torch.ones_like(total))
    return w @ V, w


def _failure(*args, **kwargs) -> str:
    with pytest.raises(CheckFailure) as info:
        check_call(*args, **kwargs)
    return str(info.value)


@pytest.fixture
def qkv():
    gen = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((4, 3), (5, 3), (5, 2)))
    mask = torch.ones(4, 5, dtype=torch.bool).tril()
    mask[2] = False  # query 2 sees no key
    return Q, K, V, mask


def test_passing_check_returns_the_result(qkv):
    Q, K, V, mask = qkv
    got = check_call(_attention, "f", (Q, K, V), _attention(Q, K, V, mask), kwargs={"mask": mask})
    assert isinstance(got, tuple) and len(got) == 2


def test_every_failure_ends_with_the_hidden_tests_note_once(qkv):
    Q, K, V, mask = qkv
    cases = [
        lambda: check_call(lambda *a, **k: _attention(*a, **k)[1], "f", (Q, K, V), _attention(Q, K, V)),
        lambda: check_call(None, "f", (Q,), Q),
        lambda: check_call(lambda Q: 1 / 0, "f", (Q,), Q),
        lambda: check_call(lambda Q: Q[:2], "f", (Q,), Q),
        lambda: check_call(lambda Q: Q.float(), "f", (Q,), Q),
        lambda: check_call(lambda Q: Q + 1, "f", (Q,), Q),
        lambda: expect(False, "plain"),
        lambda: call(lambda Q: Q.mul_(2), "f", (Q,)),
    ]
    for case in cases:
        with pytest.raises(CheckFailure) as info:
            case()
        text = str(info.value)
        assert text.endswith(HIDDEN_TESTS_NOTE) and text.count(HIDDEN_TESTS_NOTE) == 1, text
        # re-raising the message (as a test might) does not repeat the note
        assert str(CheckFailure(text)).count(HIDDEN_TESTS_NOTE) == 1


def test_known_mistake_is_named_first(qkv):
    Q, K, V, mask = qkv
    hint = "did you fill masked scores with -1e9 instead of -inf?"
    wrong = lambda Q, K, V, mask=None: _attention(Q, K, V, mask, fill=-1e9)  # noqa: E731
    text = _failure(
        wrong,
        "masked_attention",
        (Q, K, V),
        _attention(Q, K, V, mask),
        kwargs={"mask": mask},
        mistakes={"softmax over the queries?": lambda Q, K, V, mask=None: _attention(K, Q, V), hint: wrong},
    )
    assert text.startswith(f"Likely mistake: {hint}")
    assert "softmax over the queries" not in text
    assert "row 2 should be all zeros" in text


def test_known_mistake_that_raises_or_matches_the_reference_is_ignored(qkv):
    Q, K, V, mask = qkv
    text = _failure(
        lambda Q: Q + 1,
        "f",
        (Q,),
        Q,
        mistakes={"boom": lambda Q: 1 / 0, "same as right": lambda Q: Q.clone(), "other": Q - 1},
    )
    assert "Likely mistake" not in text


def test_uniform_row_where_zeros_expected_is_diagnosed():
    S = torch.tensor([[0.5, -math.inf, 1.0], [-math.inf, -math.inf, -math.inf]], dtype=torch.float64)
    expected = torch.tensor([[0.3775406687981454, 0.0, 0.6224593312018546], [0.0, 0.0, 0.0]], dtype=torch.float64)
    text = _failure(lambda S: torch.softmax(S.nan_to_num(neginf=-1e9), -1), "weights_row", (S,), expected)
    assert "row 1 should be all zeros" in text and "uniform" in text and "-1e9" in text
    text = _failure(lambda S: torch.softmax(S, -1), "weights_row", (S,), expected)
    assert "nan" in text and "row 1 should be all zeros" in text


def test_small_tensors_print_as_matrices():
    keep = torch.ones(3, 4, dtype=torch.bool).tril()
    text = _failure(lambda: keep.T.contiguous().T.logical_not(), "causal_keep_mask", (), keep)
    assert "    [1  0  0  0]\n    [1  1  0  0]\n    [1  1  1  0]" in text
    assert "[0* 1* 1* 1*]" in text
    M = torch.tensor([[1.0, 2.0], [3.0, 4.123456]])
    assert format_tensor(M) == "    [    1      2]\n    [    3  4.123]"
    assert format_tensor(torch.tensor([-math.inf, math.nan, 0.0])) == "    [-inf   nan     0]"


def test_batches_print_each_matrix_and_large_tensors_their_worst_row():
    small = torch.zeros(2, 2, 3)
    text = format_tensor(small)
    assert "[0, :, :]:" in text and "[1, :, :]:" in text
    big = torch.zeros(10, 3, 20, 30, dtype=torch.float64)
    wrong = big.clone()
    wrong[7, 1, 12, 25] = 1.0
    text = _failure(lambda x: wrong, "f", (big,), big)
    assert "index (7, 1, 12, 25)" in text
    assert "row [7, 1, 12, 18:30]" in text
    assert text.count("\n") < 20
    many = torch.zeros(6, 3, 3)
    assert "the matrix [4, :, :] (of 6 in the batch)" in format_tensor(many, focus=(4, 0, 0))


def test_transposed_result_is_diagnosed():
    A = torch.randn(3, 3, dtype=torch.float64)
    assert "transpose" in _failure(lambda A: A.T, "f", (A,), A)
    B = torch.randn(3, 5, dtype=torch.float64)
    assert "transpose" in _failure(lambda B: B.T, "f", (B,), B)


def test_scaled_result_is_diagnosed():
    A = torch.randn(3, 4, dtype=torch.float64)
    assert "sqrt(4)" in _failure(lambda A: A * 2, "f", (A,), A) or "2 times" in _failure(lambda A: A * 2, "f", (A,), A)
    assert "sqrt(3)" in _failure(lambda A: A * math.sqrt(3), "f", (A,), A)


def test_dtype_other_than_the_inputs_fails_and_says_so():
    S = torch.randn(3, 4, dtype=torch.float32)
    text = _failure(lambda S: torch.softmax(S, -1).to(torch.bfloat16), "f", (S,), torch.softmax(S, -1))
    assert "expected dtype float32 (the dtype of the inputs" in text and "got bfloat16" in text


def test_lower_precision_arithmetic_fails():
    gen = torch.Generator().manual_seed(1)
    S = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    _failure(lambda S: torch.softmax(S.float(), -1).double(), "f", (S,), torch.softmax(S, -1))
    S32 = S.float()
    _failure(lambda S: torch.softmax(S.bfloat16(), -1).float(), "f", (S32,), torch.softmax(S32, -1))


def test_input_modified_in_place_fails_even_with_the_right_result():
    S = torch.randn(3, 4, dtype=torch.float64)
    original = S.clone()

    def in_place(S):
        S -= S.amax(dim=-1, keepdim=True)
        return torch.softmax(S, -1)

    text = _failure(in_place, "weights_row", (S,), torch.softmax(S, -1))
    assert "modified its input `S` (argument 1) in place" in text
    assert torch.equal(S, original)  # the test's own tensor is untouched
    mask = torch.ones(3, 4, dtype=torch.bool)
    text = _failure(lambda S, mask=None: (mask.logical_not_(), S)[1], "f", (S,), S, kwargs={"mask": mask})
    assert "`mask`" in text
    # allowed when asked
    check_call(in_place, "weights_row", (S,), torch.softmax(S, -1), check_inputs=False)
    # and reported beside a wrong result
    text = _failure(lambda S: S.mul_(2), "f", (S,), S)
    assert "Also:" in text and "in place" in text


def test_proxy_hook_reports_inputs_modified_elsewhere():
    class Proxy:
        def __init__(self, fn):
            self.fn = fn

        def __call__(self, *args, **kwargs):
            return self.fn(*[a.clone() for a in args], **kwargs)

        def call_returning_inputs(self, args, kwargs):
            return self.fn(*args, **kwargs), args, kwargs

    S = torch.randn(3, 4, dtype=torch.float64)
    bad = Proxy(lambda S: S.mul_(1).add_(1) - 1)
    Proxy.__module__ = "attngrade.sandboxes"
    assert "in place" in _failure(bad, "f", (S,), S)
    Proxy.__module__ = "student"  # only the grader's own proxies are trusted with the hook
    check_call(bad, "f", (S,), S)


def test_exceptions_and_missing_functions_are_worded():
    assert "`f` is not defined" in _failure(None, "f", (), torch.zeros(1))
    text = _failure(lambda: 1 / 0, "f", (), torch.zeros(1))
    assert "raised ZeroDivisionError" in text and "lambda" not in text


def test_expect_close_keeps_its_interface():
    expect_close(torch.ones(2), torch.ones(2), "x")
    with pytest.raises(AssertionError):
        expect_close(torch.zeros(2), torch.ones(2), "x", atol=0.5, rtol=0)


def test_checks_imports_with_torch_only():
    code = (
        "import sys\nimport attngrade.checks\n"
        "bad = [m for m in ('attnbook', 'yaml', 'otter', 'numpy.linalg.tests') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_float64_tolerance_is_tight_and_module_constants():
    assert checks.tolerances(torch.float64)["rtol"] <= 1e-9
    assert checks.tolerances(torch.float32)["rtol"] <= 1e-4


def test_lower_precision_is_diagnosed():
    gen = torch.Generator().manual_seed(2)
    S = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    assert "float32 precision" in _failure(
        lambda S: torch.softmax(S.float(), -1).double(), "f", (S,), torch.softmax(S, -1)
    )
    S32 = S.float()
    assert "bfloat16 or float16" in _failure(
        lambda S: torch.softmax(S.bfloat16(), -1).float(), "f", (S32,), torch.softmax(S32, -1)
    )


def test_describe_names_dict_values_by_dtype_and_shape():
    """Homework 7 passes weights as dicts: the feedback describes them, not their numbers."""
    import torch

    from attngrade.checks import describe

    weights = {"W_q": torch.zeros(6, 6, dtype=torch.float64), "b_q": torch.zeros(6)}
    assert describe(weights) == "{W_q: tensor float64 (6, 6), b_q: tensor float32 (6,)}"


def test_an_infinity_is_named_not_measured():
    """-1e9 where -inf is expected: the message says so, never "the largest error is 1.8e+308"."""
    expected = torch.tensor([[0.0, -math.inf], [0.0, 0.0]], dtype=torch.float64)
    got = torch.tensor([[0.0, -1e9], [0.0, 0.0]], dtype=torch.float64)
    text = _failure(lambda m: got, "to_additive", (expected,), expected)
    assert "-inf expected, got -1e+09" in text
    assert "e+308" not in text and "inf at index" not in text


def test_a_known_mistake_replaces_the_generic_guesses():
    """Slopes twice too large that a known mistake explains: its hint, and no "scale factor missing?"."""
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], dtype=torch.float64)
    doubled = 2 * slopes
    plain = _failure(lambda n: doubled, "slopes", (4,), slopes)
    assert "  Hint: " in plain  # without a known mistake, the generic guess is there
    text = _failure(lambda n: doubled, "slopes", (4,), slopes, mistakes={"do the slopes start at 1?": doubled})
    assert text.startswith("Likely mistake: do the slopes start at 1?")
    assert "  Hint: " not in text


def test_a_long_call_is_written_one_argument_per_line_and_dicts_by_shape():
    weights = {f"W_{name}": torch.zeros(8, 8) for name in "qkvo"} | {"b_q": torch.zeros(8), "nested": {"x": [1, 2]}}
    text = checks.describe_call("decoder_block", (torch.zeros(2, 5, 8), torch.zeros(2, 7, 8)), {"params": weights})
    lines = text.splitlines()
    assert lines[0] == "decoder_block(" and lines[-1] == "  )"
    assert max(len(line) for line in lines) < 2 * checks.CALL_WIDTH
    assert "W_q: tensor float32 (8, 8)" in text and "nested: {x: list of 2}" in text
    short = checks.describe_call("f", (torch.zeros(2, 3),))
    assert short == "f(tensor float32 (2, 3))"


def test_otter_reports_a_failed_check_without_the_tests_code():
    """Under otter (grader.check, otter run), a failed check is reported by its own message, never
    as "Error at line N" with the test's source line (a hidden test's, in results.json)."""
    exception_test = pytest.importorskip("otter.test_files.exception_test")
    checks._quiet_otter()
    report = exception_test.ExceptionTestFile._generate_error_message

    class Test:
        name = "q2"

    text = report(Test(), CheckFailure("f(tensor float64 (2, 2)): expected 1, got 2"))
    assert text.startswith("q2 failed:\nf(tensor float64 (2, 2)): expected 1, got 2")
    assert "Error at line" not in text
    checks._quiet_otter()  # applying it twice wraps once
    assert exception_test.ExceptionTestFile._generate_error_message is report
