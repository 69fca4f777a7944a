"""attnbook.models.interpretability (chapter 10): each quantity against its definition, on every device."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook.models.configs import SequenceModelConfig
from attnbook.models.interpretability import (
    Trace,
    ablate_head,
    change_of_basis,
    composition_score,
    copying_score,
    duplicate_token_score,
    full_ov_circuit,
    head_matrices,
    induction_score,
    k_composition,
    mean_weight_on,
    ov_matrix,
    patch_heads,
    previous_token_score,
    q_composition,
    qk_matrix,
    run_with_heads,
    v_composition,
)
from attnbook.models.sequence import SequenceModel

from ..conftest import tolerances


def _model(device, dtype, layers=2, **kwargs):
    torch.manual_seed(0)
    options = {"max_len": 12, "causal": True, "mlp": False, "norm": None} | kwargs
    return SequenceModel(SequenceModelConfig(7, 8, 2, layers, **options), device=device, dtype=dtype).eval()


def _tokens(device, batch=3, n=10, seed=1):
    return torch.randint(7, (batch, n), generator=torch.Generator().manual_seed(seed)).to(device)


CONFIGS = [
    {},
    {"norm": "pre"},
    {"mlp": True, "norm": "pre"},
    {"causal": False},
    {"positional": "alibi"},
    {"positional": None, "layers": 3},
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_run_with_heads_computes_what_the_model_computes(config, device, dtype):
    config = dict(config)
    model = _model(device, dtype, config.pop("layers", 2), **config)
    tokens = _tokens(device)
    trace = run_with_heads(model, tokens)
    assert isinstance(trace, Trace)
    logits, weights = model(tokens, need_weights=True)
    torch.testing.assert_close(trace.logits, logits, **tolerances(dtype))
    assert len(trace.weights) == len(weights) == len(trace.head_outputs) == len(trace.residuals) - 1
    for mine, theirs in zip(trace.weights, weights):
        torch.testing.assert_close(mine, theirs, **tolerances(dtype))
    assert trace.head_outputs[0].shape == (3, 2, 10, 8)
    assert trace.logits.device.type == device.type and trace.logits.dtype == dtype


def test_the_head_outputs_sum_to_the_layers_output(device, dtype):
    model = _model(device, dtype)
    trace = run_with_heads(model, _tokens(device))
    for layer, block in enumerate(model.blocks):
        added = trace.residuals[layer + 1] - trace.residuals[layer]  # (batch, n, d_model)
        expected = trace.head_outputs[layer].sum(dim=1) + block.self_attn.out_proj.bias
        torch.testing.assert_close(added, expected, **tolerances(dtype))


def test_replacing_a_head_by_zero_is_ablating_it(device, dtype):
    model = _model(device, dtype)
    tokens = _tokens(device)
    zeroed = run_with_heads(model, tokens, replace={(0, 1): torch.zeros_like}).logits
    torch.testing.assert_close(zeroed, ablate_head(model, 0, 1)(tokens)[0], **tolerances(dtype))
    same = run_with_heads(model, tokens, replace={(1, 0): lambda out: out}).logits
    torch.testing.assert_close(same, model(tokens)[0], **tolerances(dtype))


def test_patching_from_the_same_sequence_or_nowhere_changes_nothing(device, dtype):
    model = _model(device, dtype)
    tokens, other = _tokens(device), _tokens(device, seed=2)
    heads = [(0, 0), (0, 1), (1, 1)]
    torch.testing.assert_close(patch_heads(model, tokens, tokens, heads), model(tokens)[0], **tolerances(dtype))
    nowhere = torch.zeros(3, 10, dtype=torch.bool, device=device)
    torch.testing.assert_close(
        patch_heads(model, tokens, other, heads, positions=nowhere), model(tokens)[0], **tolerances(dtype)
    )


def test_patching_at_a_position_moves_only_that_position_and_later_ones(device, dtype):
    model = _model(device, dtype)
    tokens, other = _tokens(device), _tokens(device, seed=2)
    positions = torch.zeros(3, 10, dtype=torch.bool, device=device)
    positions[:, 6] = True
    patched = patch_heads(model, tokens, other, [(0, 0)], positions=positions)
    clean = model(tokens)[0]
    torch.testing.assert_close(patched[:, :6], clean[:, :6], **tolerances(dtype))  # causal: earlier untouched
    assert (patched[:, 6] - clean[:, 6]).abs().max() > 1e-4
    # every head of every layer patched everywhere from `other`: the layers add other's outputs
    everything = [(layer, h) for layer in range(2) for h in range(2)]
    full = run_with_heads(model, tokens, replace={}).residuals[0]  # tokens' embeddings
    donor = run_with_heads(model, other)
    expected = full + sum(
        donor.head_outputs[layer].sum(dim=1) + b.self_attn.out_proj.bias for layer, b in enumerate(model.blocks)
    )
    torch.testing.assert_close(patch_heads(model, tokens, other, everything), model.head(expected), **tolerances(dtype))


def _one_hot_weights(keys: torch.Tensor, n: int) -> torch.Tensor:
    """Weights (batch, 1, n, n) that put all of query t's weight on keys[b, t]."""
    return torch.nn.functional.one_hot(keys.clamp(0, n - 1), n).to(torch.float64)[:, None]


def test_the_scores_read_the_key_they_are_defined_by(device):
    n, offset = 12, torch.tensor([4, 5], device=device)
    t = torch.arange(n, device=device).expand(2, n)
    queries = t >= 6
    for score, keys in (
        (induction_score, t - offset[:, None] + 1),
        (duplicate_token_score, t - offset[:, None]),
    ):
        hit = _one_hot_weights(keys, n)
        assert score(hit, offset, queries).item() == 1.0
        miss = _one_hot_weights(keys - 1, n)
        assert score(miss, offset, queries).item() == 0.0
    assert previous_token_score(_one_hot_weights(t - 1, n)).item() == 1.0
    uniform = torch.tril(torch.ones(n, n, dtype=torch.float64, device=device))
    uniform = (uniform / uniform.sum(dim=-1, keepdim=True)).expand(2, 3, n, n)  # (batch, heads, n, n)
    expected = sum(1 / (i + 1) for i in range(1, n)) / (n - 1)  # mean over t >= 1 of 1/(t + 1)
    torch.testing.assert_close(
        previous_token_score(uniform), torch.full((3,), expected, dtype=torch.float64, device=device)
    )


def test_mean_weight_on_averages_only_the_chosen_queries(device):
    weights = torch.rand(2, 3, 5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(device)
    keys = torch.tensor([[0, 1, 2, 3, 4], [4, 3, 2, 1, 0]], device=device)
    queries = torch.tensor([[True, False, True, False, False], [False, False, False, False, True]], device=device)
    expected = (weights[0, :, 0, 0] + weights[0, :, 2, 2] + weights[1, :, 4, 0]) / 3
    torch.testing.assert_close(mean_weight_on(weights, keys, queries), expected)
    with pytest.raises(ValueError, match="no query"):
        mean_weight_on(weights, keys, torch.zeros_like(queries))
    with pytest.raises(ValueError, match="keys must lie"):
        mean_weight_on(weights, keys + 3, queries)


def test_qk_and_ov_matrices_give_the_heads_scores_and_outputs(device):
    dtype = torch.float64
    model = _model(device, dtype, positional=None)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.zero_()  # no biases: the circuits are then exact
    E = model.embed.token.weight
    for h in range(2):
        W = head_matrices(model, 0, h)
        scores = E @ qk_matrix(model, 0, h) @ E.T / math.sqrt(4)  # (V, V): score of query token a on key token b
        q, k = E @ W["W_Q"].T, E @ W["W_K"].T  # (V, d_head)
        torch.testing.assert_close(scores, q @ k.T / 2.0)
        # one token alone attends to itself with weight 1: the head writes W_OV e_x
        tokens = torch.arange(7, device=device)[:, None]  # (V, 1)
        written = run_with_heads(model, tokens).head_outputs[0][:, h, 0]  # (V, d_model)
        torch.testing.assert_close(written, E @ ov_matrix(model, 0, h).T)
        torch.testing.assert_close(full_ov_circuit(model, 0, h), written @ model.head.weight.T)


def test_copying_score_reads_the_sign_of_the_eigenvalues(device):
    eye = torch.eye(5, dtype=torch.float64, device=device)
    assert copying_score(eye).item() == pytest.approx(1.0)
    assert copying_score(-eye).item() == pytest.approx(-1.0)
    assert copying_score(
        torch.diag(torch.tensor([3.0, -1.0], dtype=torch.float64, device=device))
    ).item() == pytest.approx(0.5)
    rotation = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64, device=device)  # eigenvalues +-i
    assert copying_score(rotation).item() == pytest.approx(0.0, abs=1e-12)


def test_composition_score_is_between_0_and_1(device):
    d = 6
    eye = torch.eye(d, dtype=torch.float64, device=device)
    assert composition_score(eye, eye).item() == pytest.approx(1 / math.sqrt(d))
    top, bottom = (
        torch.zeros(d, d, dtype=torch.float64, device=device),
        torch.zeros(d, d, dtype=torch.float64, device=device),
    )
    top[:3, :3] = torch.eye(3)
    bottom[3:, 3:] = torch.eye(3)
    assert composition_score(top, bottom).item() == 0.0  # writes where the other does not read
    u = torch.randn(d, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(device)
    assert composition_score(u.T, u @ u.T).item() == pytest.approx(1.0)  # rank one, aligned
    a, b = (
        torch.randn(d, d, dtype=torch.float64, generator=torch.Generator().manual_seed(s)).to(device) for s in (1, 2)
    )
    assert 0 < composition_score(a, b).item() <= 1


def test_q_k_v_composition_use_the_right_matrices(device):
    model = _model(device, torch.float64)
    early, late = (0, 1), (1, 0)
    qk, ov0, ov1 = qk_matrix(model, *late), ov_matrix(model, *early), ov_matrix(model, *late)
    torch.testing.assert_close(q_composition(model, early, late), composition_score(qk.T, ov0))
    torch.testing.assert_close(k_composition(model, early, late), composition_score(qk, ov0))
    torch.testing.assert_close(v_composition(model, early, late), composition_score(ov1, ov0))
    with pytest.raises(ValueError, match="earlier"):
        k_composition(model, late, early)


def test_bad_input_gets_a_clear_error(device):
    model = _model(device, torch.float32)
    tokens = _tokens(device)
    with pytest.raises(ValueError, match="post"):
        run_with_heads(_model(device, torch.float32, norm="post"), tokens)
    with pytest.raises(TypeError, match="SequenceModel"):
        run_with_heads(torch.nn.Linear(2, 2), tokens)
    with pytest.raises(ValueError, match="layer"):
        ov_matrix(model, 2, 0)
    with pytest.raises(ValueError, match="head"):
        run_with_heads(model, tokens, replace={(0, 5): torch.zeros_like})
    with pytest.raises(ValueError):
        run_with_heads(model, tokens, replace={(0, 0): torch.zeros(3, 10, 5, device=device)})
    with pytest.raises(ValueError, match="source"):
        patch_heads(model, tokens, tokens[:, :5], [(0, 0)])
    with pytest.raises(ValueError, match="at least one"):
        patch_heads(model, tokens, tokens, [])


def _basis(d, seed=3):
    g = torch.Generator().manual_seed(seed)
    scales = torch.empty(d, dtype=torch.float64).uniform_(-2.3, 2.3, generator=g).exp()  # 0.1 .. 10
    rotation, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64, generator=g))
    return rotation @ torch.diag(scales)  # (d, d): invertible, far from orthogonal


@pytest.mark.parametrize(
    "config", [{}, {"positional": "alibi"}, {"causal": False}], ids=["sinusoidal", "alibi", "bidir"]
)
def test_a_change_of_basis_keeps_every_logit_and_the_token_circuits(config, device):
    model = _model(device, torch.float64, **config)
    G = _basis(8).to(device)
    changed = change_of_basis(model, G)
    tokens = _tokens(device)
    original, trace = run_with_heads(model, tokens), run_with_heads(changed, tokens)
    scale = original.logits.abs().max()
    assert (trace.logits - original.logits).abs().max() <= 1e-12 * scale  # float64: the same model
    for a, b in zip(original.weights, trace.weights, strict=True):
        assert (a - b).abs().max() <= 1e-12
    for a, b in zip(original.residuals, trace.residuals, strict=True):  # the stream is x G
        torch.testing.assert_close(a @ G, b, rtol=1e-12, atol=1e-12)
    E, E2 = model.embed.token.weight, changed.embed.token.weight
    for later in range(2):
        qk, qk2 = qk_matrix(model, 1, later), qk_matrix(changed, 1, later)
        ov, ov2 = ov_matrix(model, 0, 0), ov_matrix(changed, 0, 0)
        G_inv = torch.linalg.inv(G)
        torch.testing.assert_close(qk2, G_inv @ qk @ G_inv.T, rtol=1e-10, atol=1e-12)  # G^{-1} W_QK G^{-T}
        torch.testing.assert_close(ov2, G.T @ ov @ G_inv.T, rtol=1e-10, atol=1e-12)  # G^T W_OV G^{-T}
        torch.testing.assert_close(E2 @ qk2 @ ov2 @ E2.T, E @ qk @ ov @ E.T, rtol=1e-10, atol=1e-12)  # invariant
        torch.testing.assert_close(
            full_ov_circuit(changed, 1, later), full_ov_circuit(model, 1, later), rtol=1e-10, atol=1e-12
        )
    assert abs(k_composition(changed, (0, 0), (1, 0)).item() - k_composition(model, (0, 0), (1, 0)).item()) > 1e-3
    assert model.embed.token.weight is not changed.embed.token.weight and torch.equal(E, model.embed.token.weight)


def test_a_change_of_basis_gives_the_copy_its_own_table_and_saves_it(device):
    """The positions move with the stream (p -> p G), so the copy needs a table of its own: shared,
    the original would change too. The changed table is no longer the one a new model builds, so it
    is part of the copy's state_dict: loading it into another changed copy gives the same logits."""
    model = _model(device, torch.float64)
    before = model.embed.encoding.clone()
    G = _basis(8).to(device)
    changed = change_of_basis(model, G)
    assert torch.equal(model.embed.encoding, before)  # the original keeps its table
    assert changed.embed.encoding.data_ptr() != model.embed.encoding.data_ptr()
    torch.testing.assert_close(changed.embed.encoding, before @ G, rtol=1e-12, atol=1e-12)
    assert "embed.encoding" in changed.state_dict() and "embed.encoding" not in model.state_dict()
    other = change_of_basis(model, torch.eye(8, dtype=torch.float64, device=device))
    other.load_state_dict(changed.state_dict())
    tokens = _tokens(device)
    assert torch.equal(other(tokens)[0], changed(tokens)[0])
    # a model without the table (ALiBi) has none to change
    assert change_of_basis(_model(device, torch.float64, positional="alibi"), G).embed.encoding is None


def test_an_orthogonal_change_of_basis_keeps_the_composition_scores(device):
    model = _model(device, torch.float64)
    rotation, _ = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4)))
    changed = change_of_basis(model, rotation.to(device))
    for fn in (q_composition, k_composition, v_composition):
        torch.testing.assert_close(fn(changed, (0, 1), (1, 0)), fn(model, (0, 1), (1, 0)), rtol=1e-12, atol=0)


def test_change_of_basis_rejects_what_it_cannot_change(device):
    G = torch.eye(8, dtype=torch.float64, device=device)
    with pytest.raises(ValueError, match="norm=None"):
        change_of_basis(_model(device, torch.float64, norm="pre"), G)
    with pytest.raises(ValueError, match="norm=None"):
        change_of_basis(_model(device, torch.float64, mlp=True), G)
    with pytest.raises(ValueError, match="d_model"):
        change_of_basis(_model(device, torch.float64), torch.eye(7, dtype=torch.float64, device=device))
    with pytest.raises(TypeError, match="floating"):
        change_of_basis(_model(device, torch.float64), torch.eye(8, dtype=torch.long, device=device))
    with pytest.raises(ValueError, match="invertible"):
        change_of_basis(_model(device, torch.float64), torch.zeros(8, 8, dtype=torch.float64, device=device))
    with pytest.raises(TypeError, match="SequenceModel"):
        change_of_basis(torch.nn.Linear(8, 8), G)
