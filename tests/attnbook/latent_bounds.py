r"""Derived tolerances for latent attention's two paths (tests/attnbook/test_latent.py and the DeepSeek-V3 comparison).

The naive path forms :math:`k^C = c W_{UK}^\top`, :math:`v = c W_{UV}^\top` and then attention; the
absorbed path forms :math:`\tilde q = q^C W_{UK}`, scores against :math:`c`, the weighted sum
:math:`z = w c` and :math:`z W_{UV}^\top`. Both are sums of the same products in another order,
so in a floating-point format of unit roundoff u each is, to first order, within (the standard
bound for a sum of N products, :math:`N u \sum |a_k b_k|`):

* scores: :math:`\gamma_s P_{ij}`, :math:`\gamma_s = (d_h + d_c + d_R + 3) u` and
  :math:`P_{ij} = \text{scale}\,(|q^C_i|\,|W^h_{UK}|\,|c_j|^\top + |q^R_i| \cdot |k^R_j|)` (the
  two chained products, the sum of the two parts and the scale);
* weights: a score error of at most :math:`\eta_i` in row i changes each weight by a factor within
  :math:`e^{\pm 2 \eta_i}`, and each softmax rounds to :math:`u(|s_{ij} - \max_l s_{il}| + m + 3)` relatively;
* head outputs: :math:`\sum_j |\Delta w_{ij}| |c_j| |W^h_{UV}|^\top` plus each path's rounding of the two
  products, :math:`(d_c + m + 2) u\, (w |c|) |W^h_{UV}|^\top`;
* the output projection: :math:`(H d_v + 1) u\, |o|\, |W_O|^\top` for each path.

Two paths differ by at most the sum of their bounds; :data:`SAFETY` covers the second-order terms.
"""

from __future__ import annotations

import torch

SAFETY = 2.0


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def absorption_bound(q_nope, q_rope, latent, k_rope, w_uk, w_uv, weights, *, scale, w_o=None, u=None):
    r"""Entrywise bound on |naive - absorbed| for the head outputs (..., H, n, d_v), or for the
    layer's output (..., n, d_model) when ``w_o`` (d_model, H d_v) is given. ``weights`` (..., H, n, m)
    are either path's weights (their difference is second order here)."""
    u = unit_roundoff(q_nope.dtype) if u is None else u
    h, d_h, d_r = q_nope.shape[-3], q_nope.shape[-1], q_rope.shape[-1]
    m, d_c = latent.shape[-2], latent.shape[-1]
    a = lambda x: x.detach().abs()  # noqa: E731
    uk = a(w_uk).unflatten(0, (h, d_h))  # (H, d_h, d_c)
    uv = a(w_uv).unflatten(0, (h, -1))  # (H, d_v, d_c)
    c = a(latent).unsqueeze(-3)  # (..., 1, m, d_c)
    p = (a(q_nope) @ uk) @ c.transpose(-2, -1)  # (..., H, n, d_c) @ (..., 1, d_c, m) -> (..., H, n, m)
    p = scale * (p + a(q_rope) @ a(k_rope).transpose(-2, -1))  # (..., H, n, m)
    kept = weights > 0
    eta = (2 * (d_h + d_c + d_r + 3) * u * p).masked_fill(~kept, 0).amax(dim=-1, keepdim=True)  # (..., H, n, 1)
    s = torch.log(weights.detach().clamp_min(torch.finfo(weights.dtype).tiny))  # s_ij - logsumexp, <= 0
    spread = (s - s.masked_fill(~kept, -torch.inf).amax(dim=-1, keepdim=True)).abs()  # |s_ij - max_l s_il|
    eps = (2 * eta + 2 * u * (spread + m + 3)).masked_fill(~kept, 0)  # (..., H, n, m)
    dw = weights.detach() * eps  # (..., H, n, m)
    wc = weights.detach() @ c  # (..., H, n, m) @ (..., 1, m, d_c) -> (..., H, n, d_c)
    do = (dw @ c + 2 * (d_c + m + 2) * u * wc) @ uv.transpose(-2, -1)  # (..., H, n, d_c) @ (H, d_c, d_v)
    if w_o is None:
        return SAFETY * do  # (..., H, n, d_v)
    wo = a(w_o)  # (d_model, H d_v)
    o_abs = wc @ uv.transpose(-2, -1)  # (..., H, n, d_v): a bound on |o|
    merge = lambda x: x.transpose(-3, -2).flatten(-2)  # noqa: E731  (..., H, n, d_v) -> (..., n, H d_v)
    bound = merge(do) @ wo.T + 2 * (wo.shape[-1] + 1) * u * (merge(o_abs) @ wo.T)  # (..., n, d_model)
    return SAFETY * bound
