"""The sink experiment of chapter 13 (attnbook.models.markov).

The task must be the chain its docstring describes (bigram after a non-trigger, back-copy after a
trigger, ``bos`` in front or not); the measurements must give hand-computed values on hand-made
weights; the streaming evaluation must equal the full model when the window holds everything, equal
the mask-free token-by-token decoding with a ``StreamingCache``, and, with positions inside the
cache, equal a hand computation that embeds each kept token at its position of
``streaming_positions``; bad input must raise an error that names it.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnbook.efficient.streaming import streaming_positions
from attnbook.models.configs import SequenceModelConfig
from attnbook.models.markov import (
    BigramBackcopy,
    decode_with_streaming_cache,
    key_ablation_loss,
    random_earlier_keys,
    sink_model_config,
    sink_ratio,
    streaming_logits,
    train_sink_model,
    uniform_weight_on_position,
    weight_on_position,
    windowed_loss,
)
from attnbook.models.sequence import SequenceModel
from attnbook.models.tasks import Batch
from attnbook.models.training import sequence_loss


def _model(task, *, seed=0, dtype=torch.float64, device="cpu", num_heads=1, max_len=None):
    torch.manual_seed(seed)
    config = sink_model_config(task, d_model=16, num_heads=num_heads, max_len=max_len)
    return SequenceModel(config, device=device, dtype=dtype).eval()


# ---------------------------------------------------------------- the task


@pytest.mark.parametrize("bos", [True, False])
def test_every_target_follows_the_rule_of_the_chain(bos):
    task = BigramBackcopy(num_symbols=10, num_triggers=3, branching=4, length=24, bos=bos, seed=5)
    batch = task(200, torch.Generator().manual_seed(0))
    x, y = batch.inputs, batch.targets
    assert x.shape == y.shape == (200, 24) and task.out_size == 10 and task.vocab_size == 10 + bos
    assert torch.equal(x[:, 1:], y[:, :-1])  # next-token prediction: the target is the next input
    chain = torch.cat([x[:, 1:], y[:, -1:]], dim=1) if bos else torch.cat([x, y[:, -1:]], dim=1)
    if bos:
        assert (x[:, 0] == task.bos_id).all() and (x[:, 1:] != task.bos_id).all()
    assert (chain[:, 0] >= task.num_triggers).all()  # x_1 is no trigger
    for row in chain.tolist():
        for t in range(1, len(row)):
            if row[t - 1] < task.num_triggers:
                assert row[t] == row[t - 2]  # back-copy
            else:
                assert row[t] in task.successors[row[t - 1]]  # bigram


def test_the_bigram_and_the_first_symbol_are_uniform_as_documented():
    task = BigramBackcopy(num_symbols=6, num_triggers=1, branching=3, length=40, seed=2)
    batch = task(4000, torch.Generator().manual_seed(1))
    x = batch.inputs[:, 1:]  # (batch, n - 1): x_1 .. x_{n-1}
    previous, following = x[:, :-1].flatten(), x[:, 1:].flatten()
    counts = torch.zeros(6, 6)
    counts.index_put_((previous, following), torch.ones(previous.numel()), accumulate=True)
    P = task.transition_matrix().float()  # (6, 6)
    for a in range(1, 6):  # non-triggers: the empirical transitions match the bigram
        frequencies = counts[a] / counts[a].sum()
        assert (frequencies - P[a]).abs().max() < 0.03, (a, frequencies, P[a])
    first = torch.bincount(x[:, 0], minlength=6).float() / 4000
    assert first[0] == 0 and (first[1:] - 0.2).abs().max() < 0.03
    assert torch.allclose(task.transition_matrix().sum(dim=1), torch.ones(6, dtype=torch.float64))


def test_conditional_entropy_by_hand():
    task = BigramBackcopy(num_symbols=5, num_triggers=2, branching=3, length=4)
    inputs = torch.tensor([[5, 3, 1, 4]])  # bos, a non-trigger, a trigger, a non-trigger
    expected = [[math.log(3), math.log(3), 0.0, math.log(3)]]  # after bos: log(S - T) = log 3
    assert task.conditional_entropy(inputs).tolist() == expected
    no_bos = BigramBackcopy(num_symbols=6, num_triggers=2, branching=2, length=3, bos=False)
    assert no_bos.conditional_entropy(torch.tensor([[0, 2, 5]])).tolist() == [[0.0, math.log(2), math.log(2)]]
    assert task.trigger_mask(inputs).tolist() == [[False, False, True, False]]


def test_the_successors_come_from_the_seed_and_can_be_given():
    assert BigramBackcopy(seed=3).successors == BigramBackcopy(seed=3).successors
    assert BigramBackcopy(seed=3).successors != BigramBackcopy(seed=4).successors
    given = ((1, 2), (0, 2), (0, 1))
    assert BigramBackcopy(num_symbols=3, num_triggers=1, branching=2, successors=given).successors == given


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_triggers": 16}, ValueError, "num_triggers = 16 must be < num_symbols = 16"),
        ({"branching": 17}, ValueError, "branching = 17 must be <= num_symbols = 16"),
        ({"num_symbols": 2}, ValueError, "num_symbols must be >= 3"),
        ({"length": 1}, ValueError, "length must be >= 2"),
        ({"bos": 1}, TypeError, "bos"),
        (
            {"num_symbols": 3, "num_triggers": 1, "branching": 2, "successors": ((1, 1), (0, 2), (0, 1))},
            ValueError,
            "distinct",
        ),
        (
            {"num_symbols": 3, "num_triggers": 1, "branching": 2, "successors": ((1, 2), (0, 2))},
            ValueError,
            "3 tuples of 2",
        ),
    ],
)
def test_bad_task_arguments_raise(kwargs, error, match):
    with pytest.raises(error, match=match):
        BigramBackcopy(**kwargs)


def test_bad_calls_of_the_task_raise():
    task = BigramBackcopy()
    with pytest.raises(TypeError, match="torch.Generator"):
        task(4, 0)
    with pytest.raises(ValueError, match="batch_size"):
        task(0, torch.Generator())
    with pytest.raises(ValueError, match="ids in"):
        task.conditional_entropy(torch.tensor([[17]]))


# ---------------------------------------------------------------- weight on a position


def _hand_weights():
    w = torch.tensor([[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.5, 0.25, 0.25]])  # (3, 3), causal rows
    return torch.stack([w, torch.eye(3)])[None]  # (1, 2, 3, 3): head 1 attends to itself


def test_weight_on_position_and_sink_ratio_by_hand(device):
    weights = _hand_weights().to(device)
    share = weight_on_position(weights, 0)  # every query: (1 + 0.25 + 0.5) / 3 and (1 + 0 + 0) / 3
    torch.testing.assert_close(share, torch.tensor([1.75 / 3, 1 / 3], device=device))
    uniform = (1 + 1 / 2 + 1 / 3) / 3
    assert uniform_weight_on_position(3, 0) == pytest.approx(uniform, abs=1e-15)
    torch.testing.assert_close(sink_ratio(weights, 0), torch.tensor([1.75 / 3, 1 / 3], device=device) / uniform)
    later = torch.tensor([[False, True, True]], device=device)  # queries 1 and 2
    torch.testing.assert_close(weight_on_position(weights, 0, later), torch.tensor([0.375, 0.0], device=device))
    assert uniform_weight_on_position(3, 0, later) == pytest.approx((1 / 2 + 1 / 3) / 2, abs=1e-15)
    torch.testing.assert_close(weight_on_position(weights, 1), torch.tensor([0.5, 0.5], device=device))  # rows 1, 2
    assert uniform_weight_on_position(3, 1) == pytest.approx((1 / 2 + 1 / 3) / 2, abs=1e-15)


def test_a_uniform_causal_head_has_ratio_one():
    n = 7
    i = torch.arange(n)
    uniform = torch.where(i[None] <= i[:, None], 1.0 / (i[:, None] + 1.0), 0.0).double()  # (n, n)
    weights = uniform.expand(3, 2, n, n)
    queries = torch.rand(3, n, generator=torch.Generator().manual_seed(0)) < 0.5
    queries[0, 3] = True
    for position in (0, 2):
        chosen = queries & (i >= position)
        torch.testing.assert_close(sink_ratio(weights, position, chosen), torch.ones(2, dtype=torch.float64))


def test_bad_weights_and_queries_raise():
    weights = _hand_weights()
    with pytest.raises(ValueError, match="weights"):
        weight_on_position(weights[0])
    with pytest.raises(ValueError, match="position must be a key position in"):
        weight_on_position(weights, 3)
    with pytest.raises(ValueError, match="selects no query"):
        weight_on_position(weights, 0, torch.zeros(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="queries"):
        weight_on_position(weights, 0, torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="queries"):
        weight_on_position(weights, 0, torch.ones(1, 3))
    with pytest.raises(ValueError, match="selects no query"):
        uniform_weight_on_position(3, 0, torch.zeros(2, 3, dtype=torch.bool))


# ---------------------------------------------------------------- taking a key out


def test_random_earlier_keys_lie_in_range_and_reach_every_key():
    keys = random_earlier_keys(500, 6, torch.Generator().manual_seed(0))
    i = torch.arange(6)
    assert (keys[:, 0] == -1).all()
    assert ((keys[:, 1:] >= 1) & (keys[:, 1:] <= i[1:])).all()
    assert set(keys[:, 5].tolist()) == {1, 2, 3, 4, 5}
    assert (random_earlier_keys(3, 4, torch.Generator(), low=0) >= 0).all()


def _by_hand_ablated_logits(model, tokens, removed, head=None):
    """One-layer attention-only model, written out: the removed key's weight set to 0, the row renormalised."""
    block, mha = model.blocks[0], model.blocks[0].self_attn
    x = model.embed(tokens)  # (batch, n, d)
    h = block.norm1(x)
    H, n = mha.num_heads, tokens.shape[1]
    d_head = mha.head_dim

    def split(linear):
        return linear(h).reshape(h.shape[0], n, H, d_head).transpose(1, 2)  # (batch, H, n, d_head)

    q, k, v = split(mha.q_proj), split(mha.k_proj), split(mha.v_proj)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d_head)  # (batch, H, n, n)
    scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -math.inf)
    w = scores.softmax(dim=-1)
    for b in range(tokens.shape[0]):
        for i in range(n):
            if removed[b, i] >= 0:
                for hh in range(H) if head is None else [head]:
                    w[b, hh, i, removed[b, i]] = 0.0
                    w[b, hh, i] = w[b, hh, i] / w[b, hh, i].sum()
    out = (w @ v).transpose(1, 2).reshape(h.shape)  # (batch, n, d)
    return model.head(model.final_norm(x + mha.out_proj(out)))


@pytest.mark.parametrize("head", [None, 1])
def test_key_ablation_loss_is_the_renormalised_softmax(head):
    task = BigramBackcopy(num_symbols=8, num_triggers=2, branching=3, length=9, seed=1)
    model = _model(task, num_heads=2)
    batch = task(5, torch.Generator().manual_seed(3))
    removed = random_earlier_keys(5, 9, torch.Generator().manual_seed(4), low=0)
    removed[:, 0] = -1
    removed[0, 4] = -1  # a query that loses nothing, not scored
    with torch.no_grad():
        logits = _by_hand_ablated_logits(model, batch.inputs, removed, head)
    targets = torch.where(removed >= 0, batch.targets, -100)
    expected = sequence_loss(logits, targets).item()
    assert key_ablation_loss(model, batch, removed, head=head) == pytest.approx(expected, rel=1e-12)


def test_bad_ablations_raise():
    task = BigramBackcopy(length=6)
    model, batch = _model(task), task(2, torch.Generator().manual_seed(0))
    removed = torch.zeros(2, 6, dtype=torch.long)
    with pytest.raises(ValueError, match="query 0"):
        key_ablation_loss(model, batch, removed)  # query 0 would lose its only key
    removed[:, 0] = -1
    removed[1, 2] = 3
    with pytest.raises(ValueError, match="0 <= removed"):
        key_ablation_loss(model, batch, removed)  # a key in the future
    with pytest.raises(ValueError, match="no query loses"):
        key_ablation_loss(model, batch, torch.full((2, 6), -1))
    with pytest.raises(TypeError, match="integer"):
        key_ablation_loss(model, batch, torch.zeros(2, 6))
    with pytest.raises(ValueError, match="head must be a head in"):
        key_ablation_loss(model, batch, torch.full((2, 6), -1).index_fill(1, torch.tensor([1]), 0), head=1)


# ---------------------------------------------------------------- streaming


@pytest.mark.parametrize("positions", ["original", "cache"])
def test_a_window_that_holds_everything_is_the_full_model(positions, device):
    task = BigramBackcopy(length=12, seed=2)
    model = _model(task, device=device, dtype=torch.float32)
    batch = task(8, torch.Generator().manual_seed(0), device)
    with torch.no_grad():
        full, _ = model(batch.inputs)
        for window, sinks in ((12, 0), (12, 4), (30, 1)):
            logits = streaming_logits(model, batch.inputs, window, sinks, positions=positions)
            assert torch.equal(logits, full)
    assert (
        windowed_loss(model, batch, 12, 0, from_query=0, positions=positions)
        == sequence_loss(full, batch.targets).item()
    )


@pytest.mark.parametrize(("window", "sinks"), [(4, 0), (4, 1), (5, 2), (1, 0)])
def test_the_masked_stream_is_the_streaming_cache_decoded_token_by_token(window, sinks, dtype, device):
    task = BigramBackcopy(length=11, seed=3)
    model = _model(task, device=device, dtype=dtype)
    tokens = task(4, torch.Generator().manual_seed(1), device).inputs
    with torch.no_grad():
        masked = streaming_logits(model, tokens, window, sinks)
        full, _ = model(tokens)
    decoded = decode_with_streaming_cache(model, tokens, window, sinks)
    tolerance = {"atol": 1e-12, "rtol": 1e-12} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(decoded, masked, **tolerance)
    assert (masked[:, window:] - full[:, window:]).abs().max() > 1e-3  # the window changed something


def test_the_streaming_cache_takes_models_with_mlp_and_several_layers():
    config = SequenceModelConfig(vocab_size=9, d_model=16, num_heads=2, num_layers=2, max_len=10, causal=True)
    torch.manual_seed(0)
    model = SequenceModel(config, dtype=torch.float64).eval()
    tokens = torch.randint(9, (3, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        masked = streaming_logits(model, tokens, 4, 1)
    torch.testing.assert_close(decode_with_streaming_cache(model, tokens, 4, 1), masked, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(("window", "sinks"), [(4, 0), (4, 1), (6, 2)])
def test_cache_positions_embed_each_kept_token_at_its_streaming_position(window, sinks):
    task = BigramBackcopy(length=10, seed=4)
    model = _model(task)
    tokens = task(3, torch.Generator().manual_seed(2)).inputs
    n, block, mha = 10, model.blocks[0], model.blocks[0].self_attn
    P = streaming_positions(n, sinks, window)  # (n, n): the position key j carries for query i, -1 if not kept
    expected = torch.empty(3, n, task.out_size, dtype=torch.float64)
    with torch.no_grad():
        for i in range(n):
            kept = (P[i] >= 0).nonzero().flatten()  # the keys query i sees
            x = model.embed.token(tokens[:, kept]) + model.embed.encoding[P[i, kept]]  # (3, L, d) at cache positions
            h = block.norm1(x)
            out, _ = mha(h[:, -1:], h, h)  # the query (itself the last kept token) over the kept keys
            expected[:, i] = model.head(model.final_norm(x[:, -1] + out[:, 0]))
        got = streaming_logits(model, tokens, window, sinks, positions="cache")
        original = streaming_logits(model, tokens, window, sinks)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(got[:, :window], original[:, :window], atol=1e-12, rtol=1e-12)  # cache not yet full
    assert (got[:, window:] - original[:, window:]).abs().max() > 1e-3


def test_windowed_loss_scores_the_queries_after_the_window():
    task = BigramBackcopy(length=10, seed=5)
    model = _model(task)
    batch = task(6, torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = streaming_logits(model, batch.inputs, 3, 1)
    expected = sequence_loss(logits[:, 3:], batch.targets[:, 3:]).item()
    assert windowed_loss(model, batch, 3, 1) == expected
    assert windowed_loss(model, batch, 3, 1, from_query=5) == sequence_loss(logits[:, 5:], batch.targets[:, 5:]).item()


def test_bad_streaming_arguments_raise():
    task = BigramBackcopy(length=8)
    model, batch = _model(task), task(2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="window = 2 keys must exceed num_sinks = 2"):
        streaming_logits(model, batch.inputs, 2, 2)
    with pytest.raises(ValueError, match="positions"):
        streaming_logits(model, batch.inputs, 4, 1, positions="stream")
    with pytest.raises(ValueError, match="leaves no query"):
        windowed_loss(model, batch, 8, 1)
    with pytest.raises(TypeError, match="Batch"):
        windowed_loss(model, batch.inputs, 4, 1)
    with pytest.raises(TypeError, match="integer token ids"):
        streaming_logits(model, batch.inputs.float(), 4, 1)
    with pytest.raises(ValueError, match="ids in"):
        streaming_logits(model, batch.inputs + 20, 4, 1)
    deep = SequenceModel(SequenceModelConfig(vocab_size=17, d_model=8, num_heads=1, num_layers=2, causal=True))
    with pytest.raises(ValueError, match="one-layer"):
        streaming_logits(deep, batch.inputs, 4, 1, positions="cache")
    bidirectional = SequenceModel(SequenceModelConfig(vocab_size=17, d_model=8, num_heads=1))
    with pytest.raises(ValueError, match="causal"):
        streaming_logits(bidirectional, batch.inputs, 4, 1)
    with pytest.raises(TypeError, match="SequenceModel"):
        streaming_logits(torch.nn.Linear(2, 2), batch.inputs, 4, 1)
    alibi = SequenceModel(SequenceModelConfig(vocab_size=17, d_model=8, num_heads=1, causal=True, positional="alibi"))
    with pytest.raises(ValueError, match="positional='alibi'"):
        decode_with_streaming_cache(alibi, batch.inputs, 4, 1)


# ---------------------------------------------------------------- training


def test_training_is_seeded_and_short_runs_work():
    model, task, history = train_sink_model(3, steps=3, batch_size=4)
    _, task_again, history_again = train_sink_model(3, steps=3, batch_size=4)
    assert history.loss == history_again.loss and task == task_again == BigramBackcopy(seed=3)
    assert not model.training and model.config.num_layers == 1 and not model.config.mlp and model.causal
    _, no_bos, _ = train_sink_model(3, bos=False, steps=1, batch_size=2)
    assert no_bos.bos_id is None and no_bos.vocab_size == 16 and no_bos.successors == task.successors


def test_the_models_with_and_without_bos_start_from_the_same_weights():
    initial = []
    for bos in (True, False):
        torch.manual_seed(7)
        initial.append(SequenceModel(sink_model_config(BigramBackcopy(bos=bos))).state_dict())
    assert initial[0].keys() == initial[1].keys()
    assert all(torch.equal(initial[0][name], initial[1][name]) for name in initial[0])


def test_a_longer_position_table_trains_the_same_model():
    _, _, history = train_sink_model(5, steps=3, batch_size=4)
    model, _, history_long = train_sink_model(5, steps=3, batch_size=4, max_len=96)
    assert history.loss == history_long.loss and model.max_len == 96


def test_bad_training_arguments_raise():
    with pytest.raises(TypeError, match="BigramBackcopy"):
        train_sink_model(0, task=Batch(torch.zeros(1, 1), torch.zeros(1, 1)), steps=1)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        train_sink_model(-1, steps=1)
