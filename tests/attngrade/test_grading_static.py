"""The grader's static reading (flags for review, never scores): which answers name a forbidden reference or use dynamic code."""

from __future__ import annotations

import pytest

import attnbook  # noqa: F401  (the analyser resolves names among loaded modules)
import attnbook.core.column_convention  # noqa: F401
from attngrade.grading.static import analyze

FORBIDDEN = [
    "attnbook.softmax",
    "attnbook.core.column_convention.single_query_attention",
    "torch.nn.functional.scaled_dot_product_attention",
]
QUESTIONS = {"q1": ["softmax_beta"], "q3": ["single_query_attention"]}

CLEAN = """
import math
import torch
import attnbook

def softmax_beta(s, beta=1.0):
    e = torch.exp(beta * s - (beta * s).amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)

def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    q = W_q @ x + b_q
    return (W_v @ z + b_v[:, None]) @ softmax_beta((W_k @ z + b_k[:, None]).T @ q / math.sqrt(q.shape[0]))
"""


def flagged(*cells):
    return {q: bool(reasons) for q, reasons in analyze(list(cells), FORBIDDEN, QUESTIONS).items()}


def test_clean_solution_is_not_flagged():
    assert flagged(CLEAN) == {"q1": False, "q3": False}


def test_top_level_comparison_with_the_reference_is_allowed():
    check = "torch.testing.assert_close(softmax_beta(torch.ones(3)), attnbook.softmax(torch.ones(3)))\nhelp(attnbook.softmax)"
    assert flagged(CLEAN, check) == {"q1": False, "q3": False}


@pytest.mark.parametrize(
    "cheat",
    [
        "def softmax_beta(s, beta=1.0):\n    return attnbook.softmax(s, beta=beta)",
        "import attnbook as ab\ndef softmax_beta(s, beta=1.0):\n    return ab.softmax(s, beta=beta)",
        "from attnbook import softmax as sm\ndef softmax_beta(s, beta=1.0):\n    return sm(s, beta=beta)",
        "from attnbook.core.softmax import softmax\ndef softmax_beta(s, beta=1.0):\n    return softmax(s, beta=beta)",
        "from attnbook import *\ndef softmax_beta(s, beta=1.0):\n    return softmax(s, beta=beta)",
        "def softmax_beta(s, beta=1.0):\n    return getattr(attnbook, 'softmax')(s, beta=beta)",
        "def helper(s, beta):\n    return attnbook.softmax(s, beta=beta)\ndef softmax_beta(s, beta=1.0):\n    return helper(s, beta)",
    ],
)
def test_answer_that_names_the_reference_is_flagged_on_its_question_only(cheat):
    assert flagged(CLEAN, cheat) == {"q1": True, "q3": True}  # q3 calls softmax_beta


def test_reference_used_only_by_one_answer_flags_only_its_question():
    cheat = (
        "from attnbook.core.column_convention import single_query_attention as sqa\n"
        "def single_query_attention(*args):\n    return sqa(*args)"
    )
    assert flagged(CLEAN, cheat) == {"q1": False, "q3": True}


def test_torch_fused_kernel_alias_is_flagged():
    cheat = "import torch.nn.functional as F\ndef single_query_attention(*a):\n    return F.scaled_dot_product_attention(*a)"
    assert flagged(CLEAN, cheat) == {"q1": False, "q3": True}


@pytest.mark.parametrize(
    "binding",
    [
        "softmax_beta = attnbook.softmax",
        "import functools\nsoftmax_beta = functools.partial(attnbook.softmax, dim=-1)",
        "table = {'f': attnbook.softmax}",
        "softmax_beta = lambda s, beta=1.0: attnbook.softmax(s, beta=beta)",
    ],
)
def test_top_level_binding_of_the_reference_is_flagged_everywhere(binding):
    assert flagged(CLEAN, binding) == {"q1": True, "q3": True}


@pytest.mark.parametrize(
    "dynamic",
    [
        "exec('x = 1')",
        "import importlib",
        "from importlib import reload",
        "f = eval('attnbook.soft' + 'max')",
        "name = 'softmax'\ng = getattr(attnbook, name)",
        "import sys\nm = sys.modules['attnbook.core.softmax']",
        "x = softmax_beta.__globals__",
        "import gc",
        "y = torch.ops.aten",
    ],
)
def test_dynamic_code_at_top_level_is_flagged_everywhere(dynamic):
    assert flagged(CLEAN, dynamic) == {"q1": True, "q3": True}


def test_dynamic_code_inside_an_answer_is_flagged_on_that_answer():
    cheat = "def single_query_attention(*a):\n    return getattr(attnbook.core.column_convention, 'single_' + 'query_attention')(*a)"
    assert flagged(CLEAN, cheat) == {"q1": False, "q3": True}


def test_reasons_are_readable():
    cheat = "def softmax_beta(s, beta=1.0):\n    return attnbook.softmax(s, beta=beta)"
    reasons = analyze([CLEAN, cheat], FORBIDDEN, QUESTIONS)["q1"]
    assert any("attnbook.softmax" in r and "softmax_beta" in r for r in reasons)


def test_magics_and_syntax_errors_do_not_break_the_analysis():
    assert flagged("%matplotlib inline\n!ls\n" + CLEAN, "def broken(:\n    pass") == {"q1": False, "q3": False}


def test_every_parse_in_the_grading_process_takes_the_lock():
    """The grading threads parse notebooks concurrently; CPython 3.11's AST converter keeps one
    recursion counter per interpreter, so a raw ``ast.parse`` there can fail with "AST constructor
    recursion depth mismatch" on a sound notebook (attngrade.grading.parsing). Every module of the
    host's grading stage parses through ``parsing.parse``."""
    import ast as ast_module
    import pathlib

    import attngrade.grading as grading

    raw = []
    for module in sorted(pathlib.Path(grading.__file__).parent.glob("*.py")):
        if module.name == "parsing.py":
            continue
        for node in ast_module.walk(ast_module.parse(module.read_text(encoding="utf-8"))):
            func = getattr(node, "func", None)
            if isinstance(node, ast_module.Call) and isinstance(func, ast_module.Attribute) and func.attr == "parse":
                if isinstance(func.value, ast_module.Name) and func.value.id == "ast":
                    raw.append(f"{module.name}:{node.lineno}")
    assert not raw, f"ast.parse outside grading/parsing.py: {raw}"


def test_the_parse_lock_is_held_while_static_checks_parse(monkeypatch):
    from attngrade.grading import parsing

    seen = []
    real = parsing.ast.parse

    def recording(source, *args, **kwargs):
        seen.append(parsing._LOCK._is_owned())
        return real(source, *args, **kwargs)

    monkeypatch.setattr(parsing.ast, "parse", recording)
    assert parsing.parse("x = 1").body
    assert seen == [True]
