"""What a model is, in one frozen record each (chapters 4, 7, 9 and 10): checked when it is made.

* :class:`SequenceModelConfig`: the shape of a :class:`attnbook.models.sequence.SequenceModel`;
* :class:`EncoderDecoderConfig`: the shape of an :class:`attnbook.models.encoder_decoder.EncoderDecoder`;
* ``SCORES``, ``NORMS``, ``POSITIONALS``: the choices they accept.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..validators import (
    check_one_of,
    check_sizes,
)

SCORES = ("dot", "additive", "general")
NORMS = ("pre", "post", None)
POSITIONALS = ("sinusoidal", "alibi", None)


# nanoGPT's GPTConfig, for the course's models: what a SequenceModel is, in one frozen record
@dataclass(frozen=True)
class SequenceModelConfig:
    """The shape of a :class:`SequenceModel` (chapters 7, 9 and 10), checked when it is made.

    Args:
        vocab_size: number of input token ids. d_model, num_heads: width and heads of every block.
        num_layers: number of blocks.
        max_len: the longest sequence (sizes the positional encoding); with ALiBi, which needs no
            table, sequences of any length are accepted.
        out_size: number of output classes (default ``vocab_size``).
        positional: ``"sinusoidal"`` (the default): add :func:`attnbook.sinusoidal_encoding` to
            the embeddings; ``"alibi"``: no encoding, the ALiBi bias in every self-attention layer
            (``EncoderBlock(alibi=True)``); None: no positions. (True and False are read as
            ``"sinusoidal"`` and None.)
        causal: causal self-attention in every block.
        mlp: False for attention-only blocks. d_ff, norm: as for :class:`EncoderBlock`.

    ``dataclasses.replace(config, num_layers=2)`` gives a changed copy.
    """

    vocab_size: int
    d_model: int
    num_heads: int
    num_layers: int = 1
    max_len: int = 64
    out_size: int | None = None
    positional: str | None = "sinusoidal"
    causal: bool = False
    mlp: bool = True
    d_ff: int | None = None
    norm: str | None = "pre"

    def __post_init__(self) -> None:
        if isinstance(self.positional, bool):  # the older spelling: True = sinusoidal, False = none
            object.__setattr__(self, "positional", "sinusoidal" if self.positional else None)
        check_sizes(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            max_len=self.max_len,
            out_size=self.out_size,
            d_ff=self.d_ff,
        )
        check_one_of("positional", self.positional, POSITIONALS)
        check_one_of("norm", self.norm, NORMS)


# the same for the encoder-decoder: its shape in one frozen record, checked when it is made
@dataclass(frozen=True)
class EncoderDecoderConfig:
    """The shape of an :class:`EncoderDecoder` (chapters 4 and 7), checked when it is made.

    Args:
        src_vocab, tgt_vocab: input id counts of the source and of the decoder (the decoder's
            input vocabulary must contain ``bos``). d_model, num_heads: width and heads of every block.
        num_layers: encoder blocks; num_decoder_layers: decoder blocks (default num_layers).
        max_len: longest source and target. out_size: output classes (default tgt_vocab).
        score: the cross-attention's score function (``"dot"``, ``"additive"``, ``"general"``).
        positional: add the sinusoidal encoding to both embeddings. mlp, d_ff, norm: as for
            :class:`SequenceModelConfig`.

    ``dataclasses.replace(config, score="additive")`` gives a changed copy.
    """

    src_vocab: int
    tgt_vocab: int
    d_model: int
    num_heads: int
    num_layers: int = 1
    num_decoder_layers: int | None = None
    max_len: int = 64
    out_size: int | None = None
    score: str = "dot"
    positional: bool = True
    mlp: bool = True
    d_ff: int | None = None
    norm: str | None = "pre"

    def __post_init__(self) -> None:
        check_sizes(
            src_vocab=self.src_vocab,
            tgt_vocab=self.tgt_vocab,
            d_model=self.d_model,
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            num_decoder_layers=self.num_decoder_layers,
            max_len=self.max_len,
            out_size=self.out_size,
            d_ff=self.d_ff,
        )
        check_one_of("score", self.score, SCORES)
        check_one_of("norm", self.norm, NORMS)
