r"""Synthetic sequence tasks, generated on the fly from a seeded generator (chapter 7).

Each task is a small frozen dataclass. Calling it, ``task(batch_size, generator)``, draws a
:class:`Batch` with a ``torch.Generator`` (on the CPU, so a seed gives the same batches on every
device; ``device=`` moves the result). Tokens are integer ids (batch, n); a target equal to
:data:`IGNORE` (-100, the ``ignore_index`` of ``torch.nn.functional.cross_entropy``) is not
scored. ``task.vocab_size`` is the number of input ids and ``task.out_size`` the number of
output classes, the two sizes a model needs.

* :class:`Reversal`: y_i = x_{n-1-i}.
* :class:`Sorting`: y = the tokens in increasing order.
* :class:`AssociativeRecall`: a store of key-value pairs and a query key; y = its value.
* :class:`MultiQueryRecall`: ``k1 v1 ... kN vN`` then the N keys shuffled; y = the value of each
  queried key (chapter 14, multi-query associative recall as in Zoology).
* :class:`CopyOffset`: y_i = x_{i-k} (a causal task: the answer lies in the past).
* :class:`Translation`: y_i = lexicon[x_{order[i]}], a fixed word order and vocabulary map, for an
  encoder-decoder (the batch holds the decoder's inputs, ``bos`` then the target shifted right).
* :class:`PreviousAndMirror`: y_i = (x_{i-1}, x_{n-1-i}), a task for two heads.
* :class:`RepeatedSegment`: random tokens in which a segment repeats an earlier one at a random
  offset; next-token prediction scored on the copy (chapter 10, induction heads).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..validators import check_sizes

#: targets equal to this are not scored (the ``ignore_index`` of ``cross_entropy``)
IGNORE = -100


@dataclass
class Batch:
    """One batch of a task (chapter 7).

    Attributes:
        inputs: (batch, n) input ids: what a :class:`attnbook.models.sequence.SequenceModel` reads, or the
            source of an :class:`attnbook.models.encoder_decoder.EncoderDecoder`.
        targets: (batch, n_out) target classes, :data:`IGNORE` where nothing is scored.
        decoder_inputs: (batch, n_out), what the decoder of a sequence-to-sequence task reads
            (:class:`Translation`: ``bos`` followed by the targets without their last token,
            teacher forcing; :class:`AssociativeRecall`: the query); None for other tasks.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    decoder_inputs: torch.Tensor | None = None

    def to(self, device: torch.device | str | None) -> Batch:
        """The same batch on ``device``."""

        def move(t):
            return None if t is None else t.to(device)

        return Batch(move(self.inputs), move(self.targets), move(self.decoder_inputs))

    def __len__(self) -> int:
        return self.inputs.shape[0]


def _check_int(name: str, value: object, minimum: int) -> int:
    check_sizes(minimum=minimum, **{name: value})
    return value


def _check_call(batch_size: object, generator: object) -> None:
    _check_int("batch_size", batch_size, 1)
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator (seed it for reproducible batches), got {type(generator).__name__}"
        )
    if generator.device.type != "cpu":
        raise ValueError(
            f"generator must be a CPU generator (the batches are drawn on the CPU), got one on {generator.device}"
        )


def random_tokens(batch_size: int, length: int, num_symbols: int, generator: torch.Generator) -> torch.Tensor:
    """Ids drawn uniformly, with repetition, from [0, num_symbols): (batch_size, length)."""
    return torch.randint(num_symbols, (batch_size, length), generator=generator)


def distinct_tokens(batch_size: int, length: int, num_symbols: int, generator: torch.Generator) -> torch.Tensor:
    """Ids drawn without repetition from [0, num_symbols), each row in random order: (batch_size, length)."""
    if length > num_symbols:
        raise ValueError(f"cannot draw {length} distinct tokens from {num_symbols} symbols")
    noise = torch.rand(batch_size, num_symbols, generator=generator)  # (batch, num_symbols)
    return noise.argsort(dim=1)[:, :length]  # a random ordering of the symbols, cut to length


def shift_right(targets: torch.Tensor, bos: int) -> torch.Tensor:
    """Decoder inputs for teacher forcing: ``bos`` then ``targets[:, :-1]``, shape (batch, n)."""
    start = torch.full_like(targets[:, :1], bos)  # (batch, 1)
    return torch.cat([start, targets[:, :-1]], dim=1)  # (batch, n)


@dataclass(frozen=True)
class Reversal:
    """Reverse the sequence: y_i = x_{n-1-i} (chapters 5-7).

    With ``distinct=True`` (default) the n tokens of a sequence are distinct, the setting of the
    chapter's accuracy bound for models without positions.
    """

    length: int = 6
    num_symbols: int = 10
    distinct: bool = True

    def __post_init__(self) -> None:
        _check_int("length", self.length, 2)
        _check_int("num_symbols", self.num_symbols, self.length if self.distinct else 2)

    @property
    def vocab_size(self) -> int:
        return self.num_symbols

    @property
    def out_size(self) -> int:
        return self.num_symbols

    def __call__(self, batch_size: int, generator: torch.Generator, device=None) -> Batch:
        _check_call(batch_size, generator)
        draw = distinct_tokens if self.distinct else random_tokens
        x = draw(batch_size, self.length, self.num_symbols, generator)  # (batch, n)
        return Batch(x, x.flip(1)).to(device)


@dataclass(frozen=True)
class Sorting:
    """Sort the tokens: y = sorted(x), repeats allowed (chapter 7)."""

    length: int = 8
    num_symbols: int = 10

    def __post_init__(self) -> None:
        _check_int("length", self.length, 2)
        _check_int("num_symbols", self.num_symbols, 2)

    @property
    def vocab_size(self) -> int:
        return self.num_symbols

    @property
    def out_size(self) -> int:
        return self.num_symbols

    def __call__(self, batch_size: int, generator: torch.Generator, device=None) -> Batch:
        _check_call(batch_size, generator)
        x = random_tokens(batch_size, self.length, self.num_symbols, generator)  # (batch, n)
        return Batch(x, x.sort(dim=1).values).to(device)


@dataclass(frozen=True)
class AssociativeRecall:
    """A key-value store: ``num_pairs`` stored pairs and a query key; the answer is its value
    (chapters 1 and 7, the key-value store of the NYU notes).

    A sequence-to-sequence task: the source (``inputs``, (batch, num_pairs)) holds the stored pairs,
    each pair (k, v) **one** token with id ``k * num_values + v`` (an entry of the dictionary); the
    decoder reads the query, one token (``decoder_inputs``, (batch, 1)) with id k in
    [0, num_keys); the target (batch, 1) is the value v in [0, num_values) stored with that key.
    Keys are distinct within a store, values may repeat, and the query is one of the stored keys,
    chosen uniformly. The order of the entries carries no information.
    """

    num_pairs: int = 4
    num_keys: int = 8
    num_values: int = 8

    def __post_init__(self) -> None:
        _check_int("num_pairs", self.num_pairs, 1)
        _check_int("num_keys", self.num_keys, self.num_pairs)
        _check_int("num_values", self.num_values, 2)

    @property
    def length(self) -> int:
        return self.num_pairs

    @property
    def vocab_size(self) -> int:
        return self.num_keys * self.num_values

    @property
    def decoder_vocab_size(self) -> int:
        return self.num_keys

    @property
    def out_size(self) -> int:
        return self.num_values

    def pair_token(self, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """The id of the entry (key, value)."""
        return key * self.num_values + value

    def split(self, entries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values) of entry ids of any shape."""
        return entries // self.num_values, entries % self.num_values

    def __call__(self, batch_size: int, generator: torch.Generator, device=None) -> Batch:
        _check_call(batch_size, generator)
        P = self.num_pairs
        keys = distinct_tokens(batch_size, P, self.num_keys, generator)  # (batch, P)
        values = random_tokens(batch_size, P, self.num_values, generator)  # (batch, P)
        which = torch.randint(P, (batch_size, 1), generator=generator)  # (batch, 1): the entry asked for
        entries = self.pair_token(keys, values)  # (batch, P)
        return Batch(entries, values.gather(1, which), keys.gather(1, which)).to(device)  # target, query: (batch, 1)


@dataclass(frozen=True)
class MultiQueryRecall:
    r"""Multi-query associative recall, as in Zoology (Arora et al. 2023) (chapter 14).

    A sequence stores N key-value pairs as tokens ``k1 v1 k2 v2 ... kN vN`` and then asks for every
    stored key once, in a random order: ``k_{\pi(1)} ... k_{\pi(N)}``; its length is 3N. Key ids lie in
    [0, num_keys), value ids in [num_keys, num_keys + num_values) (``vocab_size`` ids in all). The
    target at the query of key k_i is the class of its value, ``v_i - num_keys`` in [0, num_values)
    (``out_size = num_values``); every other target is :data:`IGNORE`, so the loss and the accuracy
    count the query positions only. A causal model answers at the query from the pairs before it.

    Keys are distinct within a sequence (drawn without repetition), values are drawn independently
    and uniformly (repeats allowed), and the queries are a uniformly random permutation of the N
    stored keys. Every call draws one N uniformly from [min_pairs, max_pairs] for the whole batch (so
    a batch has one length); :meth:`with_pairs` gives the task with N fixed, for measuring accuracy
    against the number of pairs.
    """

    min_pairs: int = 4
    max_pairs: int = 32
    num_keys: int = 64
    num_values: int = 64

    def __post_init__(self) -> None:
        _check_int("min_pairs", self.min_pairs, 1)
        _check_int("max_pairs", self.max_pairs, self.min_pairs)
        _check_int("num_keys", self.num_keys, self.max_pairs)
        _check_int("num_values", self.num_values, 2)

    @property
    def vocab_size(self) -> int:
        return self.num_keys + self.num_values

    @property
    def out_size(self) -> int:
        return self.num_values

    @property
    def max_length(self) -> int:
        """The longest sequence, 3 * max_pairs tokens."""
        return 3 * self.max_pairs

    def with_pairs(self, num_pairs: int) -> MultiQueryRecall:
        """The same task with exactly ``num_pairs`` pairs in every sequence."""
        _check_int("num_pairs", num_pairs, 1)
        return MultiQueryRecall(num_pairs, num_pairs, self.num_keys, self.num_values)

    def __call__(self, batch_size: int, generator: torch.Generator, device=None) -> Batch:
        _check_call(batch_size, generator)
        N = int(torch.randint(self.min_pairs, self.max_pairs + 1, (), generator=generator))  # pairs in this batch
        keys = distinct_tokens(batch_size, N, self.num_keys, generator)  # (batch, N)
        values = random_tokens(batch_size, N, self.num_values, generator)  # (batch, N) value classes
        order = torch.rand(batch_size, N, generator=generator).argsort(dim=1)  # (batch, N): pi, the query order
        x = torch.empty(batch_size, 3 * N, dtype=torch.long)  # (batch, 3N)
        x[:, 0 : 2 * N : 2] = keys  # k1 .. kN at positions 0, 2, ..., 2N - 2
        x[:, 1 : 2 * N : 2] = values + self.num_keys  # v1 .. vN at positions 1, 3, ..., 2N - 1
        x[:, 2 * N :] = keys.gather(1, order)  # (batch, N): the queries k_pi(1) .. k_pi(N)
        y = torch.full_like(x, IGNORE)  # (batch, 3N)
        y[:, 2 * N :] = values.gather(1, order)  # (batch, N): the value class of each queried key
        return Batch(x, y).to(device)


@dataclass(frozen=True)
class CopyOffset:
    """Copy with a delay: y_i = x_{i - offset} for i >= offset (the first ``offset`` are not scored)
    (chapters 2 and 7). The answer always lies in the past, so a causal model can learn it."""

    length: int = 10
    offset: int = 2
    num_symbols: int = 10

    def __post_init__(self) -> None:
        _check_int("length", self.length, 2)
        _check_int("offset", self.offset, 0)
        _check_int("num_symbols", self.num_symbols, 2)
        if self.offset >= self.length:
            raise ValueError(f"offset = {self.offset} must be < length = {self.length}")

    @property
    def vocab_size(self) -> int:
        return self.num_symbols

    @property
    def out_size(self) -> int:
        return self.num_symbols

    def __call__(self, batch_size: int, generator: torch.Generator, device=None) -> Batch:
        _check_call(batch_size, generator)
        x = random_tokens(batch_size, self.length, self.num_symbols, generator)  # (batch, n)
        y = torch.full_like(x, IGNORE)
        y[:, self.offset :] = x[:, : self.length - self.offset]
        return Batch(x, y).to(device)


def _seeded_permutation(n: int, seed: int) -> tuple[int, ...]:
    return tuple(torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist())


@dataclass(frozen=True)
class Translation:
    """A toy translation: a fixed word order and a fixed dictionary (chapters 4 and 7).

    y_i = lexicon[x_{order[i]}]: target word i is the translation of source word ``order[i]``.
    ``order`` (a permutation of the n positions) and ``lexicon`` (a permutation of the symbols)
    default to ones drawn from ``seed``. Source ids lie in [0, num_symbols); the decoder reads ids
    in [0, num_symbols], where ``bos`` = num_symbols starts every target.
    """

    length: int = 6
    num_symbols: int = 10
    seed: int = 0
    order: tuple[int, ...] | None = None
    lexicon: tuple[int, ...] | None = field(default=None)

    def __post_init__(self) -> None:
        _check_int("length", self.length, 2)
        _check_int("num_symbols", self.num_symbols, 2)
        if self.order is None:
            object.__setattr__(self, "order", _seeded_permutation(self.length, self.seed))
        if self.lexicon is None:
            object.__setattr__(self, "lexicon", _seeded_permutation(self.num_symbols, self.seed + 1))
        for name, perm, size in (("order", self.order, self.length), ("lexicon", self.lexicon, self.num_symbols)):
            if sorted(perm) != list(range(size)):
                raise ValueError(f"{name} must be a permutation of 0..{size - 1}, got {perm}")

    @property
    def vocab_size(self) -> int:
        return self.num_symbols

    @property
    def out_size(self) -> int:
        return self.num_symbols

    @property
    def bos(self) -> int:
        return self.num_symbols

    @property
    def decoder_vocab_size(self) -> int:
        return self.num_symbols + 1

    def alignment(self) -> torch.Tensor:
        """The true alignment (n, n): entry (i, j) is 1 if target word i translates source word j."""
        return torch.eye(self.length)[list(self.order)]  # row i is the one-hot vector of order[i]

    def __call__(self, batch_size: int, generator: torch.Generator, device=None) -> Batch:
        _check_call(batch_size, generator)
        x = random_tokens(batch_size, self.length, self.num_symbols, generator)  # (batch, n)
        y = torch.tensor(self.lexicon)[x[:, list(self.order)]]  # (batch, n)
        return Batch(x, y, shift_right(y, self.bos)).to(device)


@dataclass(frozen=True)
class PreviousAndMirror:
    """A task that needs two lookups (chapters 3 and 7): y_i = (x_{i-1}, x_{n-1-i}).

    The previous token is taken cyclically (x_{-1} = x_{n-1}); the pair is encoded as the class
    x_{i-1} * num_symbols + x_{n-1-i}, so ``out_size`` = num_symbols ** 2. :meth:`split` recovers
    the two parts from a class.
    """

    length: int = 8
    num_symbols: int = 5

    def __post_init__(self) -> None:
        _check_int("length", self.length, 2)
        _check_int("num_symbols", self.num_symbols, 2)

    @property
    def vocab_size(self) -> int:
        return self.num_symbols

    @property
    def out_size(self) -> int:
        return self.num_symbols**2

    def split(self, classes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(previous token, mirror token) of classes of any shape."""
        return classes // self.num_symbols, classes % self.num_symbols

    def __call__(self, batch_size: int, generator: torch.Generator, device=None) -> Batch:
        _check_call(batch_size, generator)
        x = random_tokens(batch_size, self.length, self.num_symbols, generator)  # (batch, n)
        previous = x.roll(1, dims=1)  # previous[:, i] = x[:, i - 1], cyclically
        return Batch(x, previous * self.num_symbols + x.flip(1)).to(device)


@dataclass
class RepeatBatch(Batch):
    """A batch of :class:`RepeatedSegment` with where its copy lies (chapter 10).

    Attributes (besides those of :class:`Batch`):
        source: (batch,) where the earlier segment starts, a_b.
        start: (batch,) where its copy starts, c_b; the offset of sequence b is d_b = c_b - a_b.
        segment: the segment length L.
    """

    source: torch.Tensor | None = None
    start: torch.Tensor | None = None
    segment: int = 0

    @property
    def offset(self) -> torch.Tensor:
        """(batch,) the distance d = c - a back from a copied token to its earlier occurrence."""
        return self.start - self.source

    def scored(self) -> torch.Tensor:
        """(batch, n) boolean, True at the positions whose target is scored (inside the copy)."""
        return self.targets != IGNORE

    def to(self, device: torch.device | str | None) -> RepeatBatch:
        moved = super().to(device)
        return RepeatBatch(
            moved.inputs, moved.targets, None, self.source.to(device), self.start.to(device), self.segment
        )


@dataclass(frozen=True)
class RepeatedSegment:
    """Random tokens in which a segment repeats an earlier one at a random offset (chapter 10).

    Every token is drawn uniformly from ``num_symbols`` ids, then a segment of ``segment`` tokens
    starting at a (the source) is copied to positions c, ..., c + L - 1 (the copy), with c drawn
    uniformly from [L, n - L] and then a uniformly from [0, c - L] in every sequence, so the copy
    never overlaps its source and the offset d = c - a varies from sequence to sequence (from L to
    n - L). The task is next-token prediction, scored only inside the copy: at position t with
    c <= t <= c + L - 2 the target is x_{t+1} = x_{t+1-d}; every other target is :data:`IGNORE`.
    Apart from the copy the tokens are independent and uniform, so nothing but the earlier
    occurrence predicts a scored target: a model that does not copy from its context loses at least
    log(num_symbols) nats there, on average.

    With a fixed offset a one-layer model could copy by position alone (attend d - 1 back); the
    random offset rules that out. ``offset=d`` fixes it all the same (an exercise of chapter 10):
    then c is drawn uniformly from [d, n - L] and the source starts at a = c - d, so only the place
    of the copy varies. Call :meth:`draw` to get a :class:`RepeatBatch`, which also holds the source
    and copy starts.
    """

    length: int = 48
    num_symbols: int = 32
    segment: int = 16
    offset: int | None = None

    def __post_init__(self) -> None:
        _check_int("length", self.length, 4)
        _check_int("num_symbols", self.num_symbols, 2)
        _check_int("segment", self.segment, 2)
        if 2 * self.segment > self.length:
            raise ValueError(f"2 * segment = {2 * self.segment} must be <= length = {self.length}")
        if self.offset is not None:
            _check_int("offset", self.offset, 1)
            if not self.segment <= self.offset <= self.length - self.segment:
                raise ValueError(
                    f"offset = {self.offset} must lie in [segment, length - segment] = "
                    f"[{self.segment}, {self.length - self.segment}] (the copy may not overlap its source)"
                )

    @property
    def vocab_size(self) -> int:
        return self.num_symbols

    @property
    def out_size(self) -> int:
        return self.num_symbols

    def draw(self, batch_size: int, generator: torch.Generator, device=None) -> RepeatBatch:
        """A batch with its source starts a and copy starts c, each (batch,)."""
        _check_call(batch_size, generator)
        n, L = self.length, self.segment
        x = random_tokens(batch_size, n, self.num_symbols, generator)  # (batch, n)
        if self.offset is None:
            start = torch.randint(L, n - L + 1, (batch_size,), generator=generator)  # c in [L, n - L]
            source = (torch.rand(batch_size, generator=generator) * (start - L + 1)).long()  # a in [0, c - L]
        else:
            start = torch.randint(self.offset, n - L + 1, (batch_size,), generator=generator)  # c in [d, n - L]
            source = start - self.offset  # a = c - d: the offset is fixed
        i = torch.arange(L)  # (L,)
        rows = torch.arange(batch_size)[:, None]  # (batch, 1)
        x[rows, start[:, None] + i] = x[rows, source[:, None] + i]  # (batch, L): the copy
        y = torch.full_like(x, IGNORE)
        t = start[:, None] + i[:-1]  # (batch, L - 1): the scored positions c .. c + L - 2
        y[rows, t] = x[rows, t + 1]
        return RepeatBatch(x, y, None, source, start, L).to(device)

    def __call__(self, batch_size: int, generator: torch.Generator, device=None) -> Batch:
        return self.draw(batch_size, generator, device)
