r"""A short, seeded training loop for the small models of chapter 7.

:func:`train` draws a fresh batch of a task (:mod:`attnbook.models.tasks`) at every step from a seeded
``torch.Generator``, minimises the cross-entropy with AdamW, and records the loss and token
accuracy of every step plus any quantity the caller asks for at chosen steps. The same seed (for
the model's initialisation and for the data) gives the same loss curve on the same device.

The progress bar comes from ``tqdm.auto`` (a widget in Jupyter, text in a terminal) when tqdm is
installed; ``tqdm`` is not a requirement of :mod:`attnbook`, and without it no bar is shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..validators import check_sizes
from .tasks import IGNORE, Batch


def _check_logits_targets(logits: object, targets: object) -> None:
    for name, x in (("logits", logits), ("targets", targets)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating point, got {logits.dtype}")
    if targets.is_floating_point() or targets.dtype == torch.bool:
        raise TypeError(f"targets must hold integer classes, got {targets.dtype}")
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits (..., classes) and targets (...) must agree in all but the last dimension, got "
            f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)}"
        )


# accuracy = #{t : argmax_c logits[t, c] = y_t and y_t != IGNORE} / #{t : y_t != IGNORE}
def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Token accuracy: the fraction of scored positions (target != IGNORE) whose argmax is the
    target (chapter 7). logits (..., classes), targets (...) of integer classes."""
    _check_logits_targets(logits, targets)
    scored = targets != IGNORE
    if not bool(scored.any()):
        raise ValueError("no position is scored: every target is IGNORE")
    correct = (logits.argmax(dim=-1) == targets) & scored
    return correct.sum().item() / scored.sum().item()


# sequence accuracy = fraction of sequences with every scored position right
def sequence_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """The fraction of sequences (rows) whose every scored position is right (chapter 7).
    logits (batch, n, classes), targets (batch, n)."""
    _check_logits_targets(logits, targets)
    if targets.ndim != 2:
        raise ValueError(f"targets must be (batch, n), got shape {tuple(targets.shape)}")
    right = (logits.argmax(dim=-1) == targets) | (targets == IGNORE)  # (batch, n)
    return right.all(dim=1).float().mean().item()


# L = mean over scored positions of -log softmax(logits)[y]
def sequence_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the scored positions (target != IGNORE), a 0-d tensor (chapter 7)."""
    _check_logits_targets(logits, targets)
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE)  # (batch * n, classes)


def model_logits(model: nn.Module, batch: Batch, *, need_weights: bool = False):
    """Run ``model`` on a batch: ``model(inputs)``, or ``model(inputs, decoder_inputs)`` for a
    sequence-to-sequence batch. Returns the model's ``(logits, weights)``."""
    if not isinstance(batch, Batch):
        raise TypeError(f"batch must be an attnbook.models.tasks.Batch, got {type(batch).__name__}")
    if batch.decoder_inputs is None:
        return model(batch.inputs, need_weights=need_weights)
    return model(batch.inputs, batch.decoder_inputs, need_weights=need_weights)


@torch.no_grad()
def evaluate(model: nn.Module, batch: Batch) -> dict[str, float]:
    """Loss, token accuracy and sequence accuracy of ``model`` on ``batch`` (chapter 7)."""
    logits, _ = model_logits(model, batch)
    return {
        "loss": sequence_loss(logits, batch.targets).item(),
        "accuracy": accuracy(logits, batch.targets),
        "sequence_accuracy": sequence_accuracy(logits, batch.targets),
    }


@dataclass
class History:
    """What :func:`train` recorded.

    Attributes:
        loss, accuracy: the training loss and token accuracy of every step (on that step's batch).
        recorded_at: the steps at which ``records`` were taken (0 = before training).
        records: name -> list of values, one per entry of ``recorded_at``.
        seconds: wall time of the training loop.
    """

    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    recorded_at: list[int] = field(default_factory=list)
    records: dict[str, list] = field(default_factory=dict)
    seconds: float = 0.0


def _progress_bar(total: int, enabled: bool, description: str):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional: no bar
        return None
    return tqdm(total=total, desc=description, leave=False)


def train(
    model: nn.Module,
    task: Callable[..., Batch],
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    weight_decay: float = 0.01,
    seed: int = 0,
    device: torch.device | str | None = None,
    record: Mapping[str, Callable[[nn.Module], object]] | None = None,
    record_every: int | None = None,
    max_grad_norm: float | None = 1.0,
    lr_schedule: Callable[[int], float] | None = None,
    progress: bool = True,
) -> History:
    """Train ``model`` on batches of ``task`` with AdamW and cross-entropy (chapter 7).

    Args:
        model: a :class:`attnbook.models.sequence.SequenceModel` or :class:`attnbook.models.encoder_decoder.EncoderDecoder`
            (anything :func:`model_logits` can call). Seed its initialisation yourself
            (``torch.manual_seed``) before building it.
        task: a task of :mod:`attnbook.models.tasks`, called as ``task(batch_size, generator, device)``.
        steps: number of optimiser steps; each draws a new batch.
        batch_size, lr, weight_decay: the batch size and AdamW's settings.
        seed: seeds the generator of the data.
        device: where the batches go (default: the device of the model's parameters).
        record: name -> function of the model, evaluated (under ``torch.no_grad``) before training,
            every ``record_every`` steps and after the last step, e.g. an accuracy on a fixed
            test batch or the entropy of some attention weights.
        record_every: the recording period (default: only before and after training).
        max_grad_norm: clip the gradient norm to this (None: no clipping).
        lr_schedule: the learning rate of each step as a multiple of ``lr``, a function of the step
            0, 1, ... (``torch.optim.lr_scheduler.LambdaLR``'s ``lr_lambda``; None: ``lr`` throughout).
        progress: show a ``tqdm.auto`` progress bar (if tqdm is installed).

    Returns:
        a :class:`History`.
    """
    check_sizes(steps=steps, record_every=record_every)  # positive ints (record_every may be None)
    if not callable(task):
        raise TypeError(f"task must be callable as task(batch_size, generator, device), got {type(task).__name__}")
    parameters = [p for p in model.parameters() if p.requires_grad]
    if not parameters:
        raise ValueError("the model has no trainable parameters")
    device = parameters[0].device if device is None else torch.device(device)
    record = dict(record or {})
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay)
    if lr_schedule is not None and not callable(lr_schedule):
        raise TypeError(f"lr_schedule must be a function of the step, got {type(lr_schedule).__name__}")
    schedule = None if lr_schedule is None else torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule)
    history = History(records={name: [] for name in record})

    def take_records(step: int) -> None:
        if not record:
            return
        model.eval()
        with torch.no_grad():
            for name, fn in record.items():
                history.records[name].append(fn(model))
        history.recorded_at.append(step)
        model.train()

    bar = _progress_bar(steps, progress, type(task).__name__)
    start = time.perf_counter()
    take_records(0)
    model.train()
    for step in range(1, steps + 1):
        batch = task(batch_size, generator, device)
        logits, _ = model_logits(model, batch)
        loss = sequence_loss(logits, batch.targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm is not None:
            nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        optimizer.step()
        if schedule is not None:
            schedule.step()
        history.loss.append(loss.item())
        history.accuracy.append(accuracy(logits.detach(), batch.targets))
        if record and (step == steps or (record_every is not None and step % record_every == 0)):
            take_records(step)
        if bar is not None:
            bar.update(1)
            if step % 10 == 0 or step == steps:
                bar.set_postfix(loss=f"{history.loss[-1]:.3f}", acc=f"{history.accuracy[-1]:.2f}")
    if bar is not None:
        bar.close()
    model.eval()
    history.seconds = time.perf_counter() - start
    return history


def parameter_count(model: nn.Module) -> int:
    """The number of trainable parameters (entries) of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
