r"""Feature maps: the kernel of a kernel smoother written as a dot product of features (chapter 14).

Chapter 1 read attention as a kernel smoother (Nadaraya–Watson): the output for a query is the
average of the values weighted by a kernel :math:`\kappa(q, k_j)`,

.. math:: o = \frac{\sum_j \kappa(q, k_j)\, v_j}{\sum_j \kappa(q, k_j)},

and softmax attention is the exponential kernel :math:`\kappa(q, k) = e^{q \cdot k / \sqrt{d_k}}`
(that smoother is :func:`attnbook.attention`). A *feature map* :math:`\phi` replaces the kernel by
a dot product, :math:`\kappa(q, k) = \phi(q) \cdot \phi(k)`; the sums then factor through the
keys, :math:`\sum_j (\phi(q) \cdot \phi(k_j))\, v_j = \phi(q) \sum_j \phi(k_j)^\top v_j`, which is
linear attention (:mod:`attnbook.linear.linear_attention`). The functions there take the features
:math:`\phi(q), \phi(k)` already applied: a feature map is chosen here and applied by the caller.
"""

from __future__ import annotations

import torch

from ..validators import check_floating


# phi(x) = elu(x) + 1 = x + 1 (x > 0),  e^x (x <= 0)
def elu_plus_one(x: torch.Tensor) -> torch.Tensor:
    r"""The feature map :math:`\phi(x) = \operatorname{elu}(x) + 1` of Katharopoulos et al. (2020), entrywise (chapter 14).

    .. math:: \phi(x) = \operatorname{elu}(x) + 1 = \begin{cases} x + 1 & x > 0 \\ e^{x} & x \le 0 \end{cases}

    Every feature is positive, so every kernel value :math:`\phi(q) \cdot \phi(k)` is positive and
    the normaliser :math:`\phi(q_i) \cdot z_i` of linear attention is never 0 (unless every
    feature of a query underflows to 0, for entries below about -104 in float32, -745 in float64).

    Computed by the right-hand side, not as ``F.elu(x) + 1``: that sum cancels for negative
    :math:`x` (:math:`\operatorname{elu}(x) = e^x - 1` is rounded near -1, to an absolute error of
    about the dtype's eps), so in float32 its relative error is about :math:`6 \times 10^{-8} / e^x`:
    3% at :math:`x = -15` (2.98e-07 for :math:`e^{-15} = 3.06 \times 10^{-7}`) and 100% from about
    -17.3 on, where it is exactly 0 (float64: from about -37.4). The two differ by at most the
    dtype's eps; the gradient is 1 for :math:`x > 0` and :math:`e^x` below, as elu's.

    Args:
        x: a floating tensor of any shape, e.g. queries or keys (..., n, d_k).

    Returns:
        A tensor of the shape, dtype and device of ``x``, every entry > 0 (or 0 after underflow).
    """
    check_floating("x", x)
    # exp of min(x, 0): the branch not taken stays finite, so no inf * 0 = nan reaches the gradient
    return torch.where(x > 0, x + 1.0, torch.exp(x.clamp(max=0.0)))
