"""Chapter 14's recall models: the multi-query recall task, the short convolution, the three mixers,
training and the accuracy at a number of pairs (attnbook.models.recall, attnbook.models.tasks)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnbook.linear.delta_rule import delta_rule_recurrent
from attnbook.models.recall import (
    MIXERS,
    RecallModel,
    ShortConvolution,
    recall_accuracy,
    recall_curve,
    state_capacity,
    train_recall_model,
)
from attnbook.models.tasks import IGNORE, MultiQueryRecall
from attnbook.models.training import accuracy


def draw(task, batch_size=16, seed=0):
    return task(batch_size, torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- the task


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("task", [MultiQueryRecall(), MultiQueryRecall(2, 5, num_keys=6, num_values=3)])
def test_keys_then_values_then_every_stored_key_once_with_its_value_as_target(task, seed):
    batch = draw(task, 32, seed)
    x, y = batch.inputs, batch.targets
    assert x.dtype == torch.long and x.shape == y.shape and x.shape[1] % 3 == 0
    N = x.shape[1] // 3
    assert task.min_pairs <= N <= task.max_pairs
    keys, values, queries = x[:, 0 : 2 * N : 2], x[:, 1 : 2 * N : 2], x[:, 2 * N :]
    assert bool(((keys >= 0) & (keys < task.num_keys)).all())
    assert bool(((values >= task.num_keys) & (values < task.vocab_size)).all())
    for row in range(x.shape[0]):
        stored = keys[row].tolist()
        assert len(set(stored)) == N  # distinct keys
        assert sorted(queries[row].tolist()) == sorted(stored)  # the queries are a permutation of the stored keys
        value_of = dict(zip(stored, (values[row] - task.num_keys).tolist()))
        assert y[row, 2 * N :].tolist() == [value_of[k] for k in queries[row].tolist()]
    assert bool((y[:, : 2 * N] == IGNORE).all())  # scored only at the queries
    assert bool(((y[:, 2 * N :] >= 0) & (y[:, 2 * N :] < task.out_size)).all())
    assert (task.vocab_size, task.out_size) == (task.num_keys + task.num_values, task.num_values)


def test_the_number_of_pairs_is_drawn_per_batch_over_its_whole_range_and_fixed_by_with_pairs():
    task = MultiQueryRecall(3, 6, num_keys=8, num_values=4)
    g = torch.Generator().manual_seed(0)
    seen = {task(2, g).inputs.shape[1] // 3 for _ in range(200)}
    assert seen == {3, 4, 5, 6}
    fixed = task.with_pairs(5)
    assert (fixed.min_pairs, fixed.max_pairs, fixed.num_keys, fixed.num_values) == (5, 5, 8, 4)
    assert {fixed(2, g).inputs.shape[1] for _ in range(20)} == {15}
    assert task.max_length == 18


def test_the_order_of_the_queries_and_the_values_vary():
    batch = draw(MultiQueryRecall(8, 8), 64)
    N = 8
    queries, keys = batch.inputs[:, 2 * N :], batch.inputs[:, 0 : 2 * N : 2]
    assert not bool((queries == keys).all())  # not the order of storage
    assert len(set(batch.targets[:, 2 * N :].flatten().tolist())) > 32  # values drawn from all 64


def test_same_seed_same_batches(device):
    task = MultiQueryRecall()
    a, b = draw(task, 8, 3), draw(task, 8, 3)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    moved = task(8, torch.Generator().manual_seed(3), device)
    assert moved.inputs.device.type == device.type and torch.equal(moved.inputs.cpu(), a.inputs)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: MultiQueryRecall(0, 4), ValueError, "min_pairs"),
        (lambda: MultiQueryRecall(5, 4), ValueError, "max_pairs"),
        (lambda: MultiQueryRecall(4, 33, num_keys=32), ValueError, "num_keys"),
        (lambda: MultiQueryRecall(num_values=1), ValueError, "num_values"),
        (lambda: MultiQueryRecall(2.5, 4), TypeError, "min_pairs"),
        (lambda: MultiQueryRecall().with_pairs(0), ValueError, "num_pairs"),
        (lambda: MultiQueryRecall()(0, torch.Generator()), ValueError, "batch_size"),
        (lambda: MultiQueryRecall()(4, 0), TypeError, "generator"),
    ],
)
def test_bad_task_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


# ---------------------------------------------------------------- the short convolution


def test_short_convolution_is_the_causal_sum_of_its_taps():
    torch.manual_seed(0)
    conv = ShortConvolution(5, 3).double()
    x = torch.randn(2, 7, 5, dtype=torch.float64)
    w, b = conv.weight, conv.bias  # (channels, K): w[:, s] multiplies x_{t - s}
    expected = torch.zeros_like(x) + b
    for t in range(7):
        for s in range(3):
            if t - s >= 0:
                expected[:, t] += w[:, s] * x[:, t - s]
    torch.testing.assert_close(conv(x), expected, rtol=0, atol=1e-14)
    # and it is torch's depthwise conv1d with the taps reversed (conv1d correlates) and K - 1 zeros in front
    reference = F.conv1d(F.pad(x.transpose(1, 2), (2, 0)), w.flip(1)[:, None, :], b, groups=5).transpose(1, 2)
    torch.testing.assert_close(conv(x), reference, rtol=0, atol=1e-14)


@pytest.mark.parametrize("t", [0, 3, 6])
def test_short_convolution_is_causal(t):
    torch.manual_seed(1)
    conv = ShortConvolution(4, 2)
    x = torch.randn(3, 7, 4)
    changed = x.clone()
    changed[:, t] += 1.0
    before, after = conv(x), conv(changed)
    assert torch.equal(before[:, :t], after[:, :t])  # nothing before t moves
    assert not torch.equal(before[:, t], after[:, t])  # t itself does (the test can fail)


def test_short_convolution_bad_input():
    with pytest.raises(ValueError, match="kernel_size"):
        ShortConvolution(4, 0)
    with pytest.raises(ValueError, match=r"\(batch, n, channels = 4\)"):
        ShortConvolution(4)(torch.zeros(2, 5, 3))


# ---------------------------------------------------------------- the model


def model_for(mixer, device=None, dtype=torch.float64, **options):
    torch.manual_seed(0)
    return RecallModel(128, 64, mixer=mixer, device=device, dtype=dtype, **options).eval()


@pytest.mark.parametrize("mixer", MIXERS)
@pytest.mark.parametrize("t", [0, 5, 17, 29])
def test_every_mixer_is_causal(mixer, t, device):
    model = model_for(mixer, device, chunk_size=8)
    tokens = torch.randint(128, (3, 30), generator=torch.Generator().manual_seed(t)).to(device)
    changed = tokens.clone()
    changed[:, t] = (changed[:, t] + 1) % 128
    with torch.no_grad():
        before, after = model(tokens)[0], model(changed)[0]  # (3, 30, 64) each
    torch.testing.assert_close(before[:, :t], after[:, :t], rtol=0, atol=1e-12)
    assert (before[:, t:] - after[:, t:]).abs().amax() > 1e-6  # the change is seen from t on


@pytest.mark.parametrize("mixer", ["linear", "delta"])
def test_the_chunk_size_does_not_change_the_outputs(mixer):
    tokens = torch.randint(128, (2, 37), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        reference = model_for(mixer, chunk_size=1)(tokens)[0]
        for chunk_size in (3, 16, 64):
            torch.testing.assert_close(
                model_for(mixer, chunk_size=chunk_size)(tokens)[0], reference, rtol=0, atol=1e-12
            )


def test_the_mixers_compute_what_the_docstring_says():
    tokens = torch.randint(128, (2, 21), generator=torch.Generator().manual_seed(1))
    n = tokens.shape[1]
    with torch.no_grad():
        soft = model_for("softmax")
        a = soft.mixer_inputs(tokens)
        q, k, v = a["query"], a["key"], a["value"]  # (2, 4, n, 8)
        scores = (q @ k.transpose(-2, -1)) / 8**0.5  # (2, 4, n, n)
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -torch.inf)
        out, weights, state = soft.mix(tokens)
        torch.testing.assert_close(out, scores.softmax(-1) @ v, rtol=0, atol=1e-12)
        assert state is None and weights.shape == (2, 4, n, n)
        torch.testing.assert_close(soft(tokens)[0], soft(tokens, need_weights=True)[0], rtol=0, atol=1e-12)

        linear = model_for("linear")
        a = linear.mixer_inputs(tokens)
        q, k, v = a["query"], a["key"], a["value"]
        assert bool((q > 0).all() and (k > 0).all())  # elu + 1 features
        A = (q @ k.transpose(-2, -1)).tril()  # (2, 4, n, n)
        out, weights, state = linear.mix(tokens)
        torch.testing.assert_close(out, (A @ v) / A.sum(-1, keepdim=True), rtol=0, atol=1e-12)
        torch.testing.assert_close(state, k.transpose(-2, -1) @ v, rtol=0, atol=1e-12)  # S = sum_j phi(k_j)^T v_j
        assert weights is None and linear(tokens, need_weights=True)[1] is None

        delta = model_for("delta")
        a = delta.mixer_inputs(tokens)
        torch.testing.assert_close(a["key"].norm(dim=-1), torch.ones(2, 4, n, dtype=torch.float64))
        torch.testing.assert_close(a["query"].norm(dim=-1), torch.ones(2, 4, n, dtype=torch.float64))
        assert bool(((a["beta"] > 0) & (a["beta"] < 1)).all()) and a["beta"].shape == (2, 4, n)
        expected, expected_state = delta_rule_recurrent(a["query"], a["key"], a["value"], a["beta"])
        out, _, state = delta.mix(tokens)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(state, expected_state, rtol=0, atol=1e-12)


def test_state_size_and_capacity():
    for heads, width in ((4, 8), (1, 32), (2, 16)):
        for mixer in ("linear", "delta"):
            model = model_for(mixer, num_heads=heads, head_width=width)
            assert model.state_numbers == heads * width * width and state_capacity(model) == width
    soft = model_for("softmax")
    assert soft.state_numbers is None and state_capacity(soft) is None
    # 4 x 8 and 1 x 32 heads have the same parameters: only the state's shape differs
    counts = [
        sum(p.numel() for p in model_for("linear", num_heads=h, head_width=w).parameters())
        for h, w in ((4, 8), (1, 32))
    ]
    assert counts[0] == counts[1]


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: RecallModel(128, 64, mixer="mamba"), ValueError, "mixer"),
        (lambda: RecallModel(128, 64, mixer="linear", head_width=0), ValueError, "head_width"),
        (lambda: RecallModel(128, 64, mixer="linear", chunk_size=0), ValueError, "chunk_size"),
        (lambda: model_for("linear")(torch.tensor([[1, 128]])), ValueError, r"\[0, 128\)"),
        (lambda: model_for("linear")(torch.tensor([[1.0, 2.0]])), TypeError, "integer"),
        (lambda: model_for("linear")(torch.tensor([1, 2])), ValueError, "tokens"),
        (lambda: model_for("linear", max_len=4)(torch.zeros(1, 5, dtype=torch.long)), ValueError, "max_len"),
        (lambda: model_for("linear")(torch.zeros(1, 5, dtype=torch.long), need_weights=1), TypeError, "need_weights"),
        (lambda: state_capacity("linear"), TypeError, "RecallModel"),
    ],
)
def test_bad_model_input(make, error, message):
    with pytest.raises(error, match=message):
        make()


# ---------------------------------------------------------------- training and accuracy


def test_training_is_reproducible_and_moves_the_weights():
    task = MultiQueryRecall(2, 6, num_keys=8, num_values=8)
    a, history_a = train_recall_model("delta", 3, steps=3, task=task)
    b, history_b = train_recall_model("delta", 3, steps=3, task=task)
    c, history_c = train_recall_model("delta", 4, steps=3, task=task)
    assert history_a.loss == history_b.loss and len(history_a.loss) == len(history_a.accuracy) == 3
    assert history_a.loss != history_c.loss
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    torch.manual_seed(3)
    untrained = RecallModel(16, 8, mixer="delta")
    assert not torch.equal(untrained.qkv.weight, a.qkv.weight)
    assert not a.training


def test_recall_accuracy_scores_every_query_of_held_out_sequences():
    model = model_for("linear", dtype=torch.float32)
    task = MultiQueryRecall()
    value = recall_accuracy(model, 6, num_sequences=10, seed=7)
    batch = task.with_pairs(6)(10, torch.Generator().manual_seed(7))
    with torch.no_grad():
        logits = model(batch.inputs)[0]
    assert value == accuracy(logits, batch.targets)
    right = (logits.argmax(-1)[:, 12:] == batch.targets[:, 12:]).sum().item()
    assert value == right / 60  # 10 sequences x 6 queries
    assert recall_curve(model, [6, 2], num_sequences=10, seed=7) == {
        6: value,
        2: recall_accuracy(model, 2, num_sequences=10, seed=7),
    }


def test_an_oracle_gets_every_query_right():
    """A model that looks the answer up in its input reaches accuracy 1, one that answers 0 chance."""
    task = MultiQueryRecall(4, 4, num_keys=8, num_values=8)

    class Oracle(RecallModel):
        def forward(self, tokens, need_weights=False):
            N = tokens.shape[1] // 3
            keys, values = tokens[:, 0 : 2 * N : 2], tokens[:, 1 : 2 * N : 2] - 8  # (batch, N) each
            where = (tokens[:, 2 * N :, None] == keys[:, None, :]).long().argmax(-1)  # (batch, N)
            answer = values.gather(1, where)  # (batch, N)
            logits = torch.zeros(*tokens.shape, 8)
            logits[:, 2 * N :] = F.one_hot(answer, 8).double()
            return logits, None

    oracle = Oracle(16, 8, mixer="softmax")
    assert recall_accuracy(oracle, 4, num_sequences=50, task=task) == 1.0


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: train_recall_model("rnn", 0, steps=1), ValueError, "mixer"),
        (lambda: train_recall_model("linear", -1, steps=1), ValueError, "seed"),
        (lambda: train_recall_model("linear", 0, steps=0), ValueError, "steps"),
        (lambda: train_recall_model("linear", 0, steps=1, lr=0.0), ValueError, "lr"),
        (lambda: train_recall_model("linear", 0, steps=1, task="recall"), TypeError, "MultiQueryRecall"),
        (lambda: recall_accuracy(model_for("linear"), 65), ValueError, "num_keys"),
        (lambda: recall_accuracy(model_for("linear"), 0), ValueError, "num_pairs"),
        (lambda: recall_accuracy(torch.nn.Linear(2, 2), 4), TypeError, "RecallModel"),
        (
            lambda: recall_accuracy(model_for("linear"), 4, task=MultiQueryRecall(num_keys=32, max_pairs=8)),
            ValueError,
            "does not fit",
        ),
    ],
)
def test_bad_training_and_accuracy_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()
