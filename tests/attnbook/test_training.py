"""attnbook.models.training: the metrics, the seeded training loop, its records and its errors."""

from __future__ import annotations

import builtins
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from attnbook.models.configs import EncoderDecoderConfig, SequenceModelConfig
from attnbook.models.encoder_decoder import EncoderDecoder
from attnbook.models.sequence import SequenceModel
from attnbook.models.tasks import IGNORE, CopyOffset, Translation
from attnbook.models.training import History, accuracy, evaluate, model_logits, sequence_accuracy, sequence_loss, train


def _logits():
    # two sequences of three positions, four classes; argmax = [[0, 1, 2], [3, 3, 0]]
    logits = torch.full((2, 3, 4), -1.0)
    for b, row in enumerate([[0, 1, 2], [3, 3, 0]]):
        for i, c in enumerate(row):
            logits[b, i, c] = 2.0
    return logits


def test_accuracy_and_sequence_accuracy():
    logits = _logits()
    targets = torch.tensor([[0, 1, 2], [3, 0, IGNORE]])
    assert accuracy(logits, targets) == 4 / 5  # the IGNORE position is not scored
    assert sequence_accuracy(logits, targets) == 0.5
    assert sequence_accuracy(logits, torch.tensor([[0, 1, 2], [3, 3, IGNORE]])) == 1.0


def test_sequence_loss_ignores_unscored_positions():
    logits = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([[0, IGNORE, 2], [IGNORE, 1, 3]])
    scored = targets != IGNORE
    expected = F.cross_entropy(logits[scored], targets[scored])
    assert_close(sequence_loss(logits, targets), expected)
    assert_close(
        sequence_loss(logits, torch.tensor([[0, 1, 2], [0, 1, 3]])),
        -logits.log_softmax(-1).gather(-1, torch.tensor([[0, 1, 2], [0, 1, 3]])[..., None]).mean(),
    )


def test_metric_errors():
    with pytest.raises(ValueError, match="agree"):
        accuracy(torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="integer"):
        accuracy(torch.zeros(2, 3, 4), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="scored"):
        accuracy(torch.zeros(1, 2, 3), torch.full((1, 2), IGNORE))
    with pytest.raises(TypeError, match="Batch"):
        model_logits(SequenceModel(SequenceModelConfig(3, 4, 1, max_len=2)), torch.zeros(1, 2, dtype=torch.long))


def _copy_model(seed, device):
    torch.manual_seed(seed)
    return SequenceModel(SequenceModelConfig(6, 16, 2, max_len=8), device=device)


def test_a_model_learns_to_copy(device):
    model = _copy_model(0, device)
    task = CopyOffset(length=8, offset=0, num_symbols=6)
    history = train(model, task, steps=60, lr=1e-2, seed=0, progress=False)
    assert len(history.loss) == len(history.accuracy) == 60
    assert history.loss[-1] < 0.5 * history.loss[0]
    test = task(200, torch.Generator().manual_seed(1), device)
    assert evaluate(model, test)["accuracy"] >= 0.95


def test_same_seed_same_loss_curve():
    task = CopyOffset(length=6, offset=1, num_symbols=5)
    curves = [train(_copy_model(3, "cpu"), task, steps=15, seed=7, progress=False).loss for _ in range(2)]
    assert curves[0] == curves[1]
    other = train(_copy_model(3, "cpu"), task, steps=15, seed=8, progress=False).loss
    assert other != curves[0]


def test_the_learning_rate_follows_the_schedule():
    """A schedule's factor multiplies the learning rate step by step: a factor of 0 after step 3 leaves
    the weights where step 3 put them (AdamW's weight decay scales with the learning rate too), and
    a constant factor of 1 is the same training as no schedule, bit for bit."""
    task = CopyOffset(length=6, offset=1, num_symbols=5)
    three = _copy_model(3, "cpu")
    train(three, task, steps=3, seed=7, progress=False)
    stopped = _copy_model(3, "cpu")
    train(stopped, task, steps=8, seed=7, progress=False, lr_schedule=lambda step: 1.0 if step < 3 else 0.0)
    for name, weight in stopped.state_dict().items():
        assert torch.equal(weight, three.state_dict()[name]), name
    plain = train(_copy_model(3, "cpu"), task, steps=5, seed=7, progress=False).loss
    assert (
        train(_copy_model(3, "cpu"), task, steps=5, seed=7, progress=False, lr_schedule=lambda step: 1.0).loss == plain
    )
    with pytest.raises(TypeError, match="lr_schedule must be a function of the step"):
        train(_copy_model(3, "cpu"), task, steps=1, progress=False, lr_schedule=0.5)


def test_records_and_seq2seq(device):
    task = Translation(length=4, num_symbols=5)
    torch.manual_seed(0)
    config = EncoderDecoderConfig(
        src_vocab=task.vocab_size,
        tgt_vocab=task.decoder_vocab_size,
        d_model=8,
        num_heads=2,
        max_len=4,
        out_size=task.out_size,
    )
    model = EncoderDecoder(config, device=device)
    probe = task(8, torch.Generator().manual_seed(1), device)
    history = train(
        model,
        task,
        steps=7,
        batch_size=8,
        seed=0,
        progress=False,
        record_every=3,
        record={"loss": lambda m: evaluate(m, probe)["loss"], "training": lambda m: m.training},
    )
    assert isinstance(history, History)
    assert history.recorded_at == [0, 3, 6, 7]
    assert len(history.records["loss"]) == 4 and all(math.isfinite(x) for x in history.records["loss"])
    assert history.records["training"] == [False] * 4  # records are taken in eval mode
    assert not model.training and history.seconds > 0
    logits, weights = model_logits(model, probe, need_weights=True)
    assert logits.shape == (8, 4, task.out_size) and set(weights) == {"encoder", "decoder", "cross"}


def test_progress_bar_is_optional(monkeypatch):
    task = CopyOffset(length=4, offset=0, num_symbols=3)
    train(_copy_model(0, "cpu"), task, steps=2, progress=True)  # tqdm.auto, if installed
    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name.startswith("tqdm"):
            raise ImportError("no tqdm here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    assert len(train(_copy_model(0, "cpu"), task, steps=2, progress=True).loss) == 2


def test_train_errors():
    model, task = _copy_model(0, "cpu"), CopyOffset()
    with pytest.raises(ValueError, match="steps"):
        train(model, task, steps=0)
    with pytest.raises(ValueError, match="record_every"):
        train(model, task, steps=2, record_every=0)
    with pytest.raises(TypeError, match="task"):
        train(model, "copy", steps=2)
    with pytest.raises(ValueError, match="trainable"):
        train(model.requires_grad_(False), task, steps=2)
