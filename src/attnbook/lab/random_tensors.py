"""Seeded random tensors for the chapters' examples: one helper instead of one per chapter.

    draw = attnbook.seeded_randn(1, dtype=torch.float64, device=device)
    Q = draw(n, d_k)                 # (n, d_k), standard normal
    W = draw(d_model, d_k, scale=0.5)

``draw`` is ``torch.randn`` with a seed of its own: each call of :func:`seeded_randn` makes its own
``torch.Generator`` (on the CPU, so the numbers are the same on every device and do not disturb the
global seed); the tensors are then moved to ``device``. These are random inputs for examples, not
the sampling of tokens from a model (the models in :mod:`attnbook.models` generate greedily).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def seeded_randn(
    seed: int, *, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
) -> Callable[..., torch.Tensor]:
    """A function ``draw(*shape, scale=1.0)`` of seeded standard-normal tensors times ``scale``."""
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return scale * torch.randn(*shape, generator=generator, dtype=dtype).to(device)

    return draw
