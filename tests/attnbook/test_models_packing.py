"""The packed-rows task and decoder of chapter 12 (attnbook.models.packing).

The task must be what the chapter says it is: documents that start with ``bos``, a query whose target
is the value stored with its key in the same document, and that key present, with its own value, in
every earlier document of the row. The decoder must isolate documents with the document mask (packed
equals alone, in float64), leak without it, and, with rotary positions, not care whether positions
restart (chapter 12's proposition).
"""

from __future__ import annotations

import pytest
import torch

import attnbook
from attnbook.models.packing import PackedDecoder, PackedRecall, document_ids_from_bos
from attnbook.models.tasks import IGNORE


def _documents(tokens, bos):
    """The documents of one row, as lists of token ids, each starting with bos."""
    starts = [i for i, t in enumerate(tokens) if t == bos] + [len(tokens)]
    return [tokens[a:b] for a, b in zip(starts[:-1], starts[1:])]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_query_is_answered_in_its_own_document_and_every_earlier_one_holds_its_key(seed):
    task = PackedRecall()
    batch = task(16, torch.Generator().manual_seed(seed))
    assert batch.inputs.shape == batch.targets.shape == (16, task.length)
    K, V = task.num_keys, task.num_values
    for tokens, targets in zip(batch.inputs.tolist(), batch.targets.tolist()):
        assert tokens[0] == task.bos
        scored = [i for i, y in enumerate(targets) if y != IGNORE]
        assert all(tokens[i] >= K * V and tokens[i] != task.bos for i in scored)  # only queries are scored
        earlier_keys = []
        position = 0
        for document in _documents(tokens, task.bos):
            if len(document) == 1:  # a filler bos at the end of the row
                position += 1
                continue
            pairs, query = document[1:-1], document[-1]
            assert task.min_pairs <= len(pairs) <= task.max_pairs and query >= K * V
            keys = [p // V for p in pairs]
            assert len(set(keys)) == len(keys)  # distinct keys in a document
            asked = query - K * V
            answer = targets[position + len(document) - 1]
            assert answer == pairs[keys.index(asked)] % V  # the value stored with it, here
            assert all(asked in previous for previous in earlier_keys)  # every earlier document holds it
            earlier_keys.append(set(keys))
            position += len(document)
        assert position == task.length


def test_document_ids_from_bos():
    tokens = torch.tensor([[9, 1, 2, 9, 3, 9], [4, 9, 5, 5, 9, 9]])
    assert document_ids_from_bos(tokens, 9).tolist() == [[0, 0, 0, 1, 1, 2], [0, 1, 1, 1, 2, 3]]
    with pytest.raises(TypeError, match="integer ids"):
        document_ids_from_bos(tokens.float(), 9)


def _random_model(task, **options):
    torch.manual_seed(0)
    model = PackedDecoder(task.vocab_size, task.out_size, bos=task.bos, num_layers=2, dtype=torch.float64, **options)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim > 1:
                parameter.normal_(0.0, 0.5)
    return model.eval()


@pytest.mark.parametrize("positional", ["rotary", "sinusoidal", "learned"])
def test_packed_equals_alone_with_the_document_mask_and_restarted_positions(positional):
    task = PackedRecall()
    row = task(1, torch.Generator().manual_seed(3)).inputs  # (1, n)
    model = _random_model(task, positional=positional)
    cu = attnbook.cu_seqlens_from_document_ids(document_ids_from_bos(row, task.bos)[0]).tolist()
    with torch.no_grad():
        packed = model(row)[0][0]
        for a, b in zip(cu[:-1], cu[1:]):
            torch.testing.assert_close(model(row[:, a:b])[0][0], packed[a:b], rtol=0, atol=1e-12)
        model.mask = "causal"  # the control: the leak
        assert (model(row)[0][0, cu[1] :] - packed[cu[1] :]).abs().max() > 1e-3


def test_rotary_does_not_see_where_a_document_starts_but_absolute_positions_do():
    task = PackedRecall()
    row = task(1, torch.Generator().manual_seed(4)).inputs
    first = int(attnbook.cu_seqlens_from_document_ids(document_ids_from_bos(row, task.bos)[0])[1])
    for positional in ("rotary", "sinusoidal"):
        with torch.no_grad():
            restarted = _random_model(task, positional=positional)(row)[0][0]
            along = _random_model(task, positional=positional, positions="row")(row)[0][0]
        assert torch.equal(restarted[:first], along[:first])
        gap = (restarted[first:] - along[first:]).abs().max()
        assert gap <= 1e-12 if positional == "rotary" else gap > 1e-3


def test_weights_and_explicit_document_ids():
    task = PackedRecall()
    row = task(2, torch.Generator().manual_seed(5)).inputs
    model = _random_model(task)
    logits, weights = model(row, need_weights=True)
    assert logits.shape == (2, task.length, task.out_size) and len(weights) == 2
    keep = attnbook.document_causal_mask(document_ids_from_bos(row, task.bos))  # (2, n, n)
    assert (weights[0][~keep[:, None].expand_as(weights[0])] == 0).all()
    torch.testing.assert_close(model(row)[0], logits, rtol=0, atol=1e-12)  # the fused path, without weights
    same, _ = model(row, document_ids=document_ids_from_bos(row, task.bos))
    assert torch.equal(same, model(row)[0])


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: PackedDecoder(10, 4, bos=10), ValueError, "bos = 10"),
        (lambda: PackedDecoder(10, 4, bos=0, mask="full"), ValueError, "mask"),
        (lambda: PackedDecoder(10, 4, bos=0, d_model=30, num_heads=4), ValueError, "divisible"),
        (lambda: PackedDecoder(10, 4, bos=0, d_model=12, num_heads=4), ValueError, "even"),
        (lambda: PackedRecall(shared=3, min_pairs=2), ValueError, "min_pairs"),
        (lambda: PackedRecall(length=5), ValueError, "length"),
    ],
)
def test_bad_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_bad_tokens():
    model = PackedDecoder(10, 4, bos=0)
    with pytest.raises(ValueError, match=r"ids in \[0, 10\)"):
        model(torch.tensor([[0, 11]]))
