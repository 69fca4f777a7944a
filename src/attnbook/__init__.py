"""attnbook: the package behind the open course on attention mechanisms.

Row convention (tokens are rows, as in PyTorch), any batch dimensions in front, computed on the
device and in the dtype of the inputs. The public functions are re-exported here
(``attnbook.attention``, ``attnbook.softmax``, ...); each lives in one module of one wing, a
folder per topic. A wing imports only the wings below it in this order and never this face
(``tests/attnbook/test_layout.py`` checks it)::

    validators < core < positions < heads < efficient < programs < linear < kernels < models < lab < figures

* :mod:`attnbook.validators`: the argument checks every wing uses (the ground);
* :mod:`attnbook.core`: the formulas of chapters 1, 2 and 4: softmax, masks (every layout, its
  validation and application), attention, hard attention, the score functions, and ``formal``
  (the column-convention versions of *Formal Algorithms for Transformers*);
* :mod:`attnbook.positions`: chapters 5, 6 and 9's positions: sinusoidal encodings, rotary, ALiBi,
  permutations and equivariance;
* :mod:`attnbook.heads`: chapters 3 and 9's heads: multi-head and grouped-query attention (latent
  attention will go here);
* :mod:`attnbook.efficient`: chapter 8: the online softmax, tiled attention, the key-value cache,
  sliding windows and block-sparse layouts;
* :mod:`attnbook.programs`, :mod:`attnbook.linear`: homes for chapter 12 (masks as programs) and
  chapter 14 (linear attention); chapter 13 (the cache at scale) goes to ``heads`` and ``efficient``;
* :mod:`attnbook.kernels`: chapter 11's backward pass and FlashAttention-2 in PyTorch tiles and
  Triton. Importing it sets ``TRITON_INTERPRET=1`` on a machine without CUDA when the variable is
  unset, so that Triton's interpreter runs the kernels on the CPU (triton itself is imported only
  when a kernel first runs);
* :mod:`attnbook.models`: chapters 4, 7 and 10's models (blocks, configs, the sequence model, the
  encoder-decoder), their tasks and training, and interpretability (with ``ablate_head``);
* :mod:`attnbook.lab`: the tools of the lab bench: device, sampling, memory, traffic, margins and
  the benchmarks (``python -m attnbook.lab.bench``, ``python -m attnbook.lab.bench_flash``);
* :mod:`attnbook.figures`: plots and diagrams in one style (:mod:`attnbook.figures.style`).

The modules that the face exported before the wings (``formal``, ``interpretability``, ``models``,
``tasks``, ``training``, ``kernels``, ``plotting``) stay attributes of the face. No module shares
its dotted name with a function: ``attnbook.softmax`` is the function, and its module is
``attnbook.core.softmax``.
"""

from . import kernels, models
from .core import formal
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
from .efficient.tiled_attention import tiled_attention
from .heads.grouped_query import grouped_query_attention, kv_cache_bytes
from .heads.multi_head import MultiHeadAttention
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
from .lab.sampling import sampler
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

__all__ = [
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
    "sampler",
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
