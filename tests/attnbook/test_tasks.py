"""attnbook.models.tasks: every task's batches are what its docstring says, seeded, on the asked device."""

from __future__ import annotations

import pytest
import torch

from attnbook.models.tasks import (
    IGNORE,
    AssociativeRecall,
    Batch,
    CopyOffset,
    PreviousAndMirror,
    Reversal,
    Sorting,
    Translation,
    distinct_tokens,
    shift_right,
)

TASKS = [
    Reversal(),
    Reversal(length=5, num_symbols=3, distinct=False),
    Sorting(),
    AssociativeRecall(),
    CopyOffset(),
    Translation(),
    PreviousAndMirror(),
]


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: type(t).__name__)
def test_batches_are_seeded_and_in_range(task, device):
    a, b = task(16, _gen(3), device), task(16, _gen(3), device)
    c = task(16, _gen(4), device)
    assert isinstance(a, Batch) and len(a) == 16
    for x, y in ((a.inputs, b.inputs), (a.targets, b.targets)):
        assert x.dtype == torch.long and x.device.type == device.type
        assert torch.equal(x, y)
    assert not torch.equal(a.inputs, c.inputs)
    assert 0 <= int(a.inputs.min()) and int(a.inputs.max()) < task.vocab_size
    scored = a.targets[a.targets != IGNORE]
    assert 0 <= int(scored.min()) and int(scored.max()) < task.out_size
    if a.decoder_inputs is not None:
        assert a.decoder_inputs.shape == a.targets.shape
        assert int(a.decoder_inputs.max()) < task.decoder_vocab_size


def test_reversal():
    batch = Reversal(length=6, num_symbols=8)(50, _gen())
    assert batch.inputs.shape == (50, 6)
    assert torch.equal(batch.targets, batch.inputs.flip(1))
    assert all(len(set(row.tolist())) == 6 for row in batch.inputs)  # distinct tokens


def test_sorting():
    batch = Sorting(length=7, num_symbols=4)(50, _gen())
    assert torch.equal(batch.targets, batch.inputs.sort(dim=1).values)


def test_associative_recall():
    task = AssociativeRecall(num_pairs=3, num_keys=5, num_values=4)
    batch = task(100, _gen())
    assert batch.inputs.shape == (100, 3) and batch.decoder_inputs.shape == (100, 1)
    keys, values = task.split(batch.inputs)
    assert torch.equal(task.pair_token(keys, values), batch.inputs)
    for k, v, q, y in zip(
        keys.tolist(), values.tolist(), batch.decoder_inputs[:, 0].tolist(), batch.targets[:, 0].tolist()
    ):
        assert len(set(k)) == 3  # distinct keys in a store
        assert q in k and v[k.index(q)] == y  # the answer is the value stored with the query key


def test_copy_offset():
    batch = CopyOffset(length=6, offset=2, num_symbols=5)(20, _gen())
    assert (batch.targets[:, :2] == IGNORE).all()
    assert torch.equal(batch.targets[:, 2:], batch.inputs[:, :4])


def test_translation():
    task = Translation(length=5, num_symbols=7, order=(4, 0, 3, 1, 2))
    batch = task(30, _gen())
    lexicon = torch.tensor(task.lexicon)
    for i, j in enumerate(task.order):
        assert torch.equal(batch.targets[:, i], lexicon[batch.inputs[:, j]])
    assert torch.equal(batch.decoder_inputs, shift_right(batch.targets, task.bos))
    assert (batch.decoder_inputs[:, 0] == 7).all() and task.decoder_vocab_size == 8
    alignment = task.alignment()
    assert torch.equal(alignment.argmax(dim=1), torch.tensor(task.order))
    assert torch.equal(alignment.sum(dim=0), torch.ones(5))
    assert Translation(seed=1).order == Translation(seed=1).order != Translation(seed=2).order


def test_previous_and_mirror():
    task = PreviousAndMirror(length=6, num_symbols=3)
    batch = task(20, _gen())
    previous, mirror = task.split(batch.targets)
    assert torch.equal(previous[:, 1:], batch.inputs[:, :-1]) and torch.equal(previous[:, 0], batch.inputs[:, -1])
    assert torch.equal(mirror, batch.inputs.flip(1))
    assert task.out_size == 9


def test_batch_to():
    batch = Translation()(2, _gen()).to("cpu")
    assert batch.decoder_inputs is not None
    assert Reversal()(2, _gen()).to("cpu").decoder_inputs is None


def test_distinct_tokens():
    x = distinct_tokens(40, 5, 5, _gen())
    assert torch.equal(x.sort(dim=1).values, torch.arange(5).expand(40, 5))


def test_clear_errors():
    with pytest.raises(ValueError, match="num_symbols"):
        Reversal(length=6, num_symbols=4)
    with pytest.raises(TypeError, match="length"):
        Sorting(length=2.5)
    with pytest.raises(ValueError, match="offset"):
        CopyOffset(length=3, offset=3)
    with pytest.raises(ValueError, match="order"):
        Translation(length=3, order=(0, 0, 1))
    with pytest.raises(ValueError, match="num_keys"):
        AssociativeRecall(num_pairs=5, num_keys=4)
    with pytest.raises(TypeError, match="Generator"):
        Reversal()(4, 0)
    with pytest.raises(ValueError, match="batch_size"):
        Reversal()(0, _gen())
