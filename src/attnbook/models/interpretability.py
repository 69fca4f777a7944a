r"""Reading a trained attention model: head outputs, attention scores, circuits, patching (chapter 10).

The quantities of the induction-head chapter, one function each, in the notation of
Elhage et al. (2021) (column convention for the weight matrices, as ``nn.Linear`` stores
them: the projections of head h are :math:`W_Q^h, W_K^h, W_V^h` (d_head, d_model) and its block of
the output projection :math:`W_O^h` (d_model, d_head)):

* :func:`run_with_heads`: run a :class:`attnbook.models.sequence.SequenceModel` and keep every head's
  attention weights and its output :math:`W_O^h o^h_t` (its term in the sum over heads of
  chapter 3), optionally replacing some heads' outputs (the tool of activation patching).
* :func:`patch_heads`: activation patching, the logits when some heads output what they output on
  another sequence.
* :func:`mean_weight_on`, :func:`induction_score`, :func:`duplicate_token_score`,
  :func:`previous_token_score`: how much weight each head puts on a chosen key.
* :func:`qk_matrix`, :func:`ov_matrix`, :func:`full_ov_circuit`, :func:`copying_score`: a head's
  bilinear score :math:`W_{QK}^h = W_Q^{h\top} W_K^h` and its linear map
  :math:`W_{OV}^h = W_O^h W_V^h`, read through the embedding and the unembedding.
* :func:`composition_score`, :func:`q_composition`, :func:`k_composition`, :func:`v_composition`:
  how much a later head reads what an earlier head writes.
* :func:`change_of_basis`: the same model with its residual stream written in another basis; every
  logit stays the same, the matrices above (and the composition scores) do not, while the circuits
  read through the embedding (:func:`full_ov_circuit`, ``E W_QK W_OV E^T``) do.

The circuit matrices ignore the biases and the layer norms: they are exact for a model built with
``norm=None`` (then the residual stream is a plain sum of embeddings and head outputs).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ..core.attention import attention
from ..core.masks import causal_mask, restrict_mask
from ..heads.multi_head import MultiHeadAttention, head_weights, project_heads
from ..positions.alibi import alibi_bias
from ..validators import check_index, check_shapes, check_type, skip_checks
from .blocks import ScoredAttention

__all__ = [
    "Trace",
    "change_of_basis",
    "composition_score",
    "copying_score",
    "duplicate_token_score",
    "full_ov_circuit",
    "head_matrices",
    "induction_score",
    "k_composition",
    "mean_weight_on",
    "ov_matrix",
    "patch_heads",
    "previous_token_score",
    "q_composition",
    "qk_matrix",
    "run_with_heads",
    "v_composition",
]

#: a replacement for a head's output: a tensor (batch, n, d_model) or a function of the original
Replacement = torch.Tensor | Callable[[torch.Tensor], torch.Tensor]


def _check_model(model: object) -> None:
    from .sequence import SequenceModel  # models imports nothing from here; avoid a cycle anyway

    check_type("model", model, SequenceModel, "attnbook.models.sequence.SequenceModel")
    if any(block.norm == "post" for block in model.blocks):
        raise ValueError("run_with_heads reads pre-norm or norm-free models (norm='pre' or None), not norm='post'")


def _check_head(model, layer: int, head: int) -> None:
    _check_model(model)
    check_index("layer", layer, len(model.blocks))
    check_index("head", head, model.blocks[layer].self_attn.num_heads)


@dataclass
class Trace:
    """What :func:`run_with_heads` kept from one forward pass.

    Attributes:
        logits: (batch, n, out_size), as ``model(tokens)`` returns them.
        weights: one (batch, heads, n, n) tensor per layer, the attention weights.
        head_outputs: one (batch, heads, n, d_model) tensor per layer: head h's term
            :math:`W_O^h o^h_t` of the layer's output (without the bias :math:`b_O`).
        residuals: the residual stream (batch, n, d_model) entering each layer, then the final one
            (num_layers + 1 tensors).
    """

    logits: torch.Tensor
    weights: list[torch.Tensor]
    head_outputs: list[torch.Tensor]
    residuals: list[torch.Tensor]


def _block_mask(block, n: int, device) -> torch.Tensor | None:
    """The mask (or float bias) a block's self-attention uses on n tokens: ALiBi, then causal."""
    mask = None
    if block.alibi:
        mask = alibi_bias(n, n, block.alibi_slopes)  # (heads, n, n)
    if block.causal:
        keep = causal_mask(n, device=device)  # (n, n)
        mask = restrict_mask(mask, keep)  # the bias where causal, -inf after
    return mask


# o^h = A^h V^h,   the head's term in the layer's output: W_O^h o^h   (chapter 3: a sum over heads)
def run_with_heads(
    model: nn.Module, tokens: torch.Tensor, *, replace: Mapping[tuple[int, int], Replacement] | None = None
) -> Trace:
    """Run a :class:`attnbook.models.sequence.SequenceModel` head by head and keep what each head did (chapter 10).

    Block by block this computes what the model computes, with the layer's output written as the
    sum over heads of chapter 3, :math:`\\sum_h W_O^h o^h_t + b_O`, so that each term can be read or
    replaced. ``replace`` maps ``(layer, head)`` to the output that head should have instead, a
    tensor (batch, n, d_model) or a function of the original output; the rest of the model then runs
    on the replaced value (activation patching, :func:`patch_heads`). Without ``replace`` the logits
    equal ``model(tokens)[0]`` up to rounding.

    Args:
        model: a ``SequenceModel`` with pre-norm or no norm (MLPs, causal masks and ALiBi allowed).
        tokens: integer ids (batch, n).

    Returns:
        a :class:`Trace`.
    """
    _check_model(model)
    replace = dict(replace or {})
    for layer, head in replace:
        check_index("layer", layer, len(model.blocks))
        check_index("head", head, model.blocks[layer].self_attn.num_heads)
    x = model.embed(tokens)  # (batch, n, d_model); checks the tokens
    n = x.shape[1]
    weights, head_outputs, residuals = [], [], []
    with skip_checks():
        for layer, block in enumerate(model.blocks):
            residuals.append(x)
            mha, H = block.self_attn, block.self_attn.num_heads
            h_in = block.norm1(x)  # (batch, n, d_model)
            q = project_heads(h_in, mha.q_proj.weight, mha.q_proj.bias, H)  # (batch, heads, n, d_head)
            k = project_heads(h_in, mha.k_proj.weight, mha.k_proj.bias, H)  # (batch, heads, n, d_head)
            v = project_heads(h_in, mha.v_proj.weight, mha.v_proj.bias, H)  # (batch, heads, n, d_head)
            o, a = attention(q, k, v, _block_mask(block, n, x.device))  # (batch, heads, n, d_head), (.., n, n)
            W_O = mha.out_proj.weight.reshape(-1, H, mha.head_dim).transpose(0, 1)  # (heads, d_model, d_head)
            per_head = o @ W_O.transpose(-2, -1)  # (batch, heads, n, d_head) @ (heads, d_head, d_model)
            for (at_layer, head), new in replace.items():  # -> per_head (batch, heads, n, d_model)
                if at_layer == layer:
                    new = new(per_head[:, head]) if callable(new) else new
                    if not isinstance(new, torch.Tensor) or new.shape != per_head[:, head].shape:
                        got = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
                        raise ValueError(
                            f"the replacement of head {head} of layer {layer} must be a tensor (batch, n, d_model) = "
                            f"{tuple(per_head[:, head].shape)}, got {got}"
                        )
                    per_head = per_head.clone()
                    per_head[:, head] = new
            out = per_head.sum(dim=1)  # (batch, n, d_model): the sum over heads
            if mha.out_proj.bias is not None:
                out = out + mha.out_proj.bias
            x = x + out
            if block.mlp is not None:
                x = x + block.mlp(block.norm2(x))
            weights.append(a)
            head_outputs.append(per_head)
        residuals.append(x)
        logits = model.head(model.final_norm(x))  # (batch, n, out_size)
    return Trace(logits, weights, head_outputs, residuals)


# patched logits = model(tokens) with the outputs of the chosen heads taken from model(source)
def patch_heads(
    model: nn.Module,
    tokens: torch.Tensor,
    source: torch.Tensor,
    heads: list[tuple[int, int]],
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Activation patching (chapter 10): the logits of ``tokens`` when each head ``(layer, head)``
    in ``heads`` outputs, at ``positions``, what it output on ``source`` instead.

    Args:
        tokens, source: integer ids (batch, n), the run to change and the run to copy from.
        heads: the (layer, head) pairs to patch.
        positions: optional (batch, n) boolean, True where the outputs are replaced (default
            everywhere).

    Returns:
        the patched logits (batch, n, out_size).
    """
    _check_model(model)
    if not heads:
        raise ValueError("heads must name at least one (layer, head) to patch")
    for layer, head in heads:
        _check_head(model, layer, head)
    check_shapes(tokens=(tokens, "(batch, n)", "any"), source=(source, "(batch, n)", "any"))
    if tuple(tokens.shape) != tuple(source.shape):
        raise ValueError(f"tokens and source must have one shape, got {tuple(tokens.shape)} and {tuple(source.shape)}")
    if positions is not None:
        check_shapes(positions=(positions, "(batch, n)", "bool"), tokens=(tokens, "(batch, n)", "any"))
    donor = run_with_heads(model, source).head_outputs  # one (batch, heads, n, d_model) per layer

    def replacement(layer: int, head: int) -> Replacement:
        new = donor[layer][:, head]  # (batch, n, d_model)
        if positions is None:
            return new
        return lambda original: torch.where(positions[..., None], new, original)  # (batch, n, d_model)

    return run_with_heads(model, tokens, replace={(l, h): replacement(l, h) for l, h in heads}).logits


# mean over chosen queries t of A[t, key(t)]
def mean_weight_on(weights: torch.Tensor, keys: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """The mean attention weight that each head puts on one chosen key per query (chapter 10).

    Args:
        weights: (batch, heads, n, m) attention weights.
        keys: (batch, n) integer: the key position chosen for each query.
        queries: (batch, n) boolean: which queries to average over (their keys must lie in [0, m)).

    Returns:
        (heads,): :math:`\\frac{1}{|T|}\\sum_{(b, t) \\in T} A^h_{b, t, \\text{keys}[b, t]}` over the
        chosen queries T.
    """
    check_shapes(
        weights=(weights, "(batch, heads, n, m)"),
        keys=(keys, "(batch, n)", "any"),
        queries=(queries, "(batch, n)", "bool"),
    )
    if not bool(queries.any()):
        raise ValueError("no query is chosen: queries is False everywhere")
    chosen = keys[queries]
    if int(chosen.min()) < 0 or int(chosen.max()) >= weights.shape[-1]:
        raise ValueError(
            f"the chosen keys must lie in [0, {weights.shape[-1]}), got {int(chosen.min())}..{int(chosen.max())}"
        )
    safe = keys.clamp(0, weights.shape[-1] - 1)  # unchosen queries may point anywhere
    on_key = weights.gather(-1, safe[:, None, :, None].expand(-1, weights.shape[1], -1, 1))[..., 0]  # (batch, heads, n)
    return on_key.transpose(0, 1)[:, queries].mean(dim=-1)  # (heads, batch, n) -> (heads, #chosen) -> (heads,)


def _positions(queries: torch.Tensor) -> torch.Tensor:
    return torch.arange(queries.shape[-1], device=queries.device).expand_as(queries)  # (batch, n): t


# induction score = mean over the copy of A[t, t - d + 1]: the token after the earlier occurrence
def induction_score(weights: torch.Tensor, offset: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Induction score per head (chapter 10, Olsson et al. (2022)): the mean weight that a
    query t inside a repeated segment puts on key t - d + 1, the token that *followed* the earlier
    occurrence of its own token (d is the sequence's offset, :class:`attnbook.models.tasks.RepeatedSegment`).

    Args: weights (batch, heads, n, n); offset (batch,) integer; queries (batch, n) boolean.
    Returns: (heads,).
    """
    check_shapes(offset=(offset, "(batch,)", "any"), queries=(queries, "(batch, n)", "bool"))
    return mean_weight_on(weights, _positions(queries) - offset[:, None] + 1, queries)


# duplicate-token score = mean over the copy of A[t, t - d]: the earlier occurrence of the same token
def duplicate_token_score(weights: torch.Tensor, offset: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Duplicate-token score per head (chapter 10): the mean weight that a query t inside a repeated
    segment puts on key t - d, the earlier occurrence of its own token.

    Args: weights (batch, heads, n, n); offset (batch,) integer; queries (batch, n) boolean.
    Returns: (heads,).
    """
    check_shapes(offset=(offset, "(batch,)", "any"), queries=(queries, "(batch, n)", "bool"))
    return mean_weight_on(weights, _positions(queries) - offset[:, None], queries)


# previous-token score = mean over t >= 1 of A[t, t - 1]
def previous_token_score(weights: torch.Tensor, queries: torch.Tensor | None = None) -> torch.Tensor:
    """Previous-token score per head (chapter 10): the mean weight that query t puts on key t - 1,
    over the queries ``queries`` (batch, n) boolean (default: every t >= 1).

    Args: weights (batch, heads, n, n). Returns: (heads,).
    """
    check_shapes(weights=(weights, "(batch, heads, n, m)"))
    batch, _, n, _ = weights.shape
    if queries is None:
        queries = torch.ones(batch, n, dtype=torch.bool, device=weights.device)
    check_shapes(queries=(queries, "(batch, n)", "bool"), weights=(weights, "(batch, heads, n, m)"))
    queries = queries.clone()
    queries[:, 0] = False  # query 0 has no previous token
    return mean_weight_on(weights, _positions(queries) - 1, queries)


def head_matrices(model: nn.Module, layer: int, head: int) -> dict[str, torch.Tensor]:
    """The projections of one head, as ``nn.Linear`` stores them (chapter 10):
    ``W_Q``, ``W_K``, ``W_V`` (d_head, d_model) and ``W_O`` (d_model, d_head), the column block of
    the output projection that belongs to the head."""
    _check_head(model, layer, head)
    mha = model.blocks[layer].self_attn
    H, d = mha.num_heads, mha.head_dim
    with skip_checks():
        W_Q = head_weights(mha.q_proj.weight, None, H)[0][head]  # (d_head, d_model)
        W_K = head_weights(mha.k_proj.weight, None, H)[0][head]  # (d_head, d_model)
        W_V = head_weights(mha.v_proj.weight, None, H)[0][head]  # (d_head, d_model)
    W_O = mha.out_proj.weight[:, head * d : (head + 1) * d]  # (d_model, d_head)
    return {"W_Q": W_Q, "W_K": W_K, "W_V": W_V, "W_O": W_O}


# W_QK^h = W_Q^h^T W_K^h:   score(x_q, x_k) = x_q^T W_QK^h x_k / sqrt(d_head)
def qk_matrix(model: nn.Module, layer: int, head: int) -> torch.Tensor:
    """The bilinear form of a head's scores, :math:`W_{QK}^h = W_Q^{h\\top} W_K^h` (d_model, d_model)
    (chapter 10): without biases, the score of query x_q on key x_k is
    :math:`x_q^\\top W_{QK}^h x_k / \\sqrt{d_\\text{head}}`."""
    m = head_matrices(model, layer, head)
    return m["W_Q"].T @ m["W_K"]  # (d_model, d_head) @ (d_head, d_model) -> (d_model, d_model)


# W_OV^h = W_O^h W_V^h:   what the head writes for a key x_k it attends to fully
def ov_matrix(model: nn.Module, layer: int, head: int) -> torch.Tensor:
    """The linear map of a head from what it reads to what it writes,
    :math:`W_{OV}^h = W_O^h W_V^h` (d_model, d_model) (chapter 10): attending only to key x_k, the
    head adds :math:`W_{OV}^h x_k` (plus biases) to the residual stream."""
    m = head_matrices(model, layer, head)
    return m["W_O"] @ m["W_V"]  # (d_model, d_head) @ (d_head, d_model) -> (d_model, d_model)


# full OV circuit = E W_OV^T W_U^T: row s = the logits a head adds when it attends to token s
def full_ov_circuit(model: nn.Module, layer: int, head: int) -> torch.Tensor:
    """The full OV circuit of a head, :math:`E\\, W_{OV}^{h\\top} W_U^\\top` (vocab_size, out_size)
    (chapter 10): row s holds the logits that the head adds, through the direct path to the output,
    when it attends only to the embedding :math:`e_s` of token s (rows of E are the embeddings, W_U
    is the output head's weight; biases, positions and layer norms left out). A head that copies has
    a large positive diagonal."""
    E = model.embed.token.weight  # (vocab_size, d_model)
    W_U = model.head.weight  # (out_size, d_model)
    return E @ ov_matrix(model, layer, head).T @ W_U.T  # (vocab, d_model) @ (d_model, d_model) @ (d_model, out)


# copying score = sum_i lambda_i / sum_i |lambda_i| over the eigenvalues of a square matrix
def copying_score(matrix: torch.Tensor) -> torch.Tensor:
    """The copying score of a square matrix (chapter 10, Elhage et al. (2021)):
    :math:`\\sum_i \\lambda_i / \\sum_i |\\lambda_i|` over its eigenvalues, a real number in [-1, 1];
    1 when every eigenvalue is positive (the map increases what it reads, like the identity)."""
    check_shapes(matrix=(matrix, "(n, n)"))
    eigenvalues = torch.linalg.eigvals(matrix.double() if matrix.device.type != "mps" else matrix)
    return (eigenvalues.sum().real / eigenvalues.abs().sum()).to(matrix.dtype)


# composition score = ||A B||_F / (||A||_F ||B||_F)
def composition_score(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """:math:`\\|A B\\|_F / (\\|A\\|_F \\|B\\|_F)` (chapter 10, Elhage et al. (2021)): how
    much of what ``right`` writes ``left`` reads; 0 when the column space of B is orthogonal to the
    row space of A, at most 1 (Cauchy-Schwarz). left (p, q), right (q, r)."""
    check_shapes(left=(left, "(p, q)"), right=(right, "(q, r)"))
    return torch.linalg.matrix_norm(left @ right) / (  # (p, q) @ (q, r) -> (p, r)
        torch.linalg.matrix_norm(left) * torch.linalg.matrix_norm(right)
    )


# Q-composition: ||W_QK^{later T} W_OV^{earlier}||_F / (...): the query reads the earlier head's output
def q_composition(model: nn.Module, earlier: tuple[int, int], later: tuple[int, int]) -> torch.Tensor:
    """Q-composition score (chapter 10): how much head ``later`` = (layer, head) forms its *queries*
    from what head ``earlier`` writes, :func:`composition_score` of
    :math:`W_{QK}^{\\text{later}\\top}` and :math:`W_{OV}^{\\text{earlier}}`."""
    _check_order(earlier, later)
    return composition_score(qk_matrix(model, *later).T, ov_matrix(model, *earlier))


# K-composition: ||W_QK^{later} W_OV^{earlier}||_F / (...): the key reads the earlier head's output
def k_composition(model: nn.Module, earlier: tuple[int, int], later: tuple[int, int]) -> torch.Tensor:
    """K-composition score (chapter 10): how much head ``later`` forms its *keys* from what head
    ``earlier`` writes, :func:`composition_score` of :math:`W_{QK}^{\\text{later}}` and
    :math:`W_{OV}^{\\text{earlier}}`."""
    _check_order(earlier, later)
    return composition_score(qk_matrix(model, *later), ov_matrix(model, *earlier))


# V-composition: ||W_OV^{later} W_OV^{earlier}||_F / (...): the value reads the earlier head's output
def v_composition(model: nn.Module, earlier: tuple[int, int], later: tuple[int, int]) -> torch.Tensor:
    """V-composition score (chapter 10): how much head ``later`` moves what head ``earlier`` wrote,
    :func:`composition_score` of :math:`W_{OV}^{\\text{later}}` and :math:`W_{OV}^{\\text{earlier}}`."""
    _check_order(earlier, later)
    return composition_score(ov_matrix(model, *later), ov_matrix(model, *earlier))


def _check_order(earlier: tuple[int, int], later: tuple[int, int]) -> None:
    if earlier[0] >= later[0]:
        raise ValueError(f"the earlier head's layer must come before the later one's, got {earlier} and {later}")


# x -> x G in every position: reads W -> W G^{-T}, writes W -> G^T W, so every logit stays the same
def change_of_basis(model: nn.Module, basis: torch.Tensor) -> nn.Module:
    r"""The same model with its residual stream written in another basis (chapter 10).

    For an invertible ``basis`` :math:`G` (d_model, d_model), the copy's residual stream at every
    position is :math:`x G` where the original's is the row :math:`x`: the token embeddings and the
    positional table are multiplied by :math:`G` on the right, every weight that reads the stream
    (the query, key and value projections, the output head) becomes :math:`W G^{-\top}`, and every
    weight and bias that writes to it (each layer's output projection) becomes :math:`G^\top W`.
    Then :math:`(x G)(W G^{-\top})^\top = x W^\top`: every query, key, value, attention weight and
    logit is the same, up to rounding, while :math:`W_{QK}^h` becomes
    :math:`G^{-1} W_{QK}^h G^{-\top}` and :math:`W_{OV}^h` becomes :math:`G^\top W_{OV}^h G^{-\top}`.
    Products read through the embedding, such as :math:`E\, W_{QK}^h W_{OV}^{h'} E^\top` or the
    full OV circuit, do not change; norms of the matrices themselves (the composition scores) do,
    unless :math:`G` is orthogonal.

    Only models without layer norm (which is not linear) or MLP are accepted: ``norm=None``,
    ``mlp=False``. The copy has ``basis``'s dtype and device; ``model`` is not changed. The copy's
    positional table (:math:`P G`) is its own and, unlike a new model's sinusoidal table, is saved
    in its ``state_dict``.

    Args:
        model: a :class:`attnbook.models.sequence.SequenceModel` built with ``norm=None, mlp=False``.
        basis: an invertible floating matrix (d_model, d_model).

    Returns:
        the changed copy.
    """
    _check_model(model)
    if any(block.mlp is not None for block in model.blocks) or not all(
        isinstance(m, nn.Identity) for m in [model.final_norm, *(b.norm1 for b in model.blocks)]
    ):
        raise ValueError(
            "change_of_basis needs a model built with norm=None and mlp=False (a layer norm is not linear)"
        )
    d_model = model.embed.token.weight.shape[1]
    check_shapes(basis=(basis, "(d, d)"))
    if tuple(basis.shape) != (d_model, d_model) or not basis.is_floating_point():
        raise ValueError(
            f"basis must be a floating (d_model, d_model) = ({d_model}, {d_model}) matrix, got "
            f"{tuple(basis.shape)} of {basis.dtype}"
        )
    try:
        inverse_t = torch.linalg.inv(basis).T  # G^{-T}
    except torch.linalg.LinAlgError as error:
        raise ValueError(f"basis must be invertible: {error}") from None
    if not bool(torch.isfinite(inverse_t).all()):
        raise ValueError("basis must be invertible (its inverse is not finite)")
    G = basis
    changed = copy.deepcopy(model).to(device=G.device, dtype=G.dtype)
    with torch.no_grad():
        changed.embed.token.weight.copy_(changed.embed.token.weight @ G)  # (vocab, d) @ (d, d): rows x -> x G
        if changed.embed.encoding is not None:
            # the copy's own table (sharing it would change ``model``), now p G: no longer the
            # sinusoidal table a new model builds, so it joins the copy's state_dict
            moved = changed.embed.encoding @ G  # (max_len, d) @ (d, d)
            changed.embed.register_buffer("encoding", moved, persistent=True)
        for block in changed.blocks:
            mha = block.self_attn
            for proj in (mha.q_proj, mha.k_proj, mha.v_proj):  # reads: (d_out, d) @ (d, d)
                proj.weight.copy_(proj.weight @ inverse_t)
            mha.out_proj.weight.copy_(G.T @ mha.out_proj.weight)  # writes: (d, d) @ (d, H d_head)
            if mha.out_proj.bias is not None:
                mha.out_proj.bias.copy_(mha.out_proj.bias @ G)  # (d,) @ (d, d): a row, like x
        changed.head.weight.copy_(changed.head.weight @ inverse_t)  # reads: (out, d) @ (d, d)
    return changed


def _blocks(model: nn.Module) -> nn.ModuleList:
    """The blocks :func:`ablate_head` indexes: ``model.blocks`` or ``model.decoder``."""
    for name in ("blocks", "decoder"):
        blocks = getattr(model, name, None)
        if isinstance(blocks, nn.ModuleList):
            return blocks
    raise TypeError(f"model must be a SequenceModel or an EncoderDecoder, got {type(model).__name__}")


# W_o^h = 0:  the model without head h of block `layer` (chapter 3: the output is a sum over heads)
def ablate_head(model: nn.Module, layer: int, head: int, *, attention: str = "self_attn") -> nn.Module:
    """A copy of ``model`` in which head ``head`` of block ``layer`` contributes nothing (chapters 3 and 7).

    By the sum-over-heads form of multi-head attention, zeroing the columns of ``out_proj.weight``
    that belong to head h (its block W_o^h) removes exactly that head's term. ``layer`` indexes
    ``model.blocks`` (:class:`SequenceModel`) or ``model.decoder`` (:class:`EncoderDecoder`);
    ``attention`` names the attention of that block (``"self_attn"`` or ``"cross_attn"``).
    """
    blocks = _blocks(model)
    check_index("layer", layer, len(blocks))
    mha = getattr(blocks[layer], attention, None)
    if not isinstance(mha, (MultiHeadAttention, ScoredAttention)):
        raise ValueError(f"block {layer} has no attention named {attention!r}")
    check_index("head", head, mha.num_heads)
    ablated = copy.deepcopy(model)
    columns = slice(head * mha.head_dim, (head + 1) * mha.head_dim)  # the block W_o^h of W_o
    with torch.no_grad():
        getattr(_blocks(ablated)[layer], attention).out_proj.weight[:, columns] = 0
    return ablated
