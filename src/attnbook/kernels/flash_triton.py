r"""FlashAttention-2, forward and backward, as Triton kernels (chapter 11).

The same algorithm as :mod:`attnbook.kernels.flash_attention`, with the same names (``q_i``,
``k_j``, ``s_ij``, ``m_i``, ``l_i``, ``acc``, ``p_ij``, ``D``, ``dv_j``, ``dk_j``, ...), written as four
GPU kernels: the forward kernel follows the PyTorch forward loop line by line; the backward loop
is split into three kernels. One *program* (a block of GPU threads) computes one block of rows;
the loop over blocks that the PyTorch version writes in Python is the launch grid here, and the
inner loop is a loop inside the kernel:

* :func:`flash_forward_kernel`, one program per (query block, batch entry): loads its tile
  ``q_i``, loops over the key tiles with the online softmax, stores ``O_i`` and ``L_i``;
* :func:`flash_backward_preprocess_kernel`, one program per (query block, batch entry):
  ``D = rowsum(dO o O)``;
* :func:`flash_backward_dkdv_kernel`, one program per (key block, batch entry): loops over the
  query blocks, rebuilds each tile ``p_ij = exp(s_ij - L_i)`` and accumulates ``dk_j`` and ``dv_j``;
* :func:`flash_backward_dq_kernel`, one program per (query block, batch entry): loops over the
  key blocks and accumulates ``dq_i``. FlashAttention-2 may instead add each tile's share of dQ
  into memory with atomic adds from the dK/dV kernel; a separate kernel recomputes the tiles of
  P and dS once more but is deterministic (no floating-point sums in a race-dependent order)
  and runs in Triton's interpreter. Triton's fused-attention tutorial computes dQ in a loop of
  its own the same way, and Stanford's CS336 (assignment 2) suggests it. The price: 7 matrix
  products per tile in the backward pass (4 in the dK/dV kernel, 3 in the dQ kernel) against
  the forward pass's 2, where the PyTorch loops' backward pass does 5.

Causal tiles are skipped as in the PyTorch version (:func:`attnbook.kernels.key_blocks_end` and
:func:`attnbook.kernels.query_blocks_start` are the loop bounds). Ragged edges (n or m not a
multiple of the block, the head widths padded to a power of two, at least 16, for
``tl.arange`` and ``tl.dot``) are handled by masked loads and stores (``other=0``) and by
``-inf`` scores on the keys past m.

Triton is imported lazily, when a kernel first runs, not when :mod:`attnbook` is imported:

* on a machine without CUDA, if the environment variable ``TRITON_INTERPRET`` is unset, it is
  set to ``1`` when this module is imported (triton reads it when it is itself imported, and
  some of torch's own tools import it), so that the kernels run in Triton's interpreter (numpy,
  one program after another; slow, for small sizes and for teaching). If triton was imported
  before, in compiled mode, the first launch raises a ``RuntimeError`` that says so;
* with CUDA, the kernels are compiled for the GPU, unless ``TRITON_INTERPRET=1`` was set by the user;
* the decorator :func:`kernel` marks a function as a Triton kernel: the first launch replaces
  it in this module by ``triton.jit(fn)`` (the interpreter or the compiler is chosen at that
  moment, from ``TRITON_INTERPRET``);
* without the ``triton`` package, :class:`FlashAttentionTriton` raises an ``ImportError`` that
  says to ``pip install triton`` (or ``pip install "attnbook[test]"``).

Dtypes: compiled on CUDA, float16, bfloat16 and float32 (``tl.dot`` in IEEE float32, no TF32).
In the interpreter, float16, float32 and float64: its ``tl.dot`` is ``numpy.matmul`` in the
accumulator's dtype (``tl.dot`` accepts float64 operands and then returns float64). numpy has no
bfloat16, and with triton 3.9 the interpreter's ``tl.dot`` of bfloat16 tiles gave wrong numbers
(outputs off by 1e8), so bfloat16 is refused there with a ``TypeError``. The running statistics
and accumulators are float32 (float64 for float64 inputs); L is stored in that dtype; O, dQ, dK
and dV in the input dtype. In the interpreter the scale is a Python float (float64); compiled
it is a float32 kernel argument.

Shape legend: ``...`` batch dimensions, flattened to one axis ``bh`` (batch times heads) for
the kernels; ``n`` queries, ``m`` keys, ``d_k`` and ``d_v`` the head widths, padded to
``BLOCK_DK`` and ``BLOCK_DV``; ``BLOCK_Q`` and ``BLOCK_K`` the rows of a query and of a key block.
"""

from __future__ import annotations

import math
import os

import torch

from ..validators import check_number, check_sizes
from .attention_backward import _check_same_batch
from .flash_attention import _accumulation_dtype, _check_flash_inputs, _check_lse

__all__ = [
    "FlashAttentionTriton",
    "flash_attention_triton",
    "flash_triton_backward",
    "flash_triton_forward",
    "triton_available",
    "triton_interpreted",
]

triton = None  # the triton package and triton.language, bound by _load_triton()
tl = None

_KERNELS: list[str] = []  # the names of the functions marked by @kernel
_INTERPRETED: bool | None = None  # set when the kernels are built
_INSTALL = 'pip install triton (or pip install "attnbook[test]")'

BLOCK_Q = 64  # default rows of a query block
BLOCK_K = 64  # default rows of a key block


def kernel(fn):
    """Mark ``fn`` as a Triton kernel; the first launch replaces it in this module by ``triton.jit(fn)``.

    ``@kernel`` is ``@triton.jit`` applied later, so that importing this module does not import triton.
    """
    _KERNELS.append(fn.__name__)
    return fn


def triton_available() -> bool:
    """Whether the ``triton`` package can be imported."""
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def _choose_interpreter() -> None:
    """Set ``TRITON_INTERPRET=1`` when there is no CUDA and the user has not chosen: run when this module is
    imported, so that it comes before any ``import triton`` of the process (torch imports triton itself
    in some tools, e.g. ``torch.utils.flop_counter``), and again before the kernels are built."""
    if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def _load_triton() -> None:
    """Import triton (in the interpreter when there is no CUDA, see :func:`_choose_interpreter`) and build the kernels, once."""
    global triton, tl, _INTERPRETED
    if _INTERPRETED is not None:
        return
    _choose_interpreter()
    try:
        import triton as triton_package
        import triton.language as language
    except ImportError as error:
        raise ImportError(f"FlashAttentionTriton needs the triton package: {_INSTALL}") from error
    kernels = {name: triton_package.jit(globals()[name]) for name in _KERNELS}
    interpreted = type(kernels[_KERNELS[0]]).__name__ == "InterpretedFunction"  # triton chose from TRITON_INTERPRET
    if interpreted and type(language.sum).__name__ == "JITFunction":
        # triton.language's own functions were built for the compiler: triton was imported before
        # TRITON_INTERPRET=1 was set, and its interpreter cannot call them
        raise RuntimeError(
            "triton was imported before TRITON_INTERPRET=1 was set, so its interpreter cannot run the kernels: "
            "set TRITON_INTERPRET=1 in the environment before starting Python (or import attnbook before triton)"
        )
    triton, tl = triton_package, language
    globals().update(kernels)
    _INTERPRETED = interpreted


def triton_interpreted() -> bool:
    """Whether the Triton kernels run in Triton's interpreter (True) or compiled for the GPU (False); imports triton."""
    _load_triton()
    return _INTERPRETED


_choose_interpreter()

# ---------------------------------------------------------------- the kernels


@kernel
def flash_forward_kernel(
    Q, K, V, O, L,  # pointers: q (bh, n, d_k), k (bh, m, d_k), v (bh, m, d_v), O (bh, n, d_v), L (bh, n)
    stride_qb, stride_qn, stride_qd,
    stride_kb, stride_km, stride_kd,
    stride_vb, stride_vm, stride_vd,
    stride_ob, stride_on, stride_od,
    stride_lb, stride_ln,
    n, m, d_k, d_v, scale,
    IS_CAUSAL: tl.constexpr, ACC: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
):  # fmt: skip
    """O_i = softmax(S_i) V and L_i = log rowsum exp(S_i) for one block of queries of one batch entry."""
    i0 = tl.program_id(0) * BLOCK_Q  # this program's query block [i0, i1)
    b = tl.program_id(1).to(tl.int64)  # this program's batch entry
    i1 = tl.minimum(i0 + BLOCK_Q, n)
    offs_i = i0 + tl.arange(0, BLOCK_Q)  # (BLOCK_Q,) query indices
    offs_dk = tl.arange(0, BLOCK_DK)  # (BLOCK_DK,)
    offs_dv = tl.arange(0, BLOCK_DV)  # (BLOCK_DV,)
    q_ptrs = Q + b * stride_qb + offs_i[:, None] * stride_qn + offs_dk[None, :] * stride_qd
    q_i = tl.load(q_ptrs, mask=(offs_i[:, None] < n) & (offs_dk[None, :] < d_k), other=0.0)  # (BLOCK_Q, BLOCK_DK)
    m_i = tl.full([BLOCK_Q], float("-inf"), ACC)  # running maximum
    l_i = tl.zeros([BLOCK_Q], ACC)  # running normaliser
    acc = tl.zeros([BLOCK_Q, BLOCK_DV], ACC)  # running unnormalised output
    end = tl.minimum(m, i1) if IS_CAUSAL else m  # key_blocks_end: causal tiles past the diagonal are skipped
    for j0 in range(0, end, BLOCK_K):  # inner loop: a block K_j, V_j of keys and values
        offs_j = j0 + tl.arange(0, BLOCK_K)  # (BLOCK_K,) key indices
        k_ptrs = K + b * stride_kb + offs_j[:, None] * stride_km + offs_dk[None, :] * stride_kd
        v_ptrs = V + b * stride_vb + offs_j[:, None] * stride_vm + offs_dv[None, :] * stride_vd
        k_j = tl.load(k_ptrs, mask=(offs_j[:, None] < m) & (offs_dk[None, :] < d_k), other=0.0)  # (BLOCK_K, BLOCK_DK)
        v_j = tl.load(v_ptrs, mask=(offs_j[:, None] < m) & (offs_dv[None, :] < d_v), other=0.0)  # (BLOCK_K, BLOCK_DV)
        s_ij = tl.dot(q_i, tl.trans(k_j), input_precision="ieee").to(ACC) * scale  # (BLOCK_Q, BLOCK_K)
        visible = offs_j[None, :] < m  # keys past m do not exist
        if IS_CAUSAL:
            visible = visible & (offs_j[None, :] <= offs_i[:, None])  # key j after query i: hidden
        s_ij = tl.where(visible, s_ij, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s_ij, 1))  # m' = max(m_i, rowmax S_ij)
        alpha = tl.exp(m_i - m_new)  # e^(m_i - m'), 0 on the first block
        p_ij = tl.exp(s_ij - m_new[:, None])  # e^(S_ij - m'), (BLOCK_Q, BLOCK_K)
        l_i = alpha * l_i + tl.sum(p_ij, 1)  # l_i = alpha l_i + rowsum P_ij
        pv = tl.dot(p_ij.to(v_j.dtype), v_j, input_precision="ieee").to(ACC)  # P_ij V_j, (BLOCK_Q, BLOCK_DV)
        acc = alpha[:, None] * acc + pv  # acc = alpha acc + P_ij V_j
        m_i = m_new
    o_i = acc / l_i[:, None]  # O_i = acc / l_i, once
    L_i = m_i + tl.log(l_i)  # L_i = m_i + log l_i
    o_ptrs = O + b * stride_ob + offs_i[:, None] * stride_on + offs_dv[None, :] * stride_od
    tl.store(o_ptrs, o_i.to(O.dtype.element_ty), mask=(offs_i[:, None] < n) & (offs_dv[None, :] < d_v))
    tl.store(L + b * stride_lb + offs_i * stride_ln, L_i, mask=offs_i < n)


@kernel
def flash_backward_preprocess_kernel(
    O, dO, D,  # pointers: O (bh, n, d_v), dO (bh, n, d_v), D (bh, n)
    stride_ob, stride_on, stride_od,
    stride_dob, stride_don, stride_dod,
    stride_db, stride_dn,
    n, d_v,
    ACC: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_DV: tl.constexpr,
):  # fmt: skip
    """D_i = rowsum(dO_i o O_i) for one block of queries of one batch entry."""
    i0 = tl.program_id(0) * BLOCK_Q
    b = tl.program_id(1).to(tl.int64)
    offs_i = i0 + tl.arange(0, BLOCK_Q)
    offs_dv = tl.arange(0, BLOCK_DV)
    rows = (offs_i[:, None] < n) & (offs_dv[None, :] < d_v)
    o_i = tl.load(O + b * stride_ob + offs_i[:, None] * stride_on + offs_dv[None, :] * stride_od, mask=rows, other=0.0)
    dO_i = tl.load(
        dO + b * stride_dob + offs_i[:, None] * stride_don + offs_dv[None, :] * stride_dod, mask=rows, other=0.0
    )  # (BLOCK_Q, BLOCK_DV)
    D_i = tl.sum(dO_i.to(ACC) * o_i.to(ACC), 1)  # D_i = rowsum(dO_i o O_i), (BLOCK_Q,)
    tl.store(D + b * stride_db + offs_i * stride_dn, D_i, mask=offs_i < n)


@kernel
def flash_backward_dkdv_kernel(
    Q, K, V, dO, L, D, dK, dV,  # pointers: q, k, v, dO, L, D and the outputs dK (bh, m, d_k), dV (bh, m, d_v)
    stride_qb, stride_qn, stride_qd,
    stride_kb, stride_km, stride_kd,
    stride_vb, stride_vm, stride_vd,
    stride_dob, stride_don, stride_dod,
    stride_lb, stride_ln,
    stride_dkb, stride_dkm, stride_dkd,
    stride_dvb, stride_dvm, stride_dvd,
    n, m, d_k, d_v, scale,
    IS_CAUSAL: tl.constexpr, ACC: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
):  # fmt: skip
    """dK_j and dV_j for one block of keys of one batch entry, accumulated over the query blocks.

    L and D share their strides (both (bh, n), made contiguous by the caller).
    """
    j0 = tl.program_id(0) * BLOCK_K  # this program's key block [j0, j1)
    b = tl.program_id(1).to(tl.int64)
    offs_j = j0 + tl.arange(0, BLOCK_K)  # (BLOCK_K,) key indices
    offs_dk = tl.arange(0, BLOCK_DK)
    offs_dv = tl.arange(0, BLOCK_DV)
    k_mask = (offs_j[:, None] < m) & (offs_dk[None, :] < d_k)
    v_mask = (offs_j[:, None] < m) & (offs_dv[None, :] < d_v)
    k_j = tl.load(
        K + b * stride_kb + offs_j[:, None] * stride_km + offs_dk[None, :] * stride_kd, mask=k_mask, other=0.0
    )
    v_j = tl.load(
        V + b * stride_vb + offs_j[:, None] * stride_vm + offs_dv[None, :] * stride_vd, mask=v_mask, other=0.0
    )
    dk_j = tl.zeros([BLOCK_K, BLOCK_DK], ACC)
    dv_j = tl.zeros([BLOCK_K, BLOCK_DV], ACC)
    start = 0  # query_blocks_start: the query blocks before the diagonal are skipped (all of them if j0 >= n)
    if IS_CAUSAL:
        start = tl.where(j0 < n, (j0 // BLOCK_Q) * BLOCK_Q, n)
    for i0 in range(start, n, BLOCK_Q):  # inner loop: a block Q_i, dO_i of queries
        offs_i = i0 + tl.arange(0, BLOCK_Q)  # (BLOCK_Q,) query indices
        q_mask = (offs_i[:, None] < n) & (offs_dk[None, :] < d_k)
        do_mask = (offs_i[:, None] < n) & (offs_dv[None, :] < d_v)
        q_i = tl.load(
            Q + b * stride_qb + offs_i[:, None] * stride_qn + offs_dk[None, :] * stride_qd, mask=q_mask, other=0.0
        )  # (BLOCK_Q, BLOCK_DK)
        dO_i = tl.load(
            dO + b * stride_dob + offs_i[:, None] * stride_don + offs_dv[None, :] * stride_dod, mask=do_mask, other=0.0
        )  # (BLOCK_Q, BLOCK_DV)
        L_i = tl.load(L + b * stride_lb + offs_i * stride_ln, mask=offs_i < n, other=0.0)  # (BLOCK_Q,)
        D_i = tl.load(D + b * stride_lb + offs_i * stride_ln, mask=offs_i < n, other=0.0)  # (BLOCK_Q,)
        s_ij = tl.dot(q_i, tl.trans(k_j), input_precision="ieee").to(ACC) * scale  # (BLOCK_Q, BLOCK_K)
        visible = (offs_i[:, None] < n) & (offs_j[None, :] < m)  # rows and columns that exist
        if IS_CAUSAL:
            visible = visible & (offs_j[None, :] <= offs_i[:, None])  # key j after query i: hidden
        s_ij = tl.where(visible, s_ij, float("-inf"))
        p_ij = tl.exp(s_ij - L_i[:, None])  # P_ij = e^(S_ij - L_i), rebuilt; 0 where hidden
        dv_j += tl.dot(tl.trans(p_ij).to(dO_i.dtype), dO_i, input_precision="ieee").to(ACC)  # dV_j += P_ij^T dO_i
        dp_ij = tl.dot(dO_i, tl.trans(v_j), input_precision="ieee").to(ACC)  # dP_ij = dO_i V_j^T, (BLOCK_Q, BLOCK_K)
        ds_ij = p_ij * (dp_ij - D_i[:, None])  # dS_ij = P_ij o (dP_ij - D_i)
        dk_j += scale * tl.dot(tl.trans(ds_ij).to(q_i.dtype), q_i, input_precision="ieee").to(ACC)  # += scale dS^T Q
    tl.store(
        dK + b * stride_dkb + offs_j[:, None] * stride_dkm + offs_dk[None, :] * stride_dkd,
        dk_j.to(dK.dtype.element_ty),
        mask=k_mask,
    )  # written once per key block
    tl.store(
        dV + b * stride_dvb + offs_j[:, None] * stride_dvm + offs_dv[None, :] * stride_dvd,
        dv_j.to(dV.dtype.element_ty),
        mask=v_mask,
    )


@kernel
def flash_backward_dq_kernel(
    Q, K, V, dO, L, D, dQ,  # pointers: q, k, v, dO, L, D and the output dQ (bh, n, d_k)
    stride_qb, stride_qn, stride_qd,
    stride_kb, stride_km, stride_kd,
    stride_vb, stride_vm, stride_vd,
    stride_dob, stride_don, stride_dod,
    stride_lb, stride_ln,
    stride_dqb, stride_dqn, stride_dqd,
    n, m, d_k, d_v, scale,
    IS_CAUSAL: tl.constexpr, ACC: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
):  # fmt: skip
    """dQ_i for one block of queries of one batch entry, accumulated over the key blocks (the forward's loop order)."""
    i0 = tl.program_id(0) * BLOCK_Q  # this program's query block [i0, i1)
    b = tl.program_id(1).to(tl.int64)
    i1 = tl.minimum(i0 + BLOCK_Q, n)
    offs_i = i0 + tl.arange(0, BLOCK_Q)
    offs_dk = tl.arange(0, BLOCK_DK)
    offs_dv = tl.arange(0, BLOCK_DV)
    q_mask = (offs_i[:, None] < n) & (offs_dk[None, :] < d_k)
    do_mask = (offs_i[:, None] < n) & (offs_dv[None, :] < d_v)
    q_i = tl.load(
        Q + b * stride_qb + offs_i[:, None] * stride_qn + offs_dk[None, :] * stride_qd, mask=q_mask, other=0.0
    )
    dO_i = tl.load(
        dO + b * stride_dob + offs_i[:, None] * stride_don + offs_dv[None, :] * stride_dod, mask=do_mask, other=0.0
    )  # (BLOCK_Q, BLOCK_DV)
    L_i = tl.load(L + b * stride_lb + offs_i * stride_ln, mask=offs_i < n, other=0.0)  # (BLOCK_Q,)
    D_i = tl.load(D + b * stride_lb + offs_i * stride_ln, mask=offs_i < n, other=0.0)  # (BLOCK_Q,)
    dq_i = tl.zeros([BLOCK_Q, BLOCK_DK], ACC)
    end = tl.minimum(m, i1) if IS_CAUSAL else m  # key_blocks_end
    for j0 in range(0, end, BLOCK_K):  # inner loop: a block K_j, V_j
        offs_j = j0 + tl.arange(0, BLOCK_K)
        k_mask = (offs_j[:, None] < m) & (offs_dk[None, :] < d_k)
        v_mask = (offs_j[:, None] < m) & (offs_dv[None, :] < d_v)
        k_j = tl.load(
            K + b * stride_kb + offs_j[:, None] * stride_km + offs_dk[None, :] * stride_kd, mask=k_mask, other=0.0
        )  # (BLOCK_K, BLOCK_DK)
        v_j = tl.load(
            V + b * stride_vb + offs_j[:, None] * stride_vm + offs_dv[None, :] * stride_vd, mask=v_mask, other=0.0
        )  # (BLOCK_K, BLOCK_DV)
        s_ij = tl.dot(q_i, tl.trans(k_j), input_precision="ieee").to(ACC) * scale  # (BLOCK_Q, BLOCK_K)
        visible = (offs_i[:, None] < n) & (offs_j[None, :] < m)
        if IS_CAUSAL:
            visible = visible & (offs_j[None, :] <= offs_i[:, None])
        s_ij = tl.where(visible, s_ij, float("-inf"))
        p_ij = tl.exp(s_ij - L_i[:, None])  # P_ij = e^(S_ij - L_i), rebuilt
        dp_ij = tl.dot(dO_i, tl.trans(v_j), input_precision="ieee").to(ACC)  # dP_ij = dO_i V_j^T
        ds_ij = p_ij * (dp_ij - D_i[:, None])  # dS_ij = P_ij o (dP_ij - D_i)
        dq_i += scale * tl.dot(ds_ij.to(k_j.dtype), k_j, input_precision="ieee").to(ACC)  # dQ_i += scale dS_ij K_j
    tl.store(
        dQ + b * stride_dqb + offs_i[:, None] * stride_dqn + offs_dk[None, :] * stride_dqd,
        dq_i.to(dQ.dtype.element_ty),
        mask=q_mask,
    )


# ---------------------------------------------------------------- launching them

_CUDA_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_INTERPRETER_DTYPES = (torch.float16, torch.float32, torch.float64)  # numpy has no bfloat16 for tl.dot


def _head_block(d: int) -> int:
    """The head width padded to a power of two, at least 16 (``tl.arange`` and ``tl.dot`` need it)."""
    return max(16, triton.next_power_of_2(d))


def _check_block(name: str, block: object) -> None:
    check_sizes(**{name: block})
    if block < 16 or block & (block - 1):
        raise ValueError(f"{name} must be a power of two >= 16 (tl.arange and tl.dot need it), got {block}")


def _check_triton_inputs(q, k, v, is_causal, block_q, block_k, scale) -> None:
    """The checks of :func:`flash_triton_forward`: those of the PyTorch version, then the block sizes,
    the device and the dtype the kernels can run on (imports triton)."""
    _check_flash_inputs(q, k, v, is_causal, block_q, block_k, scale)
    _check_block("block_q", block_q)
    _check_block("block_k", block_k)
    _load_triton()
    if q.device.type == "cpu" and not _INTERPRETED:
        raise ValueError(
            "FlashAttentionTriton got CPU tensors but its kernels are compiled for CUDA: move the inputs to "
            "the GPU, or set TRITON_INTERPRET=1 before the first use to run them in Triton's interpreter"
        )
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"FlashAttentionTriton runs on cuda (compiled) or cpu (interpreted) tensors, got {q.device}")
    allowed = _INTERPRETER_DTYPES if _INTERPRETED else _CUDA_DTYPES
    if q.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        where = "in Triton's interpreter" if _INTERPRETED else "compiled for CUDA"
        raise TypeError(f"FlashAttentionTriton {where} supports {names}; got q, k, v of dtype {q.dtype}")


def _flatten(x: torch.Tensor) -> torch.Tensor:
    """(..., rows, d) -> (bh, rows, d): the batch dimensions as one axis (a view when possible)."""
    return x.reshape(math.prod(x.shape[:-2]), *x.shape[-2:])  # (bh, rows, d)


def _acc(dtype: torch.dtype):
    """The Triton dtype of the accumulators: float64 for float64 inputs, float32 otherwise."""
    return tl.float64 if _accumulation_dtype(dtype) == torch.float64 else tl.float32


def flash_triton_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    *,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The forward pass of FlashAttention-2 by the Triton kernel: ``(O, L)`` as :func:`attnbook.kernels.flash_attention_forward` (chapter 11).

    Args:
        q: (..., n, d_k).
        k: (..., m, d_k), m >= 1.
        v: (..., m, d_v).
        is_causal: hide key j from query i when j > i (upper-left alignment).
        block_q, block_k: rows of a query and of a key block, powers of two >= 16.
        scale: factor on the scores; defaults to ``1 / sqrt(d_k)``.

    Returns:
        O (..., n, d_v) in the input dtype and L (..., n) in the accumulator dtype (float32, or
        float64 for float64 inputs).
    """
    _check_triton_inputs(q, k, v, is_causal, block_q, block_k, scale)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    *batch, n, d_k = q.shape
    m, d_v = k.shape[-2], v.shape[-1]
    acc_dtype = _accumulation_dtype(q.dtype)
    q3, k3, v3 = _flatten(q), _flatten(k), _flatten(v)  # (bh, n, d_k), (bh, m, d_k), (bh, m, d_v)
    O = torch.empty(q3.shape[0], n, d_v, dtype=q.dtype, device=q.device)  # (bh, n, d_v)
    L = torch.empty(q3.shape[0], n, dtype=acc_dtype, device=q.device)  # (bh, n)
    if O.numel() and L.numel():
        grid = (triton.cdiv(n, block_q), q3.shape[0])  # one program per (query block, batch entry)
        flash_forward_kernel[grid](
            q3, k3, v3, O, L,
            *q3.stride(), *k3.stride(), *v3.stride(), *O.stride(), *L.stride(),
            n, m, d_k, d_v, scale,
            IS_CAUSAL=is_causal, ACC=_acc(q.dtype),
            BLOCK_Q=block_q, BLOCK_K=block_k, BLOCK_DK=_head_block(d_k), BLOCK_DV=_head_block(d_v),
        )  # fmt: skip
    return O.reshape(*batch, n, d_v), L.reshape(*batch, n)


def flash_triton_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    O: torch.Tensor,
    L: torch.Tensor,
    dO: torch.Tensor,
    is_causal: bool = False,
    *,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The backward pass of FlashAttention-2 by the Triton kernels: ``(dq, dk, dv)`` (chapter 11).

    Three launches: :func:`flash_backward_preprocess_kernel` (D), :func:`flash_backward_dkdv_kernel`
    (dK, dV; key blocks outside) and :func:`flash_backward_dq_kernel` (dQ; query blocks outside).
    Arguments as in :func:`attnbook.kernels.flash_attention_backward`.
    """
    _check_triton_inputs(q, k, v, is_causal, block_q, block_k, scale)
    for name, x in (("O", O), ("dO", dO)):
        if not isinstance(x, torch.Tensor) or x.shape != (*q.shape[:-1], v.shape[-1]) or x.dtype != q.dtype:
            shown = (tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(
                f"{name} (..., n, d_v) must have shape {(*q.shape[:-1], v.shape[-1])} and dtype {q.dtype}, got {shown}"
            )
    _check_same_batch(q=q, O=O, dO=dO)
    _check_lse(L, q)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    check_number("scale", scale)
    n, d_k = q.shape[-2:]
    m, d_v = k.shape[-2], v.shape[-1]
    acc_dtype = _accumulation_dtype(q.dtype)
    q3, k3, v3 = _flatten(q), _flatten(k), _flatten(v)  # (bh, n, d_k), (bh, m, d_k), (bh, m, d_v)
    O3, dO3 = _flatten(O), _flatten(dO)  # (bh, n, d_v)
    bh = q3.shape[0]
    L2 = L.to(acc_dtype).reshape(bh, n).contiguous()  # (bh, n)
    D = torch.empty(bh, n, dtype=acc_dtype, device=q.device)  # (bh, n), the strides of L2
    dq = torch.empty_like(q3)  # (bh, n, d_k)
    dk = torch.zeros_like(k3)  # (bh, m, d_k): keys no query sees keep 0
    dv = torch.zeros_like(v3)  # (bh, m, d_v)
    if bh and n:
        blocks = {"BLOCK_DK": _head_block(d_k), "BLOCK_DV": _head_block(d_v)}
        flash_backward_preprocess_kernel[(triton.cdiv(n, block_q), bh)](
            O3, dO3, D, *O3.stride(), *dO3.stride(), *D.stride(), n, d_v,
            ACC=_acc(q.dtype), BLOCK_Q=block_q, BLOCK_DV=blocks["BLOCK_DV"],
        )  # fmt: skip
        flash_backward_dkdv_kernel[(triton.cdiv(m, block_k), bh)](
            q3, k3, v3, dO3, L2, D, dk, dv,
            *q3.stride(), *k3.stride(), *v3.stride(), *dO3.stride(), *L2.stride(), *dk.stride(), *dv.stride(),
            n, m, d_k, d_v, scale,
            IS_CAUSAL=is_causal, ACC=_acc(q.dtype), BLOCK_Q=block_q, BLOCK_K=block_k, **blocks,
        )  # fmt: skip
        flash_backward_dq_kernel[(triton.cdiv(n, block_q), bh)](
            q3, k3, v3, dO3, L2, D, dq,
            *q3.stride(), *k3.stride(), *v3.stride(), *dO3.stride(), *L2.stride(), *dq.stride(),
            n, m, d_k, d_v, scale,
            IS_CAUSAL=is_causal, ACC=_acc(q.dtype), BLOCK_Q=block_q, BLOCK_K=block_k, **blocks,
        )  # fmt: skip
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


class FlashAttentionTriton(torch.autograd.Function):
    r"""Attention as an autograd function computed by Triton kernels: ``FlashAttentionTriton.apply(q, k, v, is_causal)`` (chapter 11).

    The same contract as :class:`attnbook.kernels.FlashAttention`: q (..., n, d_k), k (..., m, d_k),
    v (..., m, d_v) with the same batch dimensions; the forward pass
    (:func:`flash_triton_forward`) saves exactly q, k, v, O and the log-sum-exp L (..., n); the
    backward pass (:func:`flash_triton_backward`) rebuilds the weights tile by tile. Compiled on
    CUDA; on a CPU in Triton's interpreter (see the module docstring). Optional positional
    arguments after ``is_causal``: ``block_q``, ``block_k`` (powers of two >= 16, default 64).
    """

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False, block_q=BLOCK_Q, block_k=BLOCK_K):
        O, L = flash_triton_forward(q, k, v, is_causal, block_q=block_q, block_k=block_k)
        ctx.save_for_backward(q, k, v, O, L)
        ctx.is_causal, ctx.block_q, ctx.block_k = is_causal, block_q, block_k
        return O

    @staticmethod
    def backward(ctx, dO):
        q, k, v, O, L = ctx.saved_tensors
        dq, dk, dv = flash_triton_backward(
            q, k, v, O, L, dO.contiguous(), ctx.is_causal, block_q=ctx.block_q, block_k=ctx.block_k
        )
        return dq, dk, dv, None, None, None


def flash_attention_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    *,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
) -> torch.Tensor:
    r"""Attention by the Triton kernels of FlashAttention-2, differentiable: :class:`FlashAttentionTriton` as a function (chapter 11).

    .. math:: O = \operatorname{softmax}(Q K^\top / \sqrt{d_k} + M) V

    Args as in :func:`attnbook.kernels.flash_attention`; returns O, (..., n, d_v).
    """
    _check_triton_inputs(q, k, v, is_causal, block_q, block_k, None)
    return FlashAttentionTriton.apply(q, k, v, is_causal, block_q, block_k)
