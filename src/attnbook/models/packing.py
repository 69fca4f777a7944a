r"""Packed rows of documents: a recall task where earlier documents distract, and a small decoder
that reads a packed row with or without the document mask (chapter 12).

A packed row holds several documents one after the other, each starting with a ``bos`` token. The
document of every token is read off the row itself (:func:`document_ids_from_bos`), so the models
train with :func:`attnbook.models.training.train` unchanged.

* :class:`PackedRecall`: each document is ``bos``, a few key-value pairs (one token per pair, as in
  :class:`attnbook.models.tasks.AssociativeRecall`) and a query key; the target is the value stored
  with that key **in the same document**. Every document of a row holds the same ``shared`` keys,
  with values drawn afresh, and the query is one of them: every earlier document of the row holds
  the queried key with another value (a distractor, unless the values happen to agree).
* :class:`PackedDecoder`: embedding, pre-norm blocks of multi-head attention and an MLP, an output
  head. ``mask="document"`` uses the block-diagonal causal mask, ``mask="causal"`` the plain causal
  mask over the whole row; ``positions="restart"`` numbers the tokens from 0 in each document,
  ``positions="row"`` from 0 along the row; ``positional`` is ``"rotary"`` (queries and keys rotated
  in every layer, chapter 9), ``"sinusoidal"`` or ``"learned"`` (a vector added to the embedding).

Shape legend: ``batch`` rows, ``n`` tokens per row, ``d_model`` the width, ``heads`` the heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..core.attention import attention
from ..core.masks import causal_mask
from ..positions.rotary import apply_rotary
from ..positions.sinusoidal import sinusoidal_encoding
from ..programs.documents import document_causal_mask, position_ids_from_document_ids
from ..validators import check_divisible, check_one_of, check_shapes, check_sizes, skip_checks
from .blocks import _check_tokens
from .tasks import IGNORE, Batch, _check_call, _check_int

__all__ = ["MASKS", "POSITIONAL", "POSITIONS", "PackedDecoder", "PackedRecall", "document_ids_from_bos"]

MASKS = ("document", "causal")
POSITIONS = ("restart", "row")
POSITIONAL = ("rotary", "sinusoidal", "learned")


# ids_t = (number of bos tokens at positions <= t) - [row starts with bos]
def document_ids_from_bos(tokens: torch.Tensor, bos: int) -> torch.Tensor:
    """The document of every token of packed rows whose documents start with ``bos`` (chapter 12).

    A new document begins at every ``bos``; ids count from 0 in each row. Tokens before a row's first
    ``bos`` (the end of a document cut at the previous row) form document 0 of that row.

    Args:
        tokens: integer ids (batch, n).
        bos: the id that starts a document.

    Returns:
        (batch, n) int64 document ids, non-decreasing along each row, each step 0 or 1.
    """
    check_shapes(tokens=(tokens, "(batch, n)", "any"))
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must hold integer ids, got dtype {tokens.dtype} with shape {tuple(tokens.shape)}")
    starts = (tokens == bos).long()  # (batch, n), 1 where a document begins
    return starts.cumsum(dim=1) - starts[:, :1]  # (batch, n)


@dataclass(frozen=True)
class PackedRecall:
    """Packed rows of recall documents where every earlier document holds the queried key (chapter 12).

    A document is ``bos``, ``P`` pair tokens (pair (k, v) is the id ``k * num_values + v``; keys
    distinct within a document, ``P`` drawn uniformly from [min_pairs, max_pairs]) and a query
    token (id ``num_keys * num_values + k``); its length is P + 2. The target at the query is the
    value v stored with k in that document; every other target is :data:`IGNORE`. Each row draws
    ``shared`` keys that every document of the row holds (values drawn afresh for each document) and
    asks for one of them; the other keys of a document are drawn from the rest. Documents are packed
    whole until the next would not fit; the rest of the row is filled with ``bos`` tokens (documents
    of one token, never scored).

    Ids: pairs in [0, num_keys * num_values), queries after them, ``bos`` the last id
    (``vocab_size - 1``); ``out_size = num_values``.
    """

    num_keys: int = 8
    num_values: int = 8
    shared: int = 2
    min_pairs: int = 2
    max_pairs: int = 5
    length: int = 48

    def __post_init__(self) -> None:
        _check_int("num_values", self.num_values, 2)
        _check_int("shared", self.shared, 1)
        _check_int("min_pairs", self.min_pairs, self.shared)
        _check_int("max_pairs", self.max_pairs, self.min_pairs)
        _check_int("num_keys", self.num_keys, self.max_pairs)
        _check_int("length", self.length, self.max_pairs + 2)

    @property
    def bos(self) -> int:
        return self.num_keys * self.num_values + self.num_keys

    @property
    def vocab_size(self) -> int:
        return self.bos + 1

    @property
    def out_size(self) -> int:
        return self.num_values

    def __call__(self, batch_size: int, generator: torch.Generator, device=None) -> Batch:
        _check_call(batch_size, generator)
        B, K, V, S, hi, n = batch_size, self.num_keys, self.num_values, self.shared, self.max_pairs, self.length
        D = n // (self.min_pairs + 2)  # at most this many documents fit in a row
        P = torch.randint(self.min_pairs, hi + 1, (B, D), generator=generator)  # (B, D) pairs per document
        ends = (P + 2).cumsum(dim=1)  # (B, D): one past each document's last token
        starts, fits = ends - (P + 2), ends <= n  # (B, D) each
        keys_of_row = torch.rand(B, K, generator=generator).argsort(dim=1)  # (B, K): a random order of the keys
        shared, others = keys_of_row[:, :S], keys_of_row[:, S:]  # (B, S), (B, K - S)
        pick = torch.rand(B, D, K - S, generator=generator).argsort(dim=2)  # (B, D, K - S)
        extra = others[:, None, :].expand(B, D, K - S).gather(2, pick)[..., : hi - S]  # (B, D, hi - S)
        keys = torch.cat([shared[:, None, :].expand(B, D, S), extra], dim=2)  # (B, D, hi): shared keys first
        values = torch.randint(V, (B, D, hi), generator=generator)  # (B, D, hi)
        asked = torch.randint(S, (B, D, 1), generator=generator)  # (B, D, 1): which shared key is queried
        query_key, answer = keys.gather(2, asked)[..., 0], values.gather(2, asked)[..., 0]  # (B, D) each
        slot = torch.arange(hi)  # shuffle the first P slots of each document, keep the unused ones last
        order = torch.where(slot < P[..., None], torch.rand(B, D, hi, generator=generator), 2.0).argsort(dim=2)
        keys, values = keys.gather(2, order), values.gather(2, order)  # (B, D, hi) each
        query = (K * V + query_key)[..., None]  # (B, D, 1)
        content = torch.cat([torch.full((B, D, 1), self.bos), keys * V + values, query], dim=2)  # (B, D, hi + 2)
        content.scatter_(2, (P + 1)[..., None], query)  # the query right after the P pairs
        offset = torch.arange(hi + 2)  # (hi + 2,)
        used = fits[..., None] & (offset <= (P + 1)[..., None])  # (B, D, hi + 2)
        where = starts[..., None] + offset  # (B, D, hi + 2): the position of each token in its row
        row = torch.arange(B)[:, None, None].expand_as(where)
        tokens = torch.full((B, n), self.bos)
        tokens[row[used], where[used]] = content[used]
        targets = torch.full((B, n), IGNORE)
        targets[row[..., 0][fits], (starts + P + 1)[fits]] = answer[fits]
        return Batch(tokens, targets).to(device)


class PackedDecoder(nn.Module):
    r"""A small decoder for packed rows, with the document mask or without it (chapter 12).

    .. math:: X_0 = E[\text{tokens}] \;(+\, P[\text{positions}]), \qquad
              X \leftarrow X + \operatorname{MHA}(\operatorname{LN}(X), M), \qquad
              X \leftarrow X + \operatorname{MLP}(\operatorname{LN}(X)), \qquad
              \text{logits} = \operatorname{LN}(X)\, W_\text{out}^\top + b_\text{out}

    with M the document mask (``mask="document"``: query i sees key j iff j <= i in the same
    document) or the causal mask of the row (``mask="causal"``). Positions restart at each document
    (``positions="restart"``) or run along the row (``"row"``); rotary positions rotate the queries
    and keys of every head (interleaved pairs, :func:`attnbook.apply_rotary`), absolute ones
    (``"sinusoidal"``, ``"learned"``) are added to the embedding. Documents start at the ``bos``
    token (:func:`document_ids_from_bos`) unless ``document_ids`` are given.

    Args:
        vocab_size, out_size: input ids and output classes.
        bos: the id that starts a document.
        d_model, num_heads, num_layers: the sizes (d_model / num_heads even for rotary positions).
        mask, positions, positional: see above.
        max_len: the longest row (the size of the absolute position tables).
    """

    def __init__(
        self,
        vocab_size: int,
        out_size: int,
        *,
        bos: int,
        d_model: int = 32,
        num_heads: int = 4,
        num_layers: int = 1,
        mask: str = "document",
        positions: str = "restart",
        positional: str = "rotary",
        max_len: int = 512,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_sizes(vocab_size=vocab_size, out_size=out_size, d_model=d_model, num_heads=num_heads, max_len=max_len)
        check_sizes(minimum=0, num_layers=num_layers)
        check_one_of("mask", mask, MASKS)
        check_one_of("positions", positions, POSITIONS)
        check_one_of("positional", positional, POSITIONAL)
        check_divisible("d_model", d_model, num_heads, why="the heads split it")
        if positional == "rotary":
            check_divisible("the head width d_model / num_heads", d_model // num_heads, 2, why="rotary rotates pairs")
        if not 0 <= bos < vocab_size:
            raise ValueError(f"bos = {bos} must be an id in [0, vocab_size = {vocab_size})")
        factory = {"device": device, "dtype": dtype}
        self.vocab_size, self.bos, self.num_heads, self.max_len = vocab_size, bos, num_heads, max_len
        self.mask, self.positions, self.positional = mask, positions, positional
        self.embed = nn.Embedding(vocab_size, d_model, **factory)
        if positional == "learned":  # a vector per position, trained
            self.position_table = nn.Parameter(0.1 * torch.randn(max_len, d_model, **factory))
        elif positional == "sinusoidal":  # chapter 5's table, fixed
            self.register_buffer("position_table", sinusoidal_encoding(max_len, d_model, **factory), persistent=False)
        else:  # rotary: the positions act inside attention
            self.position_table = None
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.LayerNorm(d_model, **factory),
                    "qkv": nn.Linear(d_model, 3 * d_model, **factory),
                    "out": nn.Linear(d_model, d_model, **factory),
                    "norm2": nn.LayerNorm(d_model, **factory),
                    "mlp": nn.Sequential(
                        nn.Linear(d_model, 4 * d_model, **factory),
                        nn.GELU(),
                        nn.Linear(4 * d_model, d_model, **factory),
                    ),
                }
            )
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model, **factory)
        self.head = nn.Linear(d_model, out_size, **factory)

    def layout(self, tokens: torch.Tensor, document_ids: torch.Tensor | None = None):
        """The keep-mask (batch, n, n) and the positions (batch, n) this model uses for ``tokens``."""
        ids = document_ids_from_bos(tokens, self.bos) if document_ids is None else document_ids
        batch, n = tokens.shape
        if self.mask == "document":
            keep = document_causal_mask(ids)  # (batch, n, n)
        else:
            keep = causal_mask(n, device=tokens.device).expand(batch, n, n)  # (batch, n, n)
        if self.positions == "restart":
            positions = position_ids_from_document_ids(ids)  # (batch, n)
        else:
            positions = torch.arange(n, device=tokens.device).expand(batch, n)  # (batch, n)
        return keep, positions

    def forward(
        self,
        tokens: torch.Tensor,
        need_weights: bool = False,
        *,
        document_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Logits (batch, n, out_size) for every token, and the weights (batch, heads, n, n) of each
        layer when ``need_weights``. ``document_ids`` (batch, n) overrides the ids read off ``bos``."""
        _check_tokens("tokens", tokens, self.vocab_size, self.max_len)
        if document_ids is not None:
            check_shapes(tokens=(tokens, "(batch, n)", "any"), document_ids=(document_ids, "(batch, n)", "any"))
        keep, positions = self.layout(tokens, document_ids)
        x = self.embed(tokens)  # (batch, n, d_model)
        if self.position_table is not None:
            x = x + self.position_table[positions]  # (batch, n, d_model)
        batch, n, _ = x.shape
        weights = []
        with skip_checks():
            for block in self.blocks:
                qkv = block["qkv"](block["norm1"](x))  # (batch, n, 3 d_model)
                q, k, v = qkv.view(batch, n, 3, self.num_heads, -1).permute(
                    2, 0, 3, 1, 4
                )  # 3 x (batch, heads, n, d_head)
                if self.positional == "rotary":
                    q = apply_rotary(q, positions[:, None, :])  # (batch, heads, n, d_head)
                    k = apply_rotary(k, positions[:, None, :])
                out, w = attention(q, k, v, mask=keep[:, None], need_weights=need_weights)  # (batch, heads, n, d_head)
                weights.append(w)
                x = x + block["out"](out.transpose(1, 2).reshape(batch, n, -1))  # (batch, n, d_model)
                x = x + block["mlp"](block["norm2"](x))
        logits = self.head(self.final_norm(x))  # (batch, n, out_size)
        return logits, (weights if need_weights else None)
