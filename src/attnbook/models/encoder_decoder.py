r"""The encoder-decoder (chapters 4 and 7): an encoder and a decoder joined by cross-attention.

:class:`EncoderDecoder` is made from one :class:`attnbook.models.configs.EncoderDecoderConfig`;
it returns ``(logits, weights)`` like :class:`attnbook.models.sequence.SequenceModel`.
"""

from __future__ import annotations

import torch
from torch import nn

from ..efficient.kv_cache import KVCache
from ..validators import (
    check_index,
    check_shapes,
    check_sizes,
    check_type,
    skip_checks,
)
from .blocks import DecoderBlock, EncoderBlock, _check_source_mask, _Embedding, _layer_norm
from .configs import EncoderDecoderConfig


class EncoderDecoder(nn.Module):
    r"""An encoder and a decoder joined by cross-attention (chapters 4 and 7).

    .. math:: Z = \operatorname{Encoder}(\text{source}), \qquad
              \text{logits} = \operatorname{Decoder}(\text{target}_{<}, Z)

    The decoder reads the target shifted right (teacher forcing: position i holds the previous
    target token, position 0 a start token ``bos``) under the causal mask, and every decoder
    block attends to Z with the score function ``config.score`` (:func:`cross_attention_module`).
    At inference :meth:`generate` feeds back its own greedy choices.

    Args:
        config: an :class:`EncoderDecoderConfig`, e.g. ``EncoderDecoderConfig(src_vocab=9,
            tgt_vocab=5, d_model=16, num_heads=2, score="additive")``.
        device, dtype: where and in which dtype to create the parameters.

    Submodules: ``src_embed``, ``tgt_embed``, ``encoder`` (``nn.ModuleList`` of
    :class:`EncoderBlock`), ``encoder_norm``, ``decoder`` (``nn.ModuleList`` of
    :class:`DecoderBlock`), ``final_norm``, ``head``.
    """

    def __init__(self, config: EncoderDecoderConfig, *, device=None, dtype=None) -> None:
        super().__init__()
        check_type("config", config, EncoderDecoderConfig, "attnbook.models.configs.EncoderDecoderConfig")
        factory = {"device": device, "dtype": dtype}
        c = self.config = config
        block_args = {"norm": c.norm, "mlp": c.mlp, **factory}
        num_decoder_layers = c.num_layers if c.num_decoder_layers is None else c.num_decoder_layers
        self.out_size = c.tgt_vocab if c.out_size is None else c.out_size
        self.src_embed = _Embedding(c.src_vocab, c.d_model, c.max_len, c.positional, factory)
        self.tgt_embed = _Embedding(c.tgt_vocab, c.d_model, c.max_len, c.positional, factory)
        self.encoder = nn.ModuleList(
            EncoderBlock(c.d_model, c.num_heads, c.d_ff, **block_args) for _ in range(c.num_layers)
        )
        self.decoder = nn.ModuleList(
            DecoderBlock(c.d_model, c.num_heads, c.d_ff, score=c.score, **block_args) for _ in range(num_decoder_layers)
        )
        self.encoder_norm = _layer_norm(c.d_model, c.norm if c.norm == "pre" else None, factory)
        self.final_norm = _layer_norm(c.d_model, c.norm if c.norm == "pre" else None, factory)
        self.head = nn.Linear(c.d_model, self.out_size, **factory)

    @property
    def max_len(self) -> int:
        return self.src_embed.max_len

    def encode(
        self, source: torch.Tensor, source_mask: torch.Tensor | None = None, *, need_weights: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """The encoder output Z (batch, m, d_model) for source ids (batch, m), and the encoder's
        self-attention weights per layer (or None). ``source_mask``: optional (batch, m) boolean,
        True for real tokens (:func:`attnbook.padding_mask`)."""
        z, weights = self.src_embed(source, name="source"), []
        mask = _check_source_mask(source_mask, source)
        with skip_checks():
            for block in self.encoder:
                z, w = block(z, mask, need_weights=need_weights)
                weights.append(w)
            return self.encoder_norm(z), (weights if need_weights else None)

    def decode(
        self,
        target_in: torch.Tensor,
        memory: torch.Tensor,
        source_mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        caches: list[KVCache] | None = None,
        offset: int = 0,
    ) -> tuple[torch.Tensor, dict[str, list[torch.Tensor]] | None]:
        """Logits (batch, n, out_size) for decoder inputs (batch, n) given the encoder output.

        With ``caches`` (one :class:`attnbook.KVCache` per decoder block) ``target_in`` holds the
        new tokens only, at positions ``offset``, ``offset + 1``, ... Returns the logits and, with
        ``need_weights``, ``{"decoder": [...], "cross": [...]}`` (one tensor per layer).
        """
        y = self.tgt_embed(target_in, offset, name="target_in")
        check_shapes(
            target_in=(target_in, "(batch, n)", "any"),
            memory=(memory, "(batch, m, d_model)"),
            parameters=(self.head.weight, "(out_size, d_model)"),
        )
        mask = _check_source_mask(source_mask, memory[..., 0])
        if caches is not None and len(caches) != len(self.decoder):
            raise ValueError(f"caches must hold one KVCache per decoder block ({len(self.decoder)}), got {len(caches)}")
        self_w, cross_w = [], []
        with skip_checks():
            for i, block in enumerate(self.decoder):
                cache = None if caches is None else caches[i]
                y, ws, wc = block(y, memory, mask, need_weights=need_weights, cache=cache)
                self_w.append(ws)
                cross_w.append(wc)
            weights = {"decoder": self_w, "cross": cross_w} if need_weights else None
            return self.head(self.final_norm(y)), weights

    def forward(
        self,
        source: torch.Tensor,
        target_in: torch.Tensor,
        source_mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, dict[str, list[torch.Tensor]] | None]:
        """Logits for every target position (teacher forcing).

        Args:
            source: ids (batch, m). target_in: decoder inputs (batch, n): ``bos`` then the target
                without its last token. source_mask: optional (batch, m) boolean, True = real token.
            need_weights: also return the weights.

        Returns:
            ``(logits (batch, n, out_size), weights)``: weights is None or
            ``{"encoder": [...], "decoder": [...], "cross": [...]}``, one (batch, heads, ., .)
            tensor per layer: encoder (m, m), decoder self-attention (n, n), cross-attention (n, m).
        """
        memory, enc_w = self.encode(source, source_mask, need_weights=need_weights)
        logits, weights = self.decode(target_in, memory, source_mask, need_weights=need_weights)
        if need_weights:
            weights = {"encoder": enc_w, **weights}
        return logits, weights

    @torch.no_grad()
    def generate(
        self,
        source: torch.Tensor,
        steps: int,
        *,
        bos: int,
        source_mask: torch.Tensor | None = None,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """Greedy translation (chapters 7 and 8): start from ``bos`` and append the most likely next
        token ``steps`` times. The encoder runs once. With ``use_cache`` every decoder block keeps a
        :class:`attnbook.KVCache` and each step runs the decoder on the one new token; without it
        each step runs the decoder on all tokens so far. Both give the same tokens.

        Returns:
            the generated ids (batch, steps), without ``bos``.
        """
        check_sizes(steps=steps)
        if steps > self.max_len:
            raise ValueError(f"steps = {steps} exceeds max_len = {self.max_len}")
        check_index("bos", bos, self.tgt_embed.vocab_size, "a token id")
        if self.tgt_embed.vocab_size < self.out_size:
            raise ValueError(
                f"cannot feed back outputs: out_size = {self.out_size} > tgt_vocab = {self.tgt_embed.vocab_size}"
            )
        memory, _ = self.encode(source, source_mask)
        caches = [KVCache(steps) for _ in self.decoder] if use_cache else None
        sequence = torch.full((source.shape[0], 1), bos, dtype=torch.long, device=source.device)  # (batch, 1)
        generated = []
        for t in range(steps):
            if use_cache:
                logits, _ = self.decode(sequence[:, -1:], memory, source_mask, caches=caches, offset=t)
            else:
                logits, _ = self.decode(sequence, memory, source_mask)
            new = logits[:, -1:].argmax(dim=-1)  # (batch, 1)
            generated.append(new)
            sequence = torch.cat([sequence, new], dim=1)  # (batch, t + 2)
        return torch.cat(generated, dim=1)  # (batch, steps)
