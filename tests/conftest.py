"""Shared fixtures: every device test runs on each device PyTorch can see and skips the others."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

# Triton reads TRITON_INTERPRET once, when it is first imported, and some of torch's own modules
# import it (torch.utils.flop_counter does). Importing attnbook's Triton module sets
# TRITON_INTERPRET=1 on a machine without CUDA (unless the user chose) without importing triton;
# done here, before pytest imports any test module, the kernels run in the interpreter whatever
# order the test files are collected in (tests/attnbook/test_flash_triton.py checks both orders).
import attnbook.kernels.flash_triton  # noqa: F401


def _available(device: str) -> bool:
    if device == "cpu":
        return True
    if device == "cuda":
        return torch.cuda.is_available()
    if device == "mps":
        mps = getattr(torch.backends, "mps", None)
        return mps is not None and mps.is_available()
    return False


DEVICES = ["cpu", "cuda", "mps"]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """A device to run on; tests for devices this machine lacks are skipped, not dropped."""
    if not _available(request.param):
        pytest.skip(f"no {request.param} device on this machine")
    return torch.device(request.param)


@pytest.fixture(params=[torch.float32, torch.float64], ids=["float32", "float64"])
def dtype(request, device) -> torch.dtype:
    if device.type == "mps" and request.param == torch.float64:
        pytest.skip("MPS has no float64")
    return request.param


def tolerances(dtype: torch.dtype) -> dict[str, float]:
    """Tolerances for comparing two computations of the same formula."""
    if dtype == torch.float64:
        return {"atol": 1e-10, "rtol": 1e-10}
    return {"atol": 2e-5, "rtol": 1e-4}


#: test folders about the course around the package (the grader, the homework, the website);
#: `make test-quick` runs the rest, the package's own tests (tests/attnbook/)
COURSE_FOLDERS = {"attngrade", "homework", "book"}
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.path)).resolve()
        if path.is_relative_to(TESTS) and path.relative_to(TESTS).parts[0] in COURSE_FOLDERS:
            item.add_marker(pytest.mark.course)
