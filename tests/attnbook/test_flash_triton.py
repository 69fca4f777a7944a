"""FlashAttention-2 as Triton kernels (chapter 11): values, L and the three gradients against the plain
formula, in Triton's interpreter on a CPU (small sizes) and compiled on CUDA; the saved tensors; errors."""

from __future__ import annotations

import builtins
import os
import subprocess
import sys

import pytest
import torch
from torch.testing import assert_close

import attnbook
from attnbook.kernels import flash_triton as module
from attnbook.kernels.attention_backward import attention_scores_masked, log_sum_exp
from attnbook.kernels.flash_triton import (
    FlashAttentionTriton,
    flash_attention_triton,
    flash_triton_backward,
    flash_triton_forward,
)

# after attnbook.kernels, which sets TRITON_INTERPRET=1 on a machine without CUDA before triton is imported
pytest.importorskip(
    "triton", reason='the Triton kernels need the triton package: pip install triton (or pip install "attnbook[test]")'
)

EXACT = {"atol": 1e-10, "rtol": 1e-10}


@pytest.fixture
def triton_device(device):
    """The device, where the kernels can run on it: CUDA compiled, CPU in the interpreter."""
    if device.type == "mps":
        pytest.skip("Triton runs on CUDA (compiled) or on a CPU (interpreted), not on MPS")
    if device.type == "cpu" and not module.triton_interpreted():
        pytest.skip("the Triton kernels are compiled for CUDA here (TRITON_INTERPRET is not 1): no CPU run")
    return device


def precise_dtype(device):
    """float64 in the interpreter; float32 (IEEE dot products) compiled on CUDA, where float64 is not offered."""
    return torch.float64 if device.type == "cpu" else torch.float32


def tolerance(dtype):
    return EXACT if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-4}


def inputs(batch, n, m, d_k, d_v, device, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    draw = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
    return draw(*batch, n, d_k), draw(*batch, m, d_k), draw(*batch, m, d_v), draw(*batch, n, d_v)


def plain(q, k, v, dO, is_causal):
    """O and (dq, dk, dv) by autograd of attnbook.attention in float64."""
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    mask = attnbook.causal_mask(q.shape[-2], k.shape[-2], device=q.device) if is_causal else None
    O, _ = attnbook.attention(q, k, v, mask=mask)
    return O.detach(), torch.autograd.grad(O, (q, k, v), dO.double())


CASES = [  # (batch dims, n, m, d_k, d_v)
    ((2,), 37, 37, 8, 8),  # (batch, n, d); ragged: n, m not multiples of 16, d padded to 16
    ((1, 2), 20, 45, 32, 5),  # (batch, heads, n, d), n < m, d_k != d_v
    ((1, 2), 70, 23, 4, 16),  # n > m
]


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-n{c[1]}-m{c[2]}-d{c[3]}")
def test_kernels_equal_the_plain_formula(triton_device, case, is_causal):
    batch, n, m, d_k, d_v = case
    dtype = precise_dtype(triton_device)
    q, k, v, dO = inputs(batch, n, m, d_k, d_v, triton_device, dtype, seed=n + 100 * m)
    O_ref, grads_ref = plain(q, k, v, dO, is_causal)
    O, L = flash_triton_forward(q, k, v, is_causal, block_q=16, block_k=16)
    assert O.shape == O_ref.shape and O.dtype == dtype and L.shape == (*batch, n)
    assert_close(O.double(), O_ref, **tolerance(dtype))
    L_ref = log_sum_exp(attention_scores_masked(q.double(), k.double(), is_causal))
    assert_close(L.double(), L_ref, **tolerance(dtype))
    grads = flash_triton_backward(q, k, v, O, L, dO, is_causal, block_q=16, block_k=16)
    for got, want in zip(grads, grads_ref):
        assert got.shape == want.shape and got.dtype == dtype
        assert_close(got.double(), want, **tolerance(dtype))


def test_autograd_function_with_other_blocks(triton_device):
    """FlashAttentionTriton.apply with block_q != block_k, non-contiguous inputs, gradients through autograd."""
    dtype = precise_dtype(triton_device)
    q, k, v, dO = inputs((2, 3), 19, 22, 8, 8, triton_device, dtype, seed=3)  # (batch, heads, n or m, d)
    q, k, v, dO = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v, dO))  # from (batch, n, heads, d)
    assert not q.is_contiguous()
    O_ref, grads_ref = plain(q, k, v, dO, True)
    leaves = [x.requires_grad_() for x in (q, k, v)]
    O = FlashAttentionTriton.apply(*leaves, True, 32, 16)
    assert_close(O.double(), O_ref, **tolerance(dtype))
    for got, want in zip(torch.autograd.grad(O, leaves, dO), grads_ref):
        assert_close(got.double(), want, **tolerance(dtype))


def test_saves_exactly_q_k_v_O_and_L(triton_device):
    dtype = precise_dtype(triton_device)
    q, k, v, _ = inputs((1, 2), 17, 9, 4, 4, triton_device, dtype, seed=5)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    O = flash_attention_triton(q, k, v, True, block_q=16, block_k=16)
    saved = O.grad_fn.saved_tensors
    assert len(saved) == 5
    for got, want in zip(saved[:3], (q, k, v)):
        assert got.data_ptr() == want.data_ptr()
    assert_close(saved[3], O.detach(), rtol=0, atol=0)
    assert saved[4].shape == (1, 2, 17)
    L_ref = log_sum_exp(attention_scores_masked(q.detach().double(), k.detach().double(), True))
    assert_close(saved[4].double(), L_ref, **tolerance(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_lower_precision(triton_device, dtype):
    """float32, float16 and bfloat16: O and the gradients in the input dtype, L in float32, close to float64."""
    if dtype == torch.bfloat16 and module.triton_interpreted():
        pytest.skip("the interpreter's tl.dot has no bfloat16 (numpy has none): bfloat16 is compiled-only")
    q, k, v, dO = inputs((1,), 33, 30, 16, 16, triton_device, dtype, seed=9)
    O_ref, grads_ref = plain(q, k, v, dO, True)
    O, L = flash_triton_forward(q, k, v, True, block_q=16, block_k=16)
    assert O.dtype == dtype and L.dtype == torch.float32
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    assert_close(O.double(), O_ref, **tol)
    for got, want in zip(flash_triton_backward(q, k, v, O, L, dO, True, block_q=16, block_k=16), grads_ref):
        assert got.dtype == dtype
        assert_close(got.double(), want, **tol)


def test_gradcheck_in_the_interpreter(triton_device):
    if triton_device.type != "cpu":
        pytest.skip("float64 gradcheck: the interpreter only")
    q, k, v, _ = inputs((1,), 3, 4, 2, 2, triton_device, torch.float64, seed=1)
    leaves = tuple(x.requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: FlashAttentionTriton.apply(q, k, v, True, 16, 16), leaves)


def test_errors(triton_device):
    dtype = precise_dtype(triton_device)
    q, k, v, _ = inputs((2,), 4, 5, 3, 3, triton_device, dtype)
    with pytest.raises(ValueError, match="power of two >= 16"):
        flash_triton_forward(q, k, v, block_q=24)
    with pytest.raises(ValueError, match="power of two >= 16"):
        flash_attention_triton(q, k, v, block_k=8)
    with pytest.raises(ValueError, match="at least one key"):
        flash_triton_forward(q, k[:, :0], v[:, :0])
    with pytest.raises(ValueError, match="same batch dimensions"):
        flash_triton_forward(q, k[:1], v[:1])
    with pytest.raises(TypeError, match="dtype"):
        flash_triton_forward(q, k.half(), v)
    O, L = flash_triton_forward(q, k, v, block_q=16, block_k=16)
    with pytest.raises(ValueError, match="dO"):
        flash_triton_backward(q, k, v, O, L, O[:, :3], block_q=16, block_k=16)
    with pytest.raises(ValueError, match="L"):
        flash_triton_backward(q, k, v, O, L[:, :2], O, block_q=16, block_k=16)


def test_dtypes_outside_the_mode_are_refused(triton_device):
    """The interpreter refuses bfloat16 (its tl.dot cannot multiply it); compiled CUDA refuses float64."""
    q, k, v, _ = inputs((1,), 5, 5, 4, 4, triton_device, torch.float32)
    refused = torch.bfloat16 if module.triton_interpreted() else torch.float64
    with pytest.raises(TypeError, match=str(refused).replace("torch.", "")):
        flash_triton_forward(q.to(refused), k.to(refused), v.to(refused))


def test_without_triton_the_error_says_how_to_install(monkeypatch):
    """With triton missing (simulated), the first use raises an ImportError naming pip install triton."""
    real_import = builtins.__import__

    def no_triton(name, *args, **kwargs):
        if name == "triton" or name.startswith("triton."):
            raise ImportError("No module named 'triton'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(module, "_INTERPRETED", None)  # as before the first use
    monkeypatch.setattr(builtins, "__import__", no_triton)
    q = torch.zeros(1, 4, 4)
    with pytest.raises(ImportError, match="pip install triton"):
        FlashAttentionTriton.apply(q, q, q, False)


def test_no_queries_gives_empty_outputs(triton_device):
    q, k, v, dO = inputs((2,), 0, 5, 4, 4, triton_device, precise_dtype(triton_device))
    O, L = flash_triton_forward(q, k, v, True, block_q=16, block_k=16)
    assert O.shape == (2, 0, 4) and L.shape == (2, 0)
    dq, dk, dv = flash_triton_backward(q, k, v, O, L, dO, True, block_q=16, block_k=16)
    assert dq.shape == (2, 0, 4) and bool((dk == 0).all()) and bool((dv == 0).all())


def test_triton_imported_before_the_interpreter_was_chosen_is_reported():
    """Without CUDA, a process that imported triton before TRITON_INTERPRET=1 gets a clear error, not a crash
    inside the interpreter (triton builds its own library functions for one mode when it is imported)."""
    code = (
        "import triton, torch\n"
        "from attnbook.kernels.flash_triton import flash_attention_triton\n"
        "q = torch.zeros(1, 4, 4)\n"
        "try:\n"
        "    flash_attention_triton(q, q, q, block_q=16, block_k=16)\n"
        "except RuntimeError as error:\n"
        "    print('RuntimeError:', error)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "RuntimeError: triton was imported before TRITON_INTERPRET=1" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize(
    "first, second",
    [("test_flash_attention.py", "test_flash_triton.py"), ("test_flash_triton.py", "test_flash_attention.py")],
    ids=["flop-counter-first", "triton-first"],
)
def test_test_files_pass_in_either_order(first, second):
    """On a machine without CUDA, the two kernel test files pass in either order in one pytest process.

    test_flash_attention.py imports torch.utils.flop_counter, which imports triton, before attnbook: run
    first, it used to fix triton in compiled mode and every interpreted kernel test after it errored
    ("triton was imported before TRITON_INTERPRET=1"; the test above shows that error in a bare process).
    tests/conftest.py now chooses the interpreter before any test module is imported. One small test of
    each file runs (the import happens when the file is collected, so that is enough to show it).
    """
    tests = {
        "test_flash_attention.py": "test_flash_attention.py::test_saves_exactly_q_k_v_O_and_L",
        "test_flash_triton.py": "test_flash_triton.py::test_saves_exactly_q_k_v_O_and_L",
    }
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU machine, also where there is a GPU
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0"]
    command += [os.path.join(here, tests[first]), os.path.join(here, tests[second])]
    out = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 passed, 4 skipped" in out.stdout  # cpu runs; cuda and mps are skipped (no GPU here), out.stdout[-3000:]
