r"""Decay and gates as a structured mask: the state-space duality of Mamba-2 (chapter 14).

A gate :math:`a_t \in (0, 1]` per token (and per head, through the batch dimensions) makes the
state of linear attention forget: the *gated* recurrence is

.. math:: S_t = a_t S_{t-1} + k_t^\top v_t, \qquad o_t = q_t S_t .

A constant gate :math:`a_t = \gamma` is RetNet's decay; a gate computed from the token
(:math:`a_t = e^{-\Delta_t A}` with :math:`\Delta_t > 0`) is Mamba-2's scalar gate. Unrolled,
:math:`S_i = \sum_{j \le i} (a_{j+1} \cdots a_i)\, k_j^\top v_j`, so

.. math:: o_i = \sum_{j \le i} L_{ij}\, (q_i \cdot k_j)\, v_j, \qquad
          L_{ij} = \prod_{t = j+1}^{i} a_t \;\; (j \le i), \qquad L_{ij} = 0 \;\; (j > i),

that is :math:`O = (Q K^\top \odot L) V`: **the recurrence equals a masked quadratic form**, with
the causal 0/1 mask replaced by the decay mask :math:`L` (the state-space duality). :math:`L` is
1-semiseparable: every submatrix on or below its diagonal has rank at most 1, since
:math:`L_{ij} = P_i / P_j` with :math:`P_i = a_0 \cdots a_i`. The diagonal is :math:`L_{ii} = 1`
(the empty product): token i's own key enters undecayed, as in the recurrence.

**Forming L safely.** The ratio :math:`P_i / P_j` is the unsafe way
(:func:`decay_mask_linear_space`): :math:`P_i` underflows for long sequences (in float32, a gate
of 0.5 gives :math:`P_{149} = 2^{-150}`, rounded to 0), and :math:`0 / 0` is ``nan`` where the true
entry is a modest number. The safe way works with the log gates :math:`\log a_t \le 0`: the
*segment sum* :math:`\sum_{t=j+1}^{i} \log a_t` (:func:`segment_sum`), then one exponential
(:func:`decay_mask`). The segment sum is computed as in Mamba-2's minimal code: the log gates are
copied into every column, zeroed on and above the diagonal, and summed down the columns, so each
entry is a sum of exactly its own terms (:math:`t = j+1, \dots, i`). The difference of two prefix
sums :math:`c_i - c_j` would give the same number in exact arithmetic but subtract two large
numbers in floating point (an absolute error of about :math:`\epsilon |c_i|`, large far into a
long sequence however short the segment); the sum of its own terms has no cancellation (all
terms are <= 0), so its relative error is at most :math:`(i - j - 1)\epsilon` (:math:`\epsilon` the dtype's eps), and it is exact
whenever the partial sums are representable (integers, or multiples of a power of two, as in the
tests).

The three forms of :mod:`attnbook.linear.linear_attention` carry over, gates included:
:func:`gated_linear_attention_quadratic`, :func:`gated_linear_attention_recurrent` and
:func:`gated_linear_attention_chunkwise` (quadratic inside a chunk with the chunk's own decay
mask, the state decayed across chunks). They have no normaliser: gated layers normalise their
output elsewhere. The features :math:`\phi(q), \phi(k)` are applied by the caller, as there.
The state is the tensor ``S`` (..., d_k, d_v) alone.

Shape legend: ``...`` batch dimensions (batch, heads), broadcast together, the log gates' included;
``n`` tokens; ``d_k`` width of queries and keys; ``d_v`` width of the values.
"""

from __future__ import annotations

import math

import torch

from ..core.masks import causal_mask
from ..validators import check_chunk_size, check_gates, check_log_gates, check_shapes


def _segment_sum(log_gates: torch.Tensor) -> torch.Tensor:
    """:func:`segment_sum` without the checks (the chunkwise form calls it once per chunk)."""
    n = log_gates.shape[-1]
    x = log_gates.unsqueeze(-1).expand(*log_gates.shape, n)  # (..., n) -> (..., n, n): entry (t, j) = log a_t
    below = torch.ones(n, n, dtype=torch.bool, device=log_gates.device).tril(-1)  # (n, n): t > j
    x = x.masked_fill(~below, 0.0)  # (..., n, n): log a_t where t > j, else 0
    sums = x.cumsum(dim=-2)  # (..., n, n): entry (i, j) = sum_{j < t <= i} log a_t, each a sum of its own terms
    return sums.masked_fill(~causal_mask(n, device=log_gates.device), -math.inf)  # -inf above the diagonal


# segsum(log a)_ij = sum_{t=j+1}^{i} log a_t  (j <= i),   -inf  (j > i)
def segment_sum(log_gates: torch.Tensor) -> torch.Tensor:
    r"""The segment sums of the log gates, :math:`\sum_{t=j+1}^{i} \log a_t` below the diagonal (chapter 14).

    .. math:: \operatorname{segsum}(\log a)_{ij} = \begin{cases}
              \sum_{t=j+1}^{i} \log a_t & j \le i \\ -\infty & j > i \end{cases}

    The diagonal is 0 (an empty sum). Each entry is computed as a sum of exactly its own terms
    (Mamba-2's ``segsum``: the gates copied into every column, zeroed on and above the diagonal,
    then summed down the columns), never as a difference of two prefix sums, which would cancel:
    see the module docstring. Exact when every partial sum is representable; otherwise each entry
    is within a relative :math:`(i - j - 1)\epsilon` of the true sum. The first gate :math:`a_0`
    appears in no entry (it would decay a state from before the sequence).

    Args:
        log_gates: :math:`\log a_t` (..., n), every entry in (-inf, 0] (gates in (0, 1]).

    Returns:
        (..., n, n), in the dtype and on the device of ``log_gates``.
    """
    check_log_gates(log_gates)
    return _segment_sum(log_gates)


# L_ij = exp(segsum(log a)_ij) = prod_{t=j+1}^{i} a_t  (j <= i),   0  (j > i)
def decay_mask(log_gates: torch.Tensor) -> torch.Tensor:
    r"""The decay mask :math:`L_{ij} = \prod_{t=j+1}^{i} a_t`, formed in log space (chapter 14).

    .. math:: L = \exp(\operatorname{segsum}(\log a)), \qquad
              L_{ij} = \prod_{t=j+1}^{i} a_t \;\; (j \le i), \qquad L_{ij} = 0 \;\; (j > i)

    The lower-triangular, 1-semiseparable mask whose masked quadratic form equals the gated
    recurrence, :math:`(Q K^\top \odot L) V` (:func:`gated_linear_attention_quadratic`). Ones on
    the diagonal; an entry far below it may underflow to 0, which is its correctly rounded value,
    never ``nan`` (compare :func:`decay_mask_linear_space`).

    Args:
        log_gates: :math:`\log a_t` (..., n), every entry in (-inf, 0].

    Returns:
        (..., n, n), entries in [0, 1].
    """
    check_log_gates(log_gates)
    return torch.exp(_segment_sum(log_gates))  # exp(-inf) = 0 above the diagonal


# L_ij = P_i / P_j,  P_i = a_0 a_1 ... a_i   (the unsafe way: P underflows)
def decay_mask_linear_space(gates: torch.Tensor) -> torch.Tensor:
    r"""The decay mask as ratios of cumulative products of the gates: **the counterexample**, unsafe (chapter 14).

    .. math:: P_i = \prod_{t=0}^{i} a_t, \qquad L_{ij} = P_i / P_j \;\; (j \le i), \qquad L_{ij} = 0 \;\; (j > i)

    Equal to :func:`decay_mask` in exact arithmetic, and wrong in floating point for long
    sequences: once :math:`P_i` underflows to 0 (in float32 below about :math:`1.4 \times 10^{-45}`;
    with every gate 0.5 that happens at :math:`i = 149`), every entry with both :math:`i` and
    :math:`j` past that point is :math:`0 / 0 =` ``nan``, the diagonal included, where the true
    entries lie in (0, 1]; an entry with :math:`j` before it is :math:`0 / P_j = 0` where the true
    one may be 1/2; and while :math:`P_j` is subnormal the ratios lose their precision. In
    float64 the same happens later (every gate 0.5: at :math:`i = 1074`). It is here to be shown
    failing; use :func:`decay_mask`.

    Args:
        gates: :math:`a_t` (..., n), every entry in (0, 1].

    Returns:
        (..., n, n).
    """
    check_gates(gates)
    n = gates.shape[-1]
    P = gates.cumprod(dim=-1)  # (..., n): P_i = a_0 ... a_i
    L = P.unsqueeze(-1) / P.unsqueeze(-2)  # (..., n, 1) / (..., 1, n) -> (..., n, n): P_i / P_j
    return L.masked_fill(~causal_mask(n, device=gates.device), 0.0)  # 0 above the diagonal


def _check_gated_inputs(
    query: object, key: object, value: object, log_gates: object, initial_state: object = None
) -> None:
    """The checks of the three gated forms: shapes, dtypes, devices, the gates' values and a state S."""
    if initial_state is not None and not isinstance(initial_state, torch.Tensor):
        raise TypeError(
            f"initial_state must be the state S (..., d_k, d_v) that a previous call returned (gated linear "
            f"attention keeps no normaliser), got {type(initial_state).__name__}"
        )
    check_shapes(
        query=(query, "(..., n, d_k)"),
        key=(key, "(..., n, d_k)"),
        value=(value, "(..., n, d_v)"),
        log_gates=(log_gates, "(..., n)"),
        initial_state=(initial_state, "(..., d_k, d_v)"),
    )
    check_log_gates(log_gates)


def _start_state(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, log_gates: torch.Tensor, S: torch.Tensor | None
) -> torch.Tensor:
    """The state before the first token, with the batch dimensions of every input (zeros, or ``S``)."""
    shapes = [query.shape[:-2], key.shape[:-2], value.shape[:-2], log_gates.shape[:-1]]
    if S is not None:
        shapes.append(S.shape[:-2])
    batch = torch.broadcast_shapes(*shapes)
    d_k, d_v = query.shape[-1], value.shape[-1]
    if S is None:
        return torch.zeros(*batch, d_k, d_v, dtype=query.dtype, device=query.device)  # (..., d_k, d_v)
    return S.expand(*batch, d_k, d_v)  # (..., d_k, d_v)


# O = (Q K^T ⊙ L) V,   L = decay_mask(log a)
def gated_linear_attention_quadratic(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, log_gates: torch.Tensor
) -> torch.Tensor:
    r"""Gated linear attention in its masked quadratic form, with the decay mask in place of the causal one (chapter 14).

    .. math:: O = (Q K^\top \odot L)\, V, \qquad L_{ij} = \prod_{t=j+1}^{i} a_t \;\; (j \le i), \quad 0 \;\; (j > i)

    :math:`L` is :func:`decay_mask` (formed in log space). With every gate 1 it is the causal mask
    and this is :func:`attnbook.linear.linear_attention.linear_attention_quadratic` with
    ``normalize=False``. Equal to :func:`gated_linear_attention_recurrent` (the state-space
    duality; see the module docstring).

    Args:
        query: the query features (..., n, d_k), applied by the caller.
        key: the key features (..., n, d_k).
        value: (..., n, d_v).
        log_gates: :math:`\log a_t` (..., n), every entry in (-inf, 0]; a constant is RetNet's
            decay, a per-token one Mamba-2's gate. Per head through the batch dimensions, e.g.
            (batch, heads, n) for queries (batch, heads, n, d_k).

    Returns:
        The output (..., n, d_v), batch dimensions broadcast.
    """
    _check_gated_inputs(query, key, value, log_gates)
    L = torch.exp(_segment_sum(log_gates))  # (..., n, n): the decay mask
    A = (query @ key.transpose(-2, -1)) * L  # Q K^T ⊙ L: (..., n, d_k) @ (..., d_k, n) -> (..., n, n)
    return A @ value  # (..., n, n) @ (..., n, d_v) -> (..., n, d_v)


# S_t = a_t S_{t-1} + k_t^T v_t,   o_t = q_t S_t
def gated_linear_attention_recurrent(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    log_gates: torch.Tensor,
    *,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Gated linear attention as a recurrence: the state decays by the gate, then takes the token (chapter 14).

    .. math:: S_t = a_t S_{t-1} + k_t^\top v_t, \qquad o_t = q_t S_t, \qquad a_t = e^{\log a_t}

    from :math:`S_{-1} = 0` or ``initial_state`` (the state after the tokens before these; the
    first gate :math:`a_0` decays it). Equal to :func:`gated_linear_attention_quadratic` in
    exact arithmetic.

    Args:
        query, key, value, log_gates: as in :func:`gated_linear_attention_quadratic`.
        initial_state: S (..., d_k, d_v), as a previous call returned it; None for zeros.

    Returns:
        ``(output, S)``: the output (..., n, d_v) and the state (..., d_k, d_v) after the last token.
    """
    _check_gated_inputs(query, key, value, log_gates, initial_state)
    S = _start_state(query, key, value, log_gates, initial_state)  # (..., d_k, d_v)
    gates = torch.exp(log_gates)  # (..., n): a_t in (0, 1]
    outputs = []
    for t in range(query.shape[-2]):
        q_t, k_t, v_t = query[..., t, :], key[..., t, :], value[..., t, :]  # (..., d_k), (..., d_k), (..., d_v)
        a_t = gates[..., t, None, None]  # (..., 1, 1)
        S = a_t * S + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)  # a_t S + k_t^T v_t: (..., d_k, 1) * (..., 1, d_v)
        outputs.append((q_t.unsqueeze(-2) @ S).squeeze(-2))  # q_t S_t: (..., 1, d_k) @ (..., d_k, d_v) -> (..., d_v)
    if not outputs:
        return S.new_zeros(*S.shape[:-2], 0, value.shape[-1]), S
    return torch.stack(outputs, dim=-2), S  # (..., n, d_v)


# O_c = exp(b) ⊙ (Q_c S) + (Q_c K_c^T ⊙ L_c) V_c,   S <- exp(b_last) S + (w ⊙ K_c)^T V_c
def gated_linear_attention_chunkwise(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    log_gates: torch.Tensor,
    chunk_size: int,
    *,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Gated linear attention chunk by chunk: the decay mask inside a chunk, the decayed state across (chapter 14).

    For each chunk of ``chunk_size`` tokens :math:`c_0 \le i < c_1` (the last may be shorter), with
    :math:`S` the state before it and :math:`g_t = \log a_t`:

    .. math:: b_i = \sum_{t=c_0}^{i} g_t, \qquad
              w_j = e^{\operatorname{segsum}(g_c)_{c_1 - 1, j}} = \prod_{t=j+1}^{c_1 - 1} a_t,

    .. math:: O_c = e^{b} \odot (Q_c S) + (Q_c K_c^\top \odot L_c) V_c, \qquad
              S \leftarrow e^{b_{c_1 - 1}} S + (w \odot K_c)^\top V_c,

    where :math:`L_c` is the :func:`decay_mask` of the chunk's own gates, :math:`e^{b_i}` decays the
    state from before the chunk to token :math:`i` (gate :math:`a_{c_0}` included) and :math:`w_j`
    decays key :math:`j` to the end of the chunk. Every factor is an exponential of a sum of
    log gates of one sign, computed without cancellation (:func:`segment_sum`); no product of
    gates is formed in linear space. Chunk size 1 is the recurrence; n or more the quadratic form.

    Args:
        query, key, value, log_gates: as in :func:`gated_linear_attention_quadratic`.
        chunk_size: tokens per chunk, an int >= 1 (it need not divide n).
        initial_state: S (..., d_k, d_v), as in :func:`gated_linear_attention_recurrent`.

    Returns:
        ``(output, S)``: (..., n, d_v) and the state (..., d_k, d_v) after the last token.
    """
    _check_gated_inputs(query, key, value, log_gates, initial_state)
    check_chunk_size(chunk_size)
    S = _start_state(query, key, value, log_gates, initial_state)  # (..., d_k, d_v)
    n = query.shape[-2]
    outputs = []
    for c0 in range(0, n, chunk_size):
        c1 = min(c0 + chunk_size, n)
        Q, K, V = query[..., c0:c1, :], key[..., c0:c1, :], value[..., c0:c1, :]  # (..., C, d_k) twice, (..., C, d_v)
        g = log_gates[..., c0:c1]  # (..., C)
        segsum = _segment_sum(g)  # (..., C, C): sum_{j < t <= i} g_t, -inf above the diagonal
        b = g.cumsum(dim=-1)  # (..., C): b_i = sum_{c0 <= t <= i} g_t
        w = torch.exp(segsum[..., -1, :])  # (..., C): prod_{j < t < c1} a_t, key j decayed to the chunk's end
        A = (Q @ K.transpose(-2, -1)) * torch.exp(segsum)  # Q_c K_c^T ⊙ L_c: (..., C, d_k) @ (..., d_k, C)
        O = torch.exp(b).unsqueeze(-1) * (Q @ S) + A @ V  # (..., C, 1) * (..., C, d_v) + (..., C, C) @ (..., C, d_v)
        outputs.append(O)
        decayed = torch.exp(b[..., -1, None, None]) * S  # (..., 1, 1) * (..., d_k, d_v)
        S = decayed + (w.unsqueeze(-1) * K).transpose(-2, -1) @ V  # (w ⊙ K_c)^T V_c: (..., d_k, C) @ (..., C, d_v)
    if not outputs:
        return S.new_zeros(*S.shape[:-2], 0, value.shape[-1]), S
    return torch.cat(outputs, dim=-2), S  # (..., n, d_v)


# |o_i (computed) - o_i| <= u ((|Q||K|^T ⊙ L ⊙ (n + d_k + 6 + n (|segsum| + 2))) |V|)_i
def gated_linear_attention_rounding_bound(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, log_gates: torch.Tensor
) -> torch.Tensor:
    r"""A bound on the rounding error of each output entry of gated linear attention, in any of the three forms (chapter 14).

    As :func:`attnbook.linear.linear_attention.linear_attention_rounding_bound` (numerator only),
    with one more source of error: the decay :math:`L_{ij}` of each pair. The recurrence forms it
    as a product of :math:`i - j` rounded gates (relative error :math:`2(i - j)u`); the quadratic
    and chunkwise forms as exponentials of sums of at most :math:`n` log gates of one sign
    (relative error :math:`n u |s_{ij}|` in :math:`e^{s_{ij}}`, :math:`s_{ij} = \operatorname{segsum}(\log a)_{ij}`)
    times one rounding per exponential and per chunk. To first order in the unit roundoff :math:`u`,

    .. math:: |\hat o_i - o_i| \le u \Bigl(\bigl(|Q| |K|^\top \odot L \odot
              (n + d_k + 6 + n (|s| + 2))\bigr) |V|\Bigr)_i .

    Two computations differ by at most the sum of their bounds. Forms (n, n) matrices: for
    checking, at test sizes.

    Args:
        query, key, value, log_gates: as in :func:`gated_linear_attention_quadratic`.

    Returns:
        The bound (..., n, d_v), in the dtype of the inputs.
    """
    _check_gated_inputs(query, key, value, log_gates)
    n, d_k = query.shape[-2], query.shape[-1]
    u = torch.finfo(query.dtype).eps / 2
    s = _segment_sum(log_gates)  # (..., n, n), -inf above the diagonal
    relative = (n + d_k + 6 + n * (s.abs() + 2)).masked_fill(s == -math.inf, 0.0)  # (..., n, n), 0 where L = 0
    A = (query.abs() @ key.abs().transpose(-2, -1)) * torch.exp(s) * relative  # (..., n, d_k) @ (..., d_k, n)
    return u * (A @ value.abs())  # (..., n, n) @ (..., n, d_v) -> (..., n, d_v)
