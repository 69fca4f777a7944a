"""The warm-ups: calls whose first run is slow, made once by a worker before it forks any child.

Owned by the sandbox (the worker makes the calls, :func:`attngrade.sandboxed.worker.preload`); the
host reads it too: :func:`warm_ups` names, from a homework's master notebook, the warm-ups a worker
grading it should make (:mod:`attngrade.grading.grader`). Standard library only at import.
"""

from __future__ import annotations

import os

#: what a homework's notebook may call whose first call is slow (it imports more of torch): a worker
#: grading a homework whose master notebook calls it makes that call once before any fork (the host
#: names them: warm_ups)
WARM_UPS = {
    # torch.testing.assert_close imports torch.distributed.tensor and sympy at its first call, in
    # every submission's child otherwise (slower still under the guard)
    "assert_close": lambda torch, x: torch.testing.assert_close(x, x),
    # attnbook.apply_rotary checks its positions with torch.broadcast_shapes, whose first call imports
    # torch._refs (about 480 modules, 0.7 CPU-s) in every submission's child otherwise
    "apply_rotary": lambda torch, x: torch.broadcast_shapes((1,), (1,)),
    # homework 11's question 4 runs Triton kernels in Triton's interpreter: importing triton maps more
    # address space than a homework's memory allowance (exercises/hw11_kernel/grading.yml says how
    # much), so it is made once, here
    "triton": lambda torch, x: _import_triton_interpreted(),
}


def _import_triton_interpreted() -> None:
    """Import triton in its interpreter (TRITON_INTERPRET must be set before triton is imported)."""
    os.environ["TRITON_INTERPRET"] = "1"
    import triton  # noqa: F401
    import triton.language  # noqa: F401


def warm_ups(source: str) -> list[str]:
    """The WARM_UPS a notebook's source names (those a worker grading it should warm up). A name in
    its prose counts too: a needless warm-up costs a worker well under a second, once."""
    return [name for name in WARM_UPS if name in source]
