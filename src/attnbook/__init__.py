"""attnbook: the package behind the open course on attention mechanisms.

Row convention (tokens are rows, as in PyTorch), any batch dimensions in front, computed on the
device and in the dtype of the inputs. The public functions are re-exported here
(``attnbook.attention``, ``attnbook.softmax``, ...); each lives in one module of one wing, a
folder per topic. A wing imports only the wings below it in this order and never this face
(``tests/attnbook/test_layout.py`` checks it)::

    validators < core < positions < heads < efficient < programs < linear < kernels < models < lab < figures

* :mod:`attnbook.validators`: the argument checks every wing uses (the ground);
* :mod:`attnbook.core`: the formulas of chapters 1, 2 and 4: softmax, masks (every layout, its
  validation and application), attention, hard attention, the score functions, and
  ``column_convention`` (*Formal Algorithms for Transformers* with tokens as columns, re-exported
  here as ``attnbook.formal``, the name the course specification gives it);
* :mod:`attnbook.positions`: chapters 5, 6 and 9's positions: sinusoidal encodings, rotary, ALiBi,
  permutations and equivariance;
* :mod:`attnbook.heads`: chapters 3, 9 and 13's heads: multi-head, grouped-query and latent
  attention (naive and absorbed, its cache of latents), attention with sink logits, and the cache's
  bytes per token for each scheme;
* :mod:`attnbook.efficient`: chapter 8: the online softmax, tiled attention, the key-value cache,
  sliding windows and block-sparse layouts; chapter 13's streaming cache (sink tokens and a
  rolling window);
* :mod:`attnbook.programs`: chapter 12, masks as programs: packed documents (document ids,
  ``cu_seqlens``, positions that restart), mask and score functions in FlexAttention's signature
  (``mask_mod``, ``score_mod``: document, sliding window, prefix-LM, soft-capping, ALiBi), and the
  tiles a kernel may skip;
* :mod:`attnbook.linear`: chapter 14, linear attention: feature maps (``elu_plus_one``), the
  quadratic, recurrent and chunkwise forms of causal linear attention, decay and gates as a
  structured mask (``segment_sum``, ``decay_mask``; Mamba-2's state-space duality) and gated
  linear attention in the three forms; the delta rule (DeltaNet) and the gated delta rule
  (Qwen3-Next), one token (``delta_rule_step``, ``gated_delta_rule_step``), recurrent and
  chunkwise through the WY/UT representation (``ut_transform``);
* :mod:`attnbook.kernels`: chapter 11's backward pass and FlashAttention-2 in PyTorch tiles and
  Triton. Importing it sets ``TRITON_INTERPRET=1`` on a machine without CUDA when the variable is
  unset, so that Triton's interpreter runs the kernels on the CPU (triton itself is imported only
  when a kernel first runs);
* :mod:`attnbook.models`: chapters 4, 7 and 10's models (blocks, configs, the sequence model, the
  encoder-decoder), their tasks and training, and interpretability (with ``ablate_head``);
* :mod:`attnbook.lab`: the tools of the lab bench: the device, seeded random tensors
  (``random_tensors.seeded_randn``), peak memory (``memory``), the bytes each operation moves
  (``memory_traffic``), thresholds of trained-model claims that record their margins for ``make
  check-seeds`` (``thresholds``) and the benchmarks (``python -m attnbook.lab.bench``,
  ``python -m attnbook.lab.bench_flash``);
* :mod:`attnbook.figures`: plots and diagrams in one style (:mod:`attnbook.figures.style`).

The modules that the face exported before the wings (``formal``, now the module
``attnbook.core.column_convention``; ``interpretability``, ``models``, ``tasks``, ``training``,
``kernels``, ``plotting``) stay attributes of the face; ``sampler`` is now ``seeded_randn``. No
module shares its dotted name with a function: ``attnbook.softmax`` is the function, and its module is
``attnbook.core.softmax``.
"""

from . import kernels, models
from .core import column_convention as formal
from .core.attention import attention, attention_scores
from .core.hard_attention import hard_attention
from .core.masks import (
    additive_to_keep,
    apply_mask,
    block_to_keep,
    causal_mask,
    keep_to_additive,
    keep_to_block,
    padding_mask,
)
from .core.scoring import additive_scores, general_scores
from .core.softmax import softmax
from .efficient.kv_cache import KVCache
from .efficient.online_softmax import online_softmax
from .efficient.sliding_window import block_layout, block_sparse_mask, sliding_window_attention, sliding_window_mask
from .efficient.streaming import RollingKVCache, StreamingCache, streaming_mask, streaming_positions
from .efficient.tiled_attention import tiled_attention
from .heads.cache_accounting import cache_bytes, cache_bytes_per_token, cache_numbers_per_token
from .heads.grouped_query import grouped_query_attention, kv_cache_bytes
from .heads.latent import (
    LatentCache,
    MultiHeadLatentAttention,
    absorb_query,
    absorbed_output_weight,
    absorbed_query_weight,
    absorbed_rotary_scores,
    down_project,
    latent_attention_absorbed,
    latent_attention_naive,
    latent_decode_flops,
    rms_norm,
    rotary_key,
    rotary_on_latent_keys_scores,
    rotary_queries,
    up_project,
)
from .heads.multi_head import MultiHeadAttention
from .heads.sinks import sink_attention, sinks_as_virtual_key
from .kernels.attention_backward import attention_backward, backward_delta, log_sum_exp, probabilities_from_lse
from .kernels.flash_attention import (
    FlashAttention,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    flash_attention_tiles,
)
from .kernels.flash_triton import (
    FlashAttentionTriton,
    flash_attention_triton,
    flash_triton_backward,
    flash_triton_forward,
)
from .lab.device import default_device
from .lab.random_tensors import seeded_randn
from .linear.decay import (
    decay_mask,
    decay_mask_linear_space,
    gated_linear_attention_chunkwise,
    gated_linear_attention_quadratic,
    gated_linear_attention_recurrent,
    segment_sum,
)
from .linear.delta_rule import (
    delta_rule_chunkwise,
    delta_rule_recurrent,
    delta_rule_step,
    gated_delta_rule_chunkwise,
    gated_delta_rule_recurrent,
    gated_delta_rule_step,
    ut_transform,
)
from .linear.feature_maps import elu_plus_one
from .linear.linear_attention import (
    LinearAttentionState,
    linear_attention_chunkwise,
    linear_attention_quadratic,
    linear_attention_recurrent,
)
from .models import interpretability, tasks, training
from .positions.alibi import alibi_bias, alibi_bias_for_positions, alibi_slopes
from .positions.equivariance import best_equivariant_accuracy, equivariant_accuracy, equivariant_accuracy_bound
from .positions.permutations import (
    is_permutation_matrix,
    permutation_matrix,
    random_permutation,
    random_permutation_matrix,
)
from .positions.rotary import apply_rotary, half_to_interleaved, interleaved_to_half, rotary_angles, rotary_permutation
from .positions.sinusoidal import pair_rotation, shift_matrix, sinusoid_frequencies, sinusoidal_encoding
from .programs.block_masks import TileCounts, block_sparse_attention, count_tiles, tile_kinds, tile_kinds_from_mask_mod
from .programs.documents import (
    cu_seqlens_from_document_ids,
    cu_seqlens_from_lengths,
    document_causal_mask,
    document_causal_mask_from_cu_seqlens,
    document_ids_from_cu_seqlens,
    document_ids_from_lengths,
    position_ids_from_cu_seqlens,
    position_ids_from_document_ids,
)
from .programs.mask_mods import (
    and_masks,
    causal_mask_mod,
    document_mask_mod,
    mask_from_mask_mod,
    or_masks,
    prefix_lm_mask,
    prefix_lm_mask_mod,
    sliding_window_mask_mod,
)
from .programs.score_mods import (
    alibi_score_mod,
    attention_with_mods,
    scores_from_score_mod,
    softcap,
    softcap_score_mod,
)

__all__ = [
    # chapter 14: linear attention (attnbook.linear.feature_maps, .linear_attention, .decay)
    "LinearAttentionState",
    "decay_mask",
    "decay_mask_linear_space",
    "elu_plus_one",
    "gated_linear_attention_chunkwise",
    "gated_linear_attention_quadratic",
    "gated_linear_attention_recurrent",
    "linear_attention_chunkwise",
    "linear_attention_quadratic",
    "linear_attention_recurrent",
    "segment_sum",
    # chapter 14: the delta rule (attnbook.linear.delta_rule)
    "delta_rule_chunkwise",
    "delta_rule_recurrent",
    "delta_rule_step",
    "gated_delta_rule_chunkwise",
    "gated_delta_rule_recurrent",
    "gated_delta_rule_step",
    "ut_transform",
    # chapter 13: the cache at scale (attnbook.heads.latent, .sinks, .cache_accounting; attnbook.efficient.streaming)
    "LatentCache",
    "MultiHeadLatentAttention",
    "RollingKVCache",
    "StreamingCache",
    "absorb_query",
    "absorbed_output_weight",
    "absorbed_query_weight",
    "absorbed_rotary_scores",
    "cache_bytes",
    "cache_bytes_per_token",
    "cache_numbers_per_token",
    "down_project",
    "latent_attention_absorbed",
    "latent_attention_naive",
    "latent_decode_flops",
    "rms_norm",
    "rotary_key",
    "rotary_on_latent_keys_scores",
    "rotary_queries",
    "sink_attention",
    "sinks_as_virtual_key",
    "streaming_mask",
    "streaming_positions",
    "up_project",
    # chapter 12: masks as programs (attnbook.programs)
    "TileCounts",
    "block_sparse_attention",
    "count_tiles",
    "tile_kinds",
    "tile_kinds_from_mask_mod",
    "cu_seqlens_from_document_ids",
    "cu_seqlens_from_lengths",
    "document_causal_mask",
    "document_causal_mask_from_cu_seqlens",
    "document_ids_from_cu_seqlens",
    "document_ids_from_lengths",
    "position_ids_from_cu_seqlens",
    "position_ids_from_document_ids",
    "and_masks",
    "causal_mask_mod",
    "document_mask_mod",
    "mask_from_mask_mod",
    "or_masks",
    "prefix_lm_mask",
    "prefix_lm_mask_mod",
    "sliding_window_mask_mod",
    "alibi_score_mod",
    "attention_with_mods",
    "scores_from_score_mod",
    "softcap",
    "softcap_score_mod",
    "alibi_bias",
    "alibi_bias_for_positions",
    "alibi_slopes",
    "apply_rotary",
    "block_layout",
    "block_sparse_mask",
    "grouped_query_attention",
    "half_to_interleaved",
    "interleaved_to_half",
    "kv_cache_bytes",
    "rotary_angles",
    "rotary_permutation",
    "sliding_window_attention",
    "sliding_window_mask",
    "KVCache",
    "MultiHeadAttention",
    "FlashAttention",
    "FlashAttentionTriton",
    "attention_backward",
    "backward_delta",
    "flash_attention",
    "flash_attention_backward",
    "flash_attention_forward",
    "flash_attention_tiles",
    "flash_attention_triton",
    "flash_triton_backward",
    "flash_triton_forward",
    "kernels",
    "log_sum_exp",
    "probabilities_from_lse",
    "online_softmax",
    "tiled_attention",
    "additive_to_keep",
    "block_to_keep",
    "keep_to_additive",
    "keep_to_block",
    "apply_mask",
    "attention",
    "additive_scores",
    "attention_scores",
    "causal_mask",
    "default_device",
    "best_equivariant_accuracy",
    "equivariant_accuracy",
    "equivariant_accuracy_bound",
    "formal",
    "interpretability",
    "models",
    "tasks",
    "training",
    "general_scores",
    "hard_attention",
    "is_permutation_matrix",
    "padding_mask",
    "pair_rotation",
    "permutation_matrix",
    "plotting",
    "random_permutation",
    "random_permutation_matrix",
    "shift_matrix",
    "sinusoid_frequencies",
    "sinusoidal_encoding",
    "seeded_randn",
    "softmax",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    # matplotlib is imported only when a figure is drawn, so that code which only computes
    # (the tests, the grader) does not pay for it.
    if name == "plotting":
        import importlib

        return importlib.import_module(".figures.plotting", __name__)
    raise AttributeError(f"module 'attnbook' has no attribute {name!r}")
