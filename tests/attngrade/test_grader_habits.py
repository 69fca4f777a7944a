"""Honest notebooks get full marks, whatever ordinary Jupyter habit they show.

Each habit is one honest hw01 notebook (the solutions) that also does something students do:
time a cell, ask for help, install a package, compare their answer with the course package's in
a loop, plot, save after exporting, use Windows line endings, name the file after themselves, send
the zip of ``grader.export()``... All of them are written into one class folder and graded in one
batch (``Grader.grade_paths``, as the command line does); one test per habit checks its row.
"""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from attngrade.grading.grader import Grader

from ..homework_support import bwrap_available, homework
from ..submissions import submission_with

pytestmark = pytest.mark.skipif(bwrap_available() is not None, reason=f"no sandbox here: {bwrap_available()}")

FULL = {"q1": 5, "q2": 4, "q3": 5, "q4": 4, "q5": 4}
LIMITS = {"cell_timeout": 5.0, "call_timeout": 5.0, "call_grace": 2.0, "exec_timeout": 20.0, "submission_timeout": 40.0}


def hw():
    return homework("hw01")


def solutions():
    return submission_with(hw(), {})


def code(source, outputs=None, count=None):
    return {"cell_type": "code", "metadata": {}, "outputs": outputs or [], "execution_count": count, "source": source}


def markdown(source):
    return {"cell_type": "markdown", "metadata": {}, "source": source}


def _source(cell):
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def _index_of(nb, needle):
    return next(k for k, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and needle in _source(c))


def with_cells(before=(), after=(), at="import torch"):
    """The solutions with cells inserted after the imports cell (``before``) and at the end."""
    nb = solutions()
    k = _index_of(nb, at) + 1
    nb["cells"][k:k] = [c if isinstance(c, dict) else code(c) for c in before]
    nb["cells"] += [c if isinstance(c, dict) else code(c) for c in after]
    return nb


def edited(function, edit):
    """The solutions with the cell defining ``function`` changed by ``edit(source) -> source``."""
    nb = solutions()
    cell = nb["cells"][_index_of(nb, f"def {function}(")]
    cell["source"] = edit(_source(cell))
    return nb


def saved_after_export():
    """As Jupyter saves it after Run All and grader.export(): outputs, counts, an image, widgets."""
    nb = solutions()
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    n = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        n += 1
        cell["execution_count"] = n
        src = _source(cell)
        if "grader.check(" in src:
            cell["outputs"] = [
                {
                    "output_type": "execute_result",
                    "execution_count": n,
                    "metadata": {},
                    "data": {
                        "text/plain": ["q1 results: All test cases passed!"],
                        "text/html": ["<p><strong>q1</strong> passed!</p>"],
                    },
                }
            ]
        elif "grader.export(" in src:
            cell["outputs"] = [
                {
                    "output_type": "stream",
                    "name": "stdout",
                    "text": ["Running your submission against local test cases...\n"],
                },
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {
                        "text/html": [
                            "<p>Your submission has been exported. Click <a href='hw01_2024.zip' download>here</a></p>"
                        ],
                        "text/plain": ["<IPython.core.display.HTML object>"],
                    },
                },
                {
                    "output_type": "stream",
                    "name": "stderr",
                    "text": ["Kernel is running over TCP without encryption\n"],
                },
            ]
        else:
            cell["outputs"] = [
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {"image/png": png, "text/plain": ["<Figure size 640x480 with 1 Axes>"]},
                }
            ]
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}}
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def crlf_notebook():
    nb = solutions()
    for cell in nb["cells"]:
        lines = _source(cell).split("\n")
        cell["source"] = [line + "\r\n" for line in lines[:-1]] + [lines[-1]]
    return nb


#: the hw01 comparisons students write: loops over inputs, comparing with the course's functions
#: (which the homework forbids in answers; here they only name them, at top level or in a helper)
COMPARE_LOOP = """
import attnbook
from attnbook import attention as reference_attention
for n in range(3):
    s = torch.randn(4, 5)
    print(n, torch.allclose(softmax_beta(s), attnbook.softmax(s)))
    q, K, V = torch.randn(3), torch.randn(3, 6), torch.randn(2, 6)
    print(torch.allclose(retrieve(q, K, V, 1.0), reference_attention(q[None], K.T, V.T, scale=1.0)[0][0]))
"""

COMPARE_HELPER = """
def check_against_the_book(fn=softmax_beta):
    s = torch.randn(4, 5)
    return torch.allclose(fn(s), attnbook.softmax(s)) and attnbook.attention is not None

if False:
    check_against_the_book()
"""


#: comparisons with the course's own functions, written at top level in an answer cell: in the
#: student's Jupyter they run; while grading the references are absent and raise, which must cost
#: neither the definition nor a point, wherever the line sits (and a line using its result fails too)
COMPARE_ABOVE = "expected = attnbook.softmax(torch.zeros(2, 3))\nprint(expected.shape)\n"
COMPARE_SDPA = (
    "import torch.nn.functional as F\n"
    "expected = F.scaled_dot_product_attention(torch.zeros(1, 2, 3), torch.zeros(1, 4, 3), torch.zeros(1, 4, 3))\n"
)
COMPARE_BELOW = "\nprint(torch.allclose(softmax_beta(torch.zeros(2, 3)), attnbook.softmax(torch.zeros(2, 3))))\n"


def compare_between(source: str) -> str:
    """A comparison line after the docstring, inside nothing: between two top-level statements."""
    return source.replace("\ndef ", "\nexpected = attnbook.softmax(torch.zeros(2, 3))\n\n\ndef ", 1)


# habit -> (file name, notebook dict or raw bytes)
def habits() -> dict[str, tuple[str, object]]:
    table: dict[str, tuple[str, object]] = {
        "plain_solutions": ("plain_solutions.ipynb", solutions()),
        "cell_time_magic_around_a_definition": (
            "cell_time_magic.ipynb",
            edited("softmax_beta", lambda s: "%%time\n" + s),
        ),
        "cell_time_magic_with_crlf": (
            "cell_time_magic_crlf.ipynb",
            edited("retrieve", lambda s: ("%%time\n" + s).replace("\n", "\r\n")),
        ),
        "cell_capture_magic_around_a_definition": (
            "cell_capture_magic.ipynb",
            edited("project", lambda s: "%%capture captured\n" + s),
        ),
        "line_time_magic": (
            "line_time_magic.ipynb",
            with_cells(
                after=[
                    "%time s = softmax_beta(torch.randn(3, 4))",
                    "%timeit -n 1 -r 1 softmax_beta(torch.randn(3, 4))",
                    "%time\nx = 1",
                ]
            ),
        ),
        "matplotlib_inline": (
            "matplotlib_inline.ipynb",
            with_cells(
                before=[
                    "%matplotlib inline\n%config InlineBackend.figure_format = 'retina'",
                    "%load_ext autoreload\n%autoreload 2",
                ]
            ),
        ),
        "pip_install": (
            "pip_install.ipynb",
            with_cells(before=["!pip install torch matplotlib", "%pip install -q numpy", "!ls -la\nfiles = !ls"]),
        ),
        "help_call": ("help_call.ipynb", with_cells(after=["help(torch.softmax)", "help(softmax_beta)"])),
        "question_mark_help": (
            "question_mark_help.ipynb",
            with_cells(after=["softmax_beta?", "torch.softmax??", "?retrieve"]),
        ),
        "import_inspect": (
            "import_inspect.ipynb",
            with_cells(
                before=["import inspect"],
                after=["print(inspect.getsource(softmax_beta))\nprint(inspect.signature(retrieve))"],
            ),
        ),
        "star_import": ("star_import.ipynb", with_cells(before=["from attnbook import *\nfrom math import *"])),
        "loop_comparing_with_the_references": ("compare_loop.ipynb", with_cells(after=[COMPARE_LOOP])),
        "helper_naming_the_references": ("compare_helper.ipynb", with_cells(after=[COMPARE_HELPER])),
        "compare_above_the_def": ("compare_above.ipynb", edited("softmax_beta", lambda s: COMPARE_ABOVE + s)),
        "compare_with_a_fused_kernel_above_the_def": (
            "compare_sdpa_above.ipynb",
            edited("retrieve", lambda s: COMPARE_SDPA + s),
        ),
        "compare_below_the_def": ("compare_below.ipynb", edited("softmax_beta", lambda s: s + COMPARE_BELOW)),
        "compare_above_and_below_the_def": (
            "compare_above_below.ipynb",
            edited("project", lambda s: COMPARE_ABOVE + s + COMPARE_BELOW),
        ),
        "compare_between_two_statements": (
            "compare_between.ipynb",
            edited("attention_moments", lambda s: "_seen = 1\n" + compare_between("\n" + s)),
        ),
        "compare_in_a_cell_of_its_own_above": (
            "compare_own_cell.ipynb",
            with_cells(before=[COMPARE_ABOVE + "print(torch.allclose(expected, expected))"]),
        ),
        "markdown_and_raw_cells": (
            "markdown_and_raw.ipynb",
            with_cells(
                before=[
                    markdown("# My notes\nSoftmax is $e^x / \\sum e^x$."),
                    {"cell_type": "raw", "metadata": {}, "source": "raw text, not code: def softmax_beta(: ..."},
                ],
                after=[markdown(["## done\n", "thanks"])],
            ),
        ),
        "input_call": ("input_call.ipynb", with_cells(after=["name = input('your name? ')\nprint('hi', name)"])),
        "a_cell_that_raises": (
            "cell_raises.ipynb",
            with_cells(
                after=["raise ValueError('I was experimenting')", "undefined_name + 1", "import does_not_exist"]
            ),
        ),
        "display_calls": (
            "display_calls.ipynb",
            with_cells(
                after=[
                    "from IPython.display import display, Markdown, HTML\ndisplay(Markdown('**hi**'))\n"
                    "display(softmax_beta(torch.zeros(3)))\nHTML('<b>x</b>')"
                ]
            ),
        ),
        "plots_with_show": (
            "plots_with_show.ipynb",
            with_cells(
                after=[
                    "import matplotlib.pyplot as plt\ns = torch.linspace(-3, 3, 50)\nfig, ax = plt.subplots()\n"
                    "for beta in (0.5, 1, 2):\n    ax.plot(s, softmax_beta(torch.stack([s, torch.zeros_like(s)], -1), beta)[:, 0])\n"
                    "plt.show()\nfig.savefig('plot.png')\nplt.close('all')"
                ]
            ),
        ),
        "grader_check_and_export": (
            "grader_calls.ipynb",
            with_cells(
                after=[
                    "grader.check_all()",
                    "grader.check('q3')\ngrader.export(pdf=False, run_tests=True)",
                    "grader.export()",
                ]
            ),
        ),
        "saved_after_export": ("saved_after_export.ipynb", saved_after_export()),
        "crlf_line_endings": (
            "crlf_line_endings.ipynb",
            json.dumps(crlf_notebook(), indent=1).replace("\n", "\r\n").encode("utf-8"),
        ),
        "byte_order_mark": ("byte_order_mark.ipynb", b"\xef\xbb\xbf" + json.dumps(solutions()).encode("utf-8")),
        "name_with_spaces": ("Anna Lee hw01.ipynb", solutions()),
        "name_with_commas": ("Lee, Anna, hw01.ipynb", solutions()),
        "name_with_quotes": ('O\'Brien "Bob" hw01.ipynb', solutions()),
        "name_non_ascii": ("Zoë Łukasz Ñandú 学生 hw01.ipynb", solutions()),
        "very_long_name": ("student_" + "x" * 200 + ".ipynb", solutions()),
        "name_with_a_leading_tab": ("\tTab Student.ipynb", solutions()),
        "name_with_a_newline": ("New\nLine.ipynb", solutions()),
        "name_with_a_leading_dash": ("-rf --dash.ipynb", solutions()),
        "zip_export": ("export_zip.zip", _zip_of(solutions())),
        "autograder_notebook": ("autograder_format.ipynb", hw().autograder_notebook.read_bytes()),
        "prints_a_lot": (
            "prints_a_lot.ipynb",
            with_cells(after=["for k in range(20000):\n    print(k, 'All tests passed!' if k % 2 else 'x' * 50)"]),
        ),
        "main_guard_and_type_hints": (
            "main_guard.ipynb",
            with_cells(
                after=[
                    "from typing import Callable\nf: Callable = softmax_beta\nif __name__ == '__main__':\n    print(f(torch.ones(2)))"
                ]
            ),
        ),
        "writes_files": (
            "writes_files.ipynb",
            with_cells(
                after=[
                    "torch.save({'w': torch.ones(2)}, 'weights.pt')\nopen('notes.txt', 'w').write('hello')\n"
                    "import os\nos.makedirs('out', exist_ok=True)"
                ]
            ),
        ),
    }
    return table


def _zip_of(nb) -> bytes:
    """What ``grader.export()`` writes: the notebook, otter's log, and macOS's extras."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("hw01.ipynb", json.dumps(nb, indent=1))
        z.writestr(".OTTER_LOG", b"\x80\x04binary log")
        z.writestr("__MACOSX/._hw01.ipynb", b"\x00\x05\x16\x07")
    return buf.getvalue()


def _stem(file_name: str) -> str:
    return file_name.rsplit(".", 1)[0]


HABITS = list(habits())


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("habits") / "class"
    folder.mkdir()
    table = habits()
    for file_name, content in table.values():
        data = content if isinstance(content, bytes) else json.dumps(content, indent=1).encode("utf-8")
        (folder / file_name).write_bytes(data)
    with Grader(hw(), jobs=2, limits=LIMITS, hide=[folder]) as grader:
        results = grader.grade_paths(sorted(folder.iterdir()))
    by_name = {r.submission: r for r in results}
    return table, by_name


@pytest.mark.parametrize("habit", HABITS)
def test_an_honest_notebook_gets_full_marks_with_this_habit(habit, graded):
    table, by_name = graded
    file_name = table[habit][0]
    assert _stem(file_name) in by_name, sorted(by_name)
    result = by_name[_stem(file_name)]
    detail = {
        "status": result.status,
        "error": result.error,
        "notes": result.notes,
        "cells": result.execution_errors,
        "review": result.review,
        "failed": [f"{q.name}/{c.name}: {c.message[:300]}" for q in result.questions for c in q.cases if not c.passed],
    }
    assert {q.name: q.score for q in result.questions} == FULL, detail
    assert result.total == result.possible == 22, detail
    assert result.status in ("ok", "review"), detail


def test_every_file_is_a_row_named_after_it(graded):
    table, by_name = graded
    assert sorted(by_name) == sorted(_stem(f) for f, _ in table.values())


@pytest.mark.parametrize(
    "habit",
    [
        "plain_solutions",
        "cell_time_magic_around_a_definition",
        "star_import",
        "import_inspect",
        "help_call",
        "crlf_line_endings",
        "saved_after_export",
    ],
)
def test_habits_that_name_no_reference_are_not_flagged(habit, graded):
    table, by_name = graded
    result = by_name[_stem(table[habit][0])]
    assert result.review == [] and result.status == "ok", result.review
