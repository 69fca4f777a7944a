r"""Multi-head attention in the row convention (chapter 3).

Each of H heads projects the inputs with its own weights, attends, and the H outputs are
concatenated and mixed by an output matrix:

.. math:: \operatorname{MultiHead}(X, Z) = [O^1 \mid \dots \mid O^H]\, W_o^\top + b_o, \qquad
          O^h = \operatorname{Attention}(X W_q^{h\top} + b_q^h,\; Z W_k^{h\top} + b_k^h,\;
          Z W_v^{h\top} + b_v^h)

The per-head matrices :math:`W_q^h` (d_head, d_model) are stacked row-wise into one fused
matrix :math:`W_q` (heads * d_head, d_model), so one matrix product projects all heads at once;
:func:`project_heads` does that and :func:`project_per_head` the loop over heads, and the two
agree. Weight matrices are stored as in ``torch.nn.Linear`` (out_features, in_features), so that
:meth:`MultiHeadAttention.from_torch` copies ``torch.nn.MultiheadAttention`` without transposes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..core.attention import attention
from ..core.masks import heads_mask
from ..validators import check_divisible, check_shapes, check_sizes, check_type, skip_checks


# X[..., n, h * d_head + e] -> X^h[..., n, e]: (..., n, heads * d_head) -> (..., heads, n, d_head)
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split the last axis into ``num_heads`` consecutive blocks, one per head (chapter 3).

    Head h owns features ``h * d_head`` to ``(h + 1) * d_head - 1``. Shape (..., n, heads * d_head)
    becomes (..., heads, n, d_head). The inverse of :func:`merge_heads`.
    """
    check_shapes(x=(x, "(..., n, num_heads * d_head)", "any"), num_heads=num_heads)
    d_head = x.shape[-1] // num_heads
    x = x.reshape(*x.shape[:-1], num_heads, d_head)  # (..., n, heads, d_head)
    return x.transpose(-3, -2)  # (..., heads, n, d_head)


# concat(O^1, ..., O^H) = [O^1 | ... | O^H]: (..., heads, n, d_head) -> (..., n, heads * d_head)
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads along the feature axis, head 1 first (chapter 3).

    Shape (..., heads, n, d_head) becomes (..., n, heads * d_head). The inverse of
    :func:`split_heads`.
    """
    check_shapes(x=(x, "(..., heads, n, d_head)", "any"))
    heads, n, d_head = x.shape[-3:]
    x = x.transpose(-3, -2)  # (..., n, heads, d_head)
    return x.reshape(*x.shape[:-2], heads * d_head)  # (..., n, heads * d_head)


# W^h = W[h * d_head : (h + 1) * d_head, :],  b^h = b[h * d_head : (h + 1) * d_head]
def head_weights(
    weight: torch.Tensor, bias: torch.Tensor | None, num_heads: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The per-head blocks of a fused projection (chapter 3).

    Args:
        weight: fused matrix (heads * d_head, d_in), stored as in ``nn.Linear``.
        bias: fused bias (heads * d_head,) or None.
        num_heads: H.

    Returns:
        ``(W, b)`` with ``W[h]`` = W^h of shape (d_head, d_in), so W is (heads, d_head, d_in), and
        ``b[h]`` = b^h, so b is (heads, d_head) (or None).
    """
    check_shapes(
        weight=(weight, "(num_heads * d_head, d_in)"), bias=(bias, "(num_heads * d_head,)"), num_heads=num_heads
    )
    d_head = weight.shape[0] // num_heads
    W = weight.reshape(num_heads, d_head, weight.shape[1])  # (heads, d_head, d_in)
    if bias is None:
        return W, None
    return W, bias.reshape(num_heads, d_head)  # (heads, d_head)


# Q^h = X W^{h T} + b^h for all h at once:  split_heads(X W^T + b)
def project_heads(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, num_heads: int) -> torch.Tensor:
    """Project for all heads with one fused matrix product, then split (chapter 3).

    Args:
        x: (..., n, d_in).
        weight: (heads * d_head, d_in), the per-head matrices W^h stacked row-wise.
        bias: (heads * d_head,) or None.
        num_heads: H.

    Returns:
        (..., heads, n, d_head); slice h equals ``x @ W^h.T + b^h`` (see :func:`project_per_head`).
    """
    check_shapes(
        x=(x, "(..., n, d_in)"),
        weight=(weight, "(num_heads * d_head, d_in)"),
        bias=(bias, "(num_heads * d_head,)"),
        num_heads=num_heads,
    )
    y = F.linear(x, weight, bias)  # X W^T + b: (..., n, d_in) @ (d_in, heads * d_head) -> (..., n, heads * d_head)
    return split_heads(y, num_heads)  # (..., heads, n, d_head)


# Q^h = X W^{h T} + b^h, one head at a time
def project_per_head(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, num_heads: int) -> torch.Tensor:
    """Project head by head with the blocks W^h of :func:`head_weights` (chapter 3).

    The same numbers as :func:`project_heads`, computed by a loop of H small products instead of
    one large one; it exists to show that the fused form is only a faster way to write this.
    """
    check_shapes(
        x=(x, "(..., n, d_in)"),
        weight=(weight, "(num_heads * d_head, d_in)"),
        bias=(bias, "(num_heads * d_head,)"),
        num_heads=num_heads,
    )
    W, b = head_weights(weight, bias, num_heads)  # (heads, d_head, d_in), (heads, d_head)
    per_head = []
    for h in range(num_heads):
        y = x @ W[h].T  # (..., n, d_in) @ (d_in, d_head) -> (..., n, d_head)
        if b is not None:
            y = y + b[h]
        per_head.append(y)
    return torch.stack(per_head, dim=-3)  # (..., heads, n, d_head)


# Y = [O^1 | ... | O^H] W_o^T + b_o
def concat_then_project(heads_out: torch.Tensor, W_o: torch.Tensor, b_o: torch.Tensor | None = None) -> torch.Tensor:
    """Concatenate the head outputs, then apply the output projection (chapter 3).

    Args:
        heads_out: (..., heads, n, d_head), the outputs O^h of the heads.
        W_o: (d_out, heads * d_head), stored as in ``nn.Linear``.
        b_o: (d_out,) or None.

    Returns:
        (..., n, d_out).
    """
    check_shapes(
        heads_out=(heads_out, "(..., heads, n, d_head)"), W_o=(W_o, "(d_out, heads * d_head)"), b_o=(b_o, "(d_out,)")
    )
    # [O^1 | ... | O^H] W_o^T + b_o: (..., n, heads * d_head) @ (heads * d_head, d_out) -> (..., n, d_out)
    return F.linear(merge_heads(heads_out), W_o, b_o)


# Y = sum_h O^h W_o^{h T} + b_o,   W_o^h = W_o[:, h * d_head : (h + 1) * d_head]
def sum_over_heads(heads_out: torch.Tensor, W_o: torch.Tensor, b_o: torch.Tensor | None = None) -> torch.Tensor:
    """The output projection as a sum over heads, each through its own column block of W_o (chapter 3).

    Equal to :func:`concat_then_project`: multiplying a concatenation by a matrix is the sum of
    the blocks times the matching column blocks W_o^h (d_out, d_head). This is the form of the
    column-convention :func:`attnbook.core.column_convention.mh_attention`.
    """
    check_shapes(
        heads_out=(heads_out, "(..., heads, n, d_head)"), W_o=(W_o, "(d_out, heads * d_head)"), b_o=(b_o, "(d_out,)")
    )
    heads, _, d_head = heads_out.shape[-3:]
    W_blocks = W_o.reshape(W_o.shape[0], heads, d_head).transpose(0, 1)  # (heads, d_out, d_head)
    y = heads_out[..., 0, :, :] @ W_blocks[0].T  # (..., n, d_head) @ (d_head, d_out) -> (..., n, d_out)
    for h in range(1, heads):
        y = y + heads_out[..., h, :, :] @ W_blocks[h].T  # (..., n, d_head) @ (d_head, d_out) -> (..., n, d_out)
    return y if b_o is None else y + b_o


# params = d_model (d_model + kdim + vdim) + d_model^2  [+ 4 d_model with biases]
def mha_parameter_count(embed_dim: int, *, kdim: int | None = None, vdim: int | None = None, bias: bool = True) -> int:
    r"""Number of parameters of :class:`MultiHeadAttention` (chapter 3).

    .. math:: d_\text{model}(d_\text{model} + d_{z,k} + d_{z,v}) + d_\text{model}^2
              + [\text{bias}]\, 4 d_\text{model}

    with :math:`d_{z,k}` = ``kdim`` and :math:`d_{z,v}` = ``vdim``, the widths of the tokens keys and
    values are computed from (both ``embed_dim`` by default). It does
    not depend on the number of heads: more heads means narrower heads.
    """
    check_sizes(embed_dim=embed_dim, kdim=kdim, vdim=vdim)
    d = embed_dim
    d_zk = d if kdim is None else kdim
    d_zv = d if vdim is None else vdim
    return d * (d + d_zk + d_zv) + d * d + (4 * d if bias else 0)


# FLOPs = 2 batch [n d_model^2 + m d_zk d_model + m d_zv d_model + 2 n m d_model + n d_model^2]
def mha_flops(
    n: int, m: int, embed_dim: int, *, kdim: int | None = None, vdim: int | None = None, batch: int = 1
) -> int:
    r"""Floating-point operations of the matrix products of one :class:`MultiHeadAttention` call (chapter 3).

    A product of an (a, b) and a (b, c) matrix costs 2abc operations (a multiply and an add per
    term). The five products are the projections of Q (n rows), K and V (m rows), the scores
    Q K^T and the weighted sum A V (heads of them, each n * m * d_head, so n * m * d_model in all),
    and the output projection:

    .. math:: 2B\,\bigl(n d_\text{model}^2 + m d_{z,k} d_\text{model} + m d_{z,v} d_\text{model}
              + 2 n m d_\text{model} + n d_\text{model}^2\bigr)

    Like the parameter count it does not depend on the number of heads. The softmax, the mask and
    the bias additions (O(heads * n * m) and O(n * d_model) elementwise work) are not counted.
    """
    check_sizes(n=n, m=m, embed_dim=embed_dim, kdim=kdim, vdim=vdim, batch=batch)
    d = embed_dim
    d_zk = d if kdim is None else kdim
    d_zv = d if vdim is None else vdim
    return 2 * batch * (n * d * d + m * d_zk * d + m * d_zv * d + 2 * n * m * d + n * d * d)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention, batch first, row convention (chapter 3).

    .. math:: \operatorname{MultiHead}(X, Z) = [O^1 \mid \dots \mid O^H]\, W_o^\top + b_o, \quad
              O^h = \operatorname{Attention}(X W_q^{h\top} + b_q^h, Z W_k^{h\top} + b_k^h, Z W_v^{h\top} + b_v^h)

    Parameters, stored as ``nn.Linear`` layers (weight (out, in)): ``q_proj`` (embed_dim ->
    embed_dim), ``k_proj`` (kdim -> embed_dim), ``v_proj`` (vdim -> embed_dim) and ``out_proj``
    (embed_dim -> embed_dim). Rows ``h * d_head`` to ``(h + 1) * d_head - 1`` of the first three
    weights belong to head h (d_head = embed_dim / num_heads).

    Args:
        embed_dim: d_model, the width of the queries and of the output.
        num_heads: H; must divide ``embed_dim``.
        kdim, vdim: widths of the key and value inputs (default ``embed_dim``), for
            cross-attention to a context of another width.
        bias: whether the four projections have biases.
        device, dtype: where and in which dtype to create the parameters.

    There is no dropout: the module computes the formula above, which is what
    ``torch.nn.MultiheadAttention`` computes in ``eval()`` mode.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kdim: int | None = None,
        vdim: int | None = None,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(embed_dim=embed_dim, num_heads=num_heads, kdim=kdim, vdim=vdim)
        check_divisible("embed_dim", embed_dim, num_heads, "num_heads", why="every head gets embed_dim / num_heads")
        check_type("bias", bias, bool)
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias, **factory)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise as ``torch.nn.MultiheadAttention`` does: Xavier-uniform weights, zero biases."""
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight)
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    @property
    def bias(self) -> bool:
        return self.q_proj.bias is not None

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
            f"kdim={self.kdim}, vdim={self.vdim}, bias={self.bias}"
        )

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of the weights of a ``torch.nn.MultiheadAttention`` (chapter 3).

        The copy gives the same outputs as ``mha`` for batch-first inputs (``mha`` in ``eval()``
        mode if it has dropout), with masks converted from PyTorch's "True = blocked" to this
        module's "True = may attend" (:func:`attnbook.keep_to_block` and
        :func:`attnbook.block_to_keep`). Handles ``kdim``/``vdim`` (PyTorch then stores separate
        ``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight``) and ``bias=False``. The weights do
        not depend on ``batch_first``; only the input layout does.

        Raises:
            TypeError: if ``mha`` is not a ``torch.nn.MultiheadAttention``.
            ValueError: if it uses ``add_bias_kv`` or ``add_zero_attn``, which this module lacks.
        """
        check_type("mha", mha, nn.MultiheadAttention, "torch.nn.MultiheadAttention")
        if mha.bias_k is not None or mha.bias_v is not None or mha.add_zero_attn:
            raise ValueError(
                "MultiHeadAttention has no add_bias_kv or add_zero_attn; cannot copy a "
                "torch.nn.MultiheadAttention that uses them"
            )
        E = mha.embed_dim
        if mha._qkv_same_embed_dim:
            W_q, W_k, W_v = mha.in_proj_weight.chunk(3, dim=0)  # 3 x (E, E)
        else:
            W_q, W_k, W_v = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
        has_bias = mha.in_proj_bias is not None
        ref = mha.out_proj.weight
        new = cls(E, mha.num_heads, kdim=mha.kdim, vdim=mha.vdim, bias=has_bias, device=ref.device, dtype=ref.dtype)
        with torch.no_grad():
            new.q_proj.weight.copy_(W_q)
            new.k_proj.weight.copy_(W_k)
            new.v_proj.weight.copy_(W_v)
            new.out_proj.weight.copy_(mha.out_proj.weight)
            if has_bias:
                b_q, b_k, b_v = mha.in_proj_bias.chunk(3)  # 3 x (E,)
                new.q_proj.bias.copy_(b_q)
                new.k_proj.bias.copy_(b_k)
                new.v_proj.bias.copy_(b_v)
                new.out_proj.bias.copy_(mha.out_proj.bias)
        return new

    # MultiHead(X, Z) = concat_h Attention(X W_q^h^T + b_q^h, Z W_k^h^T + b_k^h, Z W_v^h^T + b_v^h) W_o^T + b_o
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Multi-head attention of the queries over the keys and values (chapter 3).

        Args:
            query: (batch, n, embed_dim), the primary sequence X.
            key: (batch, m, kdim), value: (batch, m, vdim), the context Z (pass the same tensor
                three times for self-attention).
            mask: optional, with the meaning of :func:`attnbook.attention`: boolean True = may
                attend, or floating, added to the scores. Its shape is read by its number of
                dimensions: (n, m) for all sequences and heads; (batch, n, m) per sequence, shared
                by the heads (a padding mask is ``padding_mask(lengths)[:, None, :]``); (batch,
                heads, n, m) per sequence and head. Size-1 axes broadcast. A 3-D mask is never
                read as (heads, n, m).
            need_weights: if True, compute the weights explicitly and return them per head; if
                False, use PyTorch's fused ``scaled_dot_product_attention`` and return None.

        Returns:
            ``(output, weights)``: output (batch, n, embed_dim); weights (batch, heads, n, m) or
            None. A query with no key to attend to gets weights 0, so its output is ``b_o``.
        """
        check_shapes(
            query=(query, "(batch, n, embed_dim)"),
            key=(key, "(batch, m, kdim)"),
            value=(value, "(batch, m, vdim)"),
            parameters=(self.q_proj.weight, "(embed_dim, embed_dim)"),
            embed_dim=self.embed_dim,
            kdim=self.kdim,
            vdim=self.vdim,
        )
        batch, n, m, H = query.shape[0], query.shape[1], key.shape[1], self.num_heads
        mask = heads_mask(mask, batch, H, n, m, like=query)  # (batch or 1, heads or 1, n, m), read by its ndim
        with skip_checks():  # the inputs are checked above; the formulas below need not check them again
            q = project_heads(query, self.q_proj.weight, self.q_proj.bias, H)  # (batch, heads, n, d_head)
            k = project_heads(key, self.k_proj.weight, self.k_proj.bias, H)  # (batch, heads, m, d_head)
            v = project_heads(value, self.v_proj.weight, self.v_proj.bias, H)  # (batch, heads, m, d_head)
            heads_out, weights = attention(q, k, v, mask=mask, need_weights=need_weights)  # (batch, heads, n, d_head)
            output = concat_then_project(heads_out, self.out_proj.weight, self.out_proj.bias)  # (batch, n, embed_dim)
        return output, weights
