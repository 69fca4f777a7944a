"""attnbook.lab.thresholds (trained-model claims that record their margin) and the check-seeds runner's parts."""

import json
import math

import nbformat
import pytest
import torch

from attnbook.lab.thresholds import assert_at_least, assert_at_most, recorded
from tools.check_seeds import Run, report, seed_line_of


@pytest.fixture(autouse=True)
def no_runner(monkeypatch):
    monkeypatch.delenv("ATTNBOOK_MARGINS", raising=False)
    monkeypatch.delenv("ATTNBOOK_MARGINS_SOFT", raising=False)


def test_a_claim_that_holds_returns_its_margin_and_is_recorded():
    assert assert_at_least(0.97, 0.9, "accuracy") == pytest.approx(0.07)
    assert assert_at_most(torch.tensor(0.25), 1.0, "loss") == pytest.approx(0.75)
    last = recorded()[-1]
    assert last == {"claim": "loss", "value": 0.25, "bound": 1.0, "relation": "<=", "margin": 0.75}


def test_a_claim_that_fails_raises_with_its_numbers():
    with pytest.raises(AssertionError, match=r"accuracy: 0\.5 >= 0\.9 does not hold"):
        assert_at_least(0.5, 0.9, "accuracy")
    with pytest.raises(AssertionError, match="loss"):
        assert_at_most(2.0, 1.0, "loss")


def test_nan_never_satisfies_a_claim():
    with pytest.raises(AssertionError):
        assert_at_least(math.nan, 0.0, "nan")
    with pytest.raises(AssertionError):
        assert_at_most(torch.tensor(float("nan")), 1.0, "nan")


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        assert_at_least(torch.ones(2), 0.0, "two numbers")
    with pytest.raises(TypeError, match="str"):
        assert_at_least("1", 0.0, "a string")
    with pytest.raises(TypeError, match="claim"):
        assert_at_least(1.0, 0.0, "")


def test_the_runner_mode_writes_every_claim_and_does_not_raise(tmp_path, monkeypatch):
    sink = tmp_path / "margins.jsonl"
    monkeypatch.setenv("ATTNBOOK_MARGINS", str(sink))
    monkeypatch.setenv("ATTNBOOK_MARGINS_SOFT", "1")
    assert assert_at_least(0.5, 0.9, "fails softly") == pytest.approx(-0.4)
    assert_at_most(0.1, 0.2, "holds")
    lines = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [line["claim"] for line in lines] == ["fails softly", "holds"]
    assert lines[0]["margin"] < 0 < lines[1]["margin"]


def chapter(*sources):
    return [nbformat.v4.new_markdown_cell("# A chapter")] + [nbformat.v4.new_code_cell(s) for s in sources]


def test_the_seed_line_is_found_only_in_the_first_code_cell():
    assert seed_line_of(chapter("import torch\nSEED = 7  # every seed\n", "x = 1")) == (1, 7)
    with pytest.raises(ValueError, match="0 lines"):
        seed_line_of(chapter("import torch", "SEED = 7"))
    with pytest.raises(ValueError, match="2 lines"):
        seed_line_of(chapter("SEED = 1\nSEED = 2"))
    with pytest.raises(ValueError, match="no code cell"):
        seed_line_of([nbformat.v4.new_markdown_cell("SEED = 1")])


def claim(name, value, bound, relation=">="):
    margin = value - bound if relation == ">=" else bound - value
    return {"claim": name, "value": value, "bound": bound, "relation": relation, "margin": margin}


def test_the_report_gives_each_claims_worst_margin_and_fails_on_any_seed(capsys):
    runs = [
        Run("07_x.md", 1, 3.0, [claim("accuracy", 0.99, 0.95), claim("loss", 0.2, 0.5, "<=")]),
        Run("07_x.md", 2, 3.0, [claim("accuracy", 0.97, 0.95), claim("loss", 0.1, 0.5, "<=")]),
    ]
    assert report(runs)
    out = capsys.readouterr().out
    assert "accuracy" in out and "0.02" in out and "0.3" in out
    runs.append(Run("07_x.md", 3, 3.0, [claim("accuracy", 0.9, 0.95), claim("loss", 0.1, 0.5, "<=")]))
    assert not report(runs)
    assert "FAILS" in capsys.readouterr().out


def test_a_run_that_raised_fails_the_report(capsys):
    assert not report([Run("09_x.md", 4, 1.0, [claim("accuracy", 1.0, 0.5)], error="AssertionError: boom")])
    assert "FAILED: AssertionError: boom" in capsys.readouterr().out
