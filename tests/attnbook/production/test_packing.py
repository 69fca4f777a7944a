"""Packed documents and soft-capping in ``transformers`` against the course (chapter 12).

* Llama on a packed row, with the course's per-document position ids
  (``attnbook.position_ids_from_document_ids``) and its block-diagonal mask
  (``attnbook.document_causal_mask``) passed as a 4-D mask, equals each document run alone: every
  hidden state of every layer's output, per document. Controls: the plain causal mask (no mask, or
  the 2-D all-ones mask of the packed-sequence bug in ``transformers`` PR #46634) lets the later
  documents read the earlier ones, and the eager path *adds* a 4-D mask, so a boolean one is a
  no-op there (it must be the additive float mask, ``attnbook.keep_to_additive``).
* What each half of the fix does: with rotary positions (Llama), positions left running 0..n-1
  under the document mask give the same outputs (scores depend on i - j only); with learned
  absolute positions (GPT-2) they do not, and restarting them is needed.
* Gemma 2's attention with ``attn_logit_softcapping`` c is the course's attention with
  ``attnbook.softcap_score_mod(c)``; controls: the scores without the tanh, or with the cap only
  outside it, differ.
"""

from __future__ import annotations

import pytest
import torch

import attnbook

from .hf import (
    U32,
    U64,
    assert_differs,
    assert_within,
    hidden_states,
    linear,
    merge_heads,
    one_call,
    output,
    random_ids,
    rotary_error,
    rounding_bound,
    skip_without_float64,
    split_heads,
    tiny_config,
    tiny_model,
)

transformers = pytest.importorskip("transformers")

H_Q, H_KV, D = 4, 2, 8  # query heads, key-value heads (2 query heads each), head width
G = H_Q // H_KV
THETA = 10000.0
LAYERS = 2
LENGTHS = [5, 1, 7, 3]  # ragged, with a one-token document
N = sum(LENGTHS)


def llama(device, implementation):
    config = tiny_config(
        transformers.LlamaConfig, hidden_size=H_Q * D, num_attention_heads=H_Q, num_key_value_heads=H_KV,
        head_dim=D, num_hidden_layers=LAYERS, intermediate_size=16, rope_theta=THETA,
        attn_implementation=implementation,
    )  # fmt: skip
    return tiny_model(transformers.LlamaModel, config, device)


def packed_row(device, seed=0):
    """Token ids (1, n), document ids (n,), restarted position ids (1, n), cu_seqlens as a list."""
    ids = random_ids(1, N, seed, device)
    documents = attnbook.document_ids_from_lengths(LENGTHS, device=device)
    positions = attnbook.position_ids_from_document_ids(documents)[None]  # (1, n)
    return ids, documents, positions, attnbook.cu_seqlens_from_lengths(LENGTHS).tolist()


def four_d(documents, dtype=torch.float64):
    """The document-causal mask as Hugging Face takes a 4-D mask: (batch, 1, n, n), additive (0 / -inf)."""
    keep = attnbook.document_causal_mask(documents)[None, None]  # (1, 1, n, n)
    return keep if dtype == torch.bool else attnbook.keep_to_additive(keep, dtype)


def alone(model, ids, cu, **kwargs):
    """Each document run by itself (positions 0..l-1, causal), the outputs put back in one row."""
    parts = [model(input_ids=ids[:, cu[d] : cu[d + 1]], **kwargs).last_hidden_state for d in range(len(cu) - 1)]
    return torch.cat(parts, dim=1)  # (1, n, d_model)


def float64_bound(reference: torch.Tensor) -> float:
    """Two float64 evaluations of the same model that differ only in the order of their sums (a row
    of n scores with blocked entries exactly 0 against the document's own row): per layer at most
    (n + d_model) u64 relative on the attention and the projections, times the output's size; a
    factor 2 for the second-order terms. An estimate of the propagation through the layers, not a
    proof; the test prints the largest error over it (0 here: the runs agree bit for bit)."""
    return 2.0 * LAYERS * (N + H_Q * D) * U64 * reference.abs().amax().item()


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_packed_llama_equals_each_document_alone(implementation, device):
    skip_without_float64(device)
    model = llama(device, implementation)
    ids, documents, positions, cu = packed_row(device)
    with torch.no_grad():
        separate = alone(model, ids, cu)
        packed = model(input_ids=ids, position_ids=positions, attention_mask=four_d(documents)).last_hidden_state
        if implementation == "sdpa":  # softmax in float64: only the order of the sums differs
            bound = float64_bound(separate)
        else:
            # the eager path runs its softmax in float32: each run's weights lie within (n + 2) u32
            # (relative) of the exact ones, so the two runs' within twice that; the layer's output and
            # the second layer carry it on, a factor LAYERS * 4 for the residual, MLP and norm in between
            # (an estimate of the propagation, not a proof; the error is printed over it, 0.007 here)
            bound = 2.0 * (N + 2) * U32 * 4 * LAYERS * separate.abs().amax().item()
        for d in range(len(LENGTHS)):
            part = slice(cu[d], cu[d + 1])
            assert_within(packed[:, part], separate[:, part], bound, f"Llama ({implementation}) packed, document {d}")

        # the leak: positions restarted but the mask left causal (no mask, or the 2-D all-ones mask)
        later = slice(cu[1], N)
        leaky = model(input_ids=ids, position_ids=positions).last_hidden_state
        assert_differs(
            leaky[:, later], separate[:, later], f"Llama ({implementation}) causal mask, restarted positions"
        )
        ones = torch.ones(1, N, dtype=torch.long, device=device)
        leaky = model(input_ids=ids, position_ids=positions, attention_mask=ones).last_hidden_state
        assert_differs(leaky[:, later], separate[:, later], f"Llama ({implementation}) 2-D all-ones mask")


def test_the_eager_path_adds_a_4d_mask_so_a_boolean_one_masks_nothing(device):
    skip_without_float64(device)
    model = llama(device, "eager")
    ids, documents, positions, cu = packed_row(device, seed=1)
    with torch.no_grad():
        separate = alone(model, ids, cu)
        boolean = model(input_ids=ids, position_ids=positions, attention_mask=four_d(documents, torch.bool))
        leaky = model(input_ids=ids, position_ids=positions).last_hidden_state  # no mask: causal
    later = slice(cu[1], N)
    assert_differs(boolean.last_hidden_state[:, later], separate[:, later], "Llama (eager) boolean 4-D mask")
    # what it does instead: True is added to the kept scores as 1.0 and False as 0.0, so nothing is
    # blocked (not even the causal part): the same as the additive float mask keep.double()
    with torch.no_grad():
        added = model(input_ids=ids, position_ids=positions, attention_mask=four_d(documents, torch.bool).double())
    assert torch.equal(boolean.last_hidden_state, added.last_hidden_state)
    assert_differs(boolean.last_hidden_state, leaky, "Llama (eager) boolean 4-D mask against no mask")


def test_rotary_positions_need_no_restart_but_learned_ones_do(device):
    skip_without_float64(device)
    ids, documents, positions, cu = packed_row(device, seed=2)
    running = torch.arange(N, device=device)[None]  # (1, n): positions not restarted
    # Llama (rotary): the document mask alone suffices; the angles are formed in float32, so
    # positions up to n - 1 rotate with relative error rotary_error, which moves a score by at most
    # 2 rotary_error scale |q||k|; carried through both layers with a factor 8 on the output's size
    # (an estimate of the propagation, not a proof; the error is printed over it, 0.003 here)
    model = llama(device, "sdpa")
    with torch.no_grad():
        separate = alone(model, ids, cu)
        unrestarted = model(input_ids=ids, position_ids=running, attention_mask=four_d(documents)).last_hidden_state
    eps = rotary_error((N - 1) * 1.0)
    assert_within(
        unrestarted,
        separate,
        8.0 * LAYERS * eps * separate.abs().amax().item(),
        "Llama, document mask, positions 0..n-1",
    )

    # GPT-2 (learned absolute positions): the mask alone is not enough
    config = tiny_config(
        transformers.GPT2Config, n_embd=H_Q * D, n_head=H_Q, n_layer=LAYERS, bos_token_id=0, eos_token_id=0,
        attn_implementation="sdpa",
    )  # fmt: skip
    gpt2 = tiny_model(transformers.GPT2Model, config, device)
    with torch.no_grad():
        separate = alone(gpt2, ids, cu)
        restarted = gpt2(input_ids=ids, position_ids=positions, attention_mask=four_d(documents)).last_hidden_state
        unrestarted = gpt2(input_ids=ids, position_ids=running, attention_mask=four_d(documents)).last_hidden_state
    assert_within(restarted, separate, float64_bound(separate), "GPT-2, document mask, restarted positions")
    later = slice(cu[1], N)
    assert_differs(unrestarted[:, later], separate[:, later], "GPT-2, document mask, positions 0..n-1")


CAP = 3.0  # small enough that the tanh bends the scores of these weights (several units)


def gemma2(device, cap=CAP):
    config = tiny_config(
        transformers.Gemma2Config, hidden_size=H_Q * D, num_attention_heads=H_Q, num_key_value_heads=H_KV,
        head_dim=D, num_hidden_layers=1, intermediate_size=16, layer_types=["full_attention"],
        attn_logit_softcapping=cap, query_pre_attn_scalar=D,
    )  # fmt: skip
    return tiny_model(transformers.Gemma2Model, config, device)


def rope_theta(config) -> float:
    parameters = config.rope_parameters
    parameters = parameters.get("full_attention", parameters)
    return float(parameters["rope_theta"])


def test_gemma2_soft_capped_scores_are_the_courses_softcap(device):
    skip_without_float64(device)
    model = gemma2(device)
    attn = model.layers[0].self_attn
    assert attn.attn_logit_softcapping == CAP
    ids = random_ids(2, 12, 3, device)
    with torch.no_grad():
        call = one_call(model, attn, ids)
    x, n = hidden_states(call), ids.shape[1]
    theta = rope_theta(model.config)
    positions = torch.arange(n, device=device)
    q = attnbook.apply_rotary(split_heads(linear(x, attn.q_proj), D), positions, pairing="half", base=theta)
    k = attnbook.apply_rotary(split_heads(linear(x, attn.k_proj), D), positions, pairing="half", base=theta)
    v = split_heads(linear(x, attn.v_proj), D)  # (batch, H_kv, n, d)
    k, v = k.repeat_interleave(G, dim=-3), v.repeat_interleave(G, dim=-3)  # (batch, H_q, n, d)
    scores = attnbook.attention_scores(q, k)  # (batch, H_q, n, n)
    assert scores.abs().amax() > 2 * CAP  # the cap bends these scores

    def course(score_mod):
        o, w = attnbook.attention_with_mods(q, k, v, mask_mod=attnbook.causal_mask_mod, score_mod=score_mod)
        return linear(merge_heads(o), attn.o_proj), w

    ours, w = course(attnbook.softcap_score_mod(CAP))
    # the capped scores are within the uncapped ones' errors (tanh is 1-Lipschitz), so the layer's
    # bound with float32 rotary and softmax holds for them
    limit = rounding_bound(
        q, k, v, w, attn.o_proj.weight, scale=D**-0.5, u_softmax=U32, rotation=rotary_error((n - 1) * theta ** (-2 / D))
    )
    assert_within(ours, output(call), limit, f"Gemma 2 layer, attn_logit_softcapping {CAP}")
    # the score_mod is the function softcap, entry by entry
    capped = attnbook.scores_from_score_mod(attnbook.softcap_score_mod(CAP), scores)
    torch.testing.assert_close(capped, attnbook.softcap(scores, CAP), atol=0, rtol=0)

    # controls: no tanh; the cap outside only, c tanh(s); inside only, tanh(s / c)
    for what, mod in [
        ("without the tanh", None),
        ("cap outside only, c tanh(s)", lambda s, b, h, i, j: CAP * torch.tanh(s)),
        ("cap inside only, tanh(s / c)", lambda s, b, h, i, j: torch.tanh(s / CAP)),
    ]:
        control, _ = course(mod)
        assert_differs(control, output(call), f"Gemma 2 {what}")
