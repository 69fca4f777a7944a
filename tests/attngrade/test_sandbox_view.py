"""What a sandbox sees (attngrade.grading.view: stubs instead of references, mounts in a working order) and what its worker does before and between submissions."""

from __future__ import annotations

import json

import pytest
import torch

from attngrade.grading import view


def test_stubbed_source_keeps_signatures_and_drops_the_body():
    source = '''
def attention(q, k, v, mask=None):
    """Docs."""
    return secret_formula(q, k, v)

class Module:
    def forward(self, x):
        return secret_formula(x)

def allowed(x):
    return x + 1
'''
    out = view.stub_source(source, {"attention": "attnbook.attention", "Module": "attnbook.Module"})
    assert "secret_formula" not in out
    assert "def attention(q, k, v, mask=None):" in out and "def forward(self, x):" in out
    assert "return x + 1" in out
    namespace: dict = {}
    exec(out, namespace)
    try:
        namespace["attention"](1, 2, 3)
    except NotImplementedError as exc:
        assert "attnbook.attention" in str(exc) and "not available while grading" in str(exc)
    else:
        raise AssertionError("the stub must raise")


def test_a_python_under_tmp_is_mounted_after_the_private_tmp(tmp_path, monkeypatch):
    """A checkout (and its virtual environment) under /tmp must stay visible: the sandbox's own
    /tmp is mounted first, the Python folders on top of it."""
    venv = tmp_path / "checkout" / ".venv"
    venv.mkdir(parents=True)
    monkeypatch.setattr(view, "_python_roots", lambda: [str(venv)])
    lib = tmp_path / "view"
    (lib / "lib").mkdir(parents=True)
    args = view.bwrap_arguments(view.View(lib), hide=[], as_root=True)
    tmpfs = max(i for i, a in enumerate(args) if a == "--tmpfs" and args[i + 1] == "/tmp")
    bind = next(i for i, a in enumerate(args) if a == "--ro-bind" and args[i + 1] == str(venv))
    assert tmpfs < bind
    # the folders above it are made traversable, but /tmp keeps its own mode (1777)
    dirs = [args[i + 1] for i, a in enumerate(args) if a == "--dir"]
    assert "/tmp" not in dirs and str(venv.parent) in dirs


def test_the_clean_up_between_submissions_keeps_mounts_whose_path_has_a_space():
    """Between two submissions the worker empties the sandbox's /tmp but leaves the mounts in it
    alone (a checkout under /tmp, with its virtual environment). The kernel writes a space in a
    mount point as ``\\040``: read undecoded, ``/tmp/my course/.venv`` was not recognised, and the
    clean-up walked the read-only environment file by file after every submission."""
    from attngrade.sandboxed.cleanup import folders_to_keep, mount_points

    mountinfo = (
        "22 1 0:21 / / rw,relatime - tmpfs tmpfs rw\n"
        "35 22 0:32 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw,size=65536k\n"
        "36 35 8:1 /srv/my\\040course/.venv /tmp/my\\040course/.venv ro,relatime - ext4 /dev/sda1 rw\n"
        "37 35 8:1 /srv/tab\\011and\\134slash /tmp/tab\\011and\\134slash ro,relatime - ext4 /dev/sda1 rw\n"
    )
    points = mount_points(mountinfo)
    assert points == ["/", "/tmp", "/tmp/my course/.venv", "/tmp/tab\tand\\slash"]
    assert folders_to_keep(points, ("/tmp", "/dev/shm")) == {
        "/tmp/my course",
        "/tmp/my course/.venv",
        "/tmp/tab\tand\\slash",
    }


def test_a_worker_warms_up_before_any_fork_what_the_homeworks_notebook_calls(tmp_path):
    """torch.testing.assert_close imports torch.distributed.tensor at its first call (half a
    second, more under the integrity guard). For a homework whose master notebook calls it (hw08),
    each worker calls it once before any fork, so that no submission's child (a fork) pays it
    again; for one that does not, no worker pays it. The homework alone decides, so every child
    starts the same whoever its classmates are. The probe, run in the child, removes one answer
    unless the module is already there."""
    import shutil

    from attngrade.grading.grader import Grader
    from attngrade.homework import load_homework
    from attngrade.sandboxed.warm_ups import warm_ups

    from ..homework_support import homework
    from ..submissions import code_cells, submission_with

    assert warm_ups("torch.testing.assert_close(got, want)") == ["assert_close"]
    assert warm_ups("assert torch.allclose(got, want)") == []
    assert warm_ups(homework("hw08").master.read_text(encoding="utf-8")) == ["assert_close"]
    if not torch.distributed.is_available():  # then assert_close imports nothing more
        pytest.skip("this torch is built without torch.distributed")
    plain = homework("hw00")
    calls = load_homework(shutil.copytree(plain.folder, tmp_path / plain.folder.name))
    master = json.loads(calls.master.read_text(encoding="utf-8"))
    master["cells"].append({"cell_type": "markdown", "metadata": {}, "source": ["Check with `assert_close`."]})
    calls.master.write_text(json.dumps(master), encoding="utf-8")
    probe = "import sys\nif 'torch.distributed.tensor' not in sys.modules:\n    del mask_row_to_column"
    totals = {}
    for hw in (plain, calls):
        with Grader(hw, jobs=1, sandbox=False, static_checks=False) as grader:
            (result,) = grader.grade_sources([("probe", [*code_cells(submission_with(plain, {})), probe])])
        totals[hw is calls] = (result.total, result.possible)
    assert totals[True][0] == totals[True][1], totals  # warmed up: the answer stays
    assert 0 < totals[False][0] < totals[False][1], totals  # not warmed up: the answer is gone
