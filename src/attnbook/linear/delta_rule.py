r"""The delta rule (DeltaNet) and the gated delta rule (Qwen3-Next): a recurrent state corrected, not
only added to, one token at a time; its recurrent and chunkwise forms (chapter 14).

Linear attention adds :math:`k_t^\top v_t` to its state at every token, so a key written twice
stores the sum of both values. The delta rule (Schlag et al. 2021, *Linear transformers are secretly
fast weight programmers*) first reads what the state already stores at the key, :math:`k_t S_{t-1}`,
and writes only a step :math:`\beta_t` of the difference:

.. math::

    S_t = S_{t-1} - \beta_t\, k_t^\top (k_t S_{t-1} - v_t)
        = (I - \beta_t\, k_t^\top k_t)\, S_{t-1} + \beta_t\, k_t^\top v_t,
    \qquad o_t = q_t S_t .

Conventions (the whole wing): row convention, a token's query and key are *row* vectors
:math:`q_t, k_t \in \mathbb{R}^{1 \times d_k}` and its value :math:`v_t \in \mathbb{R}^{1 \times d_v}`;
the state :math:`S` has shape (d_k, d_v) and maps a key to a value (:math:`k S \approx v`); the output
:math:`o_t = q_t S_t` reads the state *after* token t's update. The papers (Schlag et al. 2021; Yang
et al. 2024, *Parallelizing linear transformers with the delta rule over sequence length*) write
columns and the transposed state :math:`S^\top` (d_v, d_k):
:math:`S_t = S_{t-1}(I - \beta_t k_t k_t^\top) + \beta_t v_t k_t^\top`, :math:`o_t = S_t q_t`; the
two are the same equation, transposed.

**One step of online regression.** :math:`\nabla_S \tfrac12 \|k_t S - v_t\|^2 = k_t^\top (k_t S - v_t)`,
so the update is one gradient-descent step with step size :math:`\beta_t` on the regression loss of
the current pair (:func:`delta_rule_step`). With a unit key and :math:`\beta_t = 1` the step solves
that regression exactly: :math:`k_t S_t = v_t`.

**The gated delta rule** (Yang et al. 2025, *Gated Delta Networks*; the linear layers of Qwen3-Next)
decays the state by a gate :math:`a_t = e^{\log a_t} \in (0, 1]` before the correction:

.. math::

    S_t = a_t (I - \beta_t\, k_t^\top k_t)\, S_{t-1} + \beta_t\, k_t^\top v_t .

**The chunkwise form** (Yang et al. 2024) splits the sequence into chunks of C tokens (the last may
be shorter). Inside a chunk that starts from the state :math:`S_0`, the corrections the tokens write,
:math:`\tilde u_t = \beta_t (v_t - k_t\, a_t S_{t-1})`, satisfy a unit lower-triangular system; its
solution is the WY/UT representation (see :func:`ut_transform`), and then the whole chunk is a few
matrix products: outputs :math:`O = \operatorname{diag}(b) Q S_0 + (QK^\top \odot \Gamma)\tilde U`,
next state :math:`S_C = b_C S_0 + (\operatorname{diag}(b_C / b) K)^\top \tilde U`, with
:math:`b_t = a_1 \cdots a_t` inside the chunk and :math:`\Gamma_{ij} = b_i / b_j` for j <= i (0 above),
formed in log space by :func:`attnbook.linear.decay.segment_sum`. Without gates, b = 1 and
:math:`\Gamma` is the causal mask of ones.

Shape legend: ``...`` batch dimensions (batch, heads), broadcast together; n tokens; d_k the width of
queries and keys; d_v the width of values; C the chunk size.
"""

from __future__ import annotations

import torch

from ..validators import check_beta, check_chunk_size, check_log_gates, check_shapes, check_tensor, skip_checks
from .decay import segment_sum

__all__ = [
    "delta_rule_step",
    "gated_delta_rule_step",
    "delta_rule_recurrent",
    "gated_delta_rule_recurrent",
    "ut_transform",
    "delta_rule_chunkwise",
    "gated_delta_rule_chunkwise",
]


# ---------------------------------------------------------------- argument checks


def _check(query, key, value, beta, log_gates=None, initial_state=None, *, one_token=False, gated=False) -> None:
    """The checks of every public function: shapes, one dtype and device, beta in [0, 2], gates in (0, 1]."""
    if gated:  # required (check_shapes skips a None, which would silently mean no gates)
        check_tensor("log_gate" if one_token else "log_gates", log_gates)
    if one_token:
        check_tensor("state", initial_state)  # required for one step
        check_shapes(
            state=(initial_state, "(..., d_k, d_v)"),
            query=(query, "(..., d_k)"),
            key=(key, "(..., d_k)"),
            value=(value, "(..., d_v)"),
            beta=(beta, "(...)"),
            log_gate=(log_gates, "(...)"),
        )
    else:
        check_shapes(
            query=(query, "(..., n, d_k)"),
            key=(key, "(..., n, d_k)"),
            value=(value, "(..., n, d_v)"),
            beta=(beta, "(..., n)"),
            log_gates=(log_gates, "(..., n)"),
            initial_state=(initial_state, "(..., d_k, d_v)"),
        )
    check_beta(beta)
    if log_gates is not None:  # one token's log gate may have no dimension at all: seen as (..., 1)
        check_log_gates(log_gates[..., None] if one_token else log_gates, "log_gate" if one_token else "log_gates")


def _zero_state(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, beta: torch.Tensor, *extra
) -> torch.Tensor:
    """S_0 = 0, shape (..., d_k, d_v) with the batch dimensions of all inputs broadcast."""
    batch = torch.broadcast_shapes(
        query.shape[:-2], key.shape[:-2], value.shape[:-2], beta.shape[:-1], *(x.shape[:-1] for x in extra)
    )
    return value.new_zeros(*batch, key.shape[-1], value.shape[-1])  # (..., d_k, d_v)


# ---------------------------------------------------------------- one token


def _step(
    state: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
    log_gate: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the (gated) delta rule, unchecked: decay, read, correct, output."""
    if log_gate is not None:
        state = torch.exp(log_gate)[..., None, None] * state  # a_t S_{t-1}: (..., d_k, d_v)
    prediction = (key[..., None, :] @ state)[..., 0, :]  # k_t S: (..., 1, d_k) @ (..., d_k, d_v) -> (..., d_v)
    error = prediction - value  # k_t S - v_t: (..., d_v)
    gradient = (
        key[..., :, None] @ error[..., None, :]
    )  # k_t^T (k_t S - v_t): (..., d_k, 1) @ (..., 1, d_v) -> (..., d_k, d_v)
    new_state = state - beta[..., None, None] * gradient  # (..., d_k, d_v)
    output = (query[..., None, :] @ new_state)[..., 0, :]  # q_t S_t: (..., 1, d_k) @ (..., d_k, d_v) -> (..., d_v)
    return output, new_state


def delta_rule_step(
    state: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, beta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""One token of the delta rule (chapter 14): a gradient step on the regression loss of the pair (k_t, v_t).

    .. math::

        S_t = S_{t-1} - \beta_t\, \nabla_S \tfrac12 \|k_t S - v_t\|^2 \big|_{S_{t-1}}
            = S_{t-1} - \beta_t\, k_t^\top (k_t S_{t-1} - v_t)
            = (I - \beta_t k_t^\top k_t) S_{t-1} + \beta_t k_t^\top v_t,
        \qquad o_t = q_t S_t .

    Row convention, k_t a row vector; the papers' column form :math:`S_t = S_{t-1}(I - \beta_t k_t
    k_t^\top) + \beta_t v_t k_t^\top` is its transpose (the state there is :math:`S^\top`). With a
    unit key and :math:`\beta_t = 1` the new state stores v_t at k_t exactly: :math:`k_t S_t = v_t`.

    Args:
        state: S_{t-1}, (..., d_k, d_v).
        query: q_t, (..., d_k).
        key: k_t, (..., d_k).
        value: v_t, (..., d_v).
        beta: the step size beta_t, (...), every entry in [0, 2] (see
            :func:`attnbook.validators.check_beta`: the step never amplifies the state for a unit key).

    Returns:
        ``(output, new_state)``: o_t (..., d_v) and S_t (..., d_k, d_v), batch dimensions broadcast.

    Raises:
        TypeError: a non-tensor, a non-floating dtype, or mixed dtypes.
        ValueError: shapes that do not fit the legend (a state of the wrong shape), mixed devices,
            or beta outside [0, 2].
    """
    _check(query, key, value, beta, None, state, one_token=True)
    return _step(state, query, key, value, beta, None)


def gated_delta_rule_step(
    state: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
    log_gate: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""One token of the gated delta rule (chapter 14; Yang et al. 2025, Qwen3-Next): decay, then a delta step.

    .. math::

        S_t = a_t (I - \beta_t k_t^\top k_t) S_{t-1} + \beta_t k_t^\top v_t
            = a_t S_{t-1} - \beta_t k_t^\top (k_t\, a_t S_{t-1} - v_t),
        \qquad a_t = e^{\log a_t},\quad o_t = q_t S_t .

    Args:
        state: S_{t-1}, (..., d_k, d_v).
        query, key: q_t, k_t, (..., d_k).
        value: v_t, (..., d_v).
        beta: beta_t, (...), in [0, 2].
        log_gate: log a_t, (...), in (-inf, 0] (a gate in (0, 1]).

    Returns:
        ``(output, new_state)``: o_t (..., d_v) and S_t (..., d_k, d_v).
    """
    _check(query, key, value, beta, log_gate, state, one_token=True, gated=True)
    return _step(state, query, key, value, beta, log_gate)


# ---------------------------------------------------------------- the recurrent form


def _recurrent(query, key, value, beta, log_gates, initial_state) -> tuple[torch.Tensor, torch.Tensor]:
    """The token loop, unchecked: S_t from S_{t-1} for t = 1..n, o_t = q_t S_t."""
    state = initial_state
    if state is None:
        state = _zero_state(query, key, value, beta, *(() if log_gates is None else (log_gates,)))
    outputs = []
    for t in range(query.shape[-2]):
        log_gate = None if log_gates is None else log_gates[..., t]  # (...,)
        output, state = _step(state, query[..., t, :], key[..., t, :], value[..., t, :], beta[..., t], log_gate)
        outputs.append(output)  # (..., d_v)
    if not outputs:  # n = 0: no output, the state unchanged
        batch = torch.broadcast_shapes(state.shape[:-2], query.shape[:-2], value.shape[:-2])
        return value.new_zeros(*batch, 0, value.shape[-1]), state
    return torch.stack(outputs, dim=-2), state  # (..., n, d_v), (..., d_k, d_v)


def delta_rule_recurrent(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
    *,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The delta rule in its recurrent form (chapter 14): a (d_k, d_v) state updated token by token.

    .. math::

        S_t = (I - \beta_t k_t^\top k_t) S_{t-1} + \beta_t k_t^\top v_t, \qquad o_t = q_t S_t,
        \qquad t = 1, \dots, n,

    from :math:`S_0` = ``initial_state`` (zeros by default). Row convention (the papers' column form
    :math:`S_t = S_{t-1}(I - \beta_t k_t k_t^\top) + \beta_t v_t k_t^\top` transposed). Memory per
    token is the state, whatever n.

    Args:
        query: (..., n, d_k).
        key: (..., n, d_k); DeltaNet normalises keys to unit length, the formula does not require it.
        value: (..., n, d_v).
        beta: (..., n), every entry in [0, 2].
        initial_state: S_0, (..., d_k, d_v), or None for zeros. Continuing from the state a call
            returned gives the same outputs as one call on the concatenated sequence.

    Returns:
        ``(output, state)``: o (..., n, d_v) and the final state S_n (..., d_k, d_v).

    Raises:
        TypeError: a non-tensor, a non-floating dtype, or mixed dtypes.
        ValueError: shapes that do not fit the legend (a state of the wrong shape), mixed devices,
            or beta outside [0, 2].
    """
    _check(query, key, value, beta, None, initial_state)
    return _recurrent(query, key, value, beta, None, initial_state)


def gated_delta_rule_recurrent(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
    log_gates: torch.Tensor,
    *,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The gated delta rule in its recurrent form (chapter 14; Gated DeltaNet, Qwen3-Next's linear layers).

    .. math::

        S_t = a_t (I - \beta_t k_t^\top k_t) S_{t-1} + \beta_t k_t^\top v_t, \qquad a_t = e^{\log a_t},
        \qquad o_t = q_t S_t .

    All gates 1 (``log_gates`` = 0) give :func:`delta_rule_recurrent`.

    Args:
        query, key: (..., n, d_k).
        value: (..., n, d_v).
        beta: (..., n), in [0, 2].
        log_gates: log a_t, (..., n), in (-inf, 0] (gates in (0, 1]).
        initial_state: S_0, (..., d_k, d_v), or None for zeros.

    Returns:
        ``(output, state)``: o (..., n, d_v) and S_n (..., d_k, d_v).

    Raises:
        TypeError, ValueError: as :func:`delta_rule_recurrent`, and for a log gate that is positive,
        -inf or NaN (:func:`attnbook.validators.check_log_gates`).
    """
    _check(query, key, value, beta, log_gates, initial_state, gated=True)
    return _recurrent(query, key, value, beta, log_gates, initial_state)


# ---------------------------------------------------------------- the chunkwise form


def ut_transform(key: torch.Tensor, beta: torch.Tensor, decay: torch.Tensor | None = None) -> torch.Tensor:
    r"""The UT transform of one chunk (chapter 14; Yang et al. 2024): the matrix T with W = T K, U = T V.

    .. math::

        T = \bigl(I + \operatorname{tril}(\operatorname{diag}(\beta)\,(K K^\top \odot \Gamma), -1)\bigr)^{-1}
            \operatorname{diag}(\beta),

    with :math:`\Gamma` the chunk's decay matrix (:math:`\Gamma_{ij} = a_{j+1} \cdots a_i` for j <= i;
    all ones without gates). Why: the correction token i writes,
    :math:`\tilde u_i = \beta_i (v_i - k_i\, a_i S_{i-1})`, expands (with :math:`S_{i-1}` written
    through the earlier corrections of the chunk) into
    :math:`\tilde u_i + \beta_i \sum_{j<i} \Gamma_{ij} (k_i \cdot k_j)\, \tilde u_j = \beta_i (v_i - b_i k_i S_0)`,
    a unit lower-triangular system; so :math:`\tilde U = T V - T \operatorname{diag}(b) K\, S_0`.
    The inverse is never formed: T is the solution of the triangular system with right-hand side
    :math:`\operatorname{diag}(\beta)`, by ``torch.linalg.solve_triangular(..., upper=False,
    unitriangular=True)`` (forward substitution: row i of T from the rows above it; the diagonal
    is 1, so there is no division and the system is always solvable).

    Args:
        key: K, (..., C, d_k).
        beta: (..., C), in [0, 2].
        decay: :math:`\Gamma`, (..., C, C), lower triangular, or None for ones (the ungated rule).

    Returns:
        T, (..., C, C), lower triangular.
    """
    check_shapes(key=(key, "(..., C, d_k)"), beta=(beta, "(..., C)"), decay=(decay, "(..., C, C)"))
    check_beta(beta)
    return _ut_transform(key, beta, decay)


def _ut_transform(key, beta, decay):
    gram = key @ key.transpose(-2, -1)  # K K^T: (..., C, d_k) @ (..., d_k, C) -> (..., C, C)
    if decay is not None:
        gram = gram * decay  # K K^T ⊙ Γ: (..., C, C)
    lower = torch.tril(beta[..., :, None] * gram, diagonal=-1)  # tril(diag(β) K K^T ⊙ Γ, -1): (..., C, C)
    eye = torch.eye(key.shape[-2], dtype=key.dtype, device=key.device)  # (C, C)
    system = eye + lower  # (..., C, C), unit lower triangular
    rhs = torch.diag_embed(beta).expand(system.shape)  # diag(β): (..., C, C)
    return torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)  # (..., C, C)


def _chunkwise(query, key, value, beta, log_gates, chunk_size, initial_state) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk loop, unchecked: the WY/UT form inside each chunk, the state carried across chunks."""
    state = initial_state
    if state is None:
        state = _zero_state(query, key, value, beta, *(() if log_gates is None else (log_gates,)))
    n = query.shape[-2]
    outputs = []
    for start in range(0, n, chunk_size):  # the last chunk holds n - start < chunk_size tokens when C does not divide n
        end = min(start + chunk_size, n)
        q, k, v, b = query[..., start:end, :], key[..., start:end, :], value[..., start:end, :], beta[..., start:end]
        c = end - start
        if log_gates is None:
            decay = torch.ones(c, c, dtype=q.dtype, device=q.device).tril()  # Γ: the causal mask of ones, (C, C)
            to_start = torch.ones(c, dtype=q.dtype, device=q.device)  # b_t = 1: (C,)
            to_end = to_start  # b_C / b_t = 1: (C,)
            whole = torch.ones((), dtype=q.dtype, device=q.device)  # b_C = 1
        else:
            log_a = log_gates[..., start:end]  # (..., C)
            with skip_checks():  # the log gates were checked once, at the entry point
                segments = segment_sum(log_a)  # log a_{j+1} + ... + log a_i for j <= i, -inf above: (..., C, C)
            decay = torch.exp(segments)  # Γ_ij = a_{j+1} ... a_i = b_i / b_j for j <= i, 0 above: (..., C, C)
            log_b = torch.cumsum(log_a, dim=-1)  # log b_t = log a_1 + ... + log a_t: (..., C)
            to_start = torch.exp(log_b)  # b_t: (..., C)
            to_end = torch.exp(segments[..., -1, :])  # b_C / b_t = a_{t+1} ... a_C: (..., C)
            whole = torch.exp(log_b[..., -1])  # b_C: (...,)
        T = _ut_transform(k, b, decay)  # (..., C, C)
        W = T @ (to_start[..., :, None] * k)  # T diag(b) K: (..., C, C) @ (..., C, d_k) -> (..., C, d_k)
        U = T @ v  # T V: (..., C, C) @ (..., C, d_v) -> (..., C, d_v)
        corrections = U - W @ state  # Ũ = U - W S_0: (..., C, d_k) @ (..., d_k, d_v) -> (..., C, d_v)
        scores = (q @ k.transpose(-2, -1)) * decay  # Q K^T ⊙ Γ: (..., C, d_k) @ (..., d_k, C) -> (..., C, C)
        from_state = to_start[..., :, None] * (
            q @ state
        )  # diag(b) Q S_0: (..., C, d_k) @ (..., d_k, d_v) -> (..., C, d_v)
        outputs.append(from_state + scores @ corrections)  # (..., C, C) @ (..., C, d_v) -> (..., C, d_v)
        written = (to_end[..., :, None] * k).transpose(
            -2, -1
        ) @ corrections  # (..., d_k, C) @ (..., C, d_v) -> (..., d_k, d_v)
        state = whole[..., None, None] * state + written  # S_C = b_C S_0 + (diag(b_C / b) K)^T Ũ: (..., d_k, d_v)
    if not outputs:  # n = 0
        batch = torch.broadcast_shapes(state.shape[:-2], query.shape[:-2], value.shape[:-2])
        return value.new_zeros(*batch, 0, value.shape[-1]), state
    batch = state.shape[:-2]
    outputs = [o.expand(*batch, *o.shape[-2:]) for o in outputs]  # every chunk with the full batch dimensions
    return torch.cat(outputs, dim=-2), state  # (..., n, d_v), (..., d_k, d_v)


def delta_rule_chunkwise(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
    chunk_size: int,
    *,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The delta rule in its chunkwise form (chapter 14; Yang et al. 2024): quadratic inside a chunk,
    recurrent across chunks, through the WY/UT representation. Equal to :func:`delta_rule_recurrent`.

    For each chunk of C tokens (Q, K, V, beta its rows; the last chunk is shorter when C does not divide
    n) starting from the state :math:`S_0`:

    .. math::

        T &= \bigl(I + \operatorname{tril}(\operatorname{diag}(\beta) K K^\top, -1)\bigr)^{-1}
             \operatorname{diag}(\beta) \quad (:func:`ut_transform`), \qquad W = T K, \quad U = T V, \\
        \tilde U &= U - W S_0 \quad \text{(the corrections the tokens write)}, \\
        O &= Q S_0 + \operatorname{tril}(Q K^\top)\, \tilde U, \qquad S_C = S_0 + K^\top \tilde U .

    (Equivalently :math:`S_C = (I - K^\top W) S_0 + K^\top U`: :math:`I - K^\top W` is the product
    :math:`\prod_t (I - \beta_t k_t^\top k_t)` of the chunk, the WY representation.) Row convention,
    k_t rows; the papers' column form is the transpose.

    Args:
        query: (..., n, d_k).
        key: (..., n, d_k).
        value: (..., n, d_v).
        beta: (..., n), in [0, 2].
        chunk_size: C >= 1 tokens per chunk (1 is the recurrence; C >= n one quadratic chunk).
        initial_state: S_0, (..., d_k, d_v), or None for zeros.

    Returns:
        ``(output, state)``: o (..., n, d_v) and S_n (..., d_k, d_v).

    Raises:
        TypeError, ValueError: as :func:`delta_rule_recurrent`, and for a chunk size that is not an int >= 1.
    """
    check_chunk_size(chunk_size)
    _check(query, key, value, beta, None, initial_state)
    return _chunkwise(query, key, value, beta, None, chunk_size, initial_state)


def gated_delta_rule_chunkwise(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
    log_gates: torch.Tensor,
    chunk_size: int,
    *,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The gated delta rule in its chunkwise form (chapter 14; the form Qwen3-Next runs). Equal to
    :func:`gated_delta_rule_recurrent`.

    Inside a chunk, :math:`b_t = a_1 \cdots a_t` (from the chunk's start) and
    :math:`\Gamma_{ij} = b_i / b_j = \exp(\sum_{s=j+1}^{i} \log a_s)` for j <= i, 0 above
    (:func:`attnbook.linear.decay.segment_sum`, in log space):

    .. math::

        T &= \bigl(I + \operatorname{tril}(\operatorname{diag}(\beta)(K K^\top \odot \Gamma), -1)\bigr)^{-1}
             \operatorname{diag}(\beta), \qquad W = T \operatorname{diag}(b) K, \quad U = T V, \\
        \tilde U &= U - W S_0, \qquad
        O = \operatorname{diag}(b)\, Q S_0 + (Q K^\top \odot \Gamma)\, \tilde U, \qquad
        S_C = b_C S_0 + (\operatorname{diag}(b_C / b) K)^\top \tilde U .

    Args:
        query, key: (..., n, d_k).
        value: (..., n, d_v).
        beta: (..., n), in [0, 2].
        log_gates: log a_t, (..., n), in (-inf, 0].
        chunk_size: C >= 1 tokens per chunk.
        initial_state: S_0, (..., d_k, d_v), or None for zeros.

    Returns:
        ``(output, state)``: o (..., n, d_v) and S_n (..., d_k, d_v).
    """
    check_chunk_size(chunk_size)
    _check(query, key, value, beta, log_gates, initial_state, gated=True)
    return _chunkwise(query, key, value, beta, log_gates, chunk_size, initial_state)
