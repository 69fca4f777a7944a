"""Linear attention (chapter 14): feature maps in place of the softmax, one computation in three forms
(masked quadratic, recurrent over a fixed-size state, chunkwise), decay and gates as a structured
mask, and the delta rule; ``attnbook`` re-exports the entry points.

* :mod:`attnbook.linear.feature_maps`: feature maps phi with phi(q) . phi(k) as the kernel of a
  kernel smoother (``elu_plus_one``, Katharopoulos et al. 2020);
* :mod:`attnbook.linear.linear_attention`: causal linear attention in its three forms,
  ``linear_attention_quadratic``, ``linear_attention_recurrent`` and ``linear_attention_chunkwise``,
  their state ``LinearAttentionState`` (S, z), and the rounding bound that says how closely they
  must agree (``linear_attention_rounding_bound``);
* :mod:`attnbook.linear.decay`: gates as a structured mask (Mamba-2's state-space duality):
  ``segment_sum``, ``decay_mask`` (in log space), ``decay_mask_linear_space`` (the unsafe way, the
  counterexample), and gated linear attention in the three forms (RetNet's constant decay, Mamba-2's
  per-token gate) with its rounding bound;
* :mod:`attnbook.linear.delta_rule`: the delta rule (DeltaNet) and its gated form, recurrent and
  chunkwise.

Conventions of the whole wing: rows are tokens; query and key (..., n, d_k), value (..., n, d_v),
batch dimensions (batch, heads) in front; the state S (..., d_k, d_v) includes token t
(S_t = S_{t-1} + k_t^T v_t, o_t = q_t S_t); log gates (..., n) with gates a_t = exp(log a_t) in (0, 1].
The feature map is applied by the caller.

Imports the wings below it (``core``, ``positions``, ``heads``, ``efficient``, ``programs``) and
:mod:`attnbook.validators`. This package re-exports nothing, so that no dotted name is both a
module and a function.
"""
