r"""What a fixed-size state cannot hold: one-layer recall models with a softmax, linear or delta-rule
mixer, trained on multi-query associative recall (chapter 14).

The task is :class:`attnbook.models.tasks.MultiQueryRecall` (``k1 v1 ... kN vN`` then the N keys
shuffled; the answer at each query is its value). The model (:class:`RecallModel`) is one layer
without positions and without an MLP, as in the Zoology experiments (Arora et al. 2023):

.. math:: X = E[\text{tokens}], \qquad [Q\; K\; V] = \operatorname{conv}_2(X W_{qkv} + b_{qkv}), \qquad
          H = X + \operatorname{mixer}(Q, K, V)\, W_o + b_o, \qquad
          \text{logits} = \operatorname{LN}(H)\, W_\text{out}^\top + b_\text{out}

with :math:`\operatorname{conv}_2` a causal depthwise convolution of width 2 along the tokens
(:class:`ShortConvolution`; it lets a value token see the key just before it, without which even
softmax attention stays near chance) and the mixer, per head, one of

* ``"softmax"``: causal softmax attention (:func:`attnbook.core.attention.attention`), which keeps
  every key and value: its memory grows with the sequence;
* ``"linear"``: causal linear attention with the feature map elu + 1
  (:func:`attnbook.linear.linear_attention.linear_attention_chunkwise` on
  :func:`attnbook.linear.feature_maps.elu_plus_one` of the queries and keys): a state
  :math:`S = \sum_j \phi(k_j)^\top v_j` of d_k x d_v numbers per head;
* ``"delta"``: DeltaNet, the delta rule (:func:`attnbook.linear.delta_rule.delta_rule_chunkwise`)
  with L2-normalised queries and keys and :math:`\beta_t = \sigma(x_t w_\beta + b_\beta)` per head:
  the same d_k x d_v state, written by online regression instead of a plain sum.

:func:`train_recall_model` trains one (AdamW, a linear warm-up then a cosine decay of the learning
rate, a fresh batch of the task with N drawn from [min_pairs, max_pairs] at every step) and
:func:`recall_accuracy` measures its accuracy at a fixed number of pairs on held-out sequences
drawn from a generator of their own. :func:`state_capacity` is the bound the chapter proves: a
linear read-out of d_k-dimensional keys recalls at most d_k independent pairs exactly.

Shape legend: ``batch`` sequences, ``n`` tokens, ``d_model`` the width of the residual stream,
``heads`` the heads, ``d_head`` the width of a head (d_k = d_v = d_head).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..core.attention import attention
from ..core.masks import causal_mask
from ..linear.delta_rule import delta_rule_chunkwise
from ..linear.feature_maps import elu_plus_one
from ..linear.linear_attention import linear_attention_chunkwise
from ..validators import check_number, check_one_of, check_sizes, check_type, skip_checks
from .blocks import _check_tokens
from .tasks import Batch, MultiQueryRecall
from .training import History, accuracy, train

__all__ = [
    "MIXERS",
    "RecallModel",
    "ShortConvolution",
    "recall_accuracy",
    "recall_curve",
    "state_capacity",
    "train_recall_model",
]

#: the mixers a :class:`RecallModel` can use
MIXERS = ("softmax", "linear", "delta")


class ShortConvolution(nn.Module):
    r"""A causal depthwise convolution along the tokens (chapter 14; the "short convolution" of H3,
    Mamba and DeltaNet).

    .. math:: y_{t,c} = b_c + \sum_{s=0}^{K-1} w_{c,s}\, x_{t-s,c} \qquad (x_{t} = 0 \text{ for } t < 0)

    Each channel c has its own K weights ``weight[c, s]`` = :math:`w_{c,s}`, the weight on the token s
    steps back; output t reads inputs t - K + 1 .. t only, so it is causal. Computed as K shifted
    copies of the input (at these sizes faster on a CPU than ``conv1d`` with one group per channel).

    Args:
        channels: the number of channels (features) convolved, each on its own.
        kernel_size: K >= 1, the number of tokens each output sees (K = 1 is a per-channel scale).
    """

    def __init__(self, channels: int, kernel_size: int = 2, *, device=None, dtype=None) -> None:
        super().__init__()
        check_sizes(channels=channels, kernel_size=kernel_size)
        self.channels, self.kernel_size = channels, kernel_size
        self.weight = nn.Parameter(torch.empty(channels, kernel_size, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(channels, device=device, dtype=dtype))
        bound = 1 / math.sqrt(kernel_size)  # nn.Conv1d's default initialisation for one input channel per group
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (batch, n, channels) -> (batch, n, channels), output t from inputs t - K + 1 .. t."""
        if not isinstance(x, torch.Tensor) or x.ndim != 3 or x.shape[-1] != self.channels:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must be (batch, n, channels = {self.channels}), got {shape}")
        K, n = self.kernel_size, x.shape[1]
        padded = F.pad(x, (0, 0, K - 1, 0))  # (batch, K - 1 + n, channels): zeros before t = 0
        out = self.bias + self.weight[:, 0] * x  # s = 0: (batch, n, channels)
        for s in range(1, K):
            out = out + self.weight[:, s] * padded[:, K - 1 - s : K - 1 - s + n]  # x_{t-s}: (batch, n, channels)
        return out


class RecallModel(nn.Module):
    r"""One layer of a mixer between an embedding and an output head, for multi-query recall (chapter 14).

    See the module docstring for the equations. The mixer (``"softmax"``, ``"linear"`` or
    ``"delta"``) is the only difference between the three models of the chapter; ``num_heads`` and
    ``head_width`` set the state of the fixed-size mixers, ``num_heads`` matrices of ``head_width``
    x ``head_width`` numbers (:attr:`state_numbers`). The query, key and value projections map
    d_model to num_heads * head_width, so with ``num_heads * head_width`` fixed (4 x 8 or 1 x 32 at
    d_model = 32) the parameter count stays the same while each head's state grows.

    Args:
        vocab_size, out_size: input ids and output classes (``task.vocab_size``, ``task.out_size``).
        mixer: one of :data:`MIXERS`.
        d_model: the width of the embedding and of the residual stream.
        num_heads, head_width: the heads and the width d_k = d_v of each.
        conv_size: the kernel size of the short convolution on q, k, v (1 turns it into a scale).
        chunk_size: the chunk of the chunkwise linear and delta-rule forms (any value gives the same
            outputs up to rounding; it only trades loop length against chunk size).
        max_len: the longest sequence accepted.
    """

    def __init__(
        self,
        vocab_size: int,
        out_size: int,
        *,
        mixer: str,
        d_model: int = 32,
        num_heads: int = 4,
        head_width: int = 8,
        conv_size: int = 2,
        chunk_size: int = 16,
        max_len: int = 1024,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_one_of("mixer", mixer, MIXERS)
        check_sizes(
            vocab_size=vocab_size,
            out_size=out_size,
            d_model=d_model,
            num_heads=num_heads,
            head_width=head_width,
            conv_size=conv_size,
            chunk_size=chunk_size,
            max_len=max_len,
        )
        factory = {"device": device, "dtype": dtype}
        self.vocab_size, self.out_size, self.mixer, self.max_len = vocab_size, out_size, mixer, max_len
        self.num_heads, self.head_width, self.chunk_size = num_heads, head_width, chunk_size
        inner = num_heads * head_width
        self.embed = nn.Embedding(vocab_size, d_model, **factory)
        self.qkv = nn.Linear(d_model, 3 * inner, **factory)
        self.conv = ShortConvolution(
            3 * inner, conv_size, **factory
        )  # depthwise: q, k and v each convolved on their own
        self.beta = nn.Linear(d_model, num_heads, **factory) if mixer == "delta" else None
        self.out = nn.Linear(inner, d_model, **factory)
        self.norm = nn.LayerNorm(d_model, **factory)
        self.head = nn.Linear(d_model, out_size, **factory)

    @property
    def state_numbers(self) -> int | None:
        """The numbers the fixed-size state holds per sequence, heads * d_k * d_v (None for softmax,
        whose keys and values grow with the sequence). Linear attention's normaliser z (heads * d_k
        more) is not counted."""
        return None if self.mixer == "softmax" else self.num_heads * self.head_width**2

    def mixer_inputs(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """What the mixer reads: ``x`` (batch, n, d_model), the embedded tokens, and the ``query``,
        ``key`` and ``value`` of every head (batch, heads, n, d_head) as the mixer takes them
        (after the short convolution, and for ``"linear"`` after elu + 1, for ``"delta"`` after L2
        normalisation of queries and keys), plus ``beta`` (batch, heads, n) for ``"delta"``."""
        _check_tokens("tokens", tokens, self.vocab_size, self.max_len)
        x = self.embed(tokens)  # (batch, n, d_model)
        batch, n, _ = x.shape
        qkv = self.conv(self.qkv(x))  # (batch, n, 3 * heads * d_head)
        q, k, v = qkv.view(batch, n, 3, self.num_heads, self.head_width).permute(
            2, 0, 3, 1, 4
        )  # 3 x (batch, heads, n, d_head)
        inputs = {"x": x}
        if self.mixer == "linear":
            q, k = elu_plus_one(q), elu_plus_one(k)  # phi(q), phi(k) > 0: (batch, heads, n, d_head)
        elif self.mixer == "delta":
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)  # unit rows: (batch, heads, n, d_head)
            inputs["beta"] = torch.sigmoid(self.beta(x)).transpose(1, 2)  # (batch, n, heads) -> (batch, heads, n)
        inputs.update(query=q, key=k, value=v)
        return inputs

    def _mix(self, inputs: dict[str, torch.Tensor], need_weights: bool):
        """The mixer on :meth:`mixer_inputs`' output: (output, weights or None, state or None)."""
        q, k, v = inputs["query"], inputs["key"], inputs["value"]  # (batch, heads, n, d_head) each
        with skip_checks():  # the tokens were checked; these tensors are built here
            if self.mixer == "softmax":
                keep = causal_mask(q.shape[-2], device=q.device)  # (n, n)
                out, weights = attention(q, k, v, mask=keep, need_weights=need_weights)  # (batch, heads, n, d_head)
                return out, weights, None
            if self.mixer == "linear":
                out, (state, _) = linear_attention_chunkwise(q, k, v, self.chunk_size)  # (batch, heads, n, d_head)
                return out, None, state
            out, state = delta_rule_chunkwise(q, k, v, inputs["beta"], self.chunk_size)  # (batch, heads, n, d_head)
            return out, None, state

    def mix(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The mixer's output (batch, heads, n, d_head), the softmax weights (batch, heads, n, n) (None
        for the other mixers) and the state after the last token (batch, heads, d_head, d_head) (None
        for softmax; for ``"linear"`` the matrix S of the state (S, z))."""
        return self._mix(self.mixer_inputs(tokens), need_weights=True)

    def forward(self, tokens: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, list | None]:
        """Logits (batch, n, out_size) for every token, and ``[weights]`` (batch, heads, n, n) when
        ``need_weights`` and the mixer is softmax (None otherwise). Without weights softmax attention
        runs PyTorch's fused kernel (:func:`attnbook.core.attention.attention`, ``need_weights=False``)."""
        check_type("need_weights", need_weights, bool)
        inputs = self.mixer_inputs(tokens)
        x = inputs["x"]  # (batch, n, d_model)
        batch, n, _ = x.shape
        mixed, weights, _ = self._mix(inputs, need_weights)  # (batch, heads, n, d_head)
        mixed = mixed.transpose(1, 2).reshape(batch, n, -1)  # (batch, n, heads * d_head)
        hidden = x + self.out(mixed)  # (batch, n, d_model)
        logits = self.head(self.norm(hidden))  # (batch, n, out_size)
        return logits, ([weights] if weights is not None else None)


def state_capacity(model: RecallModel) -> int | None:
    r"""d_k, the most independent key-value pairs one head's state can recall exactly (chapter 14);
    None for softmax attention, which keeps every key and value.

    The theorem: a head of a fixed-size mixer answers a query by a linear map of its features,
    :math:`o = q S` with :math:`S` of d_k x d_v numbers. If N queries (the rows of :math:`Q`, N x d_k)
    must return N linearly independent values (the rows of :math:`V`, N x d_v) exactly, then
    :math:`Q S = V` gives :math:`N = \operatorname{rank} V \le \operatorname{rank} Q \le d_k`. So
    no state of one head, however it was written (a sum of outer products or the delta rule), recalls
    more than d_k such pairs exactly. Softmax attention escapes the bound because its weights
    :math:`\exp(q_i \cdot k_j)` are not a product through d_k dimensions.

    What it does not say: the trained models read several heads through a layer norm and an argmax,
    which need not reproduce the values exactly, so a fall of their accuracy past d_k pairs is a
    reading of the bound, not the theorem itself.
    """
    check_type("model", model, RecallModel)
    return None if model.mixer == "softmax" else model.head_width


def _check_recall_task(task: object) -> MultiQueryRecall:
    check_type("task", task, MultiQueryRecall)
    return task


def _learning_rate_factor(step: int, steps: int, warmup: int) -> float:
    """lr(step) / lr: linear warm-up over ``warmup`` steps, then a cosine decay to 0 at ``steps``."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def train_recall_model(
    mixer: str,
    seed: int,
    *,
    head_width: int = 8,
    num_heads: int = 4,
    steps: int = 600,
    batch_size: int = 32,
    lr: float = 5e-3,
    weight_decay: float = 0.01,
    warmup: int | None = None,
    task: MultiQueryRecall | None = None,
    max_grad_norm: float | None = 1.0,
    **model_options,
) -> tuple[RecallModel, History]:
    r"""Build a :class:`RecallModel` from ``seed`` and train it on multi-query recall (chapter 14).

    ``torch.manual_seed(seed)`` draws the initialisation and a ``torch.Generator`` seeded with
    ``seed`` the training batches: a fresh batch of ``task`` at every step, N drawn from
    [min_pairs, max_pairs] (default :class:`~attnbook.models.tasks.MultiQueryRecall`: 64 keys, 64
    values, N in 4..32). AdamW on the cross-entropy of the query positions, the gradient norm clipped
    to ``max_grad_norm``, the learning rate warmed up linearly over ``warmup`` steps (default a
    tenth of them) and then decayed to 0 along a cosine. Runs on the CPU in the current thread
    setting; the model is returned in eval mode.

    Args:
        mixer: ``"softmax"``, ``"linear"`` or ``"delta"``.
        seed: the seed of the initialisation and of the training data (use other seeds for testing,
            :func:`recall_accuracy` has its own).
        head_width, num_heads: the heads (d_k = d_v = head_width).
        steps, batch_size, lr, weight_decay, warmup, max_grad_norm: the optimisation.
        task: the task (default ``MultiQueryRecall()``).
        **model_options: further arguments of :class:`RecallModel` (``d_model``, ``conv_size``,
            ``chunk_size``).

    Returns:
        ``(model, history)``: the trained model and a :class:`attnbook.models.training.History`
        (the loss and accuracy of every step's batch, and the wall time in ``seconds``).
    """
    check_one_of("mixer", mixer, MIXERS)
    check_sizes(minimum=0, seed=seed)
    check_sizes(steps=steps, batch_size=batch_size)
    check_number("lr", lr, positive=True)
    check_number("weight_decay", weight_decay, minimum=0.0)
    warmup = max(1, steps // 10) if warmup is None else warmup
    check_sizes(warmup=warmup)
    task = MultiQueryRecall() if task is None else _check_recall_task(task)
    torch.manual_seed(seed)
    model = RecallModel(
        task.vocab_size, task.out_size, mixer=mixer, num_heads=num_heads, head_width=head_width, **model_options
    )
    history = train(
        model,
        task,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        weight_decay=weight_decay,
        seed=seed,  # the batches' generator
        max_grad_norm=max_grad_norm,
        lr_schedule=lambda step: _learning_rate_factor(step, steps, warmup),
        progress=False,
    )
    return model, history


@torch.no_grad()
def recall_accuracy(
    model: RecallModel,
    num_pairs: int,
    *,
    num_sequences: int = 256,
    seed: int = 1_000_003,
    task: MultiQueryRecall | None = None,
) -> float:
    """The fraction of queries answered right by ``model`` on ``num_sequences`` held-out sequences of
    ``num_pairs`` pairs each (chapter 14).

    The sequences come from ``task.with_pairs(num_pairs)`` (default ``MultiQueryRecall()``) called
    with a generator seeded with ``seed``, separate from the training data's generator; the same
    seed gives the same sequences for every model, so accuracies compare on the same draws. Every
    query is scored: num_sequences * num_pairs answers.
    """
    check_type("model", model, RecallModel)
    check_sizes(num_pairs=num_pairs, num_sequences=num_sequences)
    check_sizes(minimum=0, seed=seed)
    task = MultiQueryRecall() if task is None else _check_recall_task(task)
    if num_pairs > task.num_keys:
        raise ValueError(
            f"num_pairs = {num_pairs} exceeds num_keys = {task.num_keys}: the keys of a sequence are distinct"
        )
    if task.vocab_size != model.vocab_size or task.out_size != model.out_size:
        raise ValueError(
            f"the task (vocab_size {task.vocab_size}, out_size {task.out_size}) does not fit the model "
            f"(vocab_size {model.vocab_size}, out_size {model.out_size})"
        )
    generator = torch.Generator().manual_seed(seed)
    batch: Batch = task.with_pairs(num_pairs)(num_sequences, generator, next(model.parameters()).device)
    was_training = model.training
    model.eval()
    logits, _ = model(batch.inputs)  # (num_sequences, 3 num_pairs, out_size)
    model.train(was_training)
    return accuracy(logits, batch.targets)


def recall_curve(model: RecallModel, pair_counts, **options) -> dict[int, float]:
    """:func:`recall_accuracy` at each number of pairs in ``pair_counts``: {N: accuracy} (chapter 14)."""
    return {int(N): recall_accuracy(model, int(N), **options) for N in pair_counts}
