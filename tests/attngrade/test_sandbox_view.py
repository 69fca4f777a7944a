"""What a sandbox sees (attngrade.grading.view): stubs instead of references, and mounts in a working order."""

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


def test_the_worker_imports_before_any_fork_what_assert_close_imports_late():
    """torch.testing.assert_close imports torch.distributed.tensor at its first call (half a
    second, several under the integrity guard): the worker's preload pays it once, so that no
    submission's child (a fork) pays it again."""
    import subprocess
    import sys

    code = (
        "import sys; from attngrade.sandboxed.worker import preload; preload([]); import torch;"
        "print(not torch.distributed.is_available() or 'torch.distributed.tensor' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "True"
