"""grading.yml's forbidden references may name groups defined once in exercises/forbidden_groups.yml
(attngrade.homework.read_forbidden); unknown groups and names that do not resolve are errors naming
the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from attngrade.homework import GROUPS_FILE, all_homework, load_homework, read_forbidden

from ..paths import EXERCISES


def write(folder: Path, grading: str, groups: str | None) -> Path:
    """A homework folder ``hw99_test`` (with an empty master) in ``folder``, and the groups file beside it."""
    hw = folder / "hw99_test"
    hw.mkdir(parents=True)
    (hw / "hw99.ipynb").write_text("{}")
    (hw / "grading.yml").write_text(grading)
    if groups is not None:
        (folder / GROUPS_FILE).write_text(groups)
    return hw


GROUPS = """
masks: [attnbook.causal_mask, attnbook.padding_mask]
softmaxes: [attnbook.softmax, attnbook.efficient.online_softmax.running_max]
everything: [{group: masks}, {group: softmaxes}, torch.nn.functional.scaled_dot_product_attention]
"""


def test_groups_expand_in_order_without_repeats(tmp_path):
    grading = "forbidden:\n  - attnbook.softmax\n  - group: everything\n  - group: masks\n  - attnbook.attention\n"
    hw = load_homework(write(tmp_path, grading, GROUPS))
    assert hw.forbidden == [
        "attnbook.softmax",
        "attnbook.causal_mask",
        "attnbook.padding_mask",
        "attnbook.efficient.online_softmax.running_max",
        "torch.nn.functional.scaled_dot_product_attention",
        "attnbook.attention",
    ]


def test_an_unknown_group_is_an_error_naming_the_file_and_the_groups(tmp_path):
    hw = load_homework(write(tmp_path, "forbidden:\n  - group: mask\n", GROUPS))
    with pytest.raises(ValueError, match=r"grading\.yml: unknown group 'mask'.*everything, masks, softmaxes"):
        _ = hw.forbidden


def test_a_name_that_does_not_resolve_is_an_error_naming_the_file(tmp_path):
    hw = load_homework(write(tmp_path, "forbidden:\n  - attnbook.online_softmax.running_max\n", GROUPS))
    with pytest.raises(ValueError, match=r"hw99_test/grading\.yml: forbidden reference 'attnbook\.online_softmax"):
        _ = hw.forbidden  # the function attnbook.online_softmax has no attribute running_max
    bad_group = GROUPS + "typo: [attnbook.sofmax]\n"
    hw = load_homework(write(tmp_path / "other", "forbidden:\n  - group: typo\n", bad_group))
    with pytest.raises(ValueError, match=rf"{GROUPS_FILE}, group 'typo': forbidden reference 'attnbook\.sofmax'"):
        _ = hw.forbidden


@pytest.mark.parametrize(
    ("grading", "groups", "match"),
    [
        (
            "forbidden:\n  - group: a\n",
            "a: [{group: b}]\nb: [{group: a}]\n",
            r"group 'a' includes itself \(a -> b -> a\)",
        ),
        ("forbidden:\n  - {group: a, also: b}\n", "a: []\n", r"grading\.yml: each forbidden entry is a dotted name"),
        ("forbidden:\n  - 3\n", "a: []\n", r"grading\.yml: each forbidden entry is a dotted name"),
        ("forbidden: attnbook.softmax\n", "a: []\n", r"grading\.yml: forbidden must be a list"),
        ("forbidden:\n  - group: a\n", "a: attnbook.softmax\n", rf"{GROUPS_FILE}: must map each group name to a list"),
        ("forbidden:\n  - group: a\n", None, r"unknown group 'a'"),
    ],
)
def test_malformed_lists_are_errors_naming_the_file(tmp_path, monkeypatch, grading, groups, match):
    monkeypatch.setenv("ATTNBOOK_EXERCISES", str(tmp_path / "nowhere"))  # no groups file to fall back on
    hw = load_homework(write(tmp_path, grading, groups))
    with pytest.raises(ValueError, match=match):
        _ = hw.forbidden


def test_a_homework_copied_elsewhere_uses_the_course_groups(tmp_path):
    """A homework folder copied out of exercises/ (as the leak test does) still finds the groups."""
    hw = load_homework(write(tmp_path, "forbidden:\n  - group: masks\n", None))
    assert "attnbook.causal_mask" in hw.forbidden


def test_every_group_is_used_and_every_reference_is_listed_once():
    """The groups file and the grading.yml files together name each reference once: a change to a
    group is made in one place."""
    groups = yaml.safe_load((EXERCISES / GROUPS_FILE).read_text(encoding="utf-8"))
    listed: list[str] = [e for entries in groups.values() for e in entries if isinstance(e, str)]
    used: set[str] = {e["group"] for entries in groups.values() for e in entries if isinstance(e, dict)}
    for hw in all_homework():
        entries = yaml.safe_load((hw.folder / "grading.yml").read_text(encoding="utf-8"))["forbidden"]
        used |= {e["group"] for e in entries if isinstance(e, dict)}
        listed += [e for e in entries if isinstance(e, str)]
        assert read_forbidden(hw.folder / "grading.yml", hw.config, EXERCISES / GROUPS_FILE) == hw.forbidden
    assert used == set(groups), f"unused groups: {sorted(set(groups) - used)}"
    repeated = sorted({name for name in listed if listed.count(name) > 1})
    assert not repeated, f"listed more than once (make a group): {repeated}"
