r"""The sequence model (chapters 7, 9 and 10): embedding, optional positions, blocks, an output head.

:class:`SequenceModel` is made from one :class:`attnbook.models.configs.SequenceModelConfig`;
it returns ``(logits, weights)`` where the weights, when asked for with ``need_weights=True``,
are one (batch, heads, n, m) tensor per layer.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.masks import heads_mask
from ..efficient.kv_cache import KVCache
from ..validators import (
    check_sizes,
    check_type,
    skip_checks,
)
from .blocks import EncoderBlock, _check_tokens, _Embedding, _layer_norm
from .configs import SequenceModelConfig


class SequenceModel(nn.Module):
    r"""Embedding, optional positions, a stack of blocks, an output head (chapters 7, 9 and 10).

    .. math:: X_0 = E[\text{tokens}] + P, \qquad X_\ell = \operatorname{Block}_\ell(X_{\ell - 1}),
              \qquad \text{logits} = \operatorname{LN}(X_L)\, W_\text{out}^\top + b_\text{out}

    (P only with sinusoidal positions; the final LN only with pre-norm). With ALiBi, P = 0 and
    every block adds :math:`-\mu_h |i - j|` to the scores of head h instead (chapter 9). Without
    positions and without the causal mask every layer is permutation equivariant, and so is the
    model: it sees its input as a multiset (chapters 5 and 6). With ``causal=True`` it is a
    decoder-only model that can :meth:`generate`.

    Args:
        config: a :class:`SequenceModelConfig`, e.g. ``SequenceModelConfig(vocab_size=10,
            d_model=32, num_heads=2, causal=True)``.
        device, dtype: where and in which dtype to create the parameters.

    Submodules: ``embed`` (``embed.token`` the ``nn.Embedding``), ``blocks`` (an
    ``nn.ModuleList`` of :class:`EncoderBlock`), ``final_norm``, ``head`` (``nn.Linear``);
    ``config`` is the configuration it was built from.
    """

    def __init__(self, config: SequenceModelConfig, *, device=None, dtype=None) -> None:
        super().__init__()
        check_type("config", config, SequenceModelConfig, "attnbook.models.configs.SequenceModelConfig")
        factory = {"device": device, "dtype": dtype}
        c = self.config = config
        self.causal, self.positional = c.causal, c.positional
        self.out_size = c.vocab_size if c.out_size is None else c.out_size
        alibi = c.positional == "alibi"
        self.embed = _Embedding(
            c.vocab_size, c.d_model, c.max_len, c.positional == "sinusoidal", factory, bounded=not alibi
        )
        self.blocks = nn.ModuleList(
            EncoderBlock(
                c.d_model, c.num_heads, c.d_ff, norm=c.norm, mlp=c.mlp, causal=c.causal, alibi=alibi, **factory
            )
            for _ in range(c.num_layers)
        )
        self.final_norm = _layer_norm(c.d_model, c.norm if c.norm == "pre" else None, factory)
        self.head = nn.Linear(c.d_model, self.out_size, **factory)

    @property
    def max_len(self) -> int:
        return self.embed.max_len

    def _run(self, x, mask, need_weights, caches):
        weights = []
        for i, block in enumerate(self.blocks):
            x, w = block(x, mask, need_weights=need_weights, cache=None if caches is None else caches[i])
            weights.append(w)
        return self.head(self.final_norm(x)), (weights if need_weights else None)

    def forward(
        self, tokens: torch.Tensor, mask: torch.Tensor | None = None, *, need_weights: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Logits for every position.

        Args:
            tokens: integer ids (batch, n), n <= max_len (any n with ALiBi).
            mask: optional attention mask for every block (see :meth:`EncoderBlock.forward`).
            need_weights: also return the attention weights.

        Returns:
            ``(logits (batch, n, out_size), weights)``: weights is None, or a list with one
            (batch, heads, n, n) tensor per layer.
        """
        x = self.embed(tokens)  # (batch, n, d_model)
        heads = self.blocks[0].self_attn.num_heads
        mask = heads_mask(mask, x.shape[0], heads, x.shape[1], x.shape[1], like=x)
        with skip_checks():  # the blocks get what was checked here
            return self._run(x, mask, need_weights, None)

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, steps: int, *, use_cache: bool = True) -> torch.Tensor:
        """Greedy decoding for a causal model (chapters 7 and 8): append the most likely next token
        ``steps`` times.

        With ``use_cache`` every block keeps a :class:`attnbook.KVCache`: the prompt is appended
        at once, then each step runs the model on the one new token. Without it every step runs the
        model on the whole sequence so far and keeps the last position. Both give the same tokens.

        Returns:
            the ``steps`` generated ids (batch, steps).
        """
        if not self.causal:
            raise ValueError("generate needs a causal model (SequenceModelConfig(..., causal=True))")
        check_sizes(steps=steps)
        _check_tokens("prompt", prompt, self.embed.vocab_size, self.embed.limit)
        total = prompt.shape[1] + steps - 1  # the last generated token is never fed back
        if prompt.shape[1] == 0 or total > self.embed.limit:
            raise ValueError(
                f"need 1 <= prompt length and prompt length + steps - 1 <= max_len = {self.max_len}, "
                f"got prompt {tuple(prompt.shape)} and steps = {steps}"
            )
        if self.embed.vocab_size < self.out_size:
            raise ValueError(
                f"cannot feed back outputs: out_size = {self.out_size} > vocab_size = {self.embed.vocab_size}"
            )
        caches = [KVCache(total) for _ in self.blocks] if use_cache else None
        sequence, new, generated = prompt, prompt, []
        for _ in range(steps):
            if use_cache:
                offset = sequence.shape[1] - new.shape[1]
                with skip_checks():
                    logits, _ = self._run(self.embed(new, offset), None, False, caches)
            else:
                logits, _ = self(sequence)
            new = logits[:, -1:].argmax(dim=-1)  # (batch, 1)
            generated.append(new)
            sequence = torch.cat([sequence, new], dim=1)  # (batch, n + 1)
        return torch.cat(generated, dim=1)  # (batch, steps)
