r"""Attention sinks in a small trained model: a Markov chain with a ``bos`` token, and what a window
that drops it costs (chapter 13).

The task, :class:`BigramBackcopy`, is a Markov chain over ``num_symbols`` symbols whose next token
depends on the last one (a bigram) except after a *trigger* symbol, where it repeats the token
before the trigger (it depends on the last two). The task of Guo et al. (2024), "Active-dormant
attention heads". A one-layer attention-only model learns the bigrams through its direct path
(embedding to output head) and needs its attention head only at triggers, to fetch the previous
token; everywhere else the head has nothing to do, and what it reads there is noise. With a
``bos`` token in front the head can park its weight there: an *attention sink*.

* :class:`BigramBackcopy`: the task (with or without ``bos``), its exact conditional entropy
  (:meth:`BigramBackcopy.conditional_entropy`, the best loss any model can reach) and where its
  triggers are (:meth:`BigramBackcopy.trigger_mask`);
* :func:`sink_model_config`, :func:`train_sink_model`: the model (a one-layer attention-only
  causal :class:`attnbook.models.sequence.SequenceModel`) and its seeded training;
* :func:`weight_on_position`, :func:`uniform_weight_on_position`, :func:`sink_ratio`: how much
  weight the queries put on one key position, against a head that spreads it uniformly;
* :func:`key_ablation_loss`, :func:`random_earlier_keys`: the loss when one key is taken out of
  each query's softmax (the ``bos`` column against a random other one);
* :func:`streaming_logits`, :func:`windowed_loss`: the model evaluated as a stream with a sliding
  window of ``window`` keys, with or without ``num_sinks`` sink tokens kept beside it
  (StreamingLLM, :mod:`attnbook.efficient.streaming`), the kept tokens at their original positions
  or re-numbered inside the cache; :func:`decode_with_streaming_cache` does the same token by token
  with a :class:`attnbook.efficient.streaming.StreamingCache`.

Shape legend: ``batch`` sequences, ``n`` tokens per sequence (queries i, keys j), ``heads`` the
heads of a layer, ``d_model`` the width, ``w`` the window, ``k`` the sink tokens.

Measured with the defaults (``train_sink_model(seed)``: 16 symbols, 2 triggers, 8 successors,
length 32, width 32, one head, 600 steps of 32 sequences, AdamW 3e-2 with weight decay 0.1; about
5 CPU-seconds per model on one thread), training seeds 20-29, 512 held-out sequences each:
with ``bos`` the head puts 83-90 % of its weight on it (``sink_ratio`` over every query 6.6-7.1;
the most a head can reach there is about 7.9); without ``bos`` the first token gets 0.66-0.91 times
the even share. Taking ``bos`` out of the softmax of the non-trigger queries costs 0.06-0.36
nats, a random earlier key there 0.000; over every query the two differ by only 0.02-0.27. A
window of 8 that drops ``bos`` costs 0.09-0.39 nats (queries i >= 8), keeping ``bos`` as one sink
token gives it back to within 0.000 (renumbered inside the cache: 0.004); the same window costs
the model without ``bos`` at most 0.011. Streams longer than training (the same model built with
``max_len=160``, which trains identically, read on sequences of 160; loss over queries i >= 32, seeds
20-25): full attention at the original positions 2.46-2.92 nats against 1.81-1.89 on queries
8-31 (positions past 31 were never seen in training); ``bos`` kept beside a window of 8 at its
original positions 2.34-2.72; the same renumbered inside the cache 1.82-1.90, within 0.011 of the
full model on queries 8-31. With weight decay 0.01 instead, two of six seeds still split
the spare weight between ``bos`` and the current token after 600 steps (it moves to ``bos`` with
longer training) and their window costs fall to 0.01-0.05.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..efficient.streaming import POSITIONS, StreamingCache, streaming_mask, streaming_positions
from ..heads.multi_head import concat_then_project, project_heads
from ..validators import (
    check_index,
    check_one_of,
    check_shapes,
    check_sink_window,
    check_sizes,
    check_type,
    skip_checks,
)
from .blocks import _check_tokens
from .configs import SequenceModelConfig
from .sequence import SequenceModel
from .tasks import IGNORE, Batch, _check_call, _check_int
from .training import History, sequence_loss, train

__all__ = [
    "BigramBackcopy",
    "decode_with_streaming_cache",
    "key_ablation_loss",
    "random_earlier_keys",
    "sink_model_config",
    "sink_ratio",
    "streaming_logits",
    "train_sink_model",
    "uniform_weight_on_position",
    "weight_on_position",
    "windowed_loss",
]


def _seeded_successors(num_symbols: int, branching: int, seed: int) -> tuple[tuple[int, ...], ...]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(
        tuple(torch.randperm(num_symbols, generator=generator)[:branching].tolist()) for _ in range(num_symbols)
    )


@dataclass(frozen=True)
class BigramBackcopy:
    r"""A Markov chain whose next token depends on the last token, or on the last two after a
    trigger (chapter 13; the bigram-backcopy task of Guo et al. 2024).

    Symbols are ids 0, ..., S - 1 (S = ``num_symbols``); the first ``num_triggers`` of them are the
    triggers. A chain :math:`x_1, x_2, \dots` is drawn as

    * :math:`x_1` uniform over the S - T non-trigger symbols;
    * after a non-trigger :math:`x_t`: :math:`x_{t+1}` uniform over ``successors[x_t]``, a set of
      ``branching`` distinct symbols (a bigram, drawn once from ``seed``);
    * after a trigger :math:`x_t` (t >= 2 since :math:`x_1` is no trigger): :math:`x_{t+1} = x_{t-1}`
      (the back-copy).

    With ``bos=True`` the model reads ``[bos, x_1, ..., x_{n-1}]`` and predicts
    ``[x_1, ..., x_n]`` (``bos`` = S is one more input id, never a target); with ``bos=False`` it
    reads ``[x_1, ..., x_n]`` and predicts ``[x_2, ..., x_{n+1}]``. Either way ``length`` = n inputs
    and n targets, every one scored. The conditional entropy of each target given everything before
    it is 0 after a trigger, log(branching) after a non-trigger and log(S - T) after ``bos``
    (:meth:`conditional_entropy`): its mean is the lowest expected loss of any model.

    Args:
        num_symbols: S >= 3. num_triggers: T, 1 <= T < S.
        branching: successors of each symbol, 1 <= branching <= S.
        length: n >= 2 tokens the model reads.
        bos: put ``bos`` in front (the sink) or not.
        seed: draws ``successors`` when they are not given.
        successors: S tuples of ``branching`` distinct symbols each.
    """

    num_symbols: int = 16
    num_triggers: int = 2
    branching: int = 8
    length: int = 32
    bos: bool = True
    seed: int = 0
    successors: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        _check_int("num_symbols", self.num_symbols, 3)
        _check_int("num_triggers", self.num_triggers, 1)
        _check_int("branching", self.branching, 1)
        _check_int("length", self.length, 2)
        check_type("bos", self.bos, bool)
        if self.num_triggers >= self.num_symbols:
            raise ValueError(
                f"num_triggers = {self.num_triggers} must be < num_symbols = {self.num_symbols} "
                f"(the chain starts on a non-trigger symbol)"
            )
        if self.branching > self.num_symbols:
            raise ValueError(f"branching = {self.branching} must be <= num_symbols = {self.num_symbols}")
        if self.successors is None:
            successors = _seeded_successors(self.num_symbols, self.branching, self.seed)
            object.__setattr__(self, "successors", successors)
        S, b = self.num_symbols, self.branching
        rows = self.successors
        if (
            not isinstance(rows, tuple)
            or len(rows) != S
            or any(
                not isinstance(r, tuple) or len(r) != b or len(set(r)) != b or not all(0 <= s < S for s in r)
                for r in rows
            )
        ):
            raise ValueError(
                f"successors must be {S} tuples of {b} distinct symbols in [0, {S}) (one per symbol), got {rows!r}"
            )

    @property
    def bos_id(self) -> int | None:
        """The id of ``bos`` (= num_symbols), None without it."""
        return self.num_symbols if self.bos else None

    @property
    def vocab_size(self) -> int:
        return self.num_symbols + int(self.bos)

    @property
    def out_size(self) -> int:
        return self.num_symbols

    def transition_matrix(self) -> torch.Tensor:
        """The bigram of the non-trigger symbols, (S, S) float64: row a is the distribution of the
        next symbol after a non-trigger a (rows of triggers too, though the chain never uses them)."""
        S = self.num_symbols
        P = torch.zeros(S, S, dtype=torch.float64)
        P[torch.arange(S)[:, None], torch.tensor(self.successors)] = 1.0 / self.branching  # (S, branching)
        return P

    def chain(self, batch_size: int, steps: int, generator: torch.Generator) -> torch.Tensor:
        """A batch of chains :math:`x_1, ..., x_{steps}`: ids (batch_size, steps)."""
        _check_call(batch_size, generator)
        check_sizes(steps=steps)
        S, T, b = self.num_symbols, self.num_triggers, self.branching
        successors = torch.tensor(self.successors)  # (S, branching)
        x = torch.empty(batch_size, steps, dtype=torch.long)
        x[:, 0] = torch.randint(T, S, (batch_size,), generator=generator)  # x_1: a non-trigger
        choice = torch.randint(b, (batch_size, steps), generator=generator)  # (batch, steps): which successor
        for t in range(1, steps):
            bigram = successors[x[:, t - 1], choice[:, t]]  # (batch,)
            if t >= 2:
                back = x[:, t - 2]  # (batch,): the token before the previous one
                bigram = torch.where(x[:, t - 1] < T, back, bigram)
            x[:, t] = bigram
        return x

    def trigger_mask(self, inputs: torch.Tensor) -> torch.Tensor:
        """(batch, n) boolean: True where the input token is a trigger (its target is the token before it)."""
        check_shapes(inputs=(inputs, "(batch, n)", "any"))
        return inputs < self.num_triggers

    def conditional_entropy(self, inputs: torch.Tensor) -> torch.Tensor:
        r"""The entropy (nats) of each target given all the inputs up to it, (batch, n) float64.

        0 after a trigger, log(branching) after a non-trigger symbol, log(S - T) after ``bos``:
        the loss of the Bayes predictor, the lowest expected loss of any model.
        """
        _check_tokens("inputs", inputs, self.vocab_size, math.inf)
        entropy = torch.full(inputs.shape, math.log(self.branching), dtype=torch.float64, device=inputs.device)
        entropy[self.trigger_mask(inputs)] = 0.0
        if self.bos:
            entropy[inputs == self.bos_id] = math.log(self.num_symbols - self.num_triggers)
        return entropy  # (batch, n)

    def __call__(self, batch_size: int, generator: torch.Generator, device=None) -> Batch:
        _check_call(batch_size, generator)
        n = self.length
        if self.bos:
            x = self.chain(batch_size, n, generator)  # (batch, n): x_1 .. x_n
            start = torch.full((batch_size, 1), self.bos_id)  # (batch, 1)
            inputs = torch.cat([start, x[:, :-1]], dim=1)  # (batch, n): bos, x_1 .. x_{n-1}
            return Batch(inputs, x).to(device)
        x = self.chain(batch_size, n + 1, generator)  # (batch, n + 1)
        return Batch(x[:, :-1], x[:, 1:]).to(device)


# ---------------------------------------------------------------- the model and its training


def sink_model_config(
    task: BigramBackcopy, *, d_model: int = 32, num_heads: int = 1, max_len: int | None = None
) -> SequenceModelConfig:
    """A one-layer attention-only causal model for ``task`` with sinusoidal positions (chapter 13).

    Its input vocabulary is ``num_symbols + 1`` with or without ``bos`` (without, the id of ``bos`` is
    never read), so that the models with and without ``bos`` have the same parameters and, from the
    same seed, the same initial weights. ``max_len`` (default ``task.length``) sizes the position
    table: larger lets the model read streams longer than it was trained on (at positions it never
    saw in training; the sinusoidal table does not depend on ``max_len``, so training is unchanged).
    """
    check_type("task", task, BigramBackcopy, "attnbook.models.markov.BigramBackcopy")
    check_sizes(max_len=max_len)
    return SequenceModelConfig(
        vocab_size=task.num_symbols + 1,
        out_size=task.out_size,
        d_model=d_model,
        num_heads=num_heads,
        num_layers=1,
        max_len=task.length if max_len is None else max_len,
        positional="sinusoidal",
        causal=True,
        mlp=False,
    )


def train_sink_model(
    seed: int,
    *,
    bos: bool = True,
    task: BigramBackcopy | None = None,
    d_model: int = 32,
    num_heads: int = 1,
    max_len: int | None = None,
    steps: int = 600,
    batch_size: int = 32,
    lr: float = 3e-2,
    weight_decay: float = 0.1,
    progress: bool = False,
) -> tuple[SequenceModel, BigramBackcopy, History]:
    """Train the one-layer attention-only model of chapter 13 on :class:`BigramBackcopy`.

    Everything is seeded from ``seed``: the bigram (``BigramBackcopy(seed=seed, bos=bos)`` unless
    ``task`` is given), the initialisation (``torch.manual_seed(seed)``) and the batches
    (:func:`attnbook.models.training.train` with ``seed=seed``), so ``bos=True`` and ``bos=False``
    train on the same chain from the same initial weights. AdamW with ``lr`` and ``weight_decay``
    (0.1: with 0.01 the head of some seeds still splits its spare weight between ``bos`` and the
    current token after 600 steps). Draw test batches from another seed, e.g.
    ``task(512, torch.Generator().manual_seed(seed + 1000))``.

    Returns:
        ``(model, task, history)``; the model is in eval mode on the CPU.
    """
    check_sizes(minimum=0, seed=seed)
    check_type("bos", bos, bool)
    if task is None:
        task = BigramBackcopy(seed=seed, bos=bos)
    check_type("task", task, BigramBackcopy, "attnbook.models.markov.BigramBackcopy")
    torch.manual_seed(seed)
    model = SequenceModel(sink_model_config(task, d_model=d_model, num_heads=num_heads, max_len=max_len))
    history = train(
        model, task, steps=steps, batch_size=batch_size, lr=lr, weight_decay=weight_decay, seed=seed, progress=progress
    )
    return model, task, history


# ---------------------------------------------------------------- weight on a position


def _check_weights(weights: object) -> None:
    check_shapes(weights=(weights, "(batch, heads, n, m)"))


def _query_mask(queries, weights: torch.Tensor, position: int) -> torch.Tensor:
    """(batch, n) boolean: the queries to average over (default: every query i >= position)."""
    batch, _, n, _ = weights.shape
    if queries is None:
        i = torch.arange(n, device=weights.device)  # (n,)
        return (i >= position)[None].expand(batch, n)  # (batch, n)
    check_shapes(queries=(queries, "(batch, n)", "bool"), weights=(weights, "(batch, heads, n, m)"))
    if not bool(queries.any()):
        raise ValueError("queries selects no query: the mean over no query is undefined")
    return queries


# share_h = mean over the chosen queries (b, i) of w[b, h, i, position]
def weight_on_position(weights: torch.Tensor, position: int = 0, queries: torch.Tensor | None = None) -> torch.Tensor:
    r"""The mean attention weight on key ``position``, per head (chapter 13).

    .. math:: \text{share}_h = \frac{1}{|Q|} \sum_{(b, i) \in Q} w^h_{b, i, \text{position}}

    Args:
        weights: (batch, heads, n, m) attention weights, e.g. ``model(tokens, need_weights=True)[1][0]``.
        position: the key, 0 <= position < m (0: the first token, ``bos`` if there is one).
        queries: optional (batch, n) boolean, the queries Q to average over; default every query
            i >= position (the ones a causal mask lets see it).

    Returns:
        (heads,) the mean weight of each head.
    """
    _check_weights(weights)
    check_index("position", position, weights.shape[-1], "a key position")
    chosen = _query_mask(queries, weights, position)  # (batch, n)
    column = weights[..., position]  # (batch, heads, n)
    return (column * chosen[:, None]).sum(dim=(0, 2)) / chosen.sum()  # (heads,)


# uniform = mean over the chosen queries (b, i) of [position <= i] / (i + 1)
def uniform_weight_on_position(n: int, position: int = 0, queries: torch.Tensor | None = None) -> float:
    r"""The share :func:`weight_on_position` would report for a causal head that spreads every
    query's weight uniformly over the keys it sees, :math:`w_{ij} = 1 / (i + 1)` for j <= i (chapter 13).

    .. math:: \text{uniform} = \frac{1}{|Q|} \sum_{(b, i) \in Q} \frac{[\text{position} \le i]}{i + 1}

    Args:
        n: the number of queries (and keys). position, queries: as for :func:`weight_on_position`.
    """
    check_sizes(n=n)
    check_index("position", position, n, "a key position")
    i = torch.arange(n, dtype=torch.float64)  # (n,)
    uniform = torch.where(i >= position, 1.0 / (i + 1), 0.0)  # (n,)
    if queries is None:
        return uniform[position:].mean().item()
    check_shapes(queries=(queries, "(batch, n)", "bool"), n=n)
    if not bool(queries.any()):
        raise ValueError("queries selects no query: the mean over no query is undefined")
    chosen = queries.cpu().double()  # (batch, n)
    return ((chosen * uniform).sum() / chosen.sum()).item()


# ratio_h = share_h / uniform
def sink_ratio(weights: torch.Tensor, position: int = 0, queries: torch.Tensor | None = None) -> torch.Tensor:
    """How many times the uniform share each head puts on key ``position`` (chapter 13):
    :func:`weight_on_position` divided by :func:`uniform_weight_on_position` over the same queries.
    1 for a uniform head; (heads,)."""
    share = weight_on_position(weights, position, queries)  # (heads,)
    return share / uniform_weight_on_position(weights.shape[-2], position, queries)


# ---------------------------------------------------------------- taking a key out of the softmax


def random_earlier_keys(batch_size: int, n: int, generator: torch.Generator, *, low: int = 1) -> torch.Tensor:
    """For each query i >= low a key drawn uniformly from [low, i] (itself included), -1 for the
    queries i < low: (batch_size, n) int64, the control of :func:`key_ablation_loss` (chapter 13).
    ``low=1`` never picks the first token."""
    _check_call(batch_size, generator)
    check_sizes(n=n)
    check_sizes(minimum=0, low=low)
    i = torch.arange(n)  # (n,)
    draw = torch.rand(batch_size, n, generator=generator)  # (batch, n)
    keys = low + (draw * (i - low + 1).clamp(min=0)).long()  # (batch, n): uniform in [low, i]
    return torch.where(i >= low, keys.clamp(max=n - 1), -1)  # (batch, n)


# L = loss over the queries with removed_i >= 0, key removed_i masked (-inf) in query i's row
def key_ablation_loss(model: SequenceModel, batch: Batch, removed: torch.Tensor, *, head: int | None = None) -> float:
    r"""The model's loss when query i may not attend to key ``removed[b, i]`` (chapter 13).

    The score of that key is set to :math:`-\infty` in query i's row (in head ``head`` only, or in
    every head), so the softmax spreads its weight over the other keys; everything else is the
    model's own computation. The loss is the mean cross-entropy over the queries with
    ``removed >= 0``; the others are not scored. Removing the ``bos`` column
    (``removed[:, 1:] = 0``) against a random earlier key (:func:`random_earlier_keys`) tells a sink
    (the model needs somewhere for its weight) from a head that happens to look at the first token.

    Args:
        model: a causal :class:`attnbook.models.sequence.SequenceModel`.
        batch: a batch of its task (inputs and targets (batch, n)).
        removed: (batch, n) integer, the key each query loses, -1 for none; a key must be one the
            query sees and not the query itself when it is its only key (``0 <= removed[b, i] <= i``, i >= 1).
        head: the one head whose softmax loses the key (default every head).

    Returns:
        the mean loss (nats) over the queries with ``removed >= 0``.
    """
    _check_model(model)
    check_type("batch", batch, Batch, "attnbook.models.tasks.Batch")
    n = batch.inputs.shape[1]
    check_shapes(inputs=(batch.inputs, "(batch, n)", "any"), removed=(removed, "(batch, n)", "any"))
    if removed.is_floating_point() or removed.dtype == torch.bool:
        raise TypeError(f"removed must hold integer key positions, got dtype {removed.dtype}")
    heads = model.blocks[0].self_attn.num_heads
    if head is not None:
        check_index("head", head, heads, "a head")
    i = torch.arange(n, device=removed.device)  # (n,)
    active = removed >= 0  # (batch, n)
    if not bool(active.any()):
        raise ValueError("removed is -1 everywhere: no query loses a key, nothing is scored")
    if bool((active & ((removed > i) | (i == 0))).any()):
        raise ValueError(
            "removed[b, i] must be a key query i sees, 0 <= removed[b, i] <= i, and query 0 (which sees only "
            "itself) cannot lose its key"
        )
    keys = torch.arange(n, device=removed.device)  # (n,)
    drop = active[..., None] & (keys == removed[..., None])  # (batch, n, n): True = taken out
    keep = ~drop[:, None].expand(-1, heads, -1, -1).clone()  # (batch, heads, n, n)
    if head is not None:
        keep[:, [h for h in range(heads) if h != head]] = True
    with torch.no_grad():
        logits, _ = model(batch.inputs, keep)  # (batch, n, out_size)
    targets = torch.where(active, batch.targets, IGNORE)  # (batch, n)
    return sequence_loss(logits, targets).item()


# ---------------------------------------------------------------- streaming evaluation


def _check_model(model: object) -> None:
    check_type("model", model, SequenceModel, "attnbook.models.sequence.SequenceModel")
    if not model.causal:
        raise ValueError("a stream is read causally: the model must be causal (SequenceModelConfig(causal=True))")


def _compacted_tokens(tokens: torch.Tensor, num_sinks: int, window: int) -> torch.Tensor:
    """For every query i >= window, its w kept tokens in the order of their cache positions
    0, ..., w - 1 (:func:`attnbook.efficient.streaming.streaming_positions`): (batch, n - w, w)."""
    n = tokens.shape[1]
    P = streaming_positions(n, num_sinks, window, device=tokens.device)[window:]  # (n - w, n), -1 = not kept
    j = torch.arange(n, device=tokens.device).expand_as(P)  # (n - w, n)
    kept = P >= 0  # (n - w, n): exactly w keys per query, P increasing along j
    which = j[kept].reshape(n - window, window)  # (n - w, w): key of cache position p = 0 .. w - 1
    return tokens[:, which]  # (batch, n - w, w)


# logits_i = model(tokens under M = streaming_mask(n, k, w))_i   (positions="original")
# logits_i = model(tokens[kept(i)])_{last}                          (positions="cache")
def streaming_logits(
    model: SequenceModel, tokens: torch.Tensor, window: int, num_sinks: int = 0, *, positions: str = "original"
) -> torch.Tensor:
    r"""The logits of a causal model reading ``tokens`` as a stream through a cache of ``window``
    tokens: the first ``num_sinks`` and the most recent ones (StreamingLLM, chapter 13).

    Query i sees the keys of :func:`attnbook.efficient.streaming.streaming_mask` (every earlier key
    while i < window; then the k sink tokens and the last w - k tokens, itself included; k = 0 is a
    plain sliding window, which drops ``bos`` once i >= w).

    * ``positions="original"``: every token keeps its position in the stream; this is the model
      under the mask (:func:`decode_with_streaming_cache` computes the same token by token);
    * ``positions="cache"``: the kept tokens carry their positions inside the cache, 0, ..., w - 1
      in stream order (:func:`attnbook.efficient.streaming.streaming_positions`), so no position
      exceeds w - 1. The model's positions are added to its embedding, so this means recomputing the
      kept tokens' keys at their new positions; for a one-layer model that is exactly running it on
      the w kept tokens alone and keeping the last logits, which is what is done (deeper models
      would cache their later layers' keys as computed, which is not this; they are refused).

    With ``window >= n`` both are the model's own logits.

    Args:
        model: a causal :class:`attnbook.models.sequence.SequenceModel` (one layer for ``"cache"``).
        tokens: integer ids (batch, n).
        window: w, the keys a query sees in all. num_sinks: k, 0 <= k < w.

    Returns:
        (batch, n, out_size) logits.
    """
    _check_model(model)
    check_sink_window(window, num_sinks)
    check_one_of("positions", positions, POSITIONS)
    _check_tokens("tokens", tokens, model.embed.vocab_size, math.inf)
    n = tokens.shape[1]
    if positions == "original":
        mask = streaming_mask(n, num_sinks, window, device=tokens.device)  # (n, n)
        logits, _ = model(tokens, mask)  # (batch, n, out_size)
        return logits
    if len(model.blocks) != 1:
        raise ValueError(
            f"positions='cache' recomputes the kept tokens' keys at their cache positions, which equals a cache "
            f"only for a one-layer model; this one has {len(model.blocks)} layers"
        )
    if window >= n:
        logits, _ = model(tokens)
        return logits
    early, _ = model(tokens[:, :window])  # (batch, w, out_size): the cache is not full yet
    kept = _compacted_tokens(tokens, num_sinks, window)  # (batch, n - w, w)
    batch = tokens.shape[0]
    late, _ = model(kept.reshape(batch * (n - window), window))  # (batch * (n - w), w, out_size)
    late = late[:, -1].reshape(batch, n - window, -1)  # (batch, n - w, out_size): the query, last in its cache
    return torch.cat([early, late], dim=1)  # (batch, n, out_size)


def windowed_loss(
    model: SequenceModel,
    batch: Batch,
    window: int,
    num_sinks: int = 0,
    *,
    positions: str = "original",
    from_query: int | None = None,
) -> float:
    """The loss of :func:`streaming_logits` on ``batch``, over the queries i >= ``from_query`` (chapter 13).

    ``from_query`` defaults to ``window``: the first query whose window has dropped a token (the
    earlier ones see everything, as without a window). Compare with ``window`` >= n (the full
    model) over the same queries.

    Returns:
        the mean cross-entropy (nats) over the scored targets of queries i >= from_query.
    """
    check_type("batch", batch, Batch, "attnbook.models.tasks.Batch")
    n = batch.inputs.shape[1]
    start = window if from_query is None else from_query
    check_sizes(minimum=0, from_query=start)
    if start >= n:
        raise ValueError(
            f"from_query = {start} leaves no query of the n = {n} to score (with window = {window}, pass from_query < n)"
        )
    with torch.no_grad():
        logits = streaming_logits(model, batch.inputs, window, num_sinks, positions=positions)  # (batch, n, out)
    return sequence_loss(logits[:, start:], batch.targets[:, start:]).item()


@torch.no_grad()
def decode_with_streaming_cache(
    model: SequenceModel, tokens: torch.Tensor, window: int, num_sinks: int = 0
) -> torch.Tensor:
    r"""The logits of ``tokens`` decoded one token at a time with a
    :class:`attnbook.efficient.streaming.StreamingCache` per layer (chapter 13).

    Each block's keys and values (with the positions the embedding gave them, so
    ``StreamingCache(..., positions="original", rope_base=None)``) go into its cache; each token's
    query attends to the kept ones. The cache never holds more than ``window`` tokens. Equals
    :func:`streaming_logits` with ``positions="original"`` (the model under
    :func:`attnbook.efficient.streaming.streaming_mask`). For pre-norm causal models (with or without MLP).

    Args:
        model: a causal pre-norm :class:`attnbook.models.sequence.SequenceModel` with sinusoidal or no positions.
        tokens: integer ids (batch, n). window, num_sinks: as for :func:`streaming_logits`.

    Returns:
        (batch, n, out_size) logits.
    """
    _check_model(model)
    check_sink_window(window, num_sinks)
    if model.config.norm != "pre" or model.positional == "alibi":
        raise ValueError(
            f"decode_with_streaming_cache handles pre-norm models with sinusoidal or no positions, got "
            f"norm={model.config.norm!r}, positional={model.positional!r}"
        )
    _check_tokens("tokens", tokens, model.embed.vocab_size, model.embed.limit)
    with skip_checks():
        x = model.embed(tokens)  # (batch, n, d_model)
        for block in model.blocks:
            mha = block.self_attn
            h = block.norm1(x)  # (batch, n, d_model)
            q = project_heads(h, mha.q_proj.weight, mha.q_proj.bias, mha.num_heads)  # (batch, heads, n, d_head)
            k = project_heads(h, mha.k_proj.weight, mha.k_proj.bias, mha.num_heads)  # (batch, heads, n, d_head)
            v = project_heads(h, mha.v_proj.weight, mha.v_proj.bias, mha.num_heads)  # (batch, heads, n, d_head)
            cache = StreamingCache(num_sinks, window, positions="original", rope_base=None)
            heads_out, _ = cache.step(q, k, v)  # (batch, heads, n, d_head), one token at a time
            x = x + concat_then_project(heads_out, mha.out_proj.weight, mha.out_proj.bias)  # (batch, n, d_model)
            if block.mlp is not None:
                x = x + block.mlp(block.norm2(x))  # (batch, n, d_model)
        return model.head(model.final_norm(x))  # (batch, n, out_size)
