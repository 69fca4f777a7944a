"""Shared helpers of the production tests: tiny random ``transformers`` models built from configs in
code, the inputs and outputs of one of their attention layers, and derived tolerances.

Nothing is downloaded (``HF_HUB_OFFLINE=1``). Every model runs with ``attn_implementation="eager"``
in float64, with its linear and embedding weights drawn again with standard deviation
:data:`STD` (the 0.02 of Hugging Face's initialisation makes the scores tiny and the attention
near-uniform, which hides pairing and mask bugs; with :data:`STD` the scores spread over several
units). The tests compare *one attention layer*: a forward hook records what the model passed to
its attention module (the hidden states, the rotary cos/sin, the mask it built) and what the
module returned; the course's functions then recompute that output from the same hidden states
with the module's weights copied out.

Some modules compute parts in float32 inside a float64 model (rotary angles, the q·k products, the
softmax); :func:`rounding_bound` turns those precisions into a first-order bound on the output's
error, which is the tolerance of each comparison.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # build from configs only: never reach the Hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # tiny vocabularies draw warnings about special ids

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e .[test])")
from transformers.pytorch_utils import Conv1D  # noqa: E402  (GPT-2 stores its linear layers transposed)

F64 = torch.float64
U32 = 2.0**-24  # unit roundoff of float32
U64 = 2.0**-53  # unit roundoff of float64
VOCAB = 64  # every tiny model's vocabulary
STD = 0.25  # the weights' standard deviation: scores of a few units, attention far from uniform
SAFETY = 2.0  # the bounds are first order; a factor 2 covers the second-order terms

#: every comparison (what, max error, error / bound) and control (what, difference, difference needed); -s prints them
RECORD: list[tuple[str, float, float]] = []


def skip_without_float64(device: torch.device) -> None:
    if device.type == "mps":
        pytest.skip("the comparisons run in float64, which MPS lacks")


def tiny_config(config_class, **fields):
    """``config_class(**fields)`` for a tiny model: a vocabulary of :data:`VOCAB` ids and the eager
    attention (the one whose inputs and weights the tests read), unless ``fields`` say otherwise.
    The sizes, and special token ids inside the vocabulary where a family needs them, are the caller's."""
    return config_class(**({"vocab_size": VOCAB, "attn_implementation": "eager"} | fields))


def random_ids(batch: int, n: int, seed: int, device: torch.device) -> torch.Tensor:
    """(batch, n) token ids drawn uniformly from the :data:`VOCAB` ids, seeded, on ``device``."""
    return torch.randint(0, VOCAB, (batch, n), generator=torch.Generator().manual_seed(seed)).to(device)


def one_call(model: torch.nn.Module, attention: torch.nn.Module, *args, **kwargs) -> dict:
    """Run ``model(*args, **kwargs)`` once and return the one call of its ``attention`` module it made
    (as :func:`recording` records it); anything but exactly one call is an error."""
    with recording(attention) as calls:
        model(*args, **kwargs)
    assert len(calls) == 1, f"the model called {type(attention).__name__} {len(calls)} times, not once"
    return calls[0]


def tiny_model(model_class, config, device: torch.device, *, seed: int = 0, std: float = STD, dtype=F64):
    """``model_class(config)`` in ``dtype`` (float64 unless said) on ``device``, eval mode, with every linear (``nn.Linear``
    and GPT-2's ``Conv1D``) and embedding weight and bias drawn from N(0, std²); norms keep 1 and 0."""
    torch.manual_seed(seed)
    model = model_class(config)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding, Conv1D)):
                for p in module.parameters(recurse=False):
                    p.copy_(torch.randn(p.shape, generator=generator) * std)
    return model.to(device=device, dtype=dtype).eval()


@contextmanager
def recording(module: torch.nn.Module):
    """Record each call of ``module``: a list of dicts with ``args``, ``kwargs`` and ``output``."""
    calls: list[dict] = []

    def hook(mod, args, kwargs, output):
        calls.append({"args": args, "kwargs": kwargs, "output": output})

    handle = module.register_forward_hook(hook, with_kwargs=True)
    try:
        yield calls
    finally:
        handle.remove()


def hidden_states(call: dict) -> torch.Tensor:
    """The hidden states a recorded attention call received (first positional or keyword argument)."""
    return call["args"][0] if call["args"] else call["kwargs"]["hidden_states"]


def output(call: dict) -> torch.Tensor:
    """The attention output of a recorded call (modules return (output, weights, ...))."""
    out = call["output"]
    return out[0] if isinstance(out, tuple) else out


def linear(x: torch.Tensor, layer) -> torch.Tensor:
    """``x W^T + b`` with the weights copied out of an ``nn.Linear`` in the dtype of ``x`` (``Conv1D``
    stores W^T and computes x W + b)."""
    weight = layer.weight.detach().to(x.dtype)
    if isinstance(layer, Conv1D):
        y = x @ weight  # (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out)
    else:
        y = x @ weight.T  # (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out)
    return y if layer.bias is None else y + layer.bias.detach().to(x.dtype)


def split_heads(x: torch.Tensor, d_head: int) -> torch.Tensor:
    """(batch, n, H d_head) -> (batch, H, n, d_head), head h owning features h d_head ... (h + 1) d_head - 1."""
    return x.unflatten(-1, (-1, d_head)).transpose(-3, -2)  # (batch, n, H, d_head) -> (batch, H, n, d_head)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(batch, H, n, d_head) -> (batch, n, H d_head), the inverse of :func:`split_heads`."""
    return x.transpose(-3, -2).flatten(-2)  # (batch, n, H, d_head) -> (batch, n, H d_head)


def keep_of(additive: torch.Tensor) -> torch.Tensor:
    """The keep-mask of a Hugging Face float mask (0 = attend); asserts that every blocked entry holds
    the dtype's minimum, the value Hugging Face fills blocked scores with (not -inf)."""
    minimum = torch.finfo(additive.dtype).min
    blocked = additive != 0
    assert (additive[blocked] == minimum).all(), "a blocked entry of the Hugging Face mask is not the dtype minimum"
    return ~blocked


def keep_passed(call: dict) -> torch.Tensor:
    """The keep-mask (batch, n, m) of the float mask a recorded attention call received, read with
    :func:`keep_of` (one mask for every head: the head dimension of size 1 dropped)."""
    additive = call["kwargs"]["attention_mask"]  # (batch, 1, n, m)
    assert additive.shape[1] == 1, f"a mask per head, {tuple(additive.shape)}: the tests expect one for all heads"
    return keep_of(additive)[:, 0]


def rotary_error(max_angle: float, u: float = U32) -> float:
    """Relative error (2-norm, per rotated pair) of a rotation by an angle p·ω formed in a precision of
    unit roundoff u (ω = base^(-2j/d) rounded by its power and division, then the product: 4u|θ|), with
    cos and sin rounded to it (2u): ``u (4 max|θ| + 2)``. ω_0 = 1 is exact, so ``max_angle`` is the
    largest p·ω_j over the pairs j >= 1 (pair 0's angle p is exact and only its cos and sin round)."""
    return u * (4.0 * max_angle + 2.0)


def rounding_bound(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weights: torch.Tensor,
    w_out: torch.Tensor,
    *,
    scale: float,
    u_scores: float = U64,
    u_softmax: float = U64,
    u_rest: float = U64,
    rotation: float = 0.0,
    score_error: float = 0.0,
) -> torch.Tensor:
    r"""A first-order bound, entry by entry, on |O_a - O_b| for O = merge(softmax(s) V) W_out^T
    computed once in float64 and once with the scores formed in unit roundoff ``u_scores``, the
    softmax in ``u_softmax``, the weighted sum and the output projection in ``u_rest``, and q and k
    rotated with relative error ``rotation`` (:func:`rotary_error`); ``score_error`` is any further
    absolute error of every score (a bias rounded to float32).

    q (..., H, n, d), k (..., H, m, d), v (..., H, m, d_v) (k and v repeated to the query heads),
    weights (..., H, n, m) the float64 attention weights, w_out (d_model, H d_v). Per head:

    * score error :math:`\delta_{ij} = (2\,\text{rotation} + (d + 3) u_s + u_{sm})\,\text{scale}\,|q_i|\,|k_j|
      + \text{score\_error}` (the rotated inputs, the dot product and its inputs' rounding, the cast to
      the softmax's precision, a rounded bias);
    * relative error of :math:`e^{s_{ij} - \max_l s_{il}}`:
      :math:`\varepsilon_{ij} = \delta_{ij} + \max_l \delta_{il} + u_{sm}(|s_{ij} - \max_l s_{il}| + 1)`;
    * weight error :math:`|\Delta w_{ij}| \le w_{ij}(\varepsilon_{ij} + \sum_l w_{il}\varepsilon_{il} + (m + 1) u_{sm})`
      (the normalisation by the rounded sum);
    * output error :math:`\sum_j |\Delta w_{ij}|\,|v_j| + (m + 1) u_r \sum_j w_{ij} |v_j|`, heads merged,
      then through :math:`|W_{out}|` plus the projection's own rounding :math:`(H d_v + 1) u_r |o|\,|W_{out}|^\top`.

    Returns the bound, shape (..., n, d_model), times :data:`SAFETY` for the second-order terms.
    """
    d, m = q.shape[-1], k.shape[-2]
    kept = weights > 0  # (..., H, n, m)
    size = scale * q.norm(dim=-1)[..., :, None] * k.norm(dim=-1)[..., None, :]  # (..., H, n, m): >= |s_ij|
    delta = (2.0 * rotation + (d + 3) * u_scores + u_softmax) * size + score_error  # (..., H, n, m)
    s = scale * q @ k.transpose(-2, -1)  # (..., H, n, d) @ (..., H, d, m) -> (..., H, n, m)
    s_max = s.masked_fill(~kept, -torch.inf).amax(dim=-1, keepdim=True)  # (..., H, n, 1)
    delta_max = delta.masked_fill(~kept, 0).amax(dim=-1, keepdim=True)  # (..., H, n, 1)
    eps = (delta + delta_max + u_softmax * ((s - s_max).abs() + 1)).masked_fill(~kept, 0)  # (..., H, n, m)
    eps_mean = (weights * eps).sum(dim=-1, keepdim=True)  # (..., H, n, 1)
    dw = weights * (eps + eps_mean + (m + 1) * u_softmax)  # (..., H, n, m)
    v_abs = v.abs()
    o_abs = weights @ v_abs  # (..., H, n, m) @ (..., H, m, d_v) -> (..., H, n, d_v)
    do = dw @ v_abs + (m + 1) * u_rest * o_abs  # (..., H, n, d_v)
    w_abs = w_out.abs()  # (d_model, H d_v)
    bound = merge_heads(do) @ w_abs.T  # (..., n, H d_v) @ (H d_v, d_model) -> (..., n, d_model)
    bound = bound + (w_abs.shape[-1] + 1) * u_rest * (merge_heads(o_abs) @ w_abs.T)  # (..., n, d_model)
    return SAFETY * bound


def max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().amax().item()


def assert_within(actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor | float, what: str) -> float:
    """Assert |actual - expected| <= bound entry by entry (a tensor bound broadcasts), record the largest
    error and its ratio to the bound, and return the error."""
    assert actual.shape == expected.shape, f"{what}: shapes {tuple(actual.shape)} and {tuple(expected.shape)}"
    bound = torch.as_tensor(bound, dtype=F64, device=actual.device)
    error = (actual.detach().to(F64) - expected.detach().to(F64)).abs()
    assert error.isfinite().all(), f"{what}: the difference is not finite"
    ratio = torch.where(error == 0, 0.0, error / bound).amax().item()  # 0 / 0 where both vanish
    worst = error.amax().item()
    RECORD.append((what, worst, ratio))
    print(f"{what}: max error {worst:.2e}, largest error / bound {ratio:.3f} (bound up to {bound.amax().item():.1e})")
    assert (error <= bound).all(), f"{what}: max error {worst:.3e}, {ratio:.2f} times the derived bound"
    return worst


def assert_differs(control: torch.Tensor, expected: torch.Tensor, what: str, *, fraction: float = 0.05) -> float:
    """A control (the other convention) must differ from the production output by a clear amount:
    at least ``fraction`` of the output's largest entry. Records and returns the difference."""
    difference = max_error(control, expected)
    needed = fraction * expected.abs().amax().item()
    RECORD.append((f"control {what}", difference, needed))
    print(f"control {what}: differs by {difference:.2e} >= {needed:.2e}")
    assert math.isfinite(difference) and difference >= needed, (
        f"control {what}: differs by only {difference:.3e} (needs {needed:.3e}); the test could not tell the two "
        "conventions apart"
    )
    return difference
