"""attnbook.models.tasks.RepeatedSegment (chapter 10): a segment repeated at a random offset, scored on the copy."""

from __future__ import annotations

import pytest
import torch

from attnbook.models.tasks import IGNORE, RepeatBatch, RepeatedSegment


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_batches_are_seeded_in_range_and_on_the_device(device):
    task = RepeatedSegment()
    a, b, c = task.draw(32, _gen(1), device), task.draw(32, _gen(1), device), task.draw(32, _gen(2), device)
    assert isinstance(a, RepeatBatch) and len(a) == 32
    for x, y in ((a.inputs, b.inputs), (a.targets, b.targets), (a.start, b.start), (a.source, b.source)):
        assert x.device.type == device.type and torch.equal(x, y)
    assert not torch.equal(a.inputs, c.inputs)
    assert a.inputs.shape == (32, 48) and a.inputs.dtype == torch.long
    assert 0 <= int(a.inputs.min()) and int(a.inputs.max()) < task.vocab_size == task.out_size == 32


@pytest.mark.parametrize("shape", [(48, 32, 16), (12, 5, 4), (8, 3, 4), (10, 2, 2)])
def test_the_copy_repeats_the_source_and_only_it_is_scored(shape):
    n, V, L = shape
    batch = RepeatedSegment(n, V, L).draw(200, _gen(3))
    for b in range(200):
        x, y = batch.inputs[b], batch.targets[b]
        a, c = int(batch.source[b]), int(batch.start[b])
        assert L <= c <= n - L and 0 <= a <= c - L  # inside the sequence, no overlap
        assert int(batch.offset[b]) == c - a
        assert torch.equal(x[c : c + L], x[a : a + L])
        scored = (y != IGNORE).nonzero().flatten().tolist()
        assert scored == list(range(c, c + L - 1))
        assert torch.equal(y[c : c + L - 1], x[c + 1 : c + L])  # the next token, a repeat
    assert torch.equal(batch.scored(), batch.targets != IGNORE)


def test_the_offset_and_the_start_are_random():
    batch = RepeatedSegment(48, 32, 16).draw(2000, _gen(4))
    offsets, starts = set(batch.offset.tolist()), set(batch.start.tolist())
    assert offsets == set(range(16, 33))  # every offset from L to n - L occurs
    assert starts == set(range(16, 33))


def test_outside_the_copy_tokens_are_uniform():
    batch = RepeatedSegment(48, 4, 16).draw(4000, _gen(5))
    counts = torch.bincount(batch.inputs[:, 0], minlength=4).float() / 4000  # position 0 is never a copy
    assert (counts - 0.25).abs().max() < 0.03


def test_calling_the_task_draws_the_same_batch():
    task = RepeatedSegment()
    drawn, called = task.draw(8, _gen(6)), task(8, _gen(6))
    assert torch.equal(drawn.inputs, called.inputs) and torch.equal(drawn.targets, called.targets)


def test_to_keeps_the_starts():
    batch = RepeatedSegment().draw(4, _gen(7)).to("cpu")
    assert isinstance(batch, RepeatBatch) and batch.segment == 16 and batch.start is not None


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"length": 10, "segment": 6}, ValueError),  # 2 L > n
        ({"segment": 1}, ValueError),
        ({"num_symbols": 1}, ValueError),
        ({"length": 4.5}, TypeError),
    ],
)
def test_bad_sizes_are_rejected(kwargs, error):
    with pytest.raises(error):
        RepeatedSegment(**kwargs)


def test_bad_calls_are_rejected():
    with pytest.raises(TypeError, match="generator"):
        RepeatedSegment().draw(4, 0)
    with pytest.raises(ValueError):
        RepeatedSegment().draw(0, _gen())


@pytest.mark.parametrize("shape, offset", [((48, 32, 16), 24), ((48, 32, 16), 16), ((48, 32, 16), 32), ((12, 5, 4), 6)])
def test_a_fixed_offset_fixes_the_offset_and_only_it(shape, offset):
    n, V, L = shape
    batch = RepeatedSegment(n, V, L, offset=offset).draw(500, _gen(8))
    assert set(batch.offset.tolist()) == {offset}  # every sequence: the copy sits offset back
    assert set(batch.start.tolist()) == set(range(offset, n - L + 1))  # the copy's place still varies
    for b in range(500):
        c = int(batch.start[b])
        assert torch.equal(batch.inputs[b, c : c + L], batch.inputs[b, c - offset : c - offset + L])
        assert (batch.targets[b] != IGNORE).nonzero().flatten().tolist() == list(range(c, c + L - 1))


@pytest.mark.parametrize("offset, error", [(15, ValueError), (33, ValueError), (0, ValueError), (2.5, TypeError)])
def test_a_bad_offset_is_rejected(offset, error):
    with pytest.raises(error, match="offset"):
        RepeatedSegment(48, 32, 16, offset=offset)
