"""attnbook's wings: one folder per topic, and who may import whom (modelled on ``test_grader_layout.py``).

The wings are ordered; a module imports only from its own wing, the wings below it and the
validators at the ground, and never from the face (``import attnbook``, ``from attnbook import X``):
the face imports every wing, so an import of it from inside runs back up. Besides the face only the
validators lie at the top. The face itself keeps every name it exported before the wings.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import attnbook

PACKAGE = Path(attnbook.__file__).resolve().parent

#: the wings, lowest first; the order the face's docstring states
ORDER = [
    "validators",
    "core",
    "positions",
    "heads",
    "efficient",
    "programs",
    "linear",
    "kernels",
    "models",
    "lab",
    "figures",
]
#: the homes of chapters still to be written: a docstring and nothing else
HOMES = []

#: every name ``attnbook.X`` the face exported before the wings (``__all__`` and the module attributes),
#: under the names of issue 36 item 5 (``sampler`` is now ``seeded_randn``; ``formal``, a name the
#: course specification gives, stays on the face for the module ``core/column_convention.py``)
FACE = {
    *"""alibi_bias alibi_bias_for_positions alibi_slopes apply_rotary block_layout block_sparse_mask
    grouped_query_attention half_to_interleaved interleaved_to_half kv_cache_bytes rotary_angles
    rotary_permutation sliding_window_attention sliding_window_mask KVCache MultiHeadAttention
    FlashAttention FlashAttentionTriton attention_backward backward_delta flash_attention
    flash_attention_backward flash_attention_forward flash_attention_tiles flash_attention_triton
    flash_triton_backward flash_triton_forward kernels log_sum_exp probabilities_from_lse online_softmax
    tiled_attention additive_to_keep block_to_keep keep_to_additive keep_to_block apply_mask attention
    additive_scores attention_scores causal_mask default_device best_equivariant_accuracy
    equivariant_accuracy equivariant_accuracy_bound formal interpretability models tasks training
    general_scores hard_attention is_permutation_matrix padding_mask pair_rotation permutation_matrix
    plotting random_permutation random_permutation_matrix shift_matrix sinusoid_frequencies
    sinusoidal_encoding seeded_randn softmax""".split()
}
#: the names chapter 12 (masks as programs, attnbook.programs) added to the face
PROGRAMS = {
    *"""TileCounts block_sparse_attention count_tiles tile_kinds tile_kinds_from_mask_mod cu_seqlens_from_document_ids
    cu_seqlens_from_lengths document_causal_mask document_causal_mask_from_cu_seqlens document_ids_from_cu_seqlens
    document_ids_from_lengths position_ids_from_cu_seqlens position_ids_from_document_ids and_masks causal_mask_mod
    document_mask_mod mask_from_mask_mod or_masks prefix_lm_mask prefix_lm_mask_mod sliding_window_mask_mod
    alibi_score_mod attention_with_mods scores_from_score_mod softcap softcap_score_mod""".split()
}
#: the names chapter 13 (the cache at scale: attnbook.heads.latent, .sinks, .cache_accounting and
#: attnbook.efficient.streaming) added to the face
CACHE_AT_SCALE = {
    *"""LatentCache MultiHeadLatentAttention RollingKVCache StreamingCache absorb_query absorbed_output_weight
    absorbed_query_weight absorbed_rotary_scores cache_bytes cache_bytes_per_token cache_numbers_per_token
    down_project latent_attention_absorbed latent_attention_naive latent_decode_flops rms_norm rotary_key
    rotary_on_latent_keys_scores rotary_queries sink_attention sinks_as_virtual_key streaming_mask
    streaming_positions up_project""".split()
}
#: the names chapter 14 (linear attention: attnbook.linear) added to the face
LINEAR = {
    *"""LinearAttentionState decay_mask decay_mask_linear_space elu_plus_one gated_linear_attention_chunkwise
    gated_linear_attention_quadratic gated_linear_attention_recurrent linear_attention_chunkwise
    linear_attention_quadratic linear_attention_recurrent segment_sum""".split(),
    # the delta rule (attnbook.linear.delta_rule)
    *"""delta_rule_chunkwise delta_rule_recurrent delta_rule_step gated_delta_rule_chunkwise
    gated_delta_rule_recurrent gated_delta_rule_step ut_transform""".split(),
}


def wing(module: Path) -> str:
    relative = module.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imported(module: Path, source: str | None = None) -> set[str]:
    """The wings of attnbook that ``module`` (or ``source`` read as if it were there) imports, anywhere
    in it; ``"face"`` for the package itself."""
    tree = ast.parse(module.read_text(encoding="utf-8") if source is None else source)
    package = module.relative_to(PACKAGE).parent.parts  # () at the top, ("core",) in a wing
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                assert node.level - 1 <= len(package), f"{module}: a relative import above attnbook"
                base = list(package[: len(package) - (node.level - 1)])
                if node.module:
                    parts = base + node.module.split(".")
                    found.add(parts[0])
                elif base:
                    found.add(base[0])
                else:  # from .. import X at the top: a wing, or a name of the face
                    found |= {a.name if a.name in ORDER else "face" for a in node.names}
            elif node.module and node.module.split(".")[0] == "attnbook":
                parts = node.module.split(".")
                found.add(parts[1] if len(parts) > 1 else "face")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "attnbook":
                    found.add(parts[1] if len(parts) > 1 else "face")
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")


@pytest.mark.parametrize("module", MODULES, ids=[str(m.relative_to(PACKAGE)) for m in MODULES])
def test_imports_point_down(module):
    where = wing(module)
    assert where in ORDER, f"{module.relative_to(PACKAGE)}: a wing the layout test does not know"
    below = set(ORDER[: ORDER.index(where) + 1])
    outside = imported(module) - below
    assert not outside, f"{module.relative_to(PACKAGE)} ({where}) imports from {sorted(outside)}, above it or the face"


def test_the_checker_sees_an_import_that_runs_back_up():
    # the checker itself can fail: a kernel importing the face, or core importing models
    for source in ("import attnbook\n", "from attnbook import softmax\n", "from .. import softmax\n"):
        fake = PACKAGE / "kernels" / "_layout_probe.py"
        assert "face" in imported(fake, source)
    assert "models" in imported(PACKAGE / "core" / "_layout_probe.py", "from ..models.sequence import X\n")
    assert imported(PACKAGE / "core" / "_layout_probe.py", "from .masks import causal_mask\n") == {"core"}


def test_the_wings_are_the_subpackages_and_only_the_validators_lie_beside_the_face():
    wings = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert wings == sorted(w for w in ORDER if w != "validators")
    # (a folder left holding only __pycache__ after a checkout is no stray)
    strays = [p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name not in wings and any(p.rglob("*.py"))]
    assert not strays, f"folders of modules without __init__.py inside attnbook: {strays}"
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "validators.py"]


@pytest.mark.parametrize("name", [w for w in ORDER if w != "validators"])
def test_each_wing_says_what_lives_there(name):
    module = __import__(f"attnbook.{name}", fromlist=["_"])
    assert module.__doc__ and len(module.__doc__.split()) >= 20, f"attnbook.{name} needs a docstring map"


@pytest.mark.parametrize("name", HOMES)
def test_the_homes_of_chapters_to_come_hold_only_a_docstring(name):
    folder = PACKAGE / name
    assert sorted(p.name for p in folder.glob("*.py")) == ["__init__.py"]
    tree = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
    assert len(tree.body) == 1 and isinstance(tree.body[0].value, ast.Constant)


def test_the_face_states_the_order():
    assert " < ".join(ORDER) in " ".join(attnbook.__doc__.split())


def test_the_face_keeps_every_name_it_exported():
    assert set(attnbook.__all__) == FACE | PROGRAMS | CACHE_AT_SCALE | LINEAR
    missing = [name for name in sorted(FACE | PROGRAMS | CACHE_AT_SCALE | LINEAR) if not hasattr(attnbook, name)]
    assert not missing, f"attnbook lost {missing}"
    # the module attributes are the wings' modules, not copies
    assert attnbook.formal is sys.modules["attnbook.core.column_convention"]
    assert attnbook.models is sys.modules["attnbook.models"]
    assert attnbook.tasks is sys.modules["attnbook.models.tasks"]
    assert attnbook.plotting is sys.modules["attnbook.figures.plotting"]


def test_each_wing_imports_alone_without_the_wings_above_it():
    # importing a wing's modules loads no wing above it (the face is always loaded as the parent package)
    script = (
        "import importlib, pkgutil, sys\n"
        "name = sys.argv[1]\n"
        "pkg = importlib.import_module('attnbook.' + name)\n"
        "for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('attnbook.')}))\n"
    )
    # run with the face made empty by a stub parent, so that only the wing's own imports load modules
    for name in ["core", "positions", "heads", "efficient", "programs", "linear", "kernels", "models"]:
        stub = (
            "import sys, types, pathlib\n"
            f"face = types.ModuleType('attnbook'); face.__path__ = [{str(PACKAGE)!r}]\n"
            "sys.modules['attnbook'] = face\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", stub + script, name], capture_output=True, text=True, check=True
        ).stdout
        loaded = set(ast.literal_eval(out.strip().splitlines()[-1]))
        above = loaded - set(ORDER[: ORDER.index(name) + 1])
        assert not above, f"importing attnbook.{name} loads {sorted(above)}"
