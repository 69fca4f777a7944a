"""Packed documents (chapter 12): document ids, cu_seqlens and lengths, the conversions between them
(hypothesis round trips), positions that restart in each document, the document-causal mask
written with loops, and every error for bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnbook import (
    attention,
    causal_mask,
    cu_seqlens_from_document_ids,
    cu_seqlens_from_lengths,
    document_causal_mask,
    document_causal_mask_from_cu_seqlens,
    document_ids_from_cu_seqlens,
    document_ids_from_lengths,
    position_ids_from_cu_seqlens,
    position_ids_from_document_ids,
)
from attnbook.validators import skip_checks

F64 = torch.float64
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
LENGTHS = st.lists(st.integers(1, 7), min_size=1, max_size=6)


def ids_by_loop(lengths):
    return [d for d, length in enumerate(lengths) for _ in range(length)]


def mask_by_loop(ids):
    n = len(ids)
    return torch.tensor([[ids[i] == ids[j] and j <= i for j in range(n)] for i in range(n)])


def test_a_small_row_by_hand():
    lengths = [3, 1, 4]
    assert document_ids_from_lengths(lengths).tolist() == [0, 0, 0, 1, 2, 2, 2, 2]
    assert cu_seqlens_from_lengths(lengths).tolist() == [0, 3, 4, 8]
    assert position_ids_from_document_ids(document_ids_from_lengths(lengths)).tolist() == [0, 1, 2, 0, 0, 1, 2, 3]
    # the one-token document sees itself only, and nothing sees it but itself
    mask = document_causal_mask(document_ids_from_lengths(lengths))
    assert mask[3].tolist() == [False, False, False, True, False, False, False, False]
    assert mask[:, 3].tolist() == [False, False, False, True, False, False, False, False]


def test_dtypes_and_devices(device):
    lengths = torch.tensor([2, 3], device=device)
    ids = document_ids_from_lengths(lengths)
    cu = cu_seqlens_from_lengths(lengths)
    assert ids.dtype == torch.int64 and ids.device.type == device.type
    assert cu.dtype == torch.int32 and cu.device.type == device.type  # FlashAttention's varlen layout
    assert position_ids_from_document_ids(ids).dtype == torch.int64
    assert position_ids_from_cu_seqlens(cu).dtype == torch.int64
    assert document_ids_from_cu_seqlens(cu).dtype == torch.int64
    assert cu_seqlens_from_document_ids(ids).dtype == torch.int32
    mask = document_causal_mask(ids)
    assert mask.dtype == torch.bool and mask.device.type == device.type and mask.shape == (5, 5)
    assert document_ids_from_lengths([2, 3], device=device).device.type == device.type


@PROPERTY
@given(lengths=LENGTHS)
def test_lengths_ids_and_cu_seqlens_agree_and_round_trip(lengths):
    n = sum(lengths)
    ids = document_ids_from_lengths(lengths, n=n)
    cu = cu_seqlens_from_lengths(lengths, n=n)
    assert ids.tolist() == ids_by_loop(lengths)
    assert cu.tolist() == [sum(lengths[:d]) for d in range(len(lengths) + 1)]
    assert document_ids_from_cu_seqlens(cu).tolist() == ids.tolist()  # cu_seqlens -> ids
    assert cu_seqlens_from_document_ids(ids).tolist() == cu.tolist()  # ids -> cu_seqlens
    assert torch.equal(document_causal_mask_from_cu_seqlens(cu), document_causal_mask(ids))


@PROPERTY
@given(lengths=LENGTHS, labels=st.permutations(list(range(6))), shift=st.integers(-50, 50))
def test_any_labels_make_the_same_documents(lengths, labels, shift):
    # the ids need not be 0, 1, 2, ...: each run of equal ids is a document
    ids = torch.tensor([labels[d] + shift for d in ids_by_loop(lengths)])
    plain = document_ids_from_lengths(lengths)
    assert cu_seqlens_from_document_ids(ids).tolist() == cu_seqlens_from_lengths(lengths).tolist()
    assert torch.equal(position_ids_from_document_ids(ids), position_ids_from_document_ids(plain))
    assert torch.equal(document_causal_mask(ids), document_causal_mask(plain))


@PROPERTY
@given(lengths=LENGTHS)
def test_positions_restart_at_zero_in_every_document(lengths):
    cu = cu_seqlens_from_lengths(lengths)
    ids = document_ids_from_lengths(lengths)
    positions = position_ids_from_document_ids(ids)
    assert torch.equal(positions, position_ids_from_cu_seqlens(cu))
    for d, length in enumerate(lengths):
        start = sum(lengths[:d])
        assert positions[start : start + length].tolist() == list(range(length))


@PROPERTY
@given(lengths=LENGTHS)
def test_the_mask_equals_its_definition_written_with_loops(lengths):
    ids = document_ids_from_lengths(lengths)
    mask = document_causal_mask(ids)
    assert torch.equal(mask, mask_by_loop(ids.tolist()))
    # block-diagonal: one causal block per document, nothing outside the blocks
    for d, length in enumerate(lengths):
        start = sum(lengths[:d])
        block = slice(start, start + length)
        assert torch.equal(mask[block, block], causal_mask(length))
        assert int(mask[block].sum()) == length * (length + 1) // 2


def test_a_batch_of_rows(device):
    ids = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 2, 2, 3]], device=device)
    mask = document_causal_mask(ids)
    assert mask.shape == (2, 5, 5)
    for b in range(2):
        assert torch.equal(mask[b].cpu(), mask_by_loop(ids[b].tolist()))
    assert position_ids_from_document_ids(ids).tolist() == [[0, 1, 0, 1, 2], [0, 0, 0, 1, 0]]


def test_packed_attention_equals_each_document_alone(device):
    lengths = [3, 1, 5, 2]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, sum(lengths), 4, generator=g, dtype=F64).to(device) for _ in range(3))
    ids = document_ids_from_lengths(lengths, device=device)
    packed, _ = attention(q, k, v, mask=document_causal_mask(ids))
    cu = cu_seqlens_from_lengths(lengths).tolist()
    for d in range(len(lengths)):
        part = slice(cu[d], cu[d + 1])
        alone, _ = attention(q[:, part], k[:, part], v[:, part], mask=causal_mask(lengths[d], device=device))
        torch.testing.assert_close(packed[:, part], alone, atol=1e-15, rtol=1e-13)
    # control: the plain causal mask lets the later documents read the earlier ones
    leaky, _ = attention(q, k, v, mask=causal_mask(sum(lengths), device=device))
    assert (leaky[:, cu[1] :] - packed[:, cu[1] :]).abs().amax() > 1e-2


def test_an_empty_row():
    assert cu_seqlens_from_lengths([]).tolist() == [0]
    assert document_ids_from_lengths([]).tolist() == []
    assert document_ids_from_cu_seqlens(torch.tensor([0], dtype=torch.int32)).tolist() == []
    assert cu_seqlens_from_document_ids(torch.zeros(0, dtype=torch.int64)).tolist() == [0]
    assert document_causal_mask(torch.zeros(0, dtype=torch.int64)).shape == (0, 0)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "lengths, n, error, words",
    [
        ([3, 0, 2], None, ValueError, ["lengths[1] = 0", ">= 1", "[3, 0, 2]"]),
        ([3, -1], None, ValueError, ["lengths[1] = -1"]),
        ([3, 2], 7, ValueError, ["sum to 5", "n = 7", "lengths + [2]"]),
        ([3, 5], 7, ValueError, ["sum to 8", "n = 7"]),
        ([1.5, 2], None, TypeError, ["list of ints"]),
        (torch.tensor([1.0, 2.0]), None, TypeError, ["torch.float32"]),
        (torch.tensor([[1, 2]]), None, TypeError, ["(1, 2)"]),
    ],
)
def test_bad_lengths(lengths, n, error, words):
    for build in (document_ids_from_lengths, cu_seqlens_from_lengths):
        with pytest.raises(error) as raised:
            build(lengths, n=n)
        for word in words:
            assert word in str(raised.value), (word, str(raised.value))


@pytest.mark.parametrize(
    "cu, error, words",
    [
        (torch.tensor([1, 3, 5], dtype=torch.int32), ValueError, ["start at 0", "[1, 3, 5]"]),
        (torch.tensor([0, 3, 3, 5], dtype=torch.int32), ValueError, ["increase strictly", "cu_seqlens[2] = 3"]),
        (torch.tensor([0, 4, 2], dtype=torch.int32), ValueError, ["cu_seqlens[2] = 2", "cu_seqlens[1] = 4"]),
        (torch.tensor([0.0, 2.0]), TypeError, ["int32", "torch.float32"]),
        (torch.tensor([0, 2], dtype=torch.int16), TypeError, ["torch.int16"]),
        (torch.tensor([[0, 2]], dtype=torch.int32), ValueError, ["1-D", "(1, 2)"]),
        (torch.zeros(0, dtype=torch.int32), ValueError, ["(0,)"]),
        ([0, 2, 3], TypeError, ["torch.Tensor", "list"]),
    ],
)
def test_bad_cu_seqlens(cu, error, words):
    for use in (document_ids_from_cu_seqlens, position_ids_from_cu_seqlens, document_causal_mask_from_cu_seqlens):
        with pytest.raises(error) as raised:
            use(cu)
        for word in words:
            assert word in str(raised.value), (word, str(raised.value))


def test_int64_cu_seqlens_are_accepted():
    cu = torch.tensor([0, 2, 5])
    assert document_ids_from_cu_seqlens(cu).tolist() == [0, 0, 1, 1, 1]


@pytest.mark.parametrize(
    "ids, error, words",
    [
        (
            torch.tensor([0, 0, 1, 0]),
            ValueError,
            ["contiguous", "document 0 appears again at position 3", "after document 1"],
        ),
        (torch.tensor([[0, 1, 1], [2, 3, 2]]), ValueError, ["row 1", "document 2 appears again at position 2"]),
        (torch.tensor([0.0, 1.0]), TypeError, ["integer", "torch.float32"]),
        (torch.tensor([True, False]), TypeError, ["torch.bool"]),
        (torch.tensor(3), ValueError, ["at least 1 dimensions", "()"]),
        ([0, 0, 1], TypeError, ["torch.Tensor", "list"]),
    ],
)
def test_bad_document_ids(ids, error, words):
    for use in (document_causal_mask, position_ids_from_document_ids, cu_seqlens_from_document_ids):
        with pytest.raises(error) as raised:
            use(ids)
        for word in words:
            assert word in str(raised.value), (word, str(raised.value))


def test_cu_seqlens_from_a_batch_of_ids_asks_for_one_row():
    with pytest.raises(ValueError, match=r"one row of ids \(n,\), got shape \(2, 3\)"):
        cu_seqlens_from_document_ids(torch.zeros(2, 3, dtype=torch.int64))


def test_the_contiguity_check_can_be_skipped_inside_a_checked_call():
    # internal calls skip the data-dependent checks; the formula itself still runs
    with skip_checks():
        assert document_causal_mask(torch.tensor([0, 1, 0])).shape == (3, 3)
