"""attnbook: the package behind the open course on attention mechanisms.

Row convention (tokens are rows, as in PyTorch), any batch dimensions in front, computed on the
device and in the dtype of the inputs. The public functions are re-exported here
(``attnbook.attention``, ``attnbook.softmax``, ...); each lives in one module:

* :mod:`attnbook.core`: the formulas of chapters 1, 2 and 4: ``core.softmax``, ``core.masks``
  (every mask layout, its conversion to the scores' dtype, :func:`apply_mask`), ``core.attention``,
  ``core.hard_attention``;
* :mod:`attnbook.efficient`: chapter 8's ``efficient.online_softmax`` and ``efficient.tiled_attention``;
* :mod:`attnbook.kernels`: chapter 11's backward pass (``kernels.attention_backward``) and
  FlashAttention-2's forward and backward in PyTorch tiles (``kernels.flash_attention``,
  :class:`FlashAttention`) and as Triton kernels (``kernels.flash_triton``,
  :class:`FlashAttentionTriton`). Importing it sets ``TRITON_INTERPRET=1`` on a machine without
  CUDA when the variable is unset, so that Triton's interpreter runs the kernels on the CPU (triton
  itself is imported only when a kernel first runs);
* one module per topic at the top: ``scoring``, ``multi_head_attention``, ``positional_encoding``,
  ``permutations``, ``equivariance``, ``kv_cache``, ``rotary``, ``grouped_query``,
  ``sliding_window``, ``alibi``, ``interpretability``; :mod:`attnbook.formal` the column-convention
  versions of *Formal Algorithms for Transformers*;
* the models and their training: ``models`` (:class:`attnbook.models.SequenceModel` and
  :class:`attnbook.models.EncoderDecoder`, each made from its frozen config record), ``tasks``,
  ``training``, ``margins``;
* tools: ``validators`` (the argument checks), ``device``, ``sampling``, ``memory``, ``bench``,
  ``plotting`` and ``diagrams`` (the figures).

No module shares its dotted name with a function: ``attnbook.softmax`` is the function, and its
module is ``attnbook.core.softmax``.
"""

from . import formal, interpretability, kernels, models, tasks, training
from .alibi import alibi_bias, alibi_bias_for_positions, alibi_slopes
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
from .core.softmax import softmax
from .device import default_device
from .efficient.online_softmax import online_softmax
from .efficient.tiled_attention import tiled_attention
from .equivariance import best_equivariant_accuracy, equivariant_accuracy, equivariant_accuracy_bound
from .grouped_query import grouped_query_attention, kv_cache_bytes
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
from .kv_cache import KVCache
from .multi_head_attention import MultiHeadAttention
from .permutations import is_permutation_matrix, permutation_matrix, random_permutation, random_permutation_matrix
from .positional_encoding import pair_rotation, shift_matrix, sinusoid_frequencies, sinusoidal_encoding
from .rotary import apply_rotary, half_to_interleaved, interleaved_to_half, rotary_angles, rotary_permutation
from .sampling import sampler
from .scoring import additive_scores, general_scores
from .sliding_window import block_layout, block_sparse_mask, sliding_window_attention, sliding_window_mask

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

        return importlib.import_module(".plotting", __name__)
    raise AttributeError(f"module 'attnbook' has no attribute {name!r}")
