"""Where the course computes: one helper that picks the best available device."""

from __future__ import annotations

import torch


def default_device() -> torch.device:
    """Return ``cuda`` if a CUDA GPU is available, else ``mps`` (Apple GPU) if available, else ``cpu``.

    Every function in :mod:`attnbook` computes on the device of its inputs; this helper only
    chooses where the chapters create their example tensors.
    """
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
