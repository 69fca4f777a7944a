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
from torch import nn

from ._checks import check_floating, check_ndim, check_same_dtype_device, check_tensor
from .attention import attention


def _check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def _check_heads_divide(width: int, num_heads: int, what: str) -> int:
    num_heads = _check_positive("num_heads", num_heads)
    if width % num_heads != 0:
        raise ValueError(
            f"{what} = {width} is not divisible by num_heads = {num_heads}: every head needs "
            f"d_head = {what} / num_heads features"
        )
    return width // num_heads


# X[..., n, h * d_head + e] -> X^h[..., n, e]: (..., n, heads * d_head) -> (..., heads, n, d_head)
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split the last axis into ``num_heads`` consecutive blocks, one per head (chapter 3).

    Head h owns features ``h * d_head`` to ``(h + 1) * d_head - 1``. Shape (..., n, heads * d_head)
    becomes (..., heads, n, d_head). The inverse of :func:`merge_heads`.
    """
    check_tensor("x", x)
    check_ndim("x", x, 2, "(..., n, heads * d_head)", at_least=True)
    d_head = _check_heads_divide(x.shape[-1], num_heads, "the last dimension of x")
    x = x.reshape(*x.shape[:-1], num_heads, d_head)  # (..., n, heads, d_head)
    return x.transpose(-3, -2)  # (..., heads, n, d_head)


# concat(O^1, ..., O^H) = [O^1 | ... | O^H]: (..., heads, n, d_head) -> (..., n, heads * d_head)
def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads along the feature axis, head 1 first (chapter 3).

    Shape (..., heads, n, d_head) becomes (..., n, heads * d_head). The inverse of
    :func:`split_heads`.
    """
    check_tensor("x", x)
    check_ndim("x", x, 3, "(..., heads, n, d_head)", at_least=True)
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
    check_floating("weight", weight)
    check_ndim("weight", weight, 2, "(heads * d_head, d_in)")
    d_head = _check_heads_divide(weight.shape[0], num_heads, "weight.shape[0]")
    W = weight.reshape(num_heads, d_head, weight.shape[1])  # (heads, d_head, d_in)
    if bias is None:
        return W, None
    check_floating("bias", bias)
    if tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"bias must have shape ({weight.shape[0]},) to match weight {tuple(weight.shape)}, got {tuple(bias.shape)}")
    return W, bias.reshape(num_heads, d_head)  # (heads, d_head)


def _check_projection(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    check_floating("x", x)
    check_floating("weight", weight)
    check_ndim("x", x, 2, "(..., n, d_in)", at_least=True)
    check_ndim("weight", weight, 2, "(heads * d_head, d_in)")
    check_same_dtype_device(x=x, weight=weight, bias=bias)
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"x (..., n, d_in) has d_in = {x.shape[-1]} but weight (heads * d_head, d_in) has shape "
            f"{tuple(weight.shape)}"
        )


# Q^h = X W^{h T} + b^h for all h at once:  split_heads(X W^T + b)
def project_heads(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, num_heads: int
) -> torch.Tensor:
    """Project for all heads with one fused matrix product, then split (chapter 3).

    Args:
        x: (..., n, d_in).
        weight: (heads * d_head, d_in), the per-head matrices W^h stacked row-wise.
        bias: (heads * d_head,) or None.
        num_heads: H.

    Returns:
        (..., heads, n, d_head); slice h equals ``x @ W^h.T + b^h`` (see :func:`project_per_head`).
    """
    _check_projection(x, weight, bias)
    y = x @ weight.T  # (..., n, d_in) @ (d_in, heads * d_head) -> (..., n, heads * d_head)
    if bias is not None:
        y = y + bias  # (..., n, heads * d_head)
    return split_heads(y, num_heads)  # (..., heads, n, d_head)


# Q^h = X W^{h T} + b^h, one head at a time
def project_per_head(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, num_heads: int
) -> torch.Tensor:
    """Project head by head with the blocks W^h of :func:`head_weights` (chapter 3).

    The same numbers as :func:`project_heads`, computed by a loop of H small products instead of
    one large one; it exists to show that the fused form is only a faster way to write this.
    """
    _check_projection(x, weight, bias)
    W, b = head_weights(weight, bias, num_heads)  # (heads, d_head, d_in), (heads, d_head)
    per_head = []
    for h in range(num_heads):
        y = x @ W[h].T  # (..., n, d_in) @ (d_in, d_head) -> (..., n, d_head)
        if b is not None:
            y = y + b[h]
        per_head.append(y)
    return torch.stack(per_head, dim=-3)  # (..., heads, n, d_head)


def _check_output_projection(heads_out: torch.Tensor, W_o: torch.Tensor, b_o: torch.Tensor | None) -> None:
    check_floating("heads_out", heads_out)
    check_floating("W_o", W_o)
    check_ndim("heads_out", heads_out, 3, "(..., heads, n, d_head)", at_least=True)
    check_ndim("W_o", W_o, 2, "(d_out, heads * d_head)")
    check_same_dtype_device(heads_out=heads_out, W_o=W_o, b_o=b_o)
    heads, _, d_head = heads_out.shape[-3:]
    if W_o.shape[1] != heads * d_head:
        raise ValueError(
            f"W_o (d_out, heads * d_head) has shape {tuple(W_o.shape)} but heads_out (..., heads, n, "
            f"d_head) has shape {tuple(heads_out.shape)}, so heads * d_head = {heads * d_head}"
        )
    if b_o is not None and tuple(b_o.shape) != (W_o.shape[0],):
        raise ValueError(f"b_o must have shape ({W_o.shape[0]},) to match W_o {tuple(W_o.shape)}, got {tuple(b_o.shape)}")


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
    _check_output_projection(heads_out, W_o, b_o)
    y = merge_heads(heads_out) @ W_o.T  # (..., n, heads * d_head) @ (heads * d_head, d_out) -> (..., n, d_out)
    return y if b_o is None else y + b_o


# Y = sum_h O^h W_o^{h T} + b_o,   W_o^h = W_o[:, h * d_head : (h + 1) * d_head]
def sum_over_heads(heads_out: torch.Tensor, W_o: torch.Tensor, b_o: torch.Tensor | None = None) -> torch.Tensor:
    """The output projection as a sum over heads, each through its own column block of W_o (chapter 3).

    Equal to :func:`concat_then_project`: multiplying a concatenation by a matrix is the sum of
    the blocks times the matching column blocks W_o^h (d_out, d_head). This is the form of the
    column-convention :func:`attnbook.formal.mh_attention`.
    """
    _check_output_projection(heads_out, W_o, b_o)
    heads, _, d_head = heads_out.shape[-3:]
    W_blocks = W_o.reshape(W_o.shape[0], heads, d_head).transpose(0, 1)  # (heads, d_out, d_head)
    y = heads_out[..., 0, :, :] @ W_blocks[0].T  # (..., n, d_head) @ (d_head, d_out) -> (..., n, d_out)
    for h in range(1, heads):
        y = y + heads_out[..., h, :, :] @ W_blocks[h].T  # (..., n, d_head) @ (d_head, d_out) -> (..., n, d_out)
    return y if b_o is None else y + b_o


# params = d_model (d_model + kdim + vdim) + d_model^2  [+ 4 d_model with biases]
def mha_parameter_count(embed_dim: int, *, kdim: int | None = None, vdim: int | None = None, bias: bool = True) -> int:
    r"""Number of parameters of :class:`MultiHeadAttention` (chapter 3).

    .. math:: d_\text{model}(d_\text{model} + d_k + d_v) + d_\text{model}^2
              + [\text{bias}]\, 4 d_\text{model}

    with :math:`d_k` = ``kdim`` and :math:`d_v` = ``vdim`` (both ``embed_dim`` by default). It does
    not depend on the number of heads: more heads means narrower heads.
    """
    d = _check_positive("embed_dim", embed_dim)
    d_k = d if kdim is None else _check_positive("kdim", kdim)
    d_v = d if vdim is None else _check_positive("vdim", vdim)
    return d * (d + d_k + d_v) + d * d + (4 * d if bias else 0)


# FLOPs = 2 batch [n d_model^2 + m kdim d_model + m vdim d_model + 2 n m d_model + n d_model^2]
def mha_flops(
    n: int, m: int, embed_dim: int, *, kdim: int | None = None, vdim: int | None = None, batch: int = 1
) -> int:
    r"""Floating-point operations of the matrix products of one :class:`MultiHeadAttention` call (chapter 3).

    A product of an (a, b) and a (b, c) matrix costs 2abc operations (a multiply and an add per
    term). The five products are the projections of Q (n rows), K and V (m rows), the scores
    Q K^T and the weighted sum A V (heads of them, each n * m * d_head, so n * m * d_model in all),
    and the output projection:

    .. math:: 2B\,\bigl(n d_\text{model}^2 + m d_k d_\text{model} + m d_v d_\text{model}
              + 2 n m d_\text{model} + n d_\text{model}^2\bigr)

    Like the parameter count it does not depend on the number of heads. The softmax, the mask and
    the bias additions (O(heads * n * m) and O(n * d_model) elementwise work) are not counted.
    """
    n, m = _check_positive("n", n), _check_positive("m", m)
    d = _check_positive("embed_dim", embed_dim)
    d_k = d if kdim is None else _check_positive("kdim", kdim)
    d_v = d if vdim is None else _check_positive("vdim", vdim)
    batch = _check_positive("batch", batch)
    return 2 * batch * (n * d * d + m * d_k * d + m * d_v * d + 2 * n * m * d + n * d * d)


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
        self.embed_dim = _check_positive("embed_dim", embed_dim)
        self.head_dim = _check_heads_divide(embed_dim, num_heads, "embed_dim")
        self.num_heads = num_heads
        self.kdim = embed_dim if kdim is None else _check_positive("kdim", kdim)
        self.vdim = embed_dim if vdim is None else _check_positive("vdim", vdim)
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be a bool, got {type(bias).__name__}")
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
    def from_torch(cls, mha: nn.MultiheadAttention) -> "MultiHeadAttention":
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
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"mha must be a torch.nn.MultiheadAttention, got {type(mha).__name__}")
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

    def _check_inputs(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        for name, x, width, layout in (
            ("query", query, self.embed_dim, "(batch, n, embed_dim)"),
            ("key", key, self.kdim, "(batch, m, kdim)"),
            ("value", value, self.vdim, "(batch, m, vdim)"),
        ):
            check_floating(name, x)
            check_ndim(name, x, 3, f"{layout}; add a batch axis with x[None] for one sequence")
            if x.shape[-1] != width:
                raise ValueError(
                    f"{name} {layout} must have last dimension {width}, got shape {tuple(x.shape)}"
                )
        weight = self.q_proj.weight
        check_same_dtype_device(query=query, key=key, value=value, parameters=weight)
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                f"query, key and value must have the same batch size, got shapes {tuple(query.shape)}, "
                f"{tuple(key.shape)} and {tuple(value.shape)}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key (batch, m, kdim) and value (batch, m, vdim) must have the same number m of tokens, "
                f"got {tuple(key.shape)} and {tuple(value.shape)}"
            )

    def _heads_mask(self, mask: torch.Tensor, batch: int, n: int, m: int) -> torch.Tensor:
        """Bring a mask of shape (n, m), (batch, n, m) or (batch, heads, n, m) to four dimensions."""
        check_tensor("mask", mask)
        layouts = {2: (n, m), 3: (batch, n, m), 4: (batch, self.num_heads, n, m)}
        if mask.ndim not in layouts:
            raise ValueError(
                f"mask must have 2, 3 or 4 dimensions, (n, m), (batch, n, m) or (batch, heads, n, m) = "
                f"{layouts[4]}, got shape {tuple(mask.shape)}"
            )
        target = layouts[mask.ndim]
        try:
            ok = tuple(torch.broadcast_shapes(tuple(mask.shape), target)) == target
        except RuntimeError:
            ok = False
        if not ok:
            names = {2: "(n, m)", 3: "(batch, n, m)", 4: "(batch, heads, n, m)"}[mask.ndim]
            raise ValueError(
                f"a {mask.ndim}-D mask is read as {names} = {target} (size-1 axes broadcast), got shape "
                f"{tuple(mask.shape)}"
            )
        if mask.ndim == 3:
            mask = mask.unsqueeze(1)  # (batch, 1, n, m): the same mask for every head
        return mask

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
        self._check_inputs(query, key, value)
        batch, n, m = query.shape[0], query.shape[1], key.shape[1]
        if mask is not None:
            mask = self._heads_mask(mask, batch, n, m)  # (batch or 1, heads or 1, n, m)
        H = self.num_heads
        q = project_heads(query, self.q_proj.weight, self.q_proj.bias, H)  # (batch, heads, n, d_head)
        k = project_heads(key, self.k_proj.weight, self.k_proj.bias, H)  # (batch, heads, m, d_head)
        v = project_heads(value, self.v_proj.weight, self.v_proj.bias, H)  # (batch, heads, m, d_head)
        heads_out, weights = attention(q, k, v, mask=mask, need_weights=need_weights)  # (batch, heads, n, d_head)
        output = concat_then_project(heads_out, self.out_proj.weight, self.out_proj.bias)  # (batch, n, embed_dim)
        return output, weights
