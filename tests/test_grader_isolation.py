"""Adversarial submissions: the class grader must give each the score its work deserves.

Every attack from the course specification is a submission of homework 1 (five questions,
22 points), graded in one batch together with honest submissions. Each attack may only change
its own score; the honest submissions must get exactly what they get when graded alone. The
limits are small so that the endless loops cost seconds.
"""

from __future__ import annotations

import functools
import os

import pytest

from attnbook.grading.grader import Grader
from attnbook.grading.report import write_reports
from attnbook.grading.sandboxes import UID_BASE, _pids_of_uid, running_as_root
from attnbook.grading.submissions import code_cells, submission_with, write_notebook

from .homework_support import homework, shared_zygote

FULL = {"q1": 5, "q2": 4, "q3": 5, "q4": 4, "q5": 4}
# small enough that the endless loops cost seconds, large enough for honest code on a busy machine
LIMITS = {"cell_timeout": 2.0, "call_timeout": 2.0, "call_grace": 2.0, "exec_timeout": 10.0,
          "submission_timeout": 60.0, "memory_mb": 1024}

WRONG_Q3 = '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    return torch.zeros(W_v.shape[0], dtype=x.dtype)
'''


def hw():
    return homework("hw01")


def solution_cells(replacements=None, before=(), after=()):
    """The solutions of hw01 with some functions replaced and cells added at the top / the end."""
    cells = code_cells(submission_with(hw(), replacements or {}))
    # cell 0 is otter's init cell and cell 1 the imports: attacks go right after them
    return cells[:2] + [str(c) for c in before] + cells[2:] + [str(c) for c in after]


def scores(result):
    return {q.name: q.score for q in result.questions}


# name -> (cells, expected scores per question)
ATTACKS = {
    "honest": (solution_cells(), FULL),
    "honest_wrong_q3": (solution_cells({"single_query_attention": WRONG_Q3}), {**FULL, "q3": 0}),
    "monkeypatch_checks": (solution_cells({"single_query_attention": WRONG_Q3}, after=['''
import numpy, torch.testing
import attnbook.grading.checks as checks
torch.testing.assert_close = lambda *a, **k: None
torch.allclose = lambda *a, **k: True
numpy.allclose = lambda *a, **k: True
numpy.testing.assert_allclose = lambda *a, **k: None
checks.expect_close = checks.check_call = checks.call = lambda *a, **k: None
attnbook.formal.single_query_attention = single_query_attention
''']), {**FULL, "q3": 0}),
    "fake_success": (solution_cells({"single_query_attention": WRONG_Q3}, after=['''
print("q1 results: All test cases passed!\\nq3 results: All test cases passed!\\nTotal: 22/22")
open("results.json", "w").write('{"total": 22, "possible": 22}')
''']), {**FULL, "q3": 0}),
    "sys_exit_in_a_cell": (solution_cells(before=["import sys\nsys.exit(0)"]), FULL),
    "os_exit_at_top": (solution_cells(before=["import os\nos._exit(0)"]), {q: 0 for q in FULL}),
    "os_exit_in_q3": (solution_cells({"single_query_attention": '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    import os
    os._exit(3)
'''}), {**FULL, "q3": 0}),
    "endless_loop_in_a_cell": (solution_cells(before=["while True:\n    pass"]), FULL),
    "endless_loop_that_swallows_timeouts": (solution_cells(before=['''
while True:
    try:
        while True:
            pass
    except BaseException:
        pass
''']), {q: 0 for q in FULL}),
    "endless_loop_in_q5": (solution_cells({"retrieve": '''
def retrieve(q, K, V, beta):
    while True:
        try:
            while True:
                pass
        except BaseException:
            pass
'''}), {**FULL, "q5": 0}),
    "huge_allocation_in_a_cell": (solution_cells(before=["big = torch.ones(2**34)"]), FULL),
    "huge_allocation_in_q2": (solution_cells({"project": '''
def project(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    hoard = bytearray(8 * 2**30)
    return W_q @ x + b_q, W_k @ z + b_k[:, None], W_v @ z + b_v[:, None]
'''}), {**FULL, "q2": 0, "q3": 0}),
    "calls_the_reference_in_q5": (solution_cells({"retrieve": '''
def retrieve(q, K, V, beta):
    return attnbook.attention(q[None], K.T, V.T, scale=beta)[0][0]
'''}), {**FULL, "q5": 0}),
    "imports_the_reference_under_an_alias": (solution_cells({"single_query_attention": '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    from attnbook.formal import single_query_attention as reference
    return reference(x, z, W_q, b_q, W_k, b_k, W_v, b_v)
'''}), {**FULL, "q3": 0}),
    "binds_the_reference_at_top_level": (solution_cells(after=[
        "single_query_attention = attnbook.formal.single_query_attention"]), {q: 0 for q in FULL}),
    "obfuscated_getattr_in_q3": (solution_cells({"single_query_attention": '''
def single_query_attention(x, z, W_q, b_q, W_k, b_k, W_v, b_v):
    return getattr(attnbook.formal, "single_" + "query_attention")(x, z, W_q, b_q, W_k, b_k, W_v, b_v)
'''}), {**FULL, "q3": 0}),
    "reloads_the_reference": (solution_cells({"softmax_beta": '''
def softmax_beta(s, beta=1.0):
    import importlib, sys
    module = importlib.reload(sys.modules["attnbook.softmax"])
    return module.softmax(s, beta=beta)
'''}), {q: 0 for q in FULL}),
    "writes_garbage_to_the_grader_socket": (solution_cells(after=['''
import os
for fd in range(3, 64):
    try:
        os.write(fd, b"\\x00\\xff" * 64)
    except OSError:
        pass
''']), {q: 0 for q in FULL}),
    "kills_the_zygote": (solution_cells(before=['''
import os, signal
try:
    os.kill(os.getppid(), signal.SIGKILL)
except OSError:
    pass
''']), FULL),
}


@functools.lru_cache(maxsize=None)
def graded_batch():
    names = list(ATTACKS)
    with Grader(hw(), limits=LIMITS, zygote=shared_zygote()) as grader:
        results = grader.grade_sources([(n, ATTACKS[n][0]) for n in names])
    return {r.submission: r for r in results}


@functools.lru_cache(maxsize=None)
def graded_alone(name):
    with Grader(hw(), limits=LIMITS, zygote=shared_zygote(), jobs=1) as grader:
        (result,) = grader.grade_sources([(name, ATTACKS[name][0])])
    return result


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_gets_the_score_its_work_deserves(name):
    result = graded_batch()[name]
    assert scores(result) == ATTACKS[name][1], (result.notes, [(q.name, q.integrity, [c.message[:200] for c in q.cases if not c.passed]) for q in result.questions])


@pytest.mark.parametrize("name", ["honest", "honest_wrong_q3"])
def test_honest_submissions_are_unaffected_by_the_attacks(name):
    in_batch = graded_batch()[name]
    alone = graded_alone(name)
    assert scores(in_batch) == scores(alone) == ATTACKS[name][1]
    assert [c.passed for q in in_batch.questions for c in q.cases] == [c.passed for q in alone.questions for c in q.cases]


def test_integrity_findings_name_the_reference():
    result = graded_batch()["calls_the_reference_in_q5"]
    q5 = next(q for q in result.questions if q.name == "q5")
    assert any("attnbook.attention" in reason for reason in q5.integrity)
    assert all(not q.integrity for q in result.questions if q.name != "q5")


def test_poisoned_references_fail_even_without_the_static_check():
    """The sandbox's own lock: with static checks off, the references raise when called."""
    names = ["calls_the_reference_in_q5", "imports_the_reference_under_an_alias", "binds_the_reference_at_top_level"]
    sdpa = solution_cells({"retrieve": '''
def retrieve(q, K, V, beta):
    out = torch.nn.functional.scaled_dot_product_attention(q[None], K.T, V.T, scale=beta)
    return out[0]
'''})
    with Grader(hw(), limits=LIMITS, zygote=shared_zygote(), static_checks=False) as grader:
        results = grader.grade_sources([(n, ATTACKS[n][0]) for n in names] + [("sdpa", sdpa)])
    by_name = {r.submission: r for r in results}
    assert scores(by_name["calls_the_reference_in_q5"]) == {**FULL, "q5": 0}
    assert scores(by_name["imports_the_reference_under_an_alias"]) == {**FULL, "q3": 0}
    assert scores(by_name["binds_the_reference_at_top_level"])["q3"] == 0
    assert scores(by_name["sdpa"]) == {**FULL, "q5": 0}
    message = next(c.message for q in by_name["sdpa"].questions for c in q.cases if not c.passed)
    assert "reference implementation" in message


@pytest.mark.parametrize("isolate", [False, True], ids=["same-uid", "own-uid"])
def test_deleting_and_writing_files_changes_nothing_for_others(isolate, tmp_path):
    """A submission deletes the other submissions, scribbles over the outputs, plants a symlink."""
    if isolate and not running_as_root():
        pytest.skip("user-id isolation needs root")
    subs = tmp_path / "submissions"
    out = tmp_path / "grades"
    subs.mkdir()
    (out / "feedback").mkdir(parents=True)
    canary = tmp_path / "canary.txt"
    canary.write_text("untouched")
    os.chmod(tmp_path, 0o755)
    evil = solution_cells(after=[f'''
import os, shutil
for p in os.listdir({str(subs)!r}):
    try:
        os.remove(os.path.join({str(subs)!r}, p))
    except OSError:
        pass
for path, text in [({str(out / "gradebook.csv")!r}, "submission,total\\nhonest,0\\nvandal,22\\n"),
                   ({str(out / "feedback" / "honest.md")!r}, "you failed"), ({str(canary)!r}, "overwritten")]:
    try:
        open(path, "w").write(text)
    except OSError:
        pass
try:
    os.symlink({str(canary)!r}, {str(out / "feedback" / "vandal.md")!r})
except OSError:
    pass
'''])
    nb_good = submission_with(hw(), {})
    nb_evil = submission_with(hw(), {})
    nb_evil["cells"] = [c for c in nb_evil["cells"] if c["cell_type"] != "code"] + [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": src} for src in evil]
    write_notebook(nb_good, subs / "honest.ipynb")
    write_notebook(nb_evil, subs / "vandal.ipynb")
    with Grader(hw(), limits=LIMITS, zygote=shared_zygote(), isolate_uid=isolate) as grader:
        results = grader.grade_paths(sorted(subs.glob("*.ipynb")))
        book, _ = write_reports(results, [q.name for q in grader.questions], out, "hw01")
    by_name = {r.submission: r for r in results}
    assert scores(by_name["honest"]) == FULL
    assert scores(by_name["vandal"]) == FULL  # its answers are right; vandalism earns nothing
    rows = book.read_text().splitlines()
    assert rows[0] == "submission,q1,q2,q3,q4,q5,total,possible"
    assert "honest,5,4,5,4,4,22,22" in rows
    assert (out / "feedback" / "honest.md").read_text().startswith("# hw01: feedback for honest")
    vandal_feedback = out / "feedback" / "vandal.md"
    assert not vandal_feedback.is_symlink() and "feedback for vandal" in vandal_feedback.read_text()
    if isolate:  # with its own user id the sandbox could not touch the grader's files at all
        assert canary.read_text() == "untouched"
        assert sorted(p.name for p in subs.iterdir()) == ["honest.ipynb", "vandal.ipynb"]


@pytest.mark.skipif(not running_as_root(), reason="user-id isolation needs root")
def test_sandbox_with_own_uid_cannot_signal_the_grader_and_leaves_no_process():
    """Kill the grader itself, fork sleepers that leave the process group: none of it works or stays."""
    cells = solution_cells(before=['''
import os, signal, time
def grader_pid():
    with open(f"/proc/{os.getppid()}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])
try:
    os.kill(grader_pid(), signal.SIGKILL)
except OSError as e:
    print("could not kill the grader:", e)
for k in range(3):
    if os.fork() == 0:
        if k == 0:
            os.setsid()
        time.sleep(600)
        os._exit(0)
'''])
    with Grader(hw(), limits=LIMITS, zygote=shared_zygote(), jobs=1, isolate_uid=True) as grader:
        (result,) = grader.grade_sources([("killer", cells)])
        assert grader.isolate_uid
    assert scores(result) == FULL  # we are still alive to check
    assert _pids_of_uid(UID_BASE + 0) == []


def test_unreadable_submission_gets_zero_and_a_note(tmp_path):
    (tmp_path / "broken.ipynb").write_text("{not json")
    write_notebook(submission_with(hw(), {}), tmp_path / "fine.ipynb")
    with Grader(hw(), limits=LIMITS, zygote=shared_zygote()) as grader:
        results = grader.grade_paths(sorted(tmp_path.glob("*.ipynb")))
    by_name = {r.submission: r for r in results}
    assert by_name["broken"].total == 0 and "could not be read" in by_name["broken"].notes[0]
    assert by_name["fine"].total == 22


def test_killing_the_zygote_without_uid_isolation_only_restarts_it():
    """Without user-id isolation a sandbox can kill its zygote; the grader starts a new one."""
    names = ["kills_the_zygote", "honest", "kills_the_zygote", "honest_wrong_q3"]
    with Grader(hw(), limits=LIMITS, zygote=shared_zygote(), isolate_uid=False) as grader:
        results = grader.grade_sources([(n, ATTACKS[n][0]) for n in names])
    for name, result in zip(names, results):
        assert scores(result) == ATTACKS[name][1]
