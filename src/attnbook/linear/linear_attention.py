r"""Linear attention: one computation in three forms, quadratic, recurrent and chunkwise (chapter 14).

With features :math:`\phi(q_i), \phi(k_j)` in place of the exponential kernel (see
:mod:`attnbook.linear.feature_maps`), causal attention with the kernel
:math:`\phi(q) \cdot \phi(k)` is, writing :math:`q_i, k_j` for the features (row vectors),

.. math:: o_i = \frac{\sum_{j \le i} (q_i \cdot k_j)\, v_j}{\sum_{j \le i} q_i \cdot k_j}
              = \frac{q_i S_i}{q_i \cdot z_i}, \qquad
          S_i = \sum_{j \le i} k_j^\top v_j, \quad z_i = \sum_{j \le i} k_j .

The same numbers can be computed three ways:

* **quadratic** (:func:`linear_attention_quadratic`): :math:`O = (Q K^\top \odot M) V`, divided
  row by row by the row sums of :math:`Q K^\top \odot M`, with :math:`M` the causal mask (lower
  triangular with its diagonal). Time :math:`O(n^2 d)`, memory :math:`O(n^2)`; like softmax
  attention, but without the softmax.
* **recurrent** (:func:`linear_attention_recurrent`): a state :math:`S_t = S_{t-1} + k_t^\top v_t`
  of size :math:`d_k \times d_v` and a normaliser :math:`z_t = z_{t-1} + k_t`, updated once per
  token; :math:`o_t = q_t S_t / (q_t \cdot z_t)`. Time :math:`O(n d_k d_v)`, memory constant in
  :math:`n`: the state does not grow with the sequence, unlike a key-value cache.
* **chunkwise** (:func:`linear_attention_chunkwise`): the tokens in chunks of :math:`C`; inside a
  chunk the quadratic form, across chunks the recurrence, one state update per chunk. For the
  chunk of tokens :math:`c_0 \le i < c_1`, with :math:`S, z` the state after token :math:`c_0 - 1`,

  .. math:: O_c = Q_c S + (Q_c K_c^\top \odot M) V_c, \qquad
            S \leftarrow S + K_c^\top V_c, \quad z \leftarrow z + \textstyle\sum_{j \in c} k_j .

  Time :math:`O(n C d + n d_k d_v)`: matrix products of size :math:`C`, which is what makes the
  form fast on an accelerator, and :math:`n / C` sequential steps instead of :math:`n`.

The three are equal in exact arithmetic: the output of token :math:`i` in chunk :math:`c` is
:math:`q_i (\sum_{j < c_0} k_j^\top v_j) + \sum_{c_0 \le j \le i} (q_i \cdot k_j) v_j
= q_i S_i`, and the quadratic form's row :math:`i` is the same sum written as one row of a matrix
product. ``normalize=False`` drops the denominator (as most trained linear-attention layers do,
normalising the output elsewhere). The state includes token :math:`t` itself: the mask is causal
*with* its diagonal, as :func:`attnbook.causal_mask`.

**The features are applied by the caller**: ``query`` and ``key`` here are :math:`\phi(Q)` and
:math:`\phi(K)`, e.g. ``linear_attention_recurrent(elu_plus_one(q), elu_plus_one(k), v)``. With
``normalize=True`` the features should make every :math:`q_i \cdot z_i` positive (positive features
do); a zero denominator gives ``inf`` or ``nan``, as the formula does.

**The state** is a :class:`LinearAttentionState` ``(S, z)`` with ``S`` (..., d_k, d_v) and ``z``
(..., d_k), always both (``z`` costs :math:`d_k` numbers): it summarises the prefix whether or not
the output is normalised, so a state from a call with either ``normalize`` continues any call.
Running a sequence in two pieces, the second with ``initial_state`` the state the first returned,
gives the outputs and state of one run.

Shape legend: ``...`` batch dimensions (batch, heads), broadcast together; ``n`` tokens;
``d_k`` width of the (feature-mapped) queries and keys; ``d_v`` width of the values.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..core.masks import causal_mask
from ..validators import check_chunk_size, check_shapes, check_type


class LinearAttentionState(NamedTuple):
    r"""The state of causal linear attention after a prefix of tokens (chapter 14).

    ``S`` (..., d_k, d_v): :math:`S_t = \sum_{j \le t} k_j^\top v_j`; ``z`` (..., d_k):
    :math:`z_t = \sum_{j \le t} k_j`. Zeros before the first token.
    """

    S: torch.Tensor
    z: torch.Tensor


def _check_linear_inputs(
    query: object, key: object, value: object, initial_state: object = None, *, causal: bool = True
) -> None:
    """The checks of the three forms: shapes, dtypes and devices of the inputs and of a state (S, z)."""
    tokens = "n" if causal else "m"  # without the causal mask the keys may be more or fewer than the queries
    inputs = {
        "query": (query, "(..., n, d_k)"),
        "key": (key, f"(..., {tokens}, d_k)"),
        "value": (value, f"(..., {tokens}, d_v)"),
    }
    if initial_state is None:
        check_shapes(**inputs)
        return
    if not isinstance(initial_state, tuple) or len(initial_state) != 2:
        got = type(initial_state).__name__
        if isinstance(initial_state, torch.Tensor):
            got = f"a tensor of shape {tuple(initial_state.shape)}"
        raise TypeError(
            f"initial_state must be the pair (S, z) that a previous call returned (a LinearAttentionState, "
            f"S (..., d_k, d_v) and z (..., d_k)), got {got}"
        )
    S, z = initial_state
    check_shapes(**inputs, **{"initial_state.S": (S, "(..., d_k, d_v)"), "initial_state.z": (z, "(..., d_k)")})


def _start_state(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, initial_state: tuple | None
) -> LinearAttentionState:
    """The state before the first token, (S_0, z_0), with the batch dimensions of every input and state."""
    shapes = [query.shape[:-2], key.shape[:-2], value.shape[:-2]]
    if initial_state is not None:
        shapes += [initial_state[0].shape[:-2], initial_state[1].shape[:-1]]
    batch = torch.broadcast_shapes(*shapes)
    d_k, d_v = query.shape[-1], value.shape[-1]
    like = {"dtype": query.dtype, "device": query.device}
    if initial_state is None:
        return LinearAttentionState(torch.zeros(*batch, d_k, d_v, **like), torch.zeros(*batch, d_k, **like))
    S, z = initial_state
    return LinearAttentionState(S.expand(*batch, d_k, d_v), z.expand(*batch, d_k))  # (..., d_k, d_v), (..., d_k)


# O = (Q K^T ⊙ M) V,   divided row by row by rowsum(Q K^T ⊙ M) when normalized
def linear_attention_quadratic(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, normalize: bool = True, causal: bool = True
) -> torch.Tensor:
    r"""Linear attention in its masked quadratic form (chapter 14).

    .. math:: O = \frac{(\phi(Q) \phi(K)^\top \odot M)\, V}{\operatorname{rowsum}(\phi(Q) \phi(K)^\top \odot M)}

    with :math:`M_{ij} = [j \le i]` the causal mask (its diagonal included) when ``causal``, and
    all ones otherwise. The division is row by row, and only with ``normalize``. This is the
    kernel smoother of chapter 1 with the kernel :math:`\phi(q) \cdot \phi(k)` in place of
    :math:`e^{q \cdot k / \sqrt{d_k}}`; it forms the (n, n) matrix, as softmax attention does.

    Args:
        query: the query features :math:`\phi(Q)` (..., n, d_k): the feature map is applied by the
            caller (e.g. :func:`attnbook.linear.feature_maps.elu_plus_one`).
        key: the key features :math:`\phi(K)` (..., n, d_k), or (..., m, d_k) when not ``causal``.
        value: (..., n, d_v), or (..., m, d_v) when not ``causal``.
        normalize: divide each row by its sum :math:`\phi(q_i) \cdot z_i` (the kernel smoother);
            ``False`` returns the numerator alone.
        causal: mask key j > i (the forms below are all causal); ``False`` lets every query see
            every key.

    Returns:
        The output (..., n, d_v), batch dimensions broadcast.
    """
    _check_linear_inputs(query, key, value, causal=causal)
    check_type("normalize", normalize, bool)
    check_type("causal", causal, bool)
    A = query @ key.transpose(-2, -1)  # phi(Q) phi(K)^T: (..., n, d_k) @ (..., d_k, m) -> (..., n, m)
    if causal:
        n = query.shape[-2]
        A = A.masked_fill(~causal_mask(n, device=query.device), 0.0)  # ⊙ M: 0 where key j > query i
    output = A @ value  # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)
    if normalize:
        output = output / A.sum(dim=-1, keepdim=True)  # (..., n, d_v) / (..., n, 1): phi(q_i) . z_i
    return output


# S_t = S_{t-1} + k_t^T v_t,   z_t = z_{t-1} + k_t,   o_t = q_t S_t / (q_t . z_t)
def linear_attention_recurrent(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    normalize: bool = True,
    initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, LinearAttentionState]:
    r"""Causal linear attention as a recurrence over a fixed-size state, one token at a time (chapter 14).

    .. math:: S_t = S_{t-1} + k_t^\top v_t, \qquad z_t = z_{t-1} + k_t, \qquad
              o_t = \frac{q_t S_t}{q_t \cdot z_t}

    (without the division when ``normalize`` is False), from :math:`S_0 = 0, z_0 = 0` or
    ``initial_state``. Equal to :func:`linear_attention_quadratic` (``causal=True``) in exact
    arithmetic. Between tokens only the state exists: :math:`d_k d_v + d_k` numbers per batch
    entry, whatever the length.

    Args:
        query: the query features :math:`\phi(Q)` (..., n, d_k), applied by the caller.
        key: the key features :math:`\phi(K)` (..., n, d_k).
        value: (..., n, d_v).
        normalize: divide by :math:`q_t \cdot z_t`.
        initial_state: the :class:`LinearAttentionState` ``(S, z)`` after the tokens before these,
            S (..., d_k, d_v) and z (..., d_k), as a previous call returned it; None for zeros.

    Returns:
        ``(output, state)``: the output (..., n, d_v) and the :class:`LinearAttentionState`
        ``(S_n, z_n)`` after the last token, with the batch dimensions of all inputs broadcast.
    """
    _check_linear_inputs(query, key, value, initial_state)
    check_type("normalize", normalize, bool)
    S, z = _start_state(query, key, value, initial_state)  # (..., d_k, d_v), (..., d_k)
    outputs = []
    for t in range(query.shape[-2]):
        q_t, k_t, v_t = query[..., t, :], key[..., t, :], value[..., t, :]  # (..., d_k), (..., d_k), (..., d_v)
        S = S + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)  # k_t^T v_t: (..., d_k, 1) * (..., 1, d_v) -> (..., d_k, d_v)
        z = z + k_t  # (..., d_k)
        o_t = (q_t.unsqueeze(-2) @ S).squeeze(-2)  # q_t S_t: (..., 1, d_k) @ (..., d_k, d_v) -> (..., d_v)
        if normalize:
            o_t = o_t / (q_t * z).sum(dim=-1, keepdim=True)  # (..., d_v) / (..., 1): q_t . z_t
        outputs.append(o_t)
    if not outputs:  # no tokens: an empty output, the state handed on unchanged
        return S.new_zeros(*S.shape[:-2], 0, value.shape[-1]), LinearAttentionState(S, z)
    return torch.stack(outputs, dim=-2), LinearAttentionState(S, z)  # (..., n, d_v)


# O_c = Q_c S + (Q_c K_c^T ⊙ M) V_c,   S <- S + K_c^T V_c,   z <- z + sum_{j in c} k_j
def linear_attention_chunkwise(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    chunk_size: int,
    *,
    normalize: bool = True,
    initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, LinearAttentionState]:
    r"""Causal linear attention chunk by chunk: quadratic inside a chunk, recurrent across chunks (chapter 14).

    For each chunk :math:`c` of ``chunk_size`` consecutive tokens (the last chunk holds what is
    left when ``chunk_size`` does not divide n), with :math:`(S, z)` the state before the chunk:

    .. math:: O_c = \frac{Q_c S + (Q_c K_c^\top \odot M) V_c}
                         {Q_c z + \operatorname{rowsum}(Q_c K_c^\top \odot M)}, \qquad
              S \leftarrow S + K_c^\top V_c, \qquad z \leftarrow z + \mathbf{1}^\top K_c

    (without the division when ``normalize`` is False), :math:`M` the causal mask of the chunk
    with its diagonal. Chunk size 1 is :func:`linear_attention_recurrent`; a chunk size of n or
    more is :func:`linear_attention_quadratic` plus the state. All three are equal in exact
    arithmetic (see the module docstring for why).

    Args:
        query: the query features :math:`\phi(Q)` (..., n, d_k), applied by the caller.
        key: the key features :math:`\phi(K)` (..., n, d_k).
        value: (..., n, d_v).
        chunk_size: tokens per chunk, an int >= 1 (it need not divide n).
        normalize: divide by :math:`q_i \cdot z_i`.
        initial_state: ``(S, z)`` as in :func:`linear_attention_recurrent`.

    Returns:
        ``(output, state)``: (..., n, d_v) and the :class:`LinearAttentionState` after the last token.
    """
    _check_linear_inputs(query, key, value, initial_state)
    check_chunk_size(chunk_size)
    check_type("normalize", normalize, bool)
    S, z = _start_state(query, key, value, initial_state)  # (..., d_k, d_v), (..., d_k)
    n = query.shape[-2]
    keep = causal_mask(min(chunk_size, n), device=query.device)  # (C, C): key j <= query i inside a chunk
    outputs = []
    for c0 in range(0, n, chunk_size):
        c1 = min(c0 + chunk_size, n)
        Q, K, V = query[..., c0:c1, :], key[..., c0:c1, :], value[..., c0:c1, :]  # (..., C, d_k) twice, (..., C, d_v)
        C = c1 - c0
        A = (Q @ K.transpose(-2, -1)).masked_fill(~keep[:C, :C], 0.0)  # (..., C, d_k) @ (..., d_k, C) -> (..., C, C)
        O = Q @ S + A @ V  # (..., C, d_k) @ (..., d_k, d_v) + (..., C, C) @ (..., C, d_v) -> (..., C, d_v)
        if normalize:
            denominator = (Q @ z.unsqueeze(-1)).squeeze(-1) + A.sum(dim=-1)  # (..., C, d_k) @ (..., d_k, 1) -> (..., C)
            O = O / denominator.unsqueeze(-1)  # (..., C, d_v) / (..., C, 1)
        outputs.append(O)
        S = S + K.transpose(-2, -1) @ V  # K_c^T V_c: (..., d_k, C) @ (..., C, d_v) -> (..., d_k, d_v)
        z = z + K.sum(dim=-2)  # (..., d_k)
    if not outputs:
        return S.new_zeros(*S.shape[:-2], 0, value.shape[-1]), LinearAttentionState(S, z)
    return torch.cat(outputs, dim=-2), LinearAttentionState(S, z)  # (..., n, d_v)


# |o_i (computed) - o_i| <= gamma ((|Q||K|^T ⊙ M)|V| + |o_i| D_abs_i) / |D_i| + gamma |o_i|,   gamma = (n + d_k + 4) u
def linear_attention_rounding_bound(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, normalize: bool = True
) -> torch.Tensor:
    r"""A bound on the rounding error of each output entry of causal linear attention, in any of the three forms (chapter 14).

    Each form computes the numerator :math:`N_i = \sum_{j \le i} (q_i \cdot k_j) v_j` as sums of the
    products :math:`q_{il} k_{jl} v_{jm}` in some order (the quadratic form over :math:`l`, then
    :math:`j`; the recurrent one over :math:`j` into the state, then :math:`l`; the chunkwise one
    in between), with at most :math:`n + d_k + 4` roundings on the way to any entry. With unit
    roundoff :math:`u` (``torch.finfo(dtype).eps / 2``) and :math:`\gamma = (n + d_k + 4) u`, to first order

    .. math:: |\hat N_i - N_i| \le \gamma\, \bigl((|Q| |K|^\top \odot M) |V|\bigr)_i ,

    the denominator :math:`D_i = \sum_{j \le i} q_i \cdot k_j` likewise within
    :math:`\gamma \bar D_i`, :math:`\bar D_i = \sum_{j \le i} |q_i| \cdot |k_j|` (:math:`= D_i` for
    positive features), and the quotient adds one rounding:

    .. math:: |\hat o_i - o_i| \le \gamma\, \frac{((|Q| |K|^\top \odot M) |V|)_i + |o_i| \bar D_i}{|D_i|} + \gamma |o_i| .

    Two computations (two forms, or one form with two chunk sizes) differ by at most the sum of
    their bounds. The bound forms the (n, n) matrix: it is for checking, at test sizes.

    Args:
        query, key, value, normalize: as in :func:`linear_attention_quadratic` (``causal=True``).

    Returns:
        The bound (..., n, d_v), in the dtype of the inputs.
    """
    _check_linear_inputs(query, key, value)
    check_type("normalize", normalize, bool)
    n, d_k = query.shape[-2], query.shape[-1]
    gamma = (n + d_k + 4) * torch.finfo(query.dtype).eps / 2
    keep = causal_mask(n, device=query.device)  # (n, n)
    A_abs = (query.abs() @ key.abs().transpose(-2, -1)).masked_fill(~keep, 0.0)  # |Q||K|^T ⊙ M: (..., n, n)
    size = A_abs @ value.abs()  # (..., n, n) @ (..., n, d_v) -> (..., n, d_v)
    if not normalize:
        return gamma * size
    A = (query @ key.transpose(-2, -1)).masked_fill(~keep, 0.0)  # Q K^T ⊙ M: (..., n, d_k) @ (..., d_k, n)
    D = A.sum(dim=-1, keepdim=True).abs()  # |D_i|: (..., n, 1)
    o = (A @ value).abs() / D  # |o_i|: (..., n, n) @ (..., n, d_v) / (..., n, 1)
    return gamma * (size + o * A_abs.sum(dim=-1, keepdim=True)) / D + gamma * o  # (..., n, d_v)
