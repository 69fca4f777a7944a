"""What a sandbox sees (attngrade.grading.view: stubs instead of references, mounts in a working order) and what its worker does before and between submissions."""

from __future__ import annotations

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
    from attngrade.sandboxed.worker import folders_to_keep, mount_points

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


def test_the_worker_warms_up_before_any_fork_what_the_notebook_calls_that_is_slow_at_first():
    """torch.testing.assert_close imports torch.distributed.tensor at its first call (half a
    second, more under the integrity guard). A worker grading a homework whose notebook calls it
    pays that once, before any fork, so that no submission's child (a fork) pays it again; a worker
    for a homework that does not call it does not pay it at all."""
    import subprocess
    import sys

    from attngrade.sandboxed.worker import warm_ups

    assert warm_ups("torch.testing.assert_close(got, want)") == ["assert_close"]
    assert warm_ups("assert torch.allclose(got, want)") == []
    code = (
        "import sys; from attngrade.sandboxed.worker import preload; preload([], {warm}); import torch;"
        "print(not torch.distributed.is_available() or 'torch.distributed.tensor' in sys.modules)"
    )
    for warm, imported in ((["assert_close"], "True"), ([], "False")):
        proc = subprocess.run(
            [sys.executable, "-c", code.format(warm=warm)], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip() == imported, warm


def test_a_batch_that_calls_assert_close_gets_workers_that_warmed_it_up(monkeypatch):
    """The grader tells its workers to warm up what any notebook of the batch calls (hw08's
    solutions call assert_close), and nothing for a batch that calls none of it."""
    from attngrade.grading import grader as grading
    from attngrade.grading.grader import Grader

    from ..homework_support import homework
    from ..submissions import code_cells, submission_with

    told = []

    class Recorded(grading.Worker):
        def __init__(self, *args, **kwargs):
            told.append(list(kwargs["warm"]))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(grading, "Worker", Recorded)
    for name, warm in (("hw08", ["assert_close"]), ("hw00", [])):
        told.clear()
        hw = homework(name)
        with Grader(hw, jobs=1, sandbox=False, static_checks=False) as grader:
            (result,) = grader.grade_sources([("solutions", code_cells(submission_with(hw, {})))])
        assert result.total == result.possible, (name, result.notes)
        assert told == [warm], (name, told)
